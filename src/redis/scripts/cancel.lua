-- CANCEL: deletes an entry at once, whatever its state, and keeps its
-- result `Cancelled` (a dead letter is deleted as `remove` does, and keeps
-- its own result). A leased entry's lease is revoked: its holder's
-- extend, ack and retry find it gone, and MARKS tells its extension it was
-- cancelled until its lease would have run out and a lease more; workers
-- are told at once on the done channel ('c'). A schedule's tick is
-- cancelled alone: the schedule goes on with its next instant, as at an
-- ack. An entry with a unique window keeps its id taken that long.
-- KEYS: the queue's keys. ARGV: id, channel, request identity ('' on a
-- single server; see lib/requests.lua), the handle's rules (see `rules`),
-- lease ms, cron instants (see next_tick; '' for none yet).
-- Returns 1 if there was such an entry, 0 if not, or {-1, from, rec} when
-- a cron tick's successor needs the instants of schedule record `rec`
-- after `from` (nothing changed); a second execution of a request that
-- cancelled, 1.
-- Atomic: a cancel and a finish of the same delivery never both apply.
local err = check_all() or check_seq()
if err then return err end
local id, channel, ledger = ARGV[1], ARGV[2], ledger_of(ARGV[3])
if ledger and ledger.recall() then return 1 end
rules(ARGV[4])
local lease = tonumber(ARGV[5])
local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id))
if not e then return 0 end
local now = now_ms()
if redis.call('ZSCORE', DEAD, id) or e.member == '' then
  redis.call('ZREM', DEAD, id)
  redis.call('HDEL', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id,
    'n:' .. id)
  if e.unique then options().keep_taken(id, now + e.unique, now) end
  if ledger then ledger.remember('1', now) end
  return 1
end
local score = tonumber(redis.call('ZSCORE', zset_of(e), e.member))
local rec = e.tick and redis.call('HGET', SCHEDULES, id)
local next = nil
if rec then
  local from
  next, from = next_tick(rec, e.tick, e.since, now, ARGV[6])
  if next == nil then return {-1, from, rec} end
end
local freed = special(e) and options().unindex(id, e)
redis.call('ZREM', zset_of(e), e.member)
redis.call('ZREM', LEASES, id)
if rec then
  redis.call('HDEL', ENTRIES, 'm:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id)
  last_run(id, e.since, 'c')
else
  redis.call('HDEL', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id)
end
if e.unique then options().keep_taken(id, now + e.unique, now) end
keep_result(id, 'c', now, e.attempt, nil, nil)
if e.token ~= '' then
  local old = redis.call('ZRANGEBYSCORE', MARKS, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', MARKS, unpack(old)) end
  redis.call('ZADD', MARKS, math.max(score or now, now) + lease, e.token .. '\n' .. id)
  if channel ~= '' then redis.pcall('PUBLISH', done_channel(channel), 'c') end
end
if freed and channel ~= '' then redis.pcall('PUBLISH', channel, int(now)) end
if next then successor(id, next, channel, now) end
count_history(now)
announce_finished(channel, now)
if ledger then ledger.remember('1', now) end
return 1
