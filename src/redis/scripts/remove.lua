-- REMOVE: deletes an entry, pending, leased or dead.
-- KEYS: the queue's eight keys. ARGV: id.
-- Returns 1 if it was there, 0 if not.
local e = check_all()
if e then return e end
local id = ARGV[1]
local member = redis.call('HGET', IDS, id)
if not member then return 0 end
redis.call('ZREM', SCHEDULE, member)
redis.call('ZREM', LEASES, id)
redis.call('ZREM', DEAD, id)
redis.call('HDEL', REASONS, id)
redis.call('HDEL', IDS, id)
redis.call('HDEL', VALUES, id)
redis.call('HDEL', ATTEMPTS, id)
return 1
