-- INSERT: schedules a new entry.
-- KEYS: the queue's eight keys. ARGV: id ('' to generate one), value (JSON),
-- 'd' (ARGV[4] is a delay) or 'a' (ARGV[4] is a time), ms, channel.
-- Returns {1, id} if inserted, {0, id} if the id was taken (nothing changed).
-- Atomic: the id check and the writes run as one script.
local id = ARGV[1]
-- A given id is looked up (a read that checks `ids`); a generated one is
-- looked up only after the sequence is taken, so `ids` is checked first.
local e = ensure(VALUES, 'hash') or ensure(SEQ, 'string') or (id == '' and ensure(IDS, 'hash'))
if e then return e end
if id ~= '' and redis.call('HEXISTS', IDS, id) == 1 then return {0, id} end
local old_head = head()
local at = tonumber(ARGV[4])
if ARGV[3] == 'd' then at = at + now_ms() end
local member
if id == '' then
  repeat
    local seq = redis.call('INCR', SEQ)
    id = '#' .. seq
    member = string.format('%016x', seq) .. id
  until redis.call('HEXISTS', IDS, id) == 0
else
  member = new_member(id)
end
redis.call('HSET', VALUES, id, ARGV[2])
schedule(id, member, at, ARGV[5], old_head)
return {1, id}
