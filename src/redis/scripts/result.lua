-- RESULT: what is known of an id, for `result` and `wait`.
-- KEYS: the queue's keys. ARGV: id.
-- Returns {now, live (1: a pending, due or leased entry has the id), its
-- kept result (see `keep_result`) or false}.
local err = check_all()
if err then return err end
local id = ARGV[1]
local now = now_ms()
local got = redis.call('HMGET', ENTRIES, 'm:' .. id, 'k:' .. id)
local live = 0
if got[1] and not redis.call('ZSCORE', DEAD, id) then live = 1 end
local kept = got[2]
if kept then
  local until_ms = tonumber(redis.call('ZSCORE', KEPT, id))
  if not until_ms or until_ms <= now then kept = false end
end
return {now, live, kept or false}
