-- PAUSE: pauses ('1') or resumes ('0') the queue: while paused, claims
-- lease nothing (CLAIM reads the mark in the same step), in every process.
-- KEYS: the queue's eight keys. ARGV: '1' or '0', channel, request id (''
-- on a single server) and ms to keep the answer (see lib/requests.lua).
-- Returns 1 if it changed the state, 0 if not; a second execution of a
-- request that changed it, 1. Resuming announces on the channel, so
-- waiting consumers ask at once.
local err = check_all()
if err then return err end
local pause, channel, rid = ARGV[1] == '1', ARGV[2], ARGV[3]
if recall(rid) then return 1 end
local now = now_ms()
local paused = redis.call('HEXISTS', ENTRIES, PAUSED) == 1
if pause == paused then return 0 end
if pause then
  redis.call('HSET', ENTRIES, PAUSED, int(now))
else
  redis.call('HDEL', ENTRIES, PAUSED)
  if channel ~= '' then redis.pcall('PUBLISH', channel, int(now)) end
end
remember(rid, tonumber(ARGV[4]), '1', now)
return 1
