-- RIGHTS: run when a queue is built, after CHECK: whether the user running
-- it may run everything the queue runs, on the queue's keys. Redis 7's
-- `redis.acl_check_cmd` answers without running anything; older servers
-- cannot tell (their ACL failures show up on the first call that needs
-- the right).
-- KEYS: the queue's thirteen keys. ARGV[1]: '1' when the queue is on a cluster.
-- Returns 1 when every right is there, 0 when the server cannot tell, or
-- an error reply `NOPERM this redis user may not run ...` listing each
-- missing command (with the key it was checked on).
if not redis.acl_check_cmd then return 0 end

local missing = {}
local function need(...)
  if not redis.acl_check_cmd(...) then
    local args = {...}
    local what = string.lower(args[1])
    if args[1] == 'SCRIPT' or args[1] == 'CLUSTER' then
      what = what .. ' ' .. string.lower(args[2])
    elseif args[2] then
      what = what .. ' on ' .. args[2]
    end
    missing[#missing + 1] = what
  end
end

-- What the client sends itself (EVALSHA ran this script, but the
-- server's script cache may have been warm).
need('SCRIPT', 'LOAD', 'return 1')
need('EVALSHA', string.rep('0', 40), '0')
if ARGV[1] == '1' then need('CLUSTER', 'SLOTS') end
need('TIME')
-- What the scripts run, on every key of the type they run it on.
for _, key in ipairs(KEYS) do
  need('TYPE', key)
  need('DEL', key)
end
for _, key in ipairs({SCHEDULE, LEASES, DEAD, GIVEN_UP, REQUESTS, SPECIAL, READY, HELD, UNIQUE}) do
  need('ZADD', key, '0', 'm')
  need('ZREM', key, 'm')
  need('ZRANGE', key, '0', '0')
  need('ZRANGEBYSCORE', key, '0', '0')
  need('ZSCORE', key, 'm')
  need('ZCARD', key)
  need('ZCOUNT', key, '0', '0')
end
for _, key in ipairs({ENTRIES, SCHEDULES, LIMITS}) do
  need('HSET', key, 'f', 'v')
  need('HGET', key, 'f')
  need('HMGET', key, 'f')
  need('HDEL', key, 'f')
  need('HEXISTS', key, 'f')
  need('HGETALL', key)
end
need('GET', SEQ)
need('SET', SEQ, '0')
need('INCR', SEQ)

if #missing > 0 then
  return redis.error_reply('NOPERM this redis user may not run ' .. table.concat(missing, ', ')
    .. ' (the punctual::redis docs give the ACL rules a queue needs)')
end
return 1
