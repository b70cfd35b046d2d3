-- CLAIM: finishes deliveries (see finish), then leases up to `max` due
-- entries, in claim order, to the claim `token`.
-- KEYS: the queue's keys. ARGV: max, lease ms, the handle's rules
-- (max attempts, dead-letter retention: see `rules`), token, recover (-1,
-- or a lower bound of this claim's lease end when it is sent again after
-- its reply was lost), channel, request identity ('' on a single server;
-- see lib/requests.lua), number of ops, then 7 fields per op (kind, id,
-- token, ms, reason, cands, output).
-- Returns {now, head or -1 (none, or paused), {op results}, {items}}, an
-- item being {id, value, attempt, deadline, lease end, schedule record or
-- '', reason to bury it or '', key or '', priority, trace context or ''}. An entry past its max
-- attempts (its own, else the queue's) goes to the dead letters instead (a
-- cron tick is handed out with a reason to bury it, since its successor
-- needs the client's cron instants).
-- Claim order: the highest priority first; within one priority, rounds of
-- one entry per key (an entry without a key is a key of its own): the
-- first round takes the first due entry of each key in (due time,
-- sequence) order, each later round the next due entry of each key that
-- gave one in the round before, in the same order. A key whose limit
-- refuses one more delivery (its concurrency: entries of the key leased
-- now, plus those this claim took; its rate: deliveries of the key begun
-- in the last `per` ms, plus those this claim took) is skipped: it never
-- holds up another. Entries without a key or a priority, in SCHEDULE, are
-- level 0's keys of their own; while no entry has a key or a priority (no
-- OPTIONS field) the claim reads SCHEDULE alone, as before options existed
-- (and the claim that finds SPECIAL empty deletes OPTIONS).
-- The head: now if it took `max` (more may be due); else the earliest of
-- the next due time or lease end after now and the time a refused key's
-- rate window opens while its entries wait; -1 when there is none. So a
-- consumer never spins on due entries that wait on their key's limits.
-- Atomic: no two claims lease one entry, nor start more entries of a key
-- than its limits allow. A claim sent again with its token returns what it
-- leased the first time, if it ran: a lost reply never costs an attempt of
-- an entry nobody saw. On a cluster, a second execution of one sending (the
-- client sent the same request again by itself) leases nothing new and
-- answers as the first did.
local now = now_ms()
local max, lease, limit, token = tonumber(ARGV[1]), tonumber(ARGV[2]), rules(ARGV[3]), ARGV[4]
local recover, channel = tonumber(ARGV[5]), ARGV[6]
local ledger, n_ops = ledger_of(ARGV[7]), tonumber(ARGV[8])

-- A first sending that lands after its claim was given up on, or sent
-- again, leases nothing (the resend leases for the claim). A resend marks
-- its token so. Both read GIVEN_UP before any write.
local stale = false
if recover < 0 then
  stale = redis.call('ZSCORE', GIVEN_UP, token) and true or false
else
  local e = ensure(GIVEN_UP, 'zset')
  if e then return e end
end
-- What this sending answered if it ran already: '<lease end or
-- nothing>:<op result codes>'. Reads REQUESTS.
local kept = ledger and ledger.recall()

-- Whether the queue is paused, and whether any entry may have a key or a
-- priority (then the claim walks the claim index; ops cannot add the first
-- one: it would be leased now). The keys of options are checked before any
-- write.
local flags = redis.call('HMGET', ENTRIES, PAUSED, OPTIONS, TRACES)
local paused, any_options = flags[1] ~= false, flags[2] ~= false
-- The fields read per entry: its record and value, and its trace context
-- where an insert ever kept one.
local W = 2
if flags[3] then W = 3 end
local function field_of(i, n) return W * (i - 1) + n end
local function trace_of(got, i)
  if W == 3 then return got[field_of(i, 3)] end
  return nil
end
if any_options then
  local e = options().check_options() or ensure(LEASES, 'zset')
  if e then return e end
end

-- With ops, every key the claim may write is checked first: the ops are
-- applied before the claim's own checks, and must not be left applied by a
-- script that then fails. Likewise a resend, which marks its token first.
if n_ops > 0 or recover >= 0 then
  local e = ensure(LEASES, 'zset') or ensure(DEAD, 'zset') or check_seq()
    or ensure(SCHEDULES, 'hash')
  if e then return e end
