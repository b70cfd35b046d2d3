-- DEAD_LETTERS: lists dead letters, oldest first.
-- KEYS: the queue's keys. ARGV: max (> 0).
-- Returns {{id, value, attempts, reason}, ...}.
local err = check_all()
if err then return err end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', DEAD, 0, tonumber(ARGV[1]) - 1)) do
  local got = redis.call('HMGET', ENTRIES, 'v:' .. id, 'm:' .. id, 'r:' .. id)
  local e = parse(got[2])
  out[#out + 1] = {id, got[1], e and e.attempt or 0, got[3] or ''}
end
return out
