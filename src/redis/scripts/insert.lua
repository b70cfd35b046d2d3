-- INSERT: schedules new entries, all in one step, each in turn.
-- KEYS: the queue's keys. ARGV: channel, request identity ('' on
-- a single server; see lib/requests.lua), number of entries, then 6
-- fields per entry: id ('' to generate one), value (JSON), 'd' (ms is a
-- delay) or 'a' (ms is a time), ms, options: '' for none, or
-- '<priority>:<max attempts>:<unique ms>:<replace 0/1>:<key>' (max
-- attempts, unique ms and key empty when not set), and the inserting
-- span's trace context ('' for none), kept as ENTRIES 't:' .. id.
-- Each insert counts in the history (see `count_history`).
-- Returns {inserted, id, ...}: 1 and the id when it inserted (or
-- replaced), 0 and the id when it was refused: an entry has that id
-- (leased, dead, a schedule's tick, or pending without `replace`; an
-- earlier entry of this call counts), or no entry has it but its unique
-- window is open. With `replace`, a pending entry of the id (not leased,
-- not dead, not a tick; due or not) takes the new value, due time,
-- priority, key and options, ordered as a new insert, its attempts and
-- last error cleared. An entry with a key or a priority goes to SPECIAL
-- and READY, any other to SCHEDULE. A second execution of a request that
-- inserted returns the first's answer and inserts nothing.
-- Atomic: the id checks and the writes run as one script; every key is
-- read (or checked) before the first write, so a key of another type
-- fails it before.
local channel, ledger, n = ARGV[1], ledger_of(ARGV[2]), tonumber(ARGV[3])
local FIRST, WIDTH = 4, 6
-- Kept: per entry, its generated id, or 1 or 0 for an id given.
local kept = ledger and ledger.recall()
if kept then
  local out, i = {}, 0
  for part in string.gmatch(kept, '[^,]+') do
    local id = ARGV[FIRST + WIDTH * i]
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
-- Reads SCHEDULE and SPECIAL.
local old_head, busy = head()
local e = check_seq()
if e then return e end
local seq = tonumber(redis.call('GET', SEQ) or '0')
-- Every id given, and the ids the generated ones will most likely get,
-- looked up in one read.
local probe, generated, given = {}, 0, {}
for i = 0, n - 1 do
  local id = ARGV[FIRST + WIDTH * i]
  if id == '' then
    generated = generated + 1
    id = '#' .. int(seq + generated)
  else
    given[#given + 1] = id
  end
  probe[i + 1] = 'm:' .. id
end
local found = hmget_sliced(ENTRIES, probe)
local exists = {}
for i = 1, n do
  if found[i] then exists[string.sub(probe[i], 3)] = found[i] end
end
-- The ids given whose unique window is open (reads UNIQUE).
local closed = {}
if #given > 0 and redis.call('ZCARD', UNIQUE) > 0 then
  for _, id in ipairs(given) do
    local until_ms = tonumber(redis.call('ZSCORE', UNIQUE, id))
    if until_ms and until_ms > now then closed[id] = true end
  end
end
-- What this call writes, by id in the order first written: {e (the new
-- record), value, at, old (the record of the pending entry it replaces)}.
local final, order, out, with_options = {}, {}, {}, false
for i = 0, n - 1 do
  local o = FIRST + WIDTH * i
  local id, at, opts = ARGV[o], tonumber(ARGV[o + 3]), ARGV[o + 4]
  if ARGV[o + 2] == 'd' then at = at + now end
  local new = {attempt = 0, token = '', prio = 0}
  local replace = false
  if opts ~= '' then
    local prio, most, unique, again, key = string.match(opts, '^(%-?%d+):(%d*):(%d*):([01]):(.*)$')
    new.prio, new.max, new.unique = tonumber(prio), tonumber(most), tonumber(unique)
    if key ~= '' then new.key = key end
    replace = again == '1'
    with_options = true
  end
  local inserted, f = true, final[id]
  if id == '' then
    repeat
      seq = seq + 1
      id = '#' .. int(seq)
      -- Beyond the ids probed above (after a collision), ask one by one.
    until not final[id] and not exists[id]
      and (probe[i + 1] == 'm:' .. id or redis.call('HEXISTS', ENTRIES, 'm:' .. id) == 0)
  else
    -- The entry that has the id: one of this call, or one found (a record
    -- that does not parse is never replaced).
    local cur = f and f.e or (exists[id] and (parse(exists[id]) or {token = '?'}))
    if cur then
      inserted = replace and cur.token == '' and cur.member ~= '' and not cur.tick
      if inserted and not f then f = {old = cur} end
    elseif closed[id] then
      inserted = false
    end
    if inserted then seq = seq + 1 end
  end
  if inserted then
    if not f then f = {} end
    if not final[id] then
      final[id] = f
      order[#order + 1] = id
    end
    new.member = string.format('%016x', seq) .. id
    f.e, f.value, f.at, f.trace = new, ARGV[o + 1], at, ARGV[o + 5]
  end
  out[#out + 1] = inserted and 1 or 0
  out[#out + 1] = id
end
if #order == 0 then return out end
if with_options then
  local err = options().check_options()
  if err then return err end
end
-- The replaced entries leave their places (the first writes, to READY and
-- SCHEDULE or SPECIAL, checked above).
for _, id in ipairs(order) do
  local old = final[id].old
  if old then
    if special(old) then options().unindex(id, old) end
    redis.call('ZREM', zset_of(old), old.member)
    redis.call('HDEL', ENTRIES, 'r:' .. id, 'e:' .. id, 't:' .. id)
  end
end
redis.call('SET', SEQ, int(seq))
local fields, members, specials, ready, earliest = {}, {}, {}, {}, nil
for _, id in ipairs(order) do
  local f = final[id]
  fields[#fields + 1] = 'm:' .. id
  fields[#fields + 1] = record(f.e)
  fields[#fields + 1] = 'v:' .. id
  fields[#fields + 1] = f.value
  if f.trace ~= '' then
    fields[#fields + 1] = 't:' .. id
    fields[#fields + 1] = f.trace
    fields[#fields + 1] = TRACES
    fields[#fields + 1] = '1'
  end
  if special(f.e) then
    specials[#specials + 1] = f.at
    specials[#specials + 1] = f.e.member
    ready[#ready + 1] = {id, f.e, f.at}
  else
    members[#members + 1] = f.at
    members[#members + 1] = f.e.member
  end
  if not earliest or f.at < earliest then earliest = f.at end
end
call_sliced('HSET', ENTRIES, fields)
call_sliced('ZADD', SCHEDULE, members)
if #specials > 0 then
  redis.call('HSET', ENTRIES, OPTIONS, '1')
  call_sliced('ZADD', SPECIAL, specials)
end
if #ready > 0 then options().ready_add_all(ready) end
announce(channel, earliest, old_head, now, busy, false)
EVENTS.i = EVENTS.i + #order
count_history(now)
if ledger then
  local parts = {}
  for i = 0, n - 1 do
    parts[i + 1] = ARGV[FIRST + WIDTH * i] == '' and out[2 * i + 2] or int(out[2 * i + 1])
  end
  ledger.remember(table.concat(parts, ','), now)
end
return out