end
local results, err = finish_all(9, n_ops, now, limit, channel)
if err then return err end
local kept_end = nil
if kept then
  local lease_end, codes = string.match(kept, '^(%d*):(.*)$')
  ledger.first_results(results, codes)
  kept_end = tonumber(lease_end)
end

local function reply(items, head_score)
  if not head_score then
    head_score = tonumber(redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')[2]) or -1
  end
  -- A parked tick is no head: it waits for its schedule's resume.
  if head_score >= PARKED then head_score = -1 end
  count_history(now)
  announce_finished(channel, now)
  return {now, head_score, results, items}
end

local function item(id, value, e, lease_until, rec, why, trace)
  return {id, value or false, e.attempt, e.deadline or 0, lease_until, rec or '', why or '',
    e.key or '', e.prio or 0, trace or ''}
end

if stale then return reply({}) end

-- A second execution of this sending returns the leases the first was
-- granted (they all end at one instant) that its token still holds, and
-- leases nothing new. A resend by the consumer (`recover`) returns the
-- leases its token was granted, if the first sending ran; else it claims.
if kept or recover >= 0 then
  if recover >= 0 then mark(token, now) end
  local from, to = recover, '+inf'
  if kept then from, to = kept_end, kept_end end
  local items, order = {}, {}
  local leased = from and redis.call('ZRANGEBYSCORE', LEASES, from, to, 'WITHSCORES') or {}
  for i = 1, #leased, 2 do
    local id = leased[i]
    local e = held(id, token)
    if e then
      local rec = e.tick and redis.call('HGET', SCHEDULES, id)
      -- Only a cron tick is leased past the limit: to be buried.
      local why, most = nil, e.max or limit
      if most > 0 and e.attempt > most then
        why = 'not acked after ' .. most .. ' deliveries'
      end
      local got = redis.call('HMGET', ENTRIES, 'v:' .. id, 't:' .. id)
      items[#items + 1] = item(id, got[1], e, tonumber(leased[i + 1]), rec, why, got[2])
      order[items[#items]] = e.member
    end
  end
  if kept or #items > 0 then
    -- Close to the order the first sending took them: priority, due time,
    -- then member (whose sequence keeps equal due times FIFO).
    table.sort(items, function(a, b)
      if a[9] ~= b[9] then return a[9] > b[9] end
      if a[4] ~= b[4] then return a[4] < b[4] end
      return order[a] < order[b]
    end)
    if any_options then return reply(items, now) end
    return reply(items)
  end
end

-- On a cluster, keeps what a second execution of this sending answers, if
-- it changed something: '<when its leases end, if any>:<op result codes>'.
-- Defined on a cluster alone: defining a function is part of every call's
-- cost.
local keep_answer = ledger and function(lease_end)
  local codes, changed = ledger.result_codes(results)
  if lease_end or changed then
    ledger.remember((lease_end or '') .. ':' .. codes, now)
  end
end

-- Paused: nothing new is leased, and the head is not reported (consumers
-- wait for `resume`'s announcement, or their poll interval).
if paused then
  if keep_answer then keep_answer(nil) end
  return reply({}, -1)
end

local lease_until = now + lease
-- Formatted once: a number passed to redis.call is printed with %.17g.
local lease_arg = int(lease_until)

if not any_options then
  -- No entry has a key or a priority: SCHEDULE's due entries, in order.
  -- One more than asked: if it comes, more are due and no head lookup is
  -- needed.
  local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max + 1)
  local n = math.min(#due / 2, max)
  if n == 0 then
    if keep_answer then keep_answer(nil) end
    return reply({})
  end

  -- Reads first: a key of another type fails here, before any write.
  local fields, ids = {}, {}
  for i = 1, n do
    local id = string.sub(due[2 * i - 1], 17)
    ids[i] = id
    fields[field_of(i, 1)], fields[field_of(i, 2)] = 'm:' .. id, 'v:' .. id
    if W == 3 then fields[field_of(i, 3)] = 't:' .. id end
  end
  local got = redis.call('HMGET', ENTRIES, unpack(fields))
  local items, leases, records, members, burying = {}, {}, {}, {}, {}
  -- Formatted once: the claim's time, in each record it writes.
  local since_arg = int(now)
  for i = 1, n do
    local member, score = due[2 * i - 1], tonumber(due[2 * i])
    local id = ids[i]
    local base = W * (i - 1)
    local raw = got[base + 1]
    -- A plain record (see PLAIN_RECORD) within its attempts, or none: its
    -- new record is written without a parse. Its deadline is its score,
    -- as Redis wrote it.
    local attempt = 0
    if raw then attempt = tonumber((string.match(raw, PLAIN_RECORD))) end
    if attempt and (limit <= 0 or attempt < limit) then
      attempt = attempt + 1
      leases[#leases + 1] = lease_arg
      leases[#leases + 1] = id
      records[#records + 1] = fields[base + 1]
      records[#records + 1] = int(attempt) .. ',' .. token .. ',' .. since_arg .. ','
        .. due[2 * i] .. ',,' .. member
      members[#members + 1] = lease_arg
      members[#members + 1] = member
      items[#items + 1] = {id, got[base + 2] or false, attempt, score, lease_until, '', '', '', 0,
        W == 3 and got[base + 3] or ''}
    else
      local e = parse(raw) or {attempt = 0, token = ''}
      e.member = member
      local rec = e.tick and redis.call('HGET', SCHEDULES, id)
      local most = e.max or limit
      e.attempt = e.attempt + 1
      e.deadline = e.tick or score
      if most > 0 and e.attempt > most and not (rec and string.sub(rec, 1, 2) == 'c,') then
        e.attempt = most
        burying[#burying + 1] = {id, e, rec, most}
      else
        local why = nil
        if most > 0 and e.attempt > most then
          why = 'not acked after ' .. most .. ' deliveries'
        end
        e.token, e.since = token, now
        leases[#leases + 1] = lease_arg
        leases[#leases + 1] = id
        records[#records + 1] = fields[field_of(i, 1)]
        records[#records + 1] = record(e)
        members[#members + 1] = lease_arg
        members[#members + 1] = member
        items[#items + 1] = item(id, got[field_of(i, 2)], e, lease_until, rec, why,
          trace_of(got, i))
      end
    end
  end
  if #burying > 0 then
    local e = ensure(LEASES, 'zset') or ensure(DEAD, 'zset') or check_seq()
      or ensure(UNIQUE, 'zset') or ensure(KEPT, 'zset')
    if e then return e end
  end
  if #leases > 0 then
    -- The first write: it fails alone if LEASES holds another type.
    redis.call('ZADD', LEASES, unpack(leases))
    redis.call('HSET', ENTRIES, unpack(records))
    redis.call('ZADD', SCHEDULE, unpack(members))
  end
  for _, b in ipairs(burying) do
    local id, e, rec = b[1], b[2], b[3]
    local next = rec and next_tick(rec, e.tick, nil, now, nil)
    bury(id, e, 'not acked after ' .. b[4] .. ' deliveries', now)
    if next then successor(id, next, channel, now) end
  end
  if keep_answer then keep_answer(#leases > 0 and lease_arg or nil) end
  if #due > 2 * n and #burying == 0 then return reply(items, tonumber(due[#due])) end
  return reply(items)
end

-- Entries with options exist: the claim's index.
local O = options()
local due_hex, first_of, head_of, parse_limit = O.due_hex, O.first_of, O.head_of, O.parse_limit

-- Leases that ran out by now stop counting for their key ("reaped"): their
-- entries are available again, at their lease end, tokens kept (their old
-- holders may still finish them until another claim takes them).
repeat
  local ended = redis.call('ZRANGEBYSCORE', HELD, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1000)
  local ids, fields = {}, {}
  for i = 1, #ended, 2 do
    ids[#ids + 1] = ended[i]
    fields[#fields + 1] = 'm:' .. ended[i]
  end
  if #ids > 0 then
    local got = redis.call('HMGET', ENTRIES, unpack(fields))
    redis.call('ZREM', HELD, unpack(ids))
    local back, freed, keys = {}, {}, {}
    for i, id in ipairs(ids) do
      local e = parse(got[i])
      if e and e.member ~= '' then
        back[#back + 1] = {id, e, tonumber(ended[2 * i])}
        if e.key then
          if not freed[e.key] then
            freed[e.key] = 0
            keys[#keys + 1] = e.key
          end
          freed[e.key] = freed[e.key] + 1
        end
      end
    end
    for _, key in ipairs(keys) do
      local held = (tonumber(redis.call('HGET', LIMITS, 'c:' .. key)) or 0) - freed[key]
      if held > 0 then
        redis.call('HSET', LIMITS, 'c:' .. key, int(held))
      else
        redis.call('HDEL', LIMITS, 'c:' .. key)
      end
    end
    O.ready_add_all(back)
  end
until #ended < 2000

-- The keys met, with what their limits allow: {conc, max, per, held,
-- starts, begun, taken, started, refused}.
local keys, key_order = {}, {}

-- Deliveries begun after `since` in the starts `starts` (oldest first).
local function begun_after(starts, since)
  local count = 0
  for i = #starts / 11, 1, -1 do
    if tonumber(string.sub(starts, 11 * i - 10, 11 * i), 16) <= since then break end
    count = count + 1
  end
  return count
end

-- Reads the limits and counts of the keys of `list` not met yet, in one
-- HMGET.
local function meet(list)
  local new, fields = {}, {}
  for _, key in ipairs(list) do
    if not keys[key] and not new[key] then
      new[key] = true
      new[#new + 1] = key
      fields[#fields + 1] = 'l:' .. key
      fields[#fields + 1] = 'c:' .. key
      fields[#fields + 1] = 's:' .. key
    end
  end
  if #new == 0 then return end
  fields[#fields + 1] = 'l:*'
  local got = hmget_sliced(LIMITS, fields)
  for i, key in ipairs(new) do
    local limit = parse_limit(got[3 * i - 2] or got[#got]) or {}
    local k = {conc = limit.conc, max = limit.max, per = limit.per,
      held = tonumber(got[3 * i - 1]) or 0, starts = got[3 * i], taken = 0, started = 0}
    if k.max then k.begun = begun_after(k.starts or '', now - k.per) end
    keys[key] = k
    key_order[#key_order + 1] = key
  end
end

-- Whether one more entry of `key` (met) may start now (counted if so).
local function admits(key)
  local k = keys[key]
  if (k.conc and k.held + k.taken >= k.conc) or (k.max and k.begun + k.taken >= k.max) then
    k.refused = true
    return false
  end
  k.taken = k.taken + 1
  return true
end

-- What the claim takes, in order: {id, score (due time, or the end of a
-- lease that ran out), member (an entry of SCHEDULE) or false (of READY),
-- its member in READY, its key, its head member if it was its key's head}.
local chosen = {}
-- Due by now: places below this bound.
local due_bound = due_hex(now + 1)

-- Takes what level `lvl` gives, with SCHEDULE's due entries if `plain`
-- (level 0): round 1 from the heads (and SCHEDULE), then the later rounds
-- from the groups of the keys that gave one.
local function walk(lvl, plain)
  local heads, h_at, h_off, h_done, chunk = {}, 1, 0, false, 0
  local due, p_at, p_off, p_done = {}, 1, 0, not plain
  local gave = {}
  while #chosen < max do
    local want = max - #chosen
    if h_at > #heads and not h_done then
      -- As many as are left to take, more each time keys are refused.
      chunk = math.max(want, 2 * chunk)
      heads = redis.call('ZRANGE', READY, '[h' .. lvl, '(h' .. lvl .. due_bound, 'BYLEX',
        'LIMIT', h_off, chunk)
      h_at, h_off, h_done = 1, h_off + #heads, #heads < chunk
      local met = {}
      for _, h in ipairs(heads) do
        if string.sub(h, 33, 33) == '+' then
          local rest = string.sub(h, 34)
          met[#met + 1] = string.sub(rest, 1, string.find(rest, '\0', 1, true) - 1)
        end
      end
      meet(met)
    end
    if p_at > #due and not p_done then
      due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'WITHSCORES', 'LIMIT', p_off, want)
      p_at, p_off, p_done = 1, p_off + #due / 2, #due < 2 * want
    end
    local h, p = heads[h_at], due[p_at]
    if not h and not p then break end
    local from_plain = h == nil
    if h and p then
      local p_due, h_due = tonumber(due[p_at + 1]), tonumber(string.sub(h, 6, 16), 16)
      from_plain = p_due < h_due or (p_due == h_due
        and tonumber(string.sub(p, 1, 16), 16) < tonumber(string.sub(h, 17, 32), 16))
    end
    if from_plain then
      chosen[#chosen + 1] = {string.sub(p, 17), tonumber(due[p_at + 1]), p}
      p_at = p_at + 2
    else
      h_at = h_at + 1
      local score = tonumber(string.sub(h, 6, 16), 16)
      if string.sub(h, 33, 33) == '-' then
        chosen[#chosen + 1] = {string.sub(h, 34), score, false, h}
      else
        local rest = string.sub(h, 34)
        local nul = string.find(rest, '\0', 1, true)
        local key, id = string.sub(rest, 1, nul - 1), string.sub(rest, nul + 1)
        if admits(key) then
          local gm = 'g' .. key .. '\0' .. string.sub(h, 2, 32) .. id
          chosen[#chosen + 1] = {id, score, false, gm, key, h}
          gave[#gave + 1] = {key = key, last = gm}
        end
      end
    end
  end
  -- The later rounds. Each key's next due entries are read a few at a
  -- time (as many as its share of what is left to take).
  while #gave > 0 and #chosen < max do
    local share = math.ceil((max - #chosen) / #gave)
    local nexts = {}
    for _, g in ipairs(gave) do
      local prefix = 'g' .. g.key .. '\0' .. lvl
      if (not g.got or g.at > #g.got) and not g.done then
        g.got = redis.call('ZRANGE', READY, '(' .. g.last, '(' .. prefix .. due_bound, 'BYLEX',
          'LIMIT', 0, share)
        g.at, g.done = 1, #g.got < share
      end
      local gm = g.got[g.at]
      if gm then
        g.at = g.at + 1
        local o = #prefix
        nexts[#nexts + 1] = {g, gm, tonumber(string.sub(gm, o + 1, o + 11), 16),
          tonumber(string.sub(gm, o + 12, o + 27), 16), string.sub(gm, o + 28)}
      end
    end
    table.sort(nexts, function(a, b)
      if a[3] ~= b[3] then return a[3] < b[3] end
      return a[4] < b[4]
    end)
    gave = {}
    for _, x in ipairs(nexts) do
      if #chosen >= max then break end
      local g = x[1]
      if admits(g.key) then
        chosen[#chosen + 1] = {x[5], x[3], false, x[2], g.key}
        g.last = x[2]
        gave[#gave + 1] = g
      end
    end
  end
end

-- The levels in order, level 0 (SCHEDULE's) in its place.
local after, plain_done = nil, false
while #chosen < max do
  local first = redis.call('ZRANGE', READY, after and ('(h' .. after .. '\255') or '[h', '(i',
    'BYLEX', 'LIMIT', 0, 1)[1]
  local lvl = first and string.sub(first, 2, 5)
  if not plain_done and (not lvl or tonumber(lvl, 16) >= 32767) then
    plain_done = true
    walk('7fff', true)
    after = '7fff'
  elseif lvl then
    walk(lvl, false)
    after = lvl
  else
    break
  end
end

-- Reads first: a key of another type fails here, before any write.
local fields = {}
for i, c in ipairs(chosen) do
  fields[field_of(i, 1)], fields[field_of(i, 2)] = 'm:' .. c[1], 'v:' .. c[1]
  if W == 3 then fields[field_of(i, 3)] = 't:' .. c[1] end
end
local got = #fields > 0 and hmget_sliced(ENTRIES, fields) or {}
local items, leases, records, plain_members, members, held, burying, taken = {}, {}, {}, {}, {},
  {}, {}, {}
for i, c in ipairs(chosen) do
  local id, score = c[1], c[2]
  local e = parse(got[field_of(i, 1)])
  if c[3] then
    e = e or {attempt = 0, token = ''}
    e.member = c[3]
  end
  if not e or e.member == '' then
    -- Not an entry any more (a foreign write): out of READY, so it cannot
    -- fill claims.
    redis.call('ZREM', READY, c[4])
    if c[5] and redis.call('ZREM', READY, head_of(c[5], c[4])) == 1 then
      local first = first_of(string.sub(c[4], 1, #c[5] + 6))
      if first then redis.call('ZADD', READY, 0, head_of(c[5], first)) end
    end
  else
    if not c[3] then taken[#taken + 1] = c end
    local rec = e.tick and redis.call('HGET', SCHEDULES, id)
    local most = e.max or limit
    e.attempt = e.attempt + 1
    e.deadline = e.tick or score
    if most > 0 and e.attempt > most and not (rec and string.sub(rec, 1, 2) == 'c,') then
      e.attempt = most
      burying[#burying + 1] = {id, e, rec, most}
    else
      local why = nil
      if most > 0 and e.attempt > most then
        why = 'not acked after ' .. most .. ' deliveries'
      end
      e.token, e.since = token, now
      leases[#leases + 1] = lease_arg
      leases[#leases + 1] = id
      records[#records + 1] = fields[field_of(i, 1)]
      records[#records + 1] = record(e)
      if c[3] then
        plain_members[#plain_members + 1] = lease_arg
        plain_members[#plain_members + 1] = e.member
      else
        members[#members + 1] = lease_arg
        members[#members + 1] = e.member
        held[#held + 1] = lease_arg
        held[#held + 1] = id
        local k = c[5] and keys[c[5]]
        if k then k.started = k.started + 1 end
      end
      items[#items + 1] = item(id, got[field_of(i, 2)], e, lease_until, rec, why,
        trace_of(got, i))
    end
  end
end
if #burying > 0 then
  local e = ensure(LEASES, 'zset') or ensure(DEAD, 'zset') or check_seq()
    or ensure(KEPT, 'zset')
  if e then return e end
end
if #leases > 0 then
  -- The first write: it fails alone if LEASES holds another type.
  call_sliced('ZADD', LEASES, leases)
  call_sliced('HSET', ENTRIES, records)
  call_sliced('ZADD', SCHEDULE, plain_members)
  call_sliced('ZADD', SPECIAL, members)
  call_sliced('ZADD', HELD, held)
end
-- What the claim took leaves READY, with the heads of their keys (each
-- key's first taken was its head); each key gets its next entry as head.
if #taken > 0 then
  local gone, prefixes, heads = {}, {}, {}
  for _, c in ipairs(taken) do
    gone[#gone + 1] = c[4]
    if c[6] then
      gone[#gone + 1] = c[6]
      prefixes[#prefixes + 1] = string.sub(c[4], 1, #c[5] + 6)
      prefixes[#prefixes + 1] = c[5]
    end
  end
  call_sliced('ZREM', READY, gone)
  for i = 1, #prefixes, 2 do
    local first = first_of(prefixes[i])
    if first then
      heads[#heads + 1] = 0
      heads[#heads + 1] = head_of(prefixes[i + 1], first)
    end
  end
  call_sliced('ZADD', READY, heads)
end
-- The keys' held counts, and the starts of those with a rate now (the
-- newest `max` within `per`), in one write.
local counts, forgotten = {}, {}
for _, key in ipairs(key_order) do
  local k = keys[key]
  if k.started > 0 then
    counts[#counts + 1] = 'c:' .. key
    counts[#counts + 1] = int(k.held + k.started)
    if k.max then
      local starts, since = k.starts or '', now - k.per
      local from = #starts / 11 + 1
      for i = 1, #starts / 11 do
        if tonumber(string.sub(starts, 11 * i - 10, 11 * i), 16) > since then
          from = i
          break
        end
      end
      starts = string.sub(starts, 11 * from - 10) .. string.rep(due_hex(now), k.started)
      if #starts > 11 * k.max then starts = string.sub(starts, #starts - 11 * k.max + 1) end
      k.starts = starts
      counts[#counts + 1] = 's:' .. key
      counts[#counts + 1] = starts
    elseif k.starts then
      forgotten[#forgotten + 1] = 's:' .. key
    end
  end
end
call_sliced('HSET', LIMITS, counts)
call_sliced('HDEL', LIMITS, forgotten)
for _, b in ipairs(burying) do
  local id, e, rec = b[1], b[2], b[3]
  local next = rec and next_tick(rec, e.tick, nil, now, nil)
  bury(id, e, 'not acked after ' .. b[4] .. ' deliveries', now)
  if next then successor(id, next, channel, now) end
end
if keep_answer then keep_answer(#leases > 0 and lease_arg or nil) end
-- OPTIONS left by entries with options that are all gone: deleted, so the
-- next claims read SCHEDULE alone.
if #taken == 0 and redis.call('ZCARD', SPECIAL) == 0 then redis.call('HDEL', ENTRIES, OPTIONS) end
if #chosen >= max then return reply(items, now) end

-- The next due time or lease end after now, or a refused key's window.
local next_at = nil
for _, key in ipairs({SCHEDULE, SPECIAL}) do
  local at = tonumber(redis.call('ZRANGEBYSCORE', key, '(' .. int(now), '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)[2])
  if at and (not next_at or at < next_at) then next_at = at end
end
for _, key in ipairs(key_order) do
  local k = keys[key]
  if k.refused and k.max and k.max > 0 then
    local starts = k.starts or ''
    if begun_after(starts, now - k.per) >= k.max then
      local n = #starts / 11
      local at = tonumber(string.sub(starts, 11 * (n - k.max) + 1, 11 * (n - k.max + 1)), 16)
        + k.per
      if not next_at or at < next_at then next_at = at end
    end
  end
end
return reply(items, next_at or -1)
