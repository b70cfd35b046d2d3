-- PURGE: deletes every key of the queue, unless one holds a foreign type.
-- KEYS: the queue's eight keys. ARGV: none. Returns the number deleted.
local e = check_all()
if e then return e end
return redis.call('DEL', unpack(KEYS))
