-- EXTEND: pushes the end of held leases to now + lease.
-- KEYS: the queue's eight keys. ARGV: lease ms, channel, then id and token of
-- each delivery.
-- Returns each new lease end (ms), or 0 where the lease was lost.
-- Atomic: the lease checks and the moves run as one script. A lease end
-- moved before the head is announced, like an insert.
local e = ensure(LEASES, 'zset')
if e then return e end
local now = now_ms()
local lease_until = now + tonumber(ARGV[1])
local old_head = head()
local out, moved = {}, false
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local entry = held(id, ARGV[i + 1])
  if entry then
    redis.call('ZADD', SCHEDULE, lease_until, entry.member)
    redis.call('ZADD', LEASES, lease_until, id)
    out[#out + 1] = lease_until
    moved = true
  else
    out[#out + 1] = 0
  end
end
if moved then announce(ARGV[2], lease_until, old_head) end
return out
