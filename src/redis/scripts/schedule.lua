-- SCHEDULE: creates or changes the recurring schedule `name` (an upsert).
-- KEYS: the queue's keys. ARGV: name, record ('e,<period ms>,<policy>'
-- or 'c,<expression>'), value (JSON), cron instants (see next_tick; '' for
-- none yet), channel, request identity ('' on a single server; see
-- lib/requests.lua).
-- Returns 1 if created or changed (a second execution of such a request
-- too: it changes nothing), 0 if the same call was made before (nothing
-- changes), {-1, now} when a cron schedule needs its instants
-- after `now` (nothing changes), or {-2, 0} when the name is taken by an
-- entry that is not a tick (nothing changes). A changed spec moves a
-- pending tick to the new spec's first instant after now; a leased tick
-- keeps running and its ack follows the new spec. A schedule whose tick is missing gets one.
-- Atomic: one tick per schedule exists before and after.
local err = check_all() or check_seq()
if err then return err end
local name, rec, json, cands, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local ledger = ledger_of(ARGV[6])
if ledger and ledger.recall() then return 1 end
local now = now_ms()
local old = redis.call('HGET', SCHEDULES, name)
local got = redis.call('HMGET', ENTRIES, 'm:' .. name, 'v:' .. name)
local e = parse(got[1])
if e and not e.tick then
  -- A reply, not an error reply: the client reports it as an invalid
  -- schedule, which a generic script error would not tell apart.
  return {-2, 0}
end
if old == rec and got[2] == json and e then return 0 end
local move = not e or (old ~= rec and e.token == '')
local first = nil
if move then
  if string.sub(rec, 1, 2) == 'e,' then
    local period = tonumber(string.match(rec, '^e,(%d+),'))
    -- The grid is anchored at the Unix epoch, so replicas agree.
    first = (math.floor(now / period) + 1) * period
  else
    local from
    first, from = next_tick(rec, now, nil, now, cands)
    if first == nil then return {-1, from} end
  end
end
redis.call('HSET', SCHEDULES, name, rec)
redis.call('HSET', ENTRIES, 'v:' .. name, json)
if move then
  if e then
    redis.call('ZREM', SCHEDULE, e.member)
    redis.call('HDEL', ENTRIES, 'm:' .. name)
  end
  -- false: a cron expression with no instant left keeps no tick.
  if first then successor(name, first, channel, now) end
end
count_history(now)
if ledger then ledger.remember('1', now) end
return 1
