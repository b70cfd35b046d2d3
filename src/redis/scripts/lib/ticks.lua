-- Schedules live in SCHEDULES, name -> 'e,<period ms>,<policy>' (every) or
-- 'c,<expression>' (cron). A schedule's one live tick is the entry whose id
-- is the name and whose record has a tick instant.
--
-- The instant of the tick after the one at `instant`, run from `since` (its
-- claim), by the server's clock `now`. Cron instants come from the client,
-- which parses the expression (the server's clock still decides which one
-- is next): `cands` is '<rec>\n<from>,<c1>,<c2>,...[,x]', the first instants
-- of the expression strictly after `from`, ending in 'x' when there are no
-- more. Returns the instant; or false when the expression has none left; or
-- nil and the instant to compute from when `cands` does not cover it.
local function next_tick(rec, instant, since, now, cands)
  if string.sub(rec, 1, 2) == 'e,' then
    local period, policy = string.match(rec, '^e,(%d+),(%a+)$')
    period = tonumber(period)
    local next = instant + period
    if policy ~= 'delay' then
      -- Burst and skip stay on the epoch grid. `instant` is off it when
      -- the spec changed while this tick ran (it lies on the old grid), and
      -- `instant + period` would keep that phase for good.
      next = (math.floor(instant / period) + 1) * period
    end
    if next > now or policy == 'burst' then return next end
    if policy == 'skip' then return (math.floor(now / period) + 1) * period end
    return (since or now) + period -- delay: the grid moves to the late run
  end
  local ref = math.max(now, instant)
  local nl = cands and string.find(cands, '\n', 1, true)
  if not nl or string.sub(cands, 1, nl - 1) ~= rec then return nil, ref end
  local list = string.sub(cands, nl + 1)
  local from = tonumber(string.match(list, '^(%d+)'))
  if not from or from > ref then return nil, ref end
  local first = true
  for n in string.gmatch(list, '(%d+)') do
    if not first and tonumber(n) > ref then return tonumber(n) end
    first = false
  end
  if string.sub(list, -1) == 'x' then return false end
  return nil, ref
end

-- Inserts the tick of schedule `name` due at `at`, a fresh entry (attempt
-- 0) that keeps the value stored under the name.
-- A paused schedule's tick is parked instead: at PARKED, its due time in
-- ENTRIES 'p:' .. name (see pause_schedule.lua). Counted as inserted in
-- the history.
local function successor(name, at, channel, now)
  EVENTS.i = EVENTS.i + 1
  local old_head, busy = head()
  local member = new_member(name)
  redis.call('HSET', ENTRIES, 'm:' .. name,
    record({attempt = 0, token = '', tick = at, member = member}))
  if redis.call('HEXISTS', ENTRIES, 'p:' .. name) == 1 then
    redis.call('HSET', ENTRIES, 'p:' .. name, int(at))
    redis.call('ZADD', SCHEDULE, PARKED, member)
    return
  end
  redis.call('ZADD', SCHEDULE, at, member)
  announce(channel, at, old_head, now, busy, false)
end

-- Deletes dead letters past the calling handle's retention (see `rules`):
-- those that died before now - DEAD_MAX_AGE, then the oldest beyond
-- DEAD_MAX_COUNT. The id of one with a unique window stays taken that long.
local function trim_dead(now)
  local function forget(ids)
    for _, id in ipairs(ids) do
      local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id))
      redis.call('HDEL', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id,
        'n:' .. id)
      if e and e.unique then options().keep_taken(id, now + e.unique, now) end
    end
    call_sliced('ZREM', DEAD, ids)
  end
  if DEAD_MAX_AGE >= 0 then
    repeat
      local old = redis.call('ZRANGEBYSCORE', DEAD, '-inf', '(' .. int(now - DEAD_MAX_AGE),
        'LIMIT', 0, 1000)
      forget(old)
    until #old == 0
  end
  if DEAD_MAX_COUNT >= 0 then
    local over = redis.call('ZCARD', DEAD) - DEAD_MAX_COUNT
    while over > 0 do
      local old = redis.call('ZRANGE', DEAD, 0, math.min(over, 1000) - 1)
      forget(old)
      over = over - #old
    end
  end
end

-- Moves entry `id` (record `e`, out of the claim's indexes: see `unindex`)
-- to the dead letters with `reason`, its options kept. A tick is
-- kept under '<name>@<instant>' (its name stays free for its successor); a
-- name over 480 bytes is cut to 480 (at a character boundary), so that the
-- dead letter's id keeps to the 512 bytes of an id.
local function bury(id, e, reason, now)
  if e.member ~= '' then redis.call('ZREM', zset_of(e), e.member) end
  redis.call('ZREM', LEASES, id)
  local dead = id
  if e.tick then
    local name = id
    if #name > 480 then
      local cut = 480
      -- Not inside a character: back over its continuation bytes.
      while cut > 0 and string.byte(name, cut + 1) >= 128 and string.byte(name, cut + 1) < 192 do
        cut = cut - 1
      end
      name = string.sub(name, 1, cut)
    end
    dead = name .. '@' .. int(e.tick)
    local n = 1
    while redis.call('HEXISTS', ENTRIES, 'm:' .. dead) == 1 do
      n = n + 1
      dead = name .. '@' .. int(e.tick) .. '.' .. n
    end
    local got = redis.call('HMGET', ENTRIES, 'v:' .. id, 'e:' .. id)
    if got[1] then redis.call('HSET', ENTRIES, 'v:' .. dead, got[1]) end
    if got[2] then redis.call('HSET', ENTRIES, 'e:' .. dead, got[2]) end
    -- The dead tick names its schedule.
    redis.call('HSET', ENTRIES, 'n:' .. dead, id)
    redis.call('HDEL', ENTRIES, 'm:' .. id, 'r:' .. id, 'e:' .. id)
    last_run(id, e.since, 'x')
  end
  EVENTS.x = EVENTS.x + 1
  keep_result(dead, 'x', now, e.attempt, reason, nil)
  e.token, e.since, e.tick, e.member = '', nil, nil, ''
  redis.call('HSET', ENTRIES, 'm:' .. dead, record(e), 'r:' .. dead, reason)
  redis.call('ZADD', DEAD, now, dead)
  trim_dead(now)
end
