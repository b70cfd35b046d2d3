-- EXTEND: pushes the end of held leases to now + lease.
-- KEYS: the queue's thirteen keys. ARGV: lease ms, channel, then id and
-- token of each delivery.
-- Returns each new lease end (ms), or 0 where the lease was lost.
-- Atomic: the lease checks and the moves run as one script. A lease end
-- moved before the head is announced, like an insert. An entry with a key
-- or a priority whose lease ran out and that a claim saw (reaped: its
-- place freed) holds its place again, unless its key is at its
-- concurrency now (another entry took the place): that lease is lost.
local e = ensure(LEASES, 'zset')
if e then return e end
local now = now_ms()
local lease_until = now + tonumber(ARGV[1])
local old_head = head()
-- Reads first: every lease still held, and whether the keys of options
-- are written (checked before any write).
local entries, O = {}, nil
for i = 3, #ARGV, 2 do
  local entry = held(ARGV[i], ARGV[i + 1])
  entries[#entries + 1] = entry or false
  if entry and not O and special(entry) then
    O = options()
    e = O.check_options()
    if e then return e end
  end
end
-- A reaped entry whose key has no place left loses its lease.
for i, entry in ipairs(entries) do
  local id = ARGV[2 * i + 1]
  if entry and entry.key and not redis.call('ZSCORE', HELD, id) then
    local got = redis.call('HMGET', LIMITS, 'c:' .. entry.key, 'l:' .. entry.key, 'l:*')
    local limit = O.parse_limit(got[2] or got[3])
    if limit and limit.conc and (tonumber(got[1]) or 0) >= limit.conc then
      entries[i] = false
    end
  end
end
local out, moved = {}, false
for i, entry in ipairs(entries) do
  local id = ARGV[2 * i + 1]
  if entry then
    if special(entry) then
      if not redis.call('ZSCORE', HELD, id) then
        local at = tonumber(redis.call('ZSCORE', SPECIAL, entry.member))
        if at then O.ready_remove_all({{id, entry, at}}) end
        if entry.key then
          local held_now = tonumber(redis.call('HGET', LIMITS, 'c:' .. entry.key)) or 0
          redis.call('HSET', LIMITS, 'c:' .. entry.key, int(held_now + 1))
        end
      end
      redis.call('ZADD', HELD, lease_until, id)
    end
    redis.call('ZADD', zset_of(entry), lease_until, entry.member)
    redis.call('ZADD', LEASES, lease_until, id)
    out[#out + 1] = lease_until
    moved = true
  else
    out[#out + 1] = 0
  end
end
if moved then announce(ARGV[2], lease_until, old_head, now, false, false) end
return out
