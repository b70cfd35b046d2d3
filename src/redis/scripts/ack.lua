-- ACK: deletes a delivered entry whose lease is still held.
-- KEYS: the queue's eight keys. ARGV: id, member, attempt.
-- Returns 1 if deleted, 0 if the lease was lost (nothing changed).
-- Atomic: the lease check and the delete run as one script.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then return 0 end
local e = ensure(SCHEDULE, 'zset') or ensure(VALUES, 'hash')
if e then return e end
redis.call('ZREM', SCHEDULE, ARGV[2])
redis.call('ZREM', LEASES, id)
redis.call('HDEL', IDS, id)
redis.call('HDEL', VALUES, id)
redis.call('HDEL', ATTEMPTS, id)
return 1
