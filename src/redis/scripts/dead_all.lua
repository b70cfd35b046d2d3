-- DEAD_ALL: puts every dead letter back as pending, due `delay` ms from
-- now, attempts reset ('r'; each keeps its options), or deletes them all
-- ('c'; an id with a unique window stays taken that long), in one step.
-- KEYS: the queue's keys. ARGV: 'r' or 'c', delay ms, channel,
-- request identity ('' on a single server; see lib/requests.lua).
-- Returns how many; a second execution of a request, the first's count.
local err = check_all() or check_seq()
if err then return err end
local requeue, delay, channel = ARGV[1] == 'r', tonumber(ARGV[2]), ARGV[3]
local ledger = ledger_of(ARGV[4])
local kept = ledger and ledger.recall()
if kept then return tonumber(kept) end
local now = now_ms()
local n = 0
repeat
  local ids = redis.call('ZRANGE', DEAD, 0, 999)
  for _, id in ipairs(ids) do
    if requeue then
      local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id)) or {token = '', member = ''}
      e.attempt, e.tick, e.deadline = 0, nil, nil
      redis.call('HDEL', ENTRIES, 'r:' .. id, 'e:' .. id, 'n:' .. id)
      forget_result(id)
      place(id, e, now + delay, channel, now)
    else
      local e = parse(redis.call('HGET', ENTRIES, 'm:' .. id))
      redis.call('HDEL', ENTRIES, 'm:' .. id, 'v:' .. id, 'r:' .. id, 'e:' .. id, 't:' .. id,
        'n:' .. id)
      -- Its id stays taken for its unique window.
      if e and e.unique then options().keep_taken(id, now + e.unique, now) end
    end
  end
  call_sliced('ZREM', DEAD, ids)
  n = n + #ids
until #ids == 0
if n > 0 and ledger then ledger.remember(int(n), now) end
return n
