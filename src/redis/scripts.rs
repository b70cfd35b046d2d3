//! The server-side Lua scripts: every operation on a queue is one of them.
//!
//! Each script gets the queue's eight keys in the order of [`Keys`] and reads
//! the clock with `TIME`, so every process agrees on what is due. A script
//! that fails half way leaves its first writes in place, so each one checks
//! the type of every key it writes before its first write: the hot ones
//! (insert, claim, ack) only those, by a read they need anyway or a `TYPE`;
//! the others every key. `build` checks every key once.

use std::sync::LazyLock;

use redis::Script;

/// Names of one queue's keys, all under the hash tag `{name}`.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `schedule`, `ids`, `values`, `attempts`, `leases`, `dead`, `reasons`,
    /// `seq`, in the order the scripts expect them as `KEYS[1..=8]`.
    pub(crate) all: [String; 8],
    /// The pub/sub channel announcing a new head.
    pub(crate) channel: String,
}

impl Keys {
    pub(crate) fn new(name: &str) -> Keys {
        let key = |suffix: &str| format!("punctual:{{{name}}}:{suffix}");
        Keys {
            all: [
                key("schedule"),
                key("ids"),
                key("values"),
                key("attempts"),
                key("leases"),
                key("dead"),
                key("reasons"),
                key("seq"),
            ],
            channel: key("wake"),
        }
    }
}

// Pieces of Lua the scripts are assembled from; each script takes only the
// helpers it uses, since defining them is part of every call's cost.

/// Names for the keys, and `ensure`: fails if `key` holds another type.
macro_rules! prelude {
    () => {
        r#"
local SCHEDULE, IDS, VALUES, ATTEMPTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LEASES, DEAD, REASONS, SEQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8]

local function ensure(key, want)
  local have = redis.call('TYPE', key)['ok']
  if have ~= 'none' and have ~= want then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' of this queue holds a '
      .. have .. ', not a ' .. want)
  end
end
"#
    };
}

/// `ensure` for every key: for scripts that are not on the hot path.
macro_rules! check_all {
    () => {
        r#"
local function check_all()
  return ensure(SCHEDULE, 'zset') or ensure(IDS, 'hash') or ensure(VALUES, 'hash')
    or ensure(ATTEMPTS, 'hash') or ensure(LEASES, 'zset') or ensure(DEAD, 'zset')
    or ensure(REASONS, 'hash') or ensure(SEQ, 'string')
end
"#
    };
}

macro_rules! now_ms {
    () => {
        r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#
    };
}

