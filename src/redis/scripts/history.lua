-- HISTORY: the counts per minute of the last day, from `since`.
-- KEYS: the queue's keys. ARGV: since (ms).
-- Returns {now, {minute (ms), inserted, done, failed, dead}...}, oldest
-- first, minutes without events left out.
local err = check_all()
if err then return err end
local now = now_ms()
local from = math.max(math.floor(tonumber(ARGV[1]) / 60000), math.floor(now / 60000) - 1440)
local minutes, order = {}, {}
local slot = {i = 1, d = 2, f = 3, x = 4}
local all = redis.call('HGETALL', HISTORY)
for i = 1, #all, 2 do
  local kind, minute = string.sub(all[i], 1, 1), tonumber(string.sub(all[i], 2))
  if minute and minute >= from and slot[kind] then
    local m = minutes[minute]
    if not m then
      m = {minute * 60000, 0, 0, 0, 0}
      minutes[minute] = m
      order[#order + 1] = minute
    end
    m[1 + slot[kind]] = m[1 + slot[kind]] + tonumber(all[i + 1])
  end
end
table.sort(order)
local out = {now}
for _, minute in ipairs(order) do out[#out + 1] = minutes[minute] end
return out
