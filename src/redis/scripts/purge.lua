-- PURGE: deletes every key of the queue, schedules included, unless one
-- holds a foreign type.
-- KEYS: the queue's keys. ARGV: none. Returns the number deleted.
local err = check_all()
if err then return err end
return redis.call('DEL', unpack(KEYS))
