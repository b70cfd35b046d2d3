-- WORKERS: the records of the queue's workers.
-- KEYS: the queue's keys. ARGV: none.
-- Returns {now, {id, '<first>,<last>,<record JSON>'}...} (records not
-- refreshed for three of their periods are left to the reader to drop).
local err = check_all()
if err then return err end
local out = {now_ms()}
local all = redis.call('HGETALL', WORKERS)
for i = 1, #all, 2 do out[#out + 1] = {all[i], all[i + 1]} end
return out
