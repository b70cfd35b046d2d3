-- Every script starts with this: names for the queue's keys (KEYS[1..13],
-- in the order of `Keys` in scripts.rs), `ensure`, `int` and the entry
-- record.
--
-- Redis does not roll a script back when a command in it fails: the writes
-- before the failure stay. So every script makes sure of the type of each
-- key it writes before its first write, by a read it needs anyway (a read of
-- a key of another type fails), by making that key's write the first one,
-- or by `ensure`.
local SCHEDULE, ENTRIES, LEASES, DEAD, SEQ, SCHEDULES, GIVEN_UP, REQUESTS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
-- The keys of entries with a key or a priority (see lib/index.lua): SPECIAL
-- is SCHEDULE for them (the same members and scores); READY the claim's
-- index of those no lease holds; HELD id -> lease end, those a lease holds;
-- LIMITS the keys' limits, held counts and recent starts; UNIQUE id -> until
-- when a finished entry's id stays taken.
local SPECIAL, READY, HELD, LIMITS, UNIQUE = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]

-- The field of ENTRIES that marks the queue paused (its value: since when,
-- in ms). No entry's field has this name: theirs start with 'm:', 'v:' or
-- 'r:'.
local PAUSED = 'paused'

-- The field of ENTRIES that holds the queue's own id, made by the first
-- page that needs a cursor: it tells this queue from one of the same name
-- on another server in cursors.
local INSTANCE = 'instance'

-- The field of ENTRIES set while SPECIAL may hold entries (set by every
-- write that adds a member to SPECIAL; a claim that finds SPECIAL empty
-- deletes it): a claim on a queue without entries with options learns so
-- from the read of PAUSED, and reads SCHEDULE alone.
local OPTIONS = 'options'

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
-- Each key is checked once per run of a script (`ensured`: the keys
-- checked, or read by a command that fails on another type).
local ensured = {}
local function ensure(key, want)
  if ensured[key] then return nil end
  local have = redis.call('TYPE', key)['ok']
  if have ~= 'none' and have ~= want then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' of this queue holds a '
      .. have .. ', not a ' .. want)
  end
  ensured[key] = true
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
-- or, for an entry inserted with options (a priority, a key, its own max
-- attempts, a unique window):
--   attempt,token,since,deadline,tick,o<priority>:<max>:<unique>:<key length>:<key>,member
-- attempt: deliveries so far; token: the claim that holds its lease ('' when
-- none: pending or dead); since: when that claim was made; deadline: when
-- the delivery was due; tick: the instant of a schedule's tick ('' for other
-- entries); member: its member in SCHEDULE, or in SPECIAL for an entry with
-- a key or a priority ('' while dead). The options field starts with 'o',
-- which no member does (a member starts with a hex digit), so a record
-- written before options existed reads as it did; <max> (0: never dead) and
-- <unique> (ms) are empty when not set, <key length> (bytes) and <key> when
-- the entry has no key. Times are ms since the Unix epoch on the server's
-- clock.
local function parse(record)
  if not record then return nil end
  local attempt, token, since, deadline, tick, member =
    string.match(record, '^(%d+),([^,]*),(%d*),(%d*),(%d*),(.*)$')
  if not attempt then return nil end
  local e = {attempt = tonumber(attempt), token = token, since = tonumber(since),
    deadline = tonumber(deadline), tick = tonumber(tick), member = member, prio = 0}
  if string.byte(member, 1) == 111 then -- 'o': the entry's options
    local prio, max, unique, length, at =
      string.match(member, '^o(%-?%d+):(%d*):(%d*):(%d*):()')
    if not prio then return nil end
    e.prio, e.max, e.unique = tonumber(prio), tonumber(max), tonumber(unique)
    length = tonumber(length)
    if length then
      e.key = string.sub(member, at, at + length - 1)
      at = at + length
    end
    e.member = string.sub(member, at + 1)
  end
  return e
end

local function opt(n)
  if n then return string.format('%d', n) end
  return ''
end

-- Joined with `..`: Lua 5.1's `string.format('%s')` stops at a NUL byte,
-- which an id may hold.
local function record(e)
  local head = int(e.attempt) .. ',' .. e.token .. ',' .. opt(e.since) .. ','
    .. opt(e.deadline) .. ',' .. opt(e.tick) .. ','
  local prio = e.prio or 0
  if prio ~= 0 or e.max or e.unique or e.key then
    head = head .. 'o' .. int(prio) .. ':' .. opt(e.max) .. ':' .. opt(e.unique) .. ':'
    if e.key then head = head .. int(#e.key) .. ':' .. e.key else head = head .. ':' end
    head = head .. ','
  end
  return head .. e.member
end

-- Whether an entry is kept in SPECIAL and READY (it has a key or a
-- priority) rather than SCHEDULE.
local function special(e)
  return e.key ~= nil or (e.prio or 0) ~= 0
end

-- The sorted set that holds entry `e`'s member while it is live.
local function zset_of(e)
  if special(e) then return SPECIAL end
  return SCHEDULE
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
