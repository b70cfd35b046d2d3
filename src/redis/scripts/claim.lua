-- CLAIM: finishes deliveries (see finish), then leases up to `max` due
-- entries, in order, to the claim `token`.
-- KEYS: the queue's eight keys. ARGV: max, lease ms, the handle's rules
-- (max attempts, dead-letter retention: see `rules`), token, recover (-1,
-- or a lower bound of this claim's lease end when it is sent again after
-- its reply was lost), channel, request identity ('' on a single server;
-- see lib/requests.lua), number of ops, then 6 fields per op (kind, id,
-- token, ms, reason, cands).
-- Returns {now, head score or -1 (none, or paused), {op results}, {items}}, an item being
-- {id, value, attempt, deadline, lease end, schedule record or '', reason
-- to bury it or ''}. An entry past max attempts goes to the dead letters
-- instead (a cron tick is handed out with a reason to bury it, since its
-- successor needs the client's cron instants).
-- Atomic: no two claims lease one entry. A claim sent again with its token
-- returns what it leased the first time, if it ran: a lost reply never costs
-- an attempt of an entry nobody saw. On a cluster, a second execution of
-- one sending (the client sent the same request again by itself) leases
-- nothing new and answers as the first did.
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
  return {now, head_score, results, items}
end

local function item(id, value, e, lease_until, rec, why)
  return {id, value or false, e.attempt, e.deadline or 0, lease_until, rec or '', why or ''}
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
  local items, members = {}, {}
  local leased = from and redis.call('ZRANGEBYSCORE', LEASES, from, to, 'WITHSCORES') or {}
  for i = 1, #leased, 2 do
    local id = leased[i]
    local e = held(id, token)
    if e then
      local rec = e.tick and redis.call('HGET', SCHEDULES, id)
      -- Only a cron tick is leased past the limit: to be buried.
      local why = nil
      if limit > 0 and e.attempt > limit then
        why = 'not acked after ' .. limit .. ' deliveries'
      end
      items[#items + 1] = item(id, redis.call('HGET', ENTRIES, 'v:' .. id), e,
        tonumber(leased[i + 1]), rec, why)
      members[items[#items]] = e.member
    end
  end
  if kept or #items > 0 then
    -- In the order the first sending took them: due time, then member
    -- (whose sequence keeps equal due times FIFO).
    table.sort(items, function(a, b)
      if a[4] ~= b[4] then return a[4] < b[4] end
      return members[a] < members[b]
    end)
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
if redis.call('HEXISTS', ENTRIES, PAUSED) == 1 then
  if keep_answer then keep_answer(nil) end
  return reply({}, -1)
end

-- One more than asked: if it comes, more are due and no head lookup is needed.
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
  fields[2 * i - 1], fields[2 * i] = 'm:' .. id, 'v:' .. id
end
local got = redis.call('HMGET', ENTRIES, unpack(fields))
local lease_until = now + lease
-- Formatted once: a number passed to redis.call is printed with %.17g.
local lease_arg = int(lease_until)
local items, leases, records, members, burying = {}, {}, {}, {}, {}
for i = 1, n do
  local member, score = due[2 * i - 1], tonumber(due[2 * i])
  local id = ids[i]
  local e = parse(got[2 * i - 1]) or {attempt = 0, token = ''}
  e.member = member
  local rec = e.tick and redis.call('HGET', SCHEDULES, id)
  e.attempt = e.attempt + 1
  e.deadline = e.tick or score
  if limit > 0 and e.attempt > limit and not (rec and string.sub(rec, 1, 2) == 'c,') then
    e.attempt = limit
    burying[#burying + 1] = {id, e, rec}
  else
    local why = nil
    if limit > 0 and e.attempt > limit then
      why = 'not acked after ' .. limit .. ' deliveries'
    end
    e.token, e.since = token, now
    leases[#leases + 1] = lease_arg
    leases[#leases + 1] = id
    records[#records + 1] = fields[2 * i - 1]
    records[#records + 1] = record(e)
    members[#members + 1] = lease_arg
    members[#members + 1] = member
    items[#items + 1] = item(id, got[2 * i], e, lease_until, rec, why)
  end
end
if #burying > 0 then
  local e = ensure(LEASES, 'zset') or ensure(DEAD, 'zset') or check_seq()
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
  bury(id, e, 'not acked after ' .. limit .. ' deliveries', now)
  if next then successor(id, next, channel) end
end
if keep_answer then keep_answer(#leases > 0 and lease_arg or nil) end
if #due > 2 * n and #burying == 0 then return reply(items, tonumber(due[#due])) end
return reply(items)
