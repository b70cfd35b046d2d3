-- The head's score, or nil for an empty schedule.
local function head()
  return tonumber(redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')[2])
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
-- before this write): best effort, so a user whose ACL forbids PUBLISH still
-- gets the write, and consumers then rely on polling.
local function announce(channel, at, old_head)
  if channel ~= '' and (not old_head or at < old_head) then
    redis.pcall('PUBLISH', channel, int(at))
  end
end

-- Schedules entry `id` (record `e`, its lease given up) at `at` under a new
-- member, as if inserted now, and announces it if it is the new head: a new
-- member's sequence is the largest yet, so it is the head only if strictly
-- earlier than the old one. Takes the sequence first (a write to SEQ).
local function place(id, e, at, channel)
  local old_head = head()
  local member = new_member(id)
  if e.member ~= '' then redis.call('ZREM', SCHEDULE, e.member) end
  e.member = member
  e.token, e.since = '', nil
  redis.call('HSET', ENTRIES, 'm:' .. id, record(e))
  redis.call('ZADD', SCHEDULE, at, e.member)
  announce(channel, at, old_head)
end
