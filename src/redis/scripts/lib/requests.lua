-- A Redis Cluster client sends a request again by itself when its
-- connection drops (redis-rs's cluster connection does, after it
-- reconnects), and the first sending may have run. So on a cluster every
-- write carries an identity `rid`, a token made for that one request (each
-- sending of a claim has its own), and a write that changed something
-- keeps its answer in REQUESTS under that identity, as two members scored
-- with when they may be forgotten: '<rid>' and '<rid>\n<answer>'. A second
-- execution finds it, writes nothing and returns that answer. A write that
-- changed nothing keeps nothing: a second execution of it is then the only
-- one that counts. `rid` is '' on a single server, whose connection never
-- sends a request twice: nothing is read or kept there.

-- The answer kept for `rid`, or nil when this is its first execution.
-- Reads REQUESTS (a key of another type fails here, before any write).
local function recall(rid)
  if rid == '' then return nil end
  local until_ms = redis.call('ZSCORE', REQUESTS, rid)
  if not until_ms then return nil end
  local prefix = rid .. '\n'
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', REQUESTS, until_ms, until_ms)) do
    if string.sub(member, 1, #prefix) == prefix then
      return string.sub(member, #prefix + 1)
    end
  end
  return nil
end

-- Keeps `answer` (a string) for `rid` for `keep` ms from `now`, and
-- forgets what is overdue: in batches, once the oldest is a second overdue,
-- so that most calls add one read. The caller read REQUESTS (`recall`).
local function remember(rid, keep, answer, now)
  if rid == '' then return end
  local until_ms = now + keep
  redis.call('ZADD', REQUESTS, until_ms, rid, until_ms, rid .. '\n' .. answer)
  if #redis.call('ZRANGEBYSCORE', REQUESTS, '-inf', now - 1000, 'LIMIT', 0, 1) > 0 then
    call_sliced('ZREM', REQUESTS,
      redis.call('ZRANGEBYSCORE', REQUESTS, '-inf', now, 'LIMIT', 0, 4000))
  end
end
