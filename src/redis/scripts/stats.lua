-- STATS: counts entries by state, on one clock.
-- KEYS: the queue's keys. ARGV: none.
-- Returns {pending, due, leased, dead}; an expired lease counts as due.
local err = check_all()
if err then return err end
local now = now_ms()
local due = redis.call('ZCOUNT', SCHEDULE, '-inf', now) + redis.call('ZCOUNT', SPECIAL, '-inf', now)
local leased = redis.call('ZCOUNT', LEASES, '(' .. int(now), '+inf')
local pending = redis.call('ZCARD', SCHEDULE) + redis.call('ZCARD', SPECIAL) - due - leased
return {pending, due, leased, redis.call('ZCARD', DEAD)}
