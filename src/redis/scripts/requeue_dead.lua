-- REQUEUE_DEAD: puts a dead letter back as pending, attempts reset to 0 (a
-- dead tick comes back as a one-off entry, not a tick).
-- KEYS: the queue's seven keys. ARGV: id, delay ms, channel.
-- Returns 1, or 0 if there is no such dead letter.
local err = check_all() or check_seq()
if err then return err end
local id = ARGV[1]
if not redis.call('ZSCORE', DEAD, id) then return 0 end
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id)) or {token = '', member = ''}
e.attempt, e.tick, e.deadline = 0, nil, nil
redis.call('ZREM', DEAD, id)
redis.call('HDEL', ENTRIES, 'r:' .. id)
place(id, e, now_ms() + tonumber(ARGV[2]), ARGV[3])
return 1
