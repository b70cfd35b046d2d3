-- INSERT: schedules new entries, all in one step.
-- KEYS: the queue's eight keys. ARGV: channel, request identity ('' on a
-- single server; see lib/requests.lua), number of entries, then 4 fields
-- per entry: id ('' to generate one), value (JSON), 'd' (ms is a delay) or
-- 'a' (ms is a time), ms.
-- Returns {inserted, id, ...}: 1 and the id, or 0 and the id when an entry
-- with that id exists (it is left unchanged). A second execution of a
-- request that inserted returns the first's answer and inserts nothing.
-- Atomic: the id checks and the writes run as one script; every key is
-- read before the first write, so a key of another type fails it before.
local channel, ledger, n = ARGV[1], ledger_of(ARGV[2]), tonumber(ARGV[3])
local FIRST = 4
-- Kept: per entry, its generated id, or 1 or 0 for an id given.
local kept = ledger and ledger.recall()
if kept then
  local out, i = {}, 0
  for part in string.gmatch(kept, '[^,]+') do
    local id = ARGV[FIRST + 4 * i]
    if id == '' then
      out[2 * i + 1], out[2 * i + 2] = 1, part
    else
      out[2 * i + 1], out[2 * i + 2] = tonumber(part), id
    end
    i = i + 1
  end
  return out
end
local now = now_ms()
local old_head = head()
local e = check_seq()
if e then return e end
local seq = tonumber(redis.call('GET', SEQ) or '0')
-- Every id given, and the ids the generated ones will most likely get,
-- looked up in one read.
local probe, generated = {}, 0
for i = 0, n - 1 do
  local id = ARGV[FIRST + 4 * i]
  if id == '' then
    generated = generated + 1
    id = '#' .. int(seq + generated)
  end
  probe[i + 1] = 'm:' .. id
end
local found = hmget_sliced(ENTRIES, probe)
local exists = {}
for i = 1, n do
  if found[i] then exists[string.sub(probe[i], 3)] = true end
end
local out, fields, members, taken, earliest = {}, {}, {}, {}, nil
for i = 0, n - 1 do
  local o = FIRST + 4 * i
  local id, at = ARGV[o], tonumber(ARGV[o + 3])
  if ARGV[o + 2] == 'd' then at = at + now end
  local fresh = true
  if id == '' then
    repeat
      seq = seq + 1
      id = '#' .. int(seq)
      -- Beyond the ids probed above (after a collision), ask one by one.
    until not taken[id] and not exists[id]
      and (probe[i + 1] == 'm:' .. id or redis.call('HEXISTS', ENTRIES, 'm:' .. id) == 0)
  elseif taken[id] or exists[id] then
    fresh = false
  else
    seq = seq + 1
  end
  out[#out + 1] = fresh and 1 or 0
  out[#out + 1] = id
  if fresh then
    taken[id] = true
    local member = string.format('%016x', seq) .. id
    fields[#fields + 1] = 'm:' .. id
    fields[#fields + 1] = '0,,,,,' .. member
    fields[#fields + 1] = 'v:' .. id
    fields[#fields + 1] = ARGV[o + 1]
    members[#members + 1] = at
    members[#members + 1] = member
    if not earliest or at < earliest then earliest = at end
  end
end
if #members == 0 then return out end
redis.call('SET', SEQ, int(seq))
call_sliced('HSET', ENTRIES, fields)
call_sliced('ZADD', SCHEDULE, members)
announce(channel, earliest, old_head)
if ledger then
  local parts = {}
  for i = 0, n - 1 do
    parts[i + 1] = ARGV[FIRST + 4 * i] == '' and out[2 * i + 2] or int(out[2 * i + 1])
  end
  ledger.remember(table.concat(parts, ','), now)
end
return out
