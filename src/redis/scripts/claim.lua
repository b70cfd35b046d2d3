-- CLAIM: leases up to `max` due entries, in order, to the caller.
-- KEYS: the queue's eight keys. ARGV: max, lease ms, max attempts (0 = no
-- limit). Returns {now, head score or -1, then per entry: id, member, value,
-- attempt, deadline, lease end}. An entry that would exceed max attempts
-- goes to the dead letters instead. Atomic: no two claims lease one entry.
local now = now_ms()
local max, lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- One more than asked: if it comes, more are due and no head lookup is needed.
local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max + 1)
local n = math.min(#due / 2, max)
-- Reads first: a key of another type fails here, before any write.
local ids, attempts, values, burying = {}, {}, {}, false
for i = 1, n do
  local id = string.sub(due[2 * i - 1], 17)
  ids[i] = id
  attempts[i] = (tonumber(redis.call('HGET', ATTEMPTS, id)) or 0) + 1
  if limit > 0 and attempts[i] > limit then
    burying = true
  else
    values[i] = redis.call('HGET', VALUES, id)
  end
end
local e = ensure(LEASES, 'zset')
if not e and burying then e = ensure(DEAD, 'zset') or ensure(REASONS, 'hash') end
if e then return e end

local out = {now, -1}
local lease_until = now + lease
for i = 1, n do
  local id, member = ids[i], due[2 * i - 1]
  if values[i] == nil then
    redis.call('ZREM', SCHEDULE, member)
    redis.call('ZREM', LEASES, id)
    redis.call('ZADD', DEAD, now, id)
    redis.call('HSET', REASONS, id, 'not acked after ' .. limit .. ' deliveries')
  else
    redis.call('HSET', ATTEMPTS, id, attempts[i])
    redis.call('ZADD', SCHEDULE, lease_until, member)
    redis.call('ZADD', LEASES, lease_until, id)
    out[#out + 1] = id
    out[#out + 1] = member
    out[#out + 1] = values[i]
    out[#out + 1] = attempts[i]
    out[#out + 1] = tonumber(due[2 * i])
    out[#out + 1] = lease_until
  end
end
if #due > 2 * n then
  out[2] = tonumber(due[#due])
else
  local head = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
  if head[2] then out[2] = tonumber(head[2]) end
end
return out
