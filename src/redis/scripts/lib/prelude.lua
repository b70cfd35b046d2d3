-- Every script starts with this: names for the queue's keys (KEYS[1..8], in
-- the order of `Keys` in scripts.rs), `ensure`, `int` and the entry record.
--
-- Redis does not roll a script back when a command in it fails: the writes
-- before the failure stay. So every script makes sure of the type of each
-- key it writes before its first write, by a read it needs anyway (a read of
-- a key of another type fails), by making that key's write the first one,
-- or by `ensure`.
local SCHEDULE, ENTRIES, LEASES, DEAD, SEQ, SCHEDULES, GIVEN_UP, REQUESTS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- The field of ENTRIES that marks the queue paused (its value: since when,
-- in ms). No entry's field has this name: theirs start with 'm:', 'v:' or
-- 'r:'.
local PAUSED = 'paused'

-- The field of ENTRIES that holds the queue's own id, made by the first
-- page that needs a cursor: it tells this queue from one of the same name
-- on another server in cursors.
local INSTANCE = 'instance'

-- The calling handle's dead-letter retention, set by `rules`: the oldest
-- a dead letter may be (ms) and how many are kept; -1 for no limit.
local DEAD_MAX_AGE, DEAD_MAX_COUNT = -1, -1

-- Reads the calling handle's rules, '<max attempts>,<dead max age ms>,<dead
-- max count>' (-1: no limit), and returns its max attempts (0: no limit).
local function rules(arg)
  local limit, age, count = string.match(arg, '^(%d+),(%-?%d+),(%-?%d+)$')
  if not limit then return tonumber(arg) end
  DEAD_MAX_AGE, DEAD_MAX_COUNT = tonumber(age), tonumber(count)
  return tonumber(limit)
end

-- An error reply if `key` holds something other than `want`.
local function ensure(key, want)
  local have = redis.call('TYPE', key)['ok']
  if have ~= 'none' and have ~= want then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' of this queue holds a '
      .. have .. ', not a ' .. want)
  end
end

-- An integer in decimal (Lua's own `..` writes 13-digit numbers with an
-- exponent).
local function int(n)
  return string.format('%d', n)
end

-- An entry's record is the field 'm:' .. id of ENTRIES (its value is the
-- field 'v:' .. id, the reason of its last failed attempt, or why it died,
-- 'r:' .. id):
--   attempt,token,since,deadline,tick,member
-- attempt: deliveries so far; token: the claim that holds its lease ('' when
-- none: pending or dead); since: when that claim was made; deadline: when
-- the delivery was due; tick: the instant of a schedule's tick ('' for other
-- entries); member: its member in SCHEDULE ('' while dead). Times are ms
-- since the Unix epoch on the server's clock.
local function parse(record)
  if not record then return nil end
  local attempt, token, since, deadline, tick, member =
    string.match(record, '^(%d+),([^,]*),(%d*),(%d*),(%d*),(.*)$')
  if not attempt then return nil end
  return {attempt = tonumber(attempt), token = token, since = tonumber(since),
    deadline = tonumber(deadline), tick = tonumber(tick), member = member}
end

local function opt(n)
  if n then return string.format('%d', n) end
  return ''
end

-- Joined with `..`: Lua 5.1's `string.format('%s')` stops at a NUL byte,
-- which an id may hold.
local function record(e)
  return int(e.attempt) .. ',' .. e.token .. ',' .. opt(e.since) .. ','
    .. opt(e.deadline) .. ',' .. opt(e.tick) .. ',' .. e.member
end

-- `cmd key ...list`, in slices: a Lua call takes a few thousand arguments
-- at most.
local function call_sliced(cmd, key, list)
  for i = 1, #list, 4000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 3999, #list)))
  end
end

-- HMGET of `fields` of `key`, in slices.
local function hmget_sliced(key, fields)
  local out = {}
  for i = 1, #fields, 4000 do
    local got = redis.call('HMGET', key, unpack(fields, i, math.min(i + 3999, #fields)))
    for j = 1, #got do out[i + j - 1] = got[j] end
  end
  return out
end
