-- REQUEUE_DEAD: puts a dead letter back as pending, attempts reset to 0.
-- KEYS: the queue's eight keys. ARGV: id, delay ms, channel.
-- Returns 1, or 0 if there is no such dead letter.
local e = check_all()
if e then return e end
local id = ARGV[1]
if not redis.call('ZSCORE', DEAD, id) then return 0 end
local old_head = head()
local member = new_member(id)
redis.call('ZREM', DEAD, id)
redis.call('HDEL', REASONS, id)
redis.call('HDEL', ATTEMPTS, id)
schedule(id, member, now_ms() + tonumber(ARGV[2]), ARGV[3], old_head)
return 1
