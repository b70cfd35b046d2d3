-- HISTORY: the counts per minute of the last day, from `since`.
-- KEYS: the queue's keys. ARGV: since (ms).
-- Returns {now, {minute (ms), inserted, done, failed, dead}...}, oldest
-- first, minutes without events left out. One read of the day's fields
-- (ENTRIES 'h:<kind><minute>', see `count_history`).
local err = check_all()
if err then return err end
local now = now_ms()
local last = math.floor(now / 60000)
local from = math.max(math.floor(tonumber(ARGV[1]) / 60000), last - 1440)
local fields = {}
for m = from, last do
  for _, kind in ipairs(HISTORY_KINDS) do fields[#fields + 1] = 'h:' .. kind .. int(m) end
end
local got = hmget_sliced(ENTRIES, fields)
local out = {now}
for i = 0, last - from do
  local counts = {}
  local any = false
  for k = 1, 4 do
    counts[k] = tonumber(got[4 * i + k]) or 0
    if counts[k] > 0 then any = true end
  end
  if any then
    out[#out + 1] = {(from + i) * 60000, counts[1], counts[2], counts[3], counts[4]}
  end
end
return out
