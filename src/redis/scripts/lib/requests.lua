-- A Redis Cluster client sends a request again by itself when its
-- connection drops (redis-rs's cluster connection does, after it
-- reconnects), and the first sending may have run. So on a cluster every
-- write carries an identity, a token made for that one request (each
-- sending of a claim has its own), and a write that changed something
-- keeps its answer in REQUESTS under that identity, as two members scored
-- with when they may be forgotten: '<rid>' and '<rid>\n<answer>'. A second
-- execution finds it, writes nothing and returns that answer. A write that
-- changed nothing keeps nothing: a second execution of it is then the only
-- one that counts.
--
-- The identity argument is '<ms to keep the answer>:<rid>' on a cluster,
-- and '' on a single server, whose connection never sends a request twice:
-- nothing is read or kept there, and `ledger_of` returns nil. It uses no
-- upvalue (only globals), so that defining it costs a single server's
-- calls next to nothing; the functions it makes exist on a cluster alone.
local function ledger_of(identity)
  if identity == '' then return nil end
  local keep, rid = string.match(identity, '^(%d+):(.+)$')
  keep = tonumber(keep)
  local REQUESTS = KEYS[8]
  local ledger = {}

  -- The answer kept for this request, or nil when this is its first
  -- execution. Reads REQUESTS (a key of another type fails here, before
  -- any write).
  function ledger.recall()
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

  -- Keeps `answer` (a string) for `keep` ms from `now`, and forgets what
  -- is overdue: in batches, once the oldest is a second overdue, so that
  -- most calls add one read. The caller read REQUESTS (`recall`).
  function ledger.remember(answer, now)
    local until_ms = now + keep
    redis.call('ZADD', REQUESTS, until_ms, rid, until_ms, rid .. '\n' .. answer)
    if #redis.call('ZRANGEBYSCORE', REQUESTS, '-inf', now - 1000, 'LIMIT', 0, 1) > 0 then
      local old = redis.call('ZRANGEBYSCORE', REQUESTS, '-inf', now, 'LIMIT', 0, 4000)
      redis.call('ZREM', REQUESTS, unpack(old))
    end
  end

  -- The results of finishes (see lib/finish.lua) as kept: one character
  -- per op, its result, or 'c' where the op needed cron instants (it
  -- changed nothing). Also whether any op changed something.
  function ledger.result_codes(results)
    local codes, changed = {}, false
    for i, result in ipairs(results) do
      if type(result) == 'table' then
        codes[i] = 'c'
      else
        codes[i] = string.format('%d', result)
        changed = changed or result ~= 0
      end
    end
    return table.concat(codes), changed
  end

  -- A second execution of finishes ran them again, which changes nothing
  -- where the first applied them or found their lease lost (neither holds
  -- the lease any more): the first's results replace its own, but where
  -- an op needed cron instants (the first changed nothing; this one
  -- answers).
  function ledger.first_results(results, codes)
    for i = 1, #codes do
      local code = string.sub(codes, i, i)
      if code ~= 'c' then results[i] = tonumber(code) end
    end
  end

  return ledger
end
