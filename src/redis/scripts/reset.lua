-- RESET: moves a pending entry to now + delay, ordered as if inserted now
-- (a tick moves its instant with it). With ARGV[5] = '1' (run now), only
-- the pending tick of a schedule.
-- KEYS: the queue's keys. ARGV: id, delay ms, channel, request
-- identity ('' on a single server; see lib/requests.lua), '1' for a tick
-- only.
-- Returns 1, or 0 for an entry that is leased, dead or absent; a second
-- execution of a request that moved the entry, 1 (it moves nothing).
local err = check_all() or check_seq()
if err then return err end
local ledger = ledger_of(ARGV[4])
if ledger and ledger.recall() then return 1 end
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. ARGV[1]))
if not e or e.token ~= '' or e.member == '' then return 0 end
if ARGV[5] == '1' and not (e.tick and redis.call('HEXISTS', SCHEDULES, ARGV[1]) == 1) then
  return 0
end
local now = now_ms()
local at = now + tonumber(ARGV[2])
-- A paused schedule's tick made due runs anyway (see pause_schedule.lua).
if e.tick and redis.call('HEXISTS', ENTRIES, 'p:' .. ARGV[1]) == 1 then
  redis.call('HSET', ENTRIES, 'p:' .. ARGV[1], '')
end
if e.tick then e.tick = at end
place(ARGV[1], e, at, ARGV[3], now)
if ledger then ledger.remember('1', now) end
return 1
