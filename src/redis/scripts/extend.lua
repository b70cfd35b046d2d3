-- EXTEND: pushes the end of a held lease.
-- KEYS: the queue's eight keys. ARGV: id, member, attempt, lease ms.
-- Returns the new lease end (ms), or 0 if the lease was lost.
-- Atomic: the lease check and the move run as one script.
if not held(ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local e = ensure(SCHEDULE, 'zset')
if e then return e end
local lease_until = now_ms() + tonumber(ARGV[4])
redis.call('ZADD', SCHEDULE, lease_until, ARGV[2])
redis.call('ZADD', LEASES, lease_until, ARGV[1])
return lease_until
