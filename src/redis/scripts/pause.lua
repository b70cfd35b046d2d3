-- PAUSE: pauses ('1') or resumes ('0') the queue: while paused, claims
-- lease nothing (CLAIM reads the mark in the same step), in every process.
-- KEYS: the queue's keys. ARGV: '1' or '0', channel, request
-- identity ('' on a single server; see lib/requests.lua).
-- Returns 1 if it changed the state, 0 if not; a second execution of a
-- request that changed it, 1. Resuming announces on the channel, so
-- waiting consumers ask at once.
local err = check_all()
if err then return err end
local pause, channel, ledger = ARGV[1] == '1', ARGV[2], ledger_of(ARGV[3])
if ledger and ledger.recall() then return 1 end
local now = now_ms()
local paused = redis.call('HEXISTS', ENTRIES, PAUSED) == 1
if pause == paused then return 0 end
if pause then
  redis.call('HSET', ENTRIES, PAUSED, int(now))
else
  redis.call('HDEL', ENTRIES, PAUSED)
  if channel ~= '' then redis.pcall('PUBLISH', channel, int(now)) end
end
if ledger then ledger.remember('1', now) end
return 1
