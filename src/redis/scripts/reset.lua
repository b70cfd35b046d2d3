-- RESET: moves a pending entry to now + delay, ordered as if inserted now.
-- KEYS: the queue's eight keys. ARGV: id, delay ms, channel.
-- Returns 1, or 0 for an entry that is leased, dead or absent.
local e = check_all()
if e then return e end
local id = ARGV[1]
local old = redis.call('HGET', IDS, id)
if not old or redis.call('ZSCORE', LEASES, id) or redis.call('ZSCORE', DEAD, id) then
  return 0
end
local old_head = head()
local member = new_member(id)
redis.call('ZREM', SCHEDULE, old)
schedule(id, member, now_ms() + tonumber(ARGV[2]), ARGV[3], old_head)
return 1
