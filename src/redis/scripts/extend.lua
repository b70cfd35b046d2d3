-- EXTEND: pushes the end of held leases to now + lease, and refreshes a
-- worker's record (a worker's heartbeat).
-- KEYS: the queue's keys. ARGV: lease ms, channel, worker id ('' for
-- none), the worker's record (JSON, with its refresh period `every_ms`),
-- then id and token of each delivery.
-- Returns each new lease end (ms), 0 where the lease was lost, or -1
-- where it was lost to a cancel (MARKS says so until the lease would have
-- run out, and a lease more).
-- Atomic: the lease checks and the moves run as one script. A lease end
-- moved before the head is announced, like an insert. An entry with a key
-- or a priority whose lease ran out and that a claim saw (reaped: its
-- place freed) holds its place again, unless its key is at its
-- concurrency now (another entry took the place): that lease is lost.
local e = ensure(LEASES, 'zset') or (ARGV[3] ~= '' and ensure(WORKERS, 'hash'))
if e then return e end
local now = now_ms()
local lease_until = now + tonumber(ARGV[1])
local old_head = head()
-- Reads first: every lease still held, and whether the keys of options
-- are written (checked before any write).
local entries, O = {}, nil
local marked = {}
for i = 5, #ARGV, 2 do
  local entry = held(ARGV[i], ARGV[i + 1])
  entries[#entries + 1] = entry or false
  if not entry then
    local until_ms = tonumber(redis.call('ZSCORE', MARKS, ARGV[i + 1] .. '\n' .. ARGV[i]))
    marked[#entries] = until_ms ~= nil and until_ms > now
  end
  if entry and not O and special(entry) then
    O = options()
    e = O.check_options()
    if e then return e end
  end
end
-- A reaped entry whose key has no place left loses its lease.
for i, entry in ipairs(entries) do
  local id = ARGV[2 * i + 3]
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
  local id = ARGV[2 * i + 3]
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
  elseif marked[i] then
    out[#out + 1] = -1
  else
    out[#out + 1] = 0
  end
end
if ARGV[3] ~= '' then
  -- The worker's record: when first and last heard of, and what it said.
  -- Records not refreshed for three of their periods are forgotten.
  local all = redis.call('HGETALL', WORKERS)
  local first, stale = now, {}
  for i = 1, #all, 2 do
    local f, last, every = string.match(all[i + 1], '^(%d+),(%d+),.-"every_ms":(%d+)')
    if all[i] == ARGV[3] then
      first = tonumber(f) or now
    elseif not last or tonumber(last) + 3 * tonumber(every) < now then
      stale[#stale + 1] = all[i]
    end
  end
  if #stale > 0 then call_sliced('HDEL', WORKERS, stale) end
  redis.call('HSET', WORKERS, ARGV[3], int(first) .. ',' .. int(now) .. ',' .. ARGV[4])
end
if moved then announce(ARGV[2], lease_until, old_head, now, false, false) end
return out
