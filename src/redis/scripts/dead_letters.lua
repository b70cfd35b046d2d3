-- DEAD_LETTERS: lists dead letters, oldest first.
-- KEYS: the queue's eight keys. ARGV: max (> 0).
-- Returns {{id, value, attempts, reason}, ...}.
local e = check_all()
if e then return e end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', DEAD, 0, tonumber(ARGV[1]) - 1)) do
  out[#out + 1] = {
    id,
    redis.call('HGET', VALUES, id),
    tonumber(redis.call('HGET', ATTEMPTS, id)) or 0,
    redis.call('HGET', REASONS, id) or '',
  }
end
return out