/// Scheduling an entry. `head()` is read before any write; `schedule` then
/// announces the entry if it became the head. A new member's sequence is the
/// largest yet, so it is the head only if it is strictly earlier.
macro_rules! schedule {
    () => {
        r#"
-- A schedule member: 16 hex digits of sequence, then the id. Equal scores
-- sort by member, so equal deadlines come out in insertion order.
local function new_member(id)
  return string.format('%016x', redis.call('INCR', SEQ)) .. id
end

local function head()
  return tonumber(redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')[2])
end

local function schedule(id, member, at, channel, old_head)
  redis.call('HSET', IDS, id, member)
  redis.call('ZADD', SCHEDULE, at, member)
  if not old_head or at < old_head then
    redis.call('PUBLISH', channel, at)
  end
end
"#
    };
}

/// The member of `id` if `attempt` is its current, still held delivery.
/// Reads `ids`, `leases` and `attempts`.
macro_rules! held {
    () => {
        r#"
local function held(id, attempt)
  local member = redis.call('HGET', IDS, id)
  if not member or not redis.call('ZSCORE', LEASES, id) then return nil end
  if redis.call('HGET', ATTEMPTS, id) ~= attempt then return nil end
  return member
end
"#
    };
}

macro_rules! bury {
    () => {
        r#"
local function bury(id, member, now, reason)
  redis.call('ZREM', SCHEDULE, member)
  redis.call('ZREM', LEASES, id)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', REASONS, id, reason)
end
"#
    };
}

/// Every script checks the type of a key before its first write to it,
/// either by an `ensure` or by a read that fails on a wrong type, so a
/// script that fails on a foreign key has written nothing.
macro_rules! lua {
    ($($piece:ident),* ; $body:literal) => {
        concat!(prelude!(), $($piece!(),)* $body)
    };
}

/// ARGV: id ('' to generate one), value, 'd' (delay) or 'a' (at), ms, channel.
/// Returns `{1, id}` if inserted, `{0, id}` if the id was taken.
const INSERT: &str = lua!(now_ms, schedule; r#"
local e = ensure(IDS, 'hash') or ensure(VALUES, 'hash') or ensure(SEQ, 'string')
if e then return e end
local id = ARGV[1]
if id ~= '' and redis.call('HEXISTS', IDS, id) == 1 then return {0, id} end
local old_head = head()
local at = tonumber(ARGV[4])
if ARGV[3] == 'd' then at = at + now_ms() end
local member
if id == '' then
  repeat
    local seq = redis.call('INCR', SEQ)
    id = '#' .. seq
    member = string.format('%016x', seq) .. id
  until redis.call('HEXISTS', IDS, id) == 0
else
  member = new_member(id)
end
redis.call('HSET', VALUES, id, ARGV[2])
schedule(id, member, at, ARGV[5], old_head)
return {1, id}
"#);

/// ARGV: max, lease ms, max attempts (0 = unlimited).
/// Returns `{now, head score or -1, id, value, attempt, deadline, lease, ...}`.
const CLAIM: &str = lua!(now_ms; r#"
local now = now_ms()
local max, lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- One more than asked: if it comes, more are due and no head lookup is needed.
local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max + 1)
local n = math.min(#due / 2, max)
local ids, attempts, values, burying = {}, {}, {}, false
for i = 1, n do
  local id = string.sub(due[2 * i - 1], 17)
  ids[i] = id
  attempts[i] = (tonumber(redis.call('HGET', ATTEMPTS, id)) or 0) + 1
  if limit > 0 and attempts[i] > limit then
    burying = true
  else
    values[i] = redis.call('HGET', VALUES, id)
  end
end
local e = ensure(LEASES, 'zset')
if not e and burying then e = ensure(DEAD, 'zset') or ensure(REASONS, 'hash') end
if e then return e end

local out = {now, -1}
local lease_until = now + lease
for i = 1, n do
  local id, member = ids[i], due[2 * i - 1]
  if values[i] == nil then
    redis.call('ZREM', SCHEDULE, member)
    redis.call('ZREM', LEASES, id)
    redis.call('ZADD', DEAD, now, id)
    redis.call('HSET', REASONS, id, 'not acked after ' .. limit .. ' deliveries')
  else
    redis.call('HSET', ATTEMPTS, id, attempts[i])
    redis.call('ZADD', SCHEDULE, lease_until, member)
    redis.call('ZADD', LEASES, lease_until, id)
    out[#out + 1] = id
    out[#out + 1] = values[i]
    out[#out + 1] = attempts[i]
    out[#out + 1] = tonumber(due[2 * i])
    out[#out + 1] = lease_until
  end
end
if #due > 2 * n then
  out[2] = tonumber(due[#due])
else
  local head = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
  if head[2] then out[2] = tonumber(head[2]) end
end
return out
"#);

/// ARGV: id, attempt. Returns 1 if acked, 0 if the lease was lost.
const ACK: &str = lua!(held; r#"
local id = ARGV[1]
local member = held(id, ARGV[2])
if not member then return 0 end
local e = ensure(SCHEDULE, 'zset') or ensure(VALUES, 'hash')
if e then return e end
redis.call('ZREM', SCHEDULE, member)
redis.call('ZREM', LEASES, id)
redis.call('HDEL', IDS, id)
redis.call('HDEL', VALUES, id)
redis.call('HDEL', ATTEMPTS, id)
return 1
"#);

/// ARGV: id, attempt, delay ms, channel. Returns 1, or 0 if the lease was lost.
const RETRY: &str = lua!(held, now_ms, schedule; r#"
local id = ARGV[1]
local member = held(id, ARGV[2])
if not member then return 0 end
local e = ensure(SEQ, 'string')
if e then return e end
local old_head = head()
redis.call('ZREM', SCHEDULE, member)
redis.call('ZREM', LEASES, id)
schedule(id, new_member(id), now_ms() + tonumber(ARGV[3]), ARGV[4], old_head)
return 1
"#);

/// ARGV: id, attempt, lease ms. Returns the new lease end, or 0 if lost.
const EXTEND: &str = lua!(held, now_ms; r#"
local member = held(ARGV[1], ARGV[2])
if not member then return 0 end
local e = ensure(SCHEDULE, 'zset')
if e then return e end
local lease_until = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', SCHEDULE, lease_until, member)
redis.call('ZADD', LEASES, lease_until, ARGV[1])
return lease_until
"#);

/// ARGV: id, attempt, reason. Moves a held entry that never reached a
/// consumer to the dead letters; that delivery does not count.
const BURY: &str = lua!(held, now_ms, bury; r#"
local member = held(ARGV[1], ARGV[2])
if not member then return 0 end
local e = ensure(SCHEDULE, 'zset') or ensure(DEAD, 'zset') or ensure(REASONS, 'hash')
if e then return e end
bury(ARGV[1], member, now_ms(), ARGV[3])
redis.call('HINCRBY', ATTEMPTS, ARGV[1], -1)
return 1
"#);

/// ARGV: id. Deletes the entry, pending, leased or dead.
const REMOVE: &str = lua!(check_all; r#"
local e = check_all()
if e then return e end
local id = ARGV[1]
local member = redis.call('HGET', IDS, id)
if not member then return 0 end
redis.call('ZREM', SCHEDULE, member)
redis.call('ZREM', LEASES, id)
redis.call('ZREM', DEAD, id)
redis.call('HDEL', REASONS, id)
redis.call('HDEL', IDS, id)
redis.call('HDEL', VALUES, id)
redis.call('HDEL', ATTEMPTS, id)
return 1
"#);

/// ARGV: id, delay ms, channel. Moves a pending entry.
const RESET: &str = lua!(check_all, now_ms, schedule; r#"
local e = check_all()
if e then return e end
local id = ARGV[1]
local member = redis.call('HGET', IDS, id)
if not member or redis.call('ZSCORE', LEASES, id) or redis.call('ZSCORE', DEAD, id) then
  return 0
end
local old_head = head()
redis.call('ZREM', SCHEDULE, member)
schedule(id, new_member(id), now_ms() + tonumber(ARGV[2]), ARGV[3], old_head)
return 1
"#);

/// ARGV: id. Returns the entry's score (deadline, or lease end), or nil.
const DEADLINE: &str = lua!(check_all; r#"
local e = check_all()
if e then return e end
local member = redis.call('HGET', IDS, ARGV[1])
if not member then return false end
local score = redis.call('ZSCORE', SCHEDULE, member)
if not score then return false end
return tonumber(score)
"#);

/// Returns `{pending, due, leased, dead}`.
const STATS: &str = lua!(check_all, now_ms; r#"
local e = check_all()
if e then return e end
local now = now_ms()
local due = redis.call('ZCOUNT', SCHEDULE, '-inf', now)
local leased = redis.call('ZCOUNT', LEASES, '(' .. now, '+inf')
local pending = redis.call('ZCARD', SCHEDULE) - due - leased
return {pending, due, leased, redis.call('ZCARD', DEAD)}
"#);

/// ARGV: max (> 0). Returns `{{id, value, attempts, reason}, ...}`, oldest first.
const DEAD_LETTERS: &str = lua!(check_all; r#"
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
"#);

/// ARGV: id, delay ms, channel. Puts a dead letter back as pending.
const REQUEUE_DEAD: &str = lua!(check_all, now_ms, schedule; r#"
local e = check_all()
if e then return e end
local id = ARGV[1]
if not redis.call('ZSCORE', DEAD, id) then return 0 end
local old_head = head()
redis.call('ZREM', DEAD, id)
redis.call('HDEL', REASONS, id)
redis.call('HDEL', ATTEMPTS, id)
schedule(id, new_member(id), now_ms() + tonumber(ARGV[2]), ARGV[3], old_head)
return 1
"#);

/// Deletes every key of the queue, unless one holds a foreign type.
const PURGE: &str = lua!(check_all; r#"
local e = check_all()
if e then return e end
return redis.call('DEL', unpack(KEYS))
"#);

/// Checks the type of every key; run when a queue is built.
const CHECK: &str = lua!(check_all; r#"
local e = check_all()
if e then return e end
return 1
"#);

/// The scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) insert: Script,
    pub(crate) claim: Script,
    pub(crate) ack: Script,
    pub(crate) retry: Script,
    pub(crate) extend: Script,
    pub(crate) bury: Script,
    pub(crate) remove: Script,
    pub(crate) reset: Script,
    pub(crate) deadline: Script,
    pub(crate) stats: Script,
    pub(crate) dead_letters: Script,
    pub(crate) requeue_dead: Script,
    pub(crate) purge: Script,
    pub(crate) check: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    insert: Script::new(INSERT),
    claim: Script::new(CLAIM),
    ack: Script::new(ACK),
    retry: Script::new(RETRY),
    extend: Script::new(EXTEND),
    bury: Script::new(BURY),
    remove: Script::new(REMOVE),
    reset: Script::new(RESET),
    deadline: Script::new(DEADLINE),
    stats: Script::new(STATS),
    dead_letters: Script::new(DEAD_LETTERS),
    requeue_dead: Script::new(REQUEUE_DEAD),
    purge: Script::new(PURGE),
    check: Script::new(CHECK),
});
