-- PAUSED: whether the queue is paused.
-- KEYS: the queue's keys. ARGV: none. Returns 1 or 0.
local err = check_all()
if err then return err end
return redis.call('HEXISTS', ENTRIES, PAUSED)
