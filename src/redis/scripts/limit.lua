-- LIMIT: sets (an upsert) or removes the limit of a key ('*': the default
-- of keys without their own).
-- KEYS: the queue's keys. ARGV: key, limit ('<concurrency>,<rate
-- max>,<rate per ms>', each empty for none; '' to remove it), channel,
-- request identity ('' on a single server; see lib/requests.lua).
-- Returns 1 if it changed the key's limit, 0 if not; a second execution of
-- a request that changed it, 1 (it changes nothing). A change announces on
-- the channel: entries waiting on the old limit may run now, and every
-- consumer follows the new one from its next claim.
local err = check_all()
if err then return err end
local field, limit, channel = 'l:' .. ARGV[1], ARGV[2], ARGV[3]
local ledger = ledger_of(ARGV[4])
if ledger and ledger.recall() then return 1 end
local old = redis.call('HGET', LIMITS, field)
if limit == '' then
  if not old then return 0 end
  redis.call('HDEL', LIMITS, field)
else
  if old == limit then return 0 end
  redis.call('HSET', LIMITS, field, limit)
end
local now = now_ms()
if channel ~= '' then redis.pcall('PUBLISH', channel, int(now)) end
if ledger then ledger.remember('1', now) end
return 1
