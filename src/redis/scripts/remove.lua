-- REMOVE: deletes an entry, pending, leased or dead; a schedule's tick takes
-- its schedule with it. With ARGV[2] = 's', only a schedule's tick (and the
-- schedule, even if it has no tick now). An entry with a unique window
-- keeps its id taken that long from now; a leased entry's place of its key
-- frees (announced when entries of the key wait).
-- KEYS: the queue's keys. ARGV: id, 'e' or 's', request identity
-- ('' on a single server; see lib/requests.lua), channel ('' or absent:
-- none).
-- Returns 1 if it was there, 0 if not; a second execution of a request
-- that removed, 1 (it changes nothing).
local err = check_all()
if err then return err end
local id, ledger = ARGV[1], ledger_of(ARGV[3])
if ledger and ledger.recall() then return 1 end
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id))
local schedule = redis.call('HEXISTS', SCHEDULES, id) == 1
if ARGV[2] == 's' then
  if not schedule then return 0 end
  if e and not e.tick then e = nil end
elseif not e then
  return 0
end
local now = now_ms()
if e then
  local freed = special(e) and options().unindex(id, e)
  if e.member ~= '' then redis.call('ZREM', zset_of(e), e.member) end
  redis.call('ZREM', LEASES, id)
  redis.call('ZREM', DEAD, id)
  redis.call('HDEL', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id,
    'n:' .. id)
  if e.unique then options().keep_taken(id, now + e.unique, now) end
  if freed and ARGV[4] and ARGV[4] ~= '' then redis.pcall('PUBLISH', ARGV[4], int(now)) end
end
if schedule and (not e or e.tick) then
  redis.call('HDEL', SCHEDULES, id)
  redis.call('HDEL', ENTRIES, 'v:' .. id, 'p:' .. id, 's:' .. id)
end
if ledger then ledger.remember('1', now) end
return 1
