-- RETRY: gives a delivered entry back, due after a delay, attempts kept.
-- KEYS: the queue's eight keys. ARGV: id, member, attempt, delay ms, channel.
-- Returns 1, or 0 if the lease was lost (nothing changed).
-- Atomic: the lease check and the move run as one script.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then return 0 end
local e = ensure(SEQ, 'string')
if e then return e end
local old_head = head()
local member = new_member(id)
redis.call('ZREM', SCHEDULE, ARGV[2])
redis.call('ZREM', LEASES, id)
schedule(id, member, now_ms() + tonumber(ARGV[4]), ARGV[5], old_head)
return 1
