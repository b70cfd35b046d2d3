-- The head's score (the earliest of SCHEDULE's and SPECIAL's), or nil when
-- both are empty; and whether SPECIAL holds entries (entries with a key or
-- a priority: due ones may wait on their key's limits). Reads both.
local function head()
  local plain = tonumber(redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')[2])
  local other = tonumber(redis.call('ZRANGE', SPECIAL, 0, 0, 'WITHSCORES')[2])
  if other and (not plain or other < plain) then return other, true end
  return plain, other ~= nil
end

-- An error reply unless SEQ is absent or a counter with room to grow (a
-- member's sequence must stay exact in a Lua number), written as INCR
-- takes it (Lua's `tonumber` also takes '1e3', '0x10', ' 7'). Reads SEQ.
local function check_seq()
  local seq = redis.call('GET', SEQ)
  if seq and not (string.match(seq, '^%d+$') and tonumber(seq) < 4503599627370496) then
    return redis.error_reply('ERR ' .. SEQ .. ' is not a sequence with room to grow')
  end
end

-- A schedule member is 16 hex digits of sequence, then the id. Equal scores
-- sort by member, so equal deadlines come out in insertion order.
local function new_member(id)
  return string.format('%016x', redis.call('INCR', SEQ)) .. id
end

-- Announces `at` on `channel` if it is earlier than `old_head` (the head
-- before this write); or if it is due by `now` while entries with options
-- exist (`busy`: the due head may be an entry waiting on its key's limits,
-- which consumers do not wake for); or if `freed` (a place of a key at its
-- concurrency freed while entries of the key wait). Best effort, so a user
-- whose ACL forbids PUBLISH still gets the write, and consumers then rely
-- on polling.
local function announce(channel, at, old_head, now, busy, freed)
  if channel ~= '' and (freed or not old_head or at < old_head or (busy and at <= now)) then
    redis.pcall('PUBLISH', channel, int(at))
  end
end

-- Schedules live or dead entry `id` (record `e`, its lease given up) at
-- `at` under a new member, as if inserted now, in SCHEDULE or (with a key
-- or a priority) SPECIAL and READY, and announces it (see `announce`): a
-- new member's sequence is the largest yet, so it is the head only if
-- strictly earlier than the old one. Takes the sequence first (a write to
-- SEQ).
local function place(id, e, at, channel, now)
  local old_head, busy = head()
  local member = new_member(id)
  local freed = special(e) and options().unindex(id, e)
  if e.member ~= '' then redis.call('ZREM', zset_of(e), e.member) end
  e.member = member
  e.token, e.since = '', nil
  redis.call('HSET', ENTRIES, 'm:' .. id, record(e))
  redis.call('ZADD', zset_of(e), at, e.member)
  if special(e) then
    redis.call('HSET', ENTRIES, OPTIONS, '1')
    options().ready_add_all({{id, e, at}})
  end
  announce(channel, at, old_head, now, busy, freed)
end
