-- ENTRIES: one page of the entries in one state, after a cursor.
-- KEYS: the queue's keys. ARGV: state ('p' pending, 'd' due, 'l'
-- leased, 'x' dead), the cursor's score (-1: from the start), member
-- (SCHEDULE's or SPECIAL's for pending and due, the id for leased and
-- dead) and queue id (the INSTANCE it was made with), limit, a new id
-- for the queue should it have none yet, and '1' to walk newest first.
-- Returns {now, more (0/1), instance, {id, score, member, record, value,
-- reason, errors, a dead tick's schedule}...}: up to `limit` entries in
-- the state's order, or its reverse newest first (SCHEDULE and
-- SPECIAL merged, or LEASES or DEAD, by score then member), after the
-- cursor; or {now, -1} when the cursor is another queue's (another
-- server's queue of this name, or this name's before a purge). A page is
-- a range read of one sorted set (two, merged, for pending and due),
-- O(limit + log n) but for what it steps over (members tied with the
-- cursor's score; for pending, the leased entries among them, as many as
-- consumers hold); its one write gives the queue its id, once.
local err = check_all()
if err then return err end
local state, after, tie, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[5])
local newest = ARGV[7] == '1'
local now = now_ms()
local instance = redis.call('HGET', ENTRIES, INSTANCE)
if after >= 0 and ARGV[4] ~= (instance or '') then return {now, -1} end

-- Whether `a` sorts before or at `b` byte by byte, as a sorted set orders
-- members (Lua's `<=` follows the server's locale).
local function at_or_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end

-- Up to `want` {member, score} of `key` with scores from `min` to `max`
-- that come after the cursor and that `keep` accepts, in order (newest
-- first: from `max` down).
local function scan(key, min, max, want, keep)
  local out, offset, chunk = {}, 0, want + 1
  while #out < want do
    local got
    if newest then
      got = redis.call('ZRANGE', key, max, min, 'BYSCORE', 'REV', 'LIMIT', offset, chunk,
        'WITHSCORES')
    else
      got = redis.call('ZRANGEBYSCORE', key, min, max, 'WITHSCORES', 'LIMIT', offset, chunk)
    end
    if #got == 0 then break end
    for i = 1, #got, 2 do
      local member, score = got[i], tonumber(got[i + 1])
      local passed = after >= 0 and score == after
      if passed and newest then
        passed = at_or_before(tie, member)
      elseif passed then
        passed = at_or_before(member, tie)
      end
      if not passed and keep(member) then
        out[#out + 1] = {member, score}
        if #out == want then break end
      end
    end
    offset = offset + #got / 2
    chunk = chunk * 2
  end
  return out
end

local function any() return true end
-- The lower bound: the cursor's score (its ties are stepped over), or
-- `floor` when the cursor is before it.
local function from(floor)
  if after >= 0 and (floor == nil or after > floor) then return after end
  if floor == nil then return '-inf' end
  return '(' .. int(floor)
end

-- Newest first, the upper bound: the cursor's score, or `ceiling`
-- (inclusive) when the cursor is past it.
local function down_from(ceiling)
  if after >= 0 and (ceiling == nil or after < ceiling) then return after end
  if ceiling == nil then return '+inf' end
  return ceiling
end

-- The first `want` of two lists in order (score, then member byte by byte).
local function merge(a, b, want)
  local out, i, j = {}, 1, 1
  while #out < want and (a[i] or b[j]) do
    local x, y = a[i], b[j]
    local y_first = y and (not x or y[2] < x[2] or (y[2] == x[2] and not at_or_before(x[1], y[1])))
    if newest then
      y_first = y and (not x or y[2] > x[2] or (y[2] == x[2] and not at_or_before(y[1], x[1])))
    end
    if y_first then
      out[#out + 1] = y
      j = j + 1
    else
      out[#out + 1] = x
      i = i + 1
    end
  end
  return out
end

local function pending(member)
  return not redis.call('ZSCORE', LEASES, string.sub(member, 17))
end

local want = limit + 1
local found, key
if newest then
  local high = '+inf'
  if after >= 0 then high = after end
  if state == 'd' then
    key = SCHEDULE
    found = merge(scan(SCHEDULE, '-inf', down_from(now), want, any),
      scan(SPECIAL, '-inf', down_from(now), want, any), want)
  elseif state == 'p' then
    key = SCHEDULE
    found = merge(scan(SCHEDULE, '(' .. int(now), high, want, pending),
      scan(SPECIAL, '(' .. int(now), high, want, pending), want)
  elseif state == 'l' then
    key = LEASES
    found = scan(LEASES, '(' .. int(now), high, want, any)
  else
    key = DEAD
    found = scan(DEAD, '-inf', high, want, any)
  end
elseif state == 'd' then
  key = SCHEDULE
  found = merge(scan(SCHEDULE, from(nil), now, want, any), scan(SPECIAL, from(nil), now, want, any),
    want)
elseif state == 'p' then
  key = SCHEDULE
  found = merge(scan(SCHEDULE, from(now), '+inf', want, pending),
    scan(SPECIAL, from(now), '+inf', want, pending), want)
elseif state == 'l' then
  key = LEASES
  found = scan(LEASES, from(now), '+inf', want, any)
else
  key = DEAD
  found = scan(DEAD, from(nil), '+inf', want, any)
end
local more = 0
if #found > limit then
  more = 1
  found[#found] = nil
end
if more == 1 and not instance then
  -- A cursor names the queue from now on.
  instance = ARGV[6]
  redis.call('HSET', ENTRIES, INSTANCE, instance)
end
local out = {now, more, instance or ''}
for _, f in ipairs(found) do
  local member, score = f[1], f[2]
  local id = member
  if key == SCHEDULE then id = string.sub(member, 17) end
  local got = redis.call('HMGET', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id,
    'n:' .. id)
  out[#out + 1] = {id, score, member, got[1] or '', got[2] or false, got[3] or false,
    got[4] or '', got[5] or ''}
end
return out
