-- STATS: counts entries by state, on one clock.
-- KEYS: the queue's eight keys. ARGV: none.
-- Returns {pending, due, leased, dead}; an expired lease counts as due.
local e = check_all()
if e then return e end
local now = now_ms()
local due = redis.call('ZCOUNT', SCHEDULE, '-inf', now)
local leased = redis.call('ZCOUNT', LEASES, '(' .. now, '+inf')
local pending = redis.call('ZCARD', SCHEDULE) - due - leased
return {pending, due, leased, redis.call('ZCARD', DEAD)}
