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
-- KEPT id -> until when its result (ENTRIES 'k:' .. id) is kept; MARKS
-- '<token>\n<id>' -> until when a cancelled lease is told so at its
-- extension; WORKERS worker id -> '<first>,<last>,<record JSON>'.
local KEPT, MARKS, WORKERS = KEYS[14], KEYS[15], KEYS[16]

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

-- The score of a paused schedule's pending tick (see pause_schedule.lua):
-- after every real due time (durations are at most 2^52 ms), exact in a
-- score, and printed by Redis without an exponent.
local PARKED = 9000000000000000

-- The field of ENTRIES set once an insert kept a trace context (`t:<id>`):
-- claims read those only from then on.
local TRACES = 'traces'

-- The calling handle's dead-letter retention, set by `rules`: the oldest
-- a dead letter may be (ms) and how many are kept; -1 for no limit.
local DEAD_MAX_AGE, DEAD_MAX_COUNT = -1, -1
-- How long the calling handle keeps the results of what it finishes (ms;
-- 0: none), set by `rules`.
local KEEP = 0

-- Reads the calling handle's rules, '<max attempts>,<dead max age ms>,<dead
-- max count>[,<keep results ms>]' (-1: no limit), and returns its max
-- attempts (0: no limit).
local function rules(arg)
  local limit, age, count, keep = string.match(arg, '^(%d+),(%-?%d+),(%-?%d+),?(%d*)$')
  if not limit then return tonumber(arg) end
  DEAD_MAX_AGE, DEAD_MAX_COUNT = tonumber(age), tonumber(count)
  KEEP = tonumber(keep) or 0
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

-- A record without a tick or options, matched in one step: its attempt,
-- token and member (a member starts with a hex digit, options with 'o').
-- The hot paths (a claim's plain entries, acks) read those so.
local PLAIN_RECORD = '^(%d+),([^,]*),%d*,%d*,,([0-9a-f].*)$'

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

-- The ids whose results this run kept, announced by `announce_finished`.
local FINISHED = {}

-- Keeps the result of entry `id` for KEEP ms (nothing when KEEP is 0):
-- ENTRIES 'k:' .. id is '<state>,<at>,<attempts>,<reason length>,<output
-- length>:<reason><output>' (state 'd' done, 'x' dead, 'c' cancelled; a
-- length empty when there is none), and KEPT says until when.
local function keep_result(id, state, now, attempts, reason, output)
  if KEEP <= 0 then return end
  FINISHED[#FINISHED + 1] = id
  local r = state .. ',' .. int(now) .. ',' .. int(attempts) .. ','
  if reason then r = r .. int(#reason) end
  r = r .. ','
  if output then r = r .. int(#output) end
  redis.call('HSET', ENTRIES, 'k:' .. id, r .. ':' .. (reason or '') .. (output or ''))
  redis.call('ZADD', KEPT, now + KEEP, id)
end

-- Forgets the kept result of `id` (a requeued dead letter's).
local function forget_result(id)
  redis.call('HDEL', ENTRIES, 'k:' .. id)
  redis.call('ZREM', KEPT, id)
end

-- The channel of finishes and cancels, beside `channel` (the wake
-- channel, 'punctual:{name}:wake'): 'punctual:{name}:done'.
local function done_channel(channel)
  return string.sub(channel, 1, #channel - 4) .. 'done'
end

-- Forgets results past their time, and announces the ids whose results
-- this run kept on the done channel: 'f' then '<length>:<id>' for each.
-- Best effort, as `announce`.
local function announce_finished(channel, now)
  if #FINISHED == 0 then return end
  local old = redis.call('ZRANGEBYSCORE', KEPT, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then
    local fields = {}
    for i, id in ipairs(old) do fields[i] = 'k:' .. id end
    redis.call('HDEL', ENTRIES, unpack(fields))
    redis.call('ZREM', KEPT, unpack(old))
  end
  if channel == '' then return end
  local parts = {'f'}
  for _, id in ipairs(FINISHED) do parts[#parts + 1] = int(#id) .. ':' .. id end
  redis.pcall('PUBLISH', done_channel(channel), table.concat(parts))
  FINISHED = {}
end

-- The history: per minute of the server's clock, ENTRIES 'h:<kind><minute>'
-- -> count ('i' inserted, 'd' done, 'f' failed attempts, 'x' dead; minute:
-- ms since the epoch / 60000), and 'h:last' -> the latest minute counted;
-- minutes older than a day are deleted by the first count of a minute.
-- A script counts its events in EVENTS and adds them at its end with
-- `count_history`: one HINCRBY per kind it counted, no read (a read and a
-- write of this minute's counts cost more server time per script).
local EVENTS = {i = 0, d = 0, f = 0, x = 0}
local HISTORY_KINDS = {'i', 'd', 'f', 'x'}

-- Deletes the minutes older than a day that are left, at the first count
-- of `minute`: what the first count of the latest minute counted before
-- left (up to that minute - 1441) goes, up to a day before `minute`.
local function new_minute(minute)
  local last = tonumber(redis.call('HGET', ENTRIES, 'h:last'))
  if last == minute then return end
  redis.call('HSET', ENTRIES, 'h:last', int(minute))
  if not last or last > minute then return end
  local old = {}
  for m = last - 1440, math.min(last, minute - 1441) do
    for _, kind in ipairs(HISTORY_KINDS) do old[#old + 1] = 'h:' .. kind .. int(m) end
  end
  if #old > 0 then call_sliced('HDEL', ENTRIES, old) end
end

-- Adds this run's events to their minute (ENTRIES is known to be a hash: a
-- count that is not an integer, a foreign write's, starts again).
local function count_history(now)
  local minute, first = nil, false
  for _, kind in ipairs(HISTORY_KINDS) do
    local n = EVENTS[kind]
    if n > 0 then
      minute = minute or math.floor(now / 60000)
      local field = 'h:' .. kind .. int(minute)
      local total = redis.pcall('HINCRBY', ENTRIES, field, n)
      if type(total) ~= 'number' then
        redis.call('HSET', ENTRIES, field, int(n))
        total = n
      end
      -- The first count of this kind in this minute.
      if total == n then first = true end
      EVENTS[kind] = 0
    end
  end
  if first then new_minute(minute) end
end

-- Adds a failed attempt (attempt, at, reason) to the last ten of entry
-- `id`, kept in ENTRIES 'e:' .. id as '<attempt>,<at>,<length>:<reason>'
-- each, oldest first.
local function add_error(id, attempt, now, reason)
  local list = redis.call('HGET', ENTRIES, 'e:' .. id) or ''
  local items, at = {}, 1
  while at <= #list do
    local a, t, len, from = string.match(list, '^(%d+),(%d+),(%d+):()', at)
    if not a then break end
    local to = from + tonumber(len)
    items[#items + 1] = string.sub(list, at, to - 1)
    at = to
  end
  items[#items + 1] = int(attempt) .. ',' .. int(now) .. ',' .. int(#reason) .. ':' .. reason
  while #items > 10 do table.remove(items, 1) end
  redis.call('HSET', ENTRIES, 'e:' .. id, table.concat(items))
end

-- Records when the last finished tick of schedule `name` began (`since`,
-- its claim; the one before kept when nil) and how it ended ('d', 'x',
-- 'c'): ENTRIES 's:' .. name is '<since>,<state>'.
local function last_run(name, since, state)
  if not since then
    local old = redis.call('HGET', ENTRIES, 's:' .. name)
    since = old and tonumber(string.match(old, '^(%d*)'))
  end
  redis.call('HSET', ENTRIES, 's:' .. name, (since and int(since) or '') .. ',' .. state)
end
