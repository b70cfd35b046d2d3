-- LIMITS: every key limit of the queue.
-- KEYS: the queue's keys. ARGV: none.
-- Returns {{key, limit}, ...}: each key that has a limit ('*': the
-- default) and its limit as LIMIT takes it.
local err = check_all()
if err then return err end
local out = {}
local all = redis.call('HGETALL', LIMITS)
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'l:' then
    out[#out + 1] = {string.sub(all[i], 3), all[i + 1]}
  end
end
return out
