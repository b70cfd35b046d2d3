-- A schedule member is 16 hex digits of sequence, then the id. Equal scores
-- sort by member, so equal deadlines come out in insertion order. Taking the
-- sequence (INCR) is the script's first write, so call it before the others.
local function new_member(id)
  return string.format('%016x', redis.call('INCR', SEQ)) .. id
end

-- The head's score, read before any write.
local function head()
  return tonumber(redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')[2])
end

-- Schedules `id` as `member` at `at` and announces it on `channel` if it is
-- the new head: a new member's sequence is the largest yet, so it is the head
-- only if it is strictly earlier than the old head.
local function schedule(id, member, at, channel, old_head)
  redis.call('HSET', IDS, id, member)
  redis.call('ZADD', SCHEDULE, at, member)
  if not old_head or at < old_head then
    redis.call('PUBLISH', channel, at)
  end
end
