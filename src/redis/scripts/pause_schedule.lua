-- PAUSE_SCHEDULE: pauses ('1') or resumes ('0') schedule `name`. While
-- paused (ENTRIES 'p:' .. name set), its pending tick is parked: in
-- SCHEDULE at PARKED (after every real due time, so no claim reaches it and
-- it counts and lists as pending), its due time kept as the field's value
-- ('' when the tick was leased, or made due by `run_now`: it runs, and its
-- successor is parked). Resumed, a parked tick goes back at its due time:
-- a tick that came due meanwhile runs once, late, and its ack follows the
-- schedule's missed-ticks rule.
-- KEYS: the queue's keys. ARGV: name, '1' or '0', channel, request
-- identity ('' on a single server; see lib/requests.lua).
-- Returns 1 if it changed, 0 if it was so already, -1 if there is no such
-- schedule.
local err = check_all()
if err then return err end
local name, pause, channel, ledger = ARGV[1], ARGV[2] == '1', ARGV[3], ledger_of(ARGV[4])
if ledger and ledger.recall() then return 1 end
if redis.call('HEXISTS', SCHEDULES, name) == 0 then return -1 end
local parked = redis.call('HGET', ENTRIES, 'p:' .. name)
if pause == (parked ~= false) then return 0 end
local now = now_ms()
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. name))
if e and not e.tick then e = nil end
if pause then
  local at = ''
  if e and e.token == '' and e.member ~= '' then
    local score = redis.call('ZSCORE', SCHEDULE, e.member)
    if score then
      at = score
      redis.call('ZADD', SCHEDULE, PARKED, e.member)
    end
  end
  redis.call('HSET', ENTRIES, 'p:' .. name, at)
else
  redis.call('HDEL', ENTRIES, 'p:' .. name)
  local at = tonumber(parked)
  if at and e and e.member ~= '' then
    local old_head, busy = head()
    redis.call('ZADD', SCHEDULE, at, e.member)
    announce(channel, at, old_head, now, busy, false)
  end
end
if ledger then ledger.remember('1', now) end
return 1
