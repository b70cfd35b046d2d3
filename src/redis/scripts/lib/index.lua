-- The claim's index of the entries with a key or a priority ("special"
-- entries; the others stay in SCHEDULE alone, as before options existed).
--
-- READY is a sorted set whose members all score 0, read in lexical order
-- (ZRANGE ... BYLEX). It holds every special entry that no lease holds:
-- pending, due, or leased with a lease that ran out and that a claim saw
-- ("reaped": available again at its lease end, its token kept, so its old
-- holder may still finish it until another claim takes it). Members:
--   g<key>\0<place><id>     every such entry that has a key (its group)
--   h<place>-<id>           every such entry without a key
--   h<place>+<key>\0<id>    the first entry of each group of a level (its head)
-- where <place> is <level><due><seq>: the level, 4 hex digits of 32767 -
-- priority (the highest priority sorts first); the due time, 11 hex digits
-- of ms (the lease end for a reaped entry); the 16 hex digits of sequence
-- of its member. So the heads of a level come in due order, FIFO on ties,
-- and a claim walks heads, one per key, never a key's whole backlog. Keys
-- and ids hold no NUL.
--
-- HELD: id -> lease end, for the special entries a lease holds (each
-- counted in its key's 'c:'); a claim reaps those whose lease ran out back
-- into READY. LIMITS: 'l:<key>' -> the key's limit ('<concurrency>,<rate
-- max>,<rate per ms>', each empty for none; the default under 'l:*');
-- 'c:<key>' -> how many of its entries HELD holds; 's:<key>' -> when its
-- recent deliveries began (11 hex digits each, oldest first: at most the
-- rate's max, within its period), for a key that has a rate.
-- UNIQUE: id -> until when it stays taken (a unique window).
--
-- The functions below exist only where a script meets an entry with
-- options: `options()` makes them on its first call (as `ledger_of` in
-- lib/requests.lua, the maker uses no upvalue), so that a script on a
-- queue without them does not pay for defining them (defining a function
-- is part of every call's cost).
local function options_of(ensure, int, call_sliced, hmget_sliced, special)
  local SPECIAL, READY, HELD, LIMITS, UNIQUE = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
  local o = {}

  -- The latest due time a place tells apart (in the year 2527): later ones
  -- sort as this one.
  local LAST_DUE = 17592186044415

  -- `ensure` for the keys of entries with options, for the hot scripts once
  -- they meet such an entry.
  local function check_options()
    return ensure(SPECIAL, 'zset') or ensure(READY, 'zset') or ensure(HELD, 'zset')
      or ensure(LIMITS, 'hash') or ensure(UNIQUE, 'zset')
  end

  local function level(prio)
    return string.format('%04x', 32767 - prio)
  end

  local function due_hex(at)
    if at > LAST_DUE then at = LAST_DUE elseif at < 0 then at = 0 end
    return string.format('%011x', at)
  end

  -- The place of entry `e` (its member set) due at `at`: 31 bytes.
  local function place_of(e, at)
    return level(e.prio or 0) .. due_hex(at) .. string.sub(e.member, 1, 16)
  end

  -- The head member for group member `gm` of `key`.
  local function head_of(key, gm)
    local at = #key + 3
    return 'h' .. string.sub(gm, at, at + 30) .. '+' .. key .. '\0' .. string.sub(gm, at + 31)
  end

  -- The first member of the group `prefix` ('g' .. key .. '\0' .. level), or nil.
  local function first_of(prefix)
    return redis.call('ZRANGE', READY, '[' .. prefix, '(' .. prefix .. '\255', 'BYLEX',
      'LIMIT', 0, 1)[1]
  end

  -- Adds the entries of `list` ({id, e, at}: record `e`, its member set, due
  -- at `at`) to READY, each group's first entry its head.
  local function ready_add_all(list)
    local members, groups, order = {}, {}, {}
    for _, x in ipairs(list) do
      local id, e = x[1], x[2]
      local place = place_of(e, x[3])
      members[#members + 1] = 0
      if e.key then
        local prefix = 'g' .. e.key .. '\0' .. string.sub(place, 1, 4)
        if not groups[prefix] then
          groups[prefix] = {key = e.key, old = first_of(prefix)}
          order[#order + 1] = prefix
        end
        members[#members + 1] = 'g' .. e.key .. '\0' .. place .. id
      else
        members[#members + 1] = 'h' .. place .. '-' .. id
      end
    end
    call_sliced('ZADD', READY, members)
    for _, prefix in ipairs(order) do
      local g = groups[prefix]
      local new = first_of(prefix)
      if new ~= g.old then
        if g.old then redis.call('ZREM', READY, head_of(g.key, g.old)) end
        redis.call('ZADD', READY, 0, head_of(g.key, new))
      end
    end
  end

  -- Takes the entries of `list` ({id, e, at}, as they were added) out of
  -- READY; a group whose head left gets its next entry as head. Returns how
  -- many of them READY held.
  local function ready_remove_all(list)
    local members, groups, order = {}, {}, {}
    for _, x in ipairs(list) do
      local id, e = x[1], x[2]
      local place = place_of(e, x[3])
      if e.key then
        local gm = 'g' .. e.key .. '\0' .. place .. id
        local prefix = 'g' .. e.key .. '\0' .. string.sub(place, 1, 4)
        local g = groups[prefix]
        if not g then
          g = {key = e.key, heads = {}}
          groups[prefix] = g
          order[#order + 1] = prefix
        end
        g.heads[#g.heads + 1] = head_of(e.key, gm)
        members[#members + 1] = gm
      else
        members[#members + 1] = 'h' .. place .. '-' .. id
      end
    end
    local found = 0
    for i = 1, #members, 4000 do
      found = found + redis.call('ZREM', READY, unpack(members, i, math.min(i + 3999, #members)))
    end
    for _, prefix in ipairs(order) do
      local g = groups[prefix]
      local removed = 0
      for i = 1, #g.heads, 4000 do
        removed = removed
          + redis.call('ZREM', READY, unpack(g.heads, i, math.min(i + 3999, #g.heads)))
      end
      if removed > 0 then
        local new = first_of(prefix)
        if new then redis.call('ZADD', READY, 0, head_of(g.key, new)) end
      end
    end
    return found
  end

  -- Whether entries of `key` wait in READY (at any level).
  local function key_waits(key)
    return #redis.call('ZRANGE', READY, '[g' .. key .. '\0', '(g' .. key .. '\1', 'BYLEX',
      'LIMIT', 0, 1) > 0
  end

  -- A limit's text as {conc, max, per} (nil where it has none), or nil.
  local function parse_limit(text)
    if not text then return nil end
    local conc, max, per = string.match(text, '^(%d*),(%d*),(%d*)$')
    if not conc then return nil end
    local limit = {conc = tonumber(conc)}
    if max ~= '' and per ~= '' then
      limit.max, limit.per = tonumber(max), math.max(tonumber(per), 1)
    end
    return limit
  end

  -- Takes live entry `id` (record `e`, its member in its sorted set) out of
  -- the claim's indexes: out of HELD if a lease holds it (its key's count
  -- one lower), else out of READY (its place read from SPECIAL). Returns
  -- whether waiting consumers must look again: a place of a key at its
  -- concurrency freed while entries of that key wait.
  local function unindex(id, e)
    if e.member == '' or not special(e) then return false end
    if e.token ~= '' and redis.call('ZREM', HELD, id) == 1 then
      if not e.key then return false end
      local got = redis.call('HMGET', LIMITS, 'c:' .. e.key, 'l:' .. e.key, 'l:*')
      local held = tonumber(got[1]) or 0
      if held <= 1 then
        redis.call('HDEL', LIMITS, 'c:' .. e.key)
      else
        redis.call('HSET', LIMITS, 'c:' .. e.key, int(held - 1))
      end
      local limit = parse_limit(got[2] or got[3])
      return limit ~= nil and limit.conc ~= nil and held >= limit.conc and key_waits(e.key)
    end
    local at = tonumber(redis.call('ZSCORE', SPECIAL, e.member))
    if at then ready_remove_all({{id, e, at}}) end
    return false
  end

  -- Leased entries `ids` (records `list`, with a key or a priority) leave the
  -- claim's indexes, all at once: HELD, or READY where a claim reaped their
  -- lease; the places of their keys free. Returns whether waiting consumers
  -- must look again (as `unindex`).
  local function release_all(ids, list)
    local held = 0
    for i = 1, #ids, 4000 do
      held = held + redis.call('ZREM', HELD, unpack(ids, i, math.min(i + 3999, #ids)))
    end
    local freed, keys = {}, {}
    for i, id in ipairs(ids) do
      local e = list[i]
      -- Not all held: those that READY holds were reaped (rare).
      local reaped = false
      if held < #ids then
        local at = tonumber(redis.call('ZSCORE', SPECIAL, e.member))
        reaped = at ~= nil and ready_remove_all({{id, e, at}}) > 0
      end
      if e.key and not reaped then
        if not freed[e.key] then
          freed[e.key] = 0
          keys[#keys + 1] = e.key
        end
        freed[e.key] = freed[e.key] + 1
      end
    end
    if #keys == 0 then return false end
    local fields = {}
    for _, key in ipairs(keys) do
      fields[#fields + 1] = 'c:' .. key
      fields[#fields + 1] = 'l:' .. key
    end
    fields[#fields + 1] = 'l:*'
    local got = hmget_sliced(LIMITS, fields)
    local counts, zero, wake = {}, {}, false
    for i, key in ipairs(keys) do
      local held_before = tonumber(got[2 * i - 1]) or 0
      local left = held_before - freed[key]
      if left > 0 then
        counts[#counts + 1] = 'c:' .. key
        counts[#counts + 1] = int(left)
      else
        zero[#zero + 1] = 'c:' .. key
      end
      local limit = parse_limit(got[2 * i] or got[#got])
      if not wake and limit and limit.conc and held_before >= limit.conc then
        wake = key_waits(key)
      end
    end
    call_sliced('HSET', LIMITS, counts)
    call_sliced('HDEL', LIMITS, zero)
    return wake
  end

  -- Keeps id `id` taken until `until_ms`: an insert of it is refused until
  -- then. Forgets some windows that closed by `now` (lazily: no sweeper).
  local function keep_taken(id, until_ms, now)
    redis.call('ZADD', UNIQUE, until_ms, id)
    local old = redis.call('ZRANGEBYSCORE', UNIQUE, '-inf', now, 'LIMIT', 0, 100)
    if #old > 0 then redis.call('ZREM', UNIQUE, unpack(old)) end
  end

  o.check_options = check_options
  o.level = level
  o.due_hex = due_hex
  o.place_of = place_of
  o.head_of = head_of
  o.first_of = first_of
  o.ready_add_all = ready_add_all
  o.ready_remove_all = ready_remove_all
  o.key_waits = key_waits
  o.parse_limit = parse_limit
  o.unindex = unindex
  o.release_all = release_all
  o.keep_taken = keep_taken
  return o
end

local made_options = nil
local function options()
  if not made_options then
    made_options = options_of(ensure, int, call_sliced, hmget_sliced, special)
  end
  return made_options
end
