-- Records that a sending of the claim `token` that lands from now on leases
-- nothing new: its handle gave the claim up, or sent it again. Kept an
-- hour (the oldest are trimmed as new ones come).
local function mark(token, now)
  redis.call('ZADD', GIVEN_UP, now, token)
  local old = redis.call('ZRANGEBYSCORE', GIVEN_UP, '-inf', now - 3600000, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', GIVEN_UP, unpack(old)) end
end

-- Finishes the delivery (id, token). `kind`: 'a' ack; 'r' retry, due `ms`
-- from now, attempts kept; 'f' fail: a retry as 'r', or to the dead letters
-- with `reason` once the attempt reached `limit` (0: never); 'b' bury: to
-- the dead letters with `reason`, that delivery not counted; 's' snooze: as
-- 'r', that delivery not counted; 'x' discard: to the dead letters with
-- `reason`, that delivery counted; 'g' give back,
-- due at once in its old place (`ms` 1: the attempt counts, 0: it does not);
-- 'G' gives back every delivery of the claim `token` (see below).
-- A tick that leaves the schedule (ack, dead) gets its successor; `cands`
-- are the cron instants for it (see next_tick). `limit` is the queue's max
-- attempts, unless the entry has its own. An ack, or a removal, of an entry
-- with a unique window keeps its id taken that long; a place of a key freed
-- announces when entries of the key wait (see `unindex`).
-- Returns 1 if applied (2: and a failure went to the dead letters), 0 if
-- the lease was lost (nothing changed), or
-- {-1, from, rec} if the successor needs cron instants after `from`
-- (nothing changed). An ack keeps `output` ('' for none) in its result
-- (see `keep_result`); a failed attempt ('f', 'x') is kept in the entry's
-- errors and counted in the history, as every ack and death. The caller
-- checked every key's type.
local function finish(kind, id, token, ms, reason, cands, now, limit, channel, output)
  if kind == 'G' then
    -- Gives back whatever the claim `token` holds (its reply was lost), with
    -- no attempt counted; `ms` bounds the end of its leases from below. A
    -- sending of that claim still on its way then leases nothing.
    mark(token, now)
    for _, leased in ipairs(redis.call('ZRANGEBYSCORE', LEASES, ms, '+inf')) do
      finish('g', leased, token, 0, '', '', now, limit, channel, '')
    end
    return 1
  end
  local e = held(id, token)
  if not e then return 0 end
  local applied = 1
  if kind == 'f' or kind == 'x' then
    EVENTS.f = EVENTS.f + 1
    add_error(id, e.attempt, now, reason)
  end
  if kind == 'f' then
    -- The entry's own limit replaces the queue's.
    local most = e.max or limit
    if most > 0 and e.attempt >= most then kind, applied = 'd', 2 else kind = 'r' end
  elseif kind == 'b' then
    e.attempt, kind = math.max(e.attempt - 1, 0), 'd'
  elseif kind == 's' then
    e.attempt, kind = math.max(e.attempt - 1, 0), 'r'
  elseif kind == 'x' then
    kind, applied = 'd', 2
  end
  if kind == 'r' then
    redis.call('ZREM', LEASES, id)
    -- A failed attempt's reason stays with the entry until it is acked.
    if reason ~= '' then redis.call('HSET', ENTRIES, 'r:' .. id, reason) end
    place(id, e, now + ms, channel, now)
    return 1
  end
  if kind == 'g' then
    if ms == 0 then e.attempt = math.max(e.attempt - 1, 0) end
    local at = math.min(e.deadline or now, now)
    local old_head, busy = head()
    local freed = special(e) and options().unindex(id, e)
    redis.call('ZREM', LEASES, id)
    e.token, e.since = '', nil
    redis.call('HSET', ENTRIES, 'm:' .. id, record(e))
    redis.call('ZADD', zset_of(e), at, e.member)
    if special(e) then options().ready_add_all({{id, e, at}}) end
    announce(channel, at, old_head, now, busy, freed)
    return 1
  end
  -- 'a' or 'd': the entry leaves the schedule.
  local next, from = nil, nil
  local rec = e.tick and redis.call('HGET', SCHEDULES, id)
  if rec then
    next, from = next_tick(rec, e.tick, e.since, now, cands)
    if next == nil then return {-1, from, rec} end
  end
  local freed = special(e) and options().unindex(id, e)
  if kind == 'd' then
    bury(id, e, reason, now)
  else
    redis.call('ZREM', zset_of(e), e.member)
    redis.call('ZREM', LEASES, id)
    if rec then
      redis.call('HDEL', ENTRIES, 'm:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id)
    else
      redis.call('HDEL', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id)
    end
    -- Its id stays taken for its unique window.
    if e.unique then options().keep_taken(id, now + e.unique, now) end
    EVENTS.d = EVENTS.d + 1
    if e.tick then last_run(id, e.since, 'd') end
    keep_result(id, 'd', now, e.attempt, nil, output ~= '' and output or nil)
  end
  if freed and channel ~= '' then redis.pcall('PUBLISH', channel, int(now)) end
  if next then successor(id, next, channel, now) end
  return applied
end

-- Applies the ops in ARGV from `at` on (7 fields each: kind, id, token, ms,
-- reason, cands, output), after checking the type of every key they may write.
-- Acks of entries that are not ticks and keep no unique window (most of a
-- worker's ops) are applied together: their records are read in one HMGET
-- and their deletes are one command per key (those with a key or a
-- priority also leave the claim's indexes together, see `release_all`).
-- Returns their results, or an error reply before any write.
local function finish_all(at, n, now, limit, channel)
  if n == 0 then return {} end
  local fields = {}
  for i = 0, n - 1 do
    fields[i + 1] = 'm:' .. ARGV[at + 7 * i + 1]
  end
  -- Reads ENTRIES (a key of another type fails here, before any write).
  -- And whether trace contexts were ever kept (then acks delete theirs).
  fields[n + 1] = TRACES
  local records = hmget_sliced(ENTRIES, fields)
  local traces = records[n + 1]
  -- Acks together write SCHEDULE, LEASES, ENTRIES (read above) and, for
  -- entries with options, the keys of options; the other ops may write
  -- every key.
  -- The acks of plain records (no tick, no options: see PLAIN_RECORD) are
  -- read by one match, without a parse: their attempt, token and member.
  local others, with_options = false, false
  local p_attempt, p_token, p_member = {}, {}, {}
  for i = 0, n - 1 do
    local raw = records[i + 1]
    local plain = false
    if raw and ARGV[at + 7 * i] == 'a' then
      local attempt, token, member = string.match(raw, PLAIN_RECORD)
      if attempt then
        p_attempt[i + 1], p_token[i + 1], p_member[i + 1] = tonumber(attempt), token, member
        plain = true
      end
    end
    if not plain then
      local record = parse(raw)
      records[i + 1] = record
      if ARGV[at + 7 * i] ~= 'a' or (record and (record.tick or record.unique)) then
        others = true
      elseif record and special(record) then
        with_options = true
      end
    end
  end
  local e = ensure(SCHEDULE, 'zset') or (KEEP > 0 and ensure(KEPT, 'zset'))
  if others then
    e = e or ensure(LEASES, 'zset') or ensure(DEAD, 'zset') or check_seq()
      or ensure(SCHEDULES, 'hash') or ensure(GIVEN_UP, 'zset')
  end
  if others or with_options then e = e or ensure(LEASES, 'zset') or options().check_options() end
  if e then return nil, e end
  local results = {}
  local members, ids, gone, special_members, special_ids, special_records = {}, {}, {}, {}, {},
    {}
  local seen, kept = {}, {}
  for i = 0, n - 1 do
    local o = at + 7 * i
    local kind, id, token = ARGV[o], ARGV[o + 1], ARGV[o + 2]
    local record = records[i + 1]
    -- An ack of a record without a tick or a unique window: its token,
    -- member, attempt and whether it has a key or a priority.
    local r_token, r_member, r_attempt, r_special = p_token[i + 1], p_member[i + 1],
      p_attempt[i + 1], false
    if not r_token and kind == 'a' and record and not record.tick and not record.unique then
      r_token, r_member, r_attempt, r_special = record.token, record.member, record.attempt,
        special(record)
    end
    if r_token then
      if token ~= '' and r_token == token then
        -- The same ack twice in one batch: applied once.
        if not seen[id] then
          seen[id] = true
          if r_special then
            special_members[#special_members + 1] = r_member
            special_ids[#special_ids + 1] = id
            special_records[#special_records + 1] = record
          else
            members[#members + 1] = r_member
          end
          ids[#ids + 1] = id
          gone[#gone + 1] = fields[i + 1]
          gone[#gone + 1] = 'v:' .. id
          gone[#gone + 1] = 'r:' .. id
          -- Failed attempts are kept only by an entry delivered before.
          if r_attempt > 1 then gone[#gone + 1] = 'e:' .. id end
          if traces then gone[#gone + 1] = 't:' .. id end
          if KEEP > 0 then kept[#kept + 1] = {id, r_attempt, ARGV[o + 6]} end
        end
        results[i + 1] = 1
      else
        results[i + 1] = 0
      end
    else
      results[i + 1] = finish(kind, id, token, tonumber(ARGV[o + 3]), ARGV[o + 4],
        ARGV[o + 5], now, limit, channel, ARGV[o + 6])
    end
  end
  EVENTS.d = EVENTS.d + #ids
  if #ids > 0 then
    -- First for plain batches: it fails alone if LEASES holds another type.
    call_sliced('ZREM', LEASES, ids)
    -- Before SPECIAL loses them: a reaped one's place in READY is read there.
    local wake = #special_ids > 0 and options().release_all(special_ids, special_records)
    call_sliced('ZREM', SCHEDULE, members)
    call_sliced('ZREM', SPECIAL, special_members)
    call_sliced('HDEL', ENTRIES, gone)
    for _, k in ipairs(kept) do
      keep_result(k[1], 'd', now, k[2], nil, k[3] ~= '' and k[3] or nil)
    end
    if wake and channel ~= '' then redis.pcall('PUBLISH', channel, int(now)) end
  end
  return results
end
