-- BURY: moves a claimed entry whose value does not decode to the dead
-- letters; that delivery never reached a consumer, so it does not count.
-- KEYS: the queue's eight keys. ARGV: id, member, attempt, reason.
-- Returns 1, or 0 if the lease was lost.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then return 0 end
local e = ensure(SCHEDULE, 'zset') or ensure(DEAD, 'zset') or ensure(REASONS, 'hash')
if e then return e end
redis.call('ZREM', SCHEDULE, ARGV[2])
redis.call('ZREM', LEASES, id)
redis.call('ZADD', DEAD, now_ms(), id)
redis.call('HSET', REASONS, id, ARGV[4])
redis.call('HINCRBY', ATTEMPTS, id, -1)
return 1
