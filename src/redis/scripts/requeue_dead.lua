-- REQUEUE_DEAD: puts a dead letter back as pending, attempts reset to 0 (a
-- dead tick comes back as a one-off entry, not a tick).
-- KEYS: the queue's keys. ARGV: id, delay ms, channel, request
-- identity ('' on a single server; see lib/requests.lua).
-- Returns 1, or 0 if there is no such dead letter; a second execution of a
-- request that put it back, 1 (it changes nothing).
local err = check_all() or check_seq()
if err then return err end
local id, ledger = ARGV[1], ledger_of(ARGV[4])
if ledger and ledger.recall() then return 1 end
if not redis.call('ZSCORE', DEAD, id) then return 0 end
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id)) or {token = '', member = ''}
e.attempt, e.tick, e.deadline = 0, nil, nil
redis.call('ZREM', DEAD, id)
redis.call('HDEL', ENTRIES, 'r:' .. id, 'e:' .. id, 'n:' .. id)
-- Its next finish is the one a `wait` waits for.
forget_result(id)
local now = now_ms()
place(id, e, now + tonumber(ARGV[2]), ARGV[3], now)
if ledger then ledger.remember('1', now) end
return 1
