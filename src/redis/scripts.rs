//! The server-side Lua scripts: every operation on a queue is one of them.
//!
//! Each script gets the queue's eight keys in the order of [`Keys`] and reads
//! the clock with `TIME`, so every process agrees on what is due. Scripts
//! that write first check the type of every key (a script that failed half
//! way would leave its first writes in place), then write.

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

/// Helpers every script starts with.
macro_rules! lua {
    ($body:literal) => {
        concat!(
            r#"
local SCHEDULE, IDS, VALUES, ATTEMPTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LEASES, DEAD, REASONS, SEQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local TYPES = {'zset', 'hash', 'hash', 'hash', 'zset', 'zset', 'hash', 'string'}

local function wrong_type()
  for i, want in ipairs(TYPES) do
    local have = redis.call('TYPE', KEYS[i])['ok']
    if have ~= 'none' and have ~= want then
      return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' of this queue holds a '
        .. have .. ', not a ' .. want)
    end
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A schedule member: 16 hex digits of sequence, then the id. Equal scores
-- sort by member, so equal deadlines come out in sequence (insertion) order.
local function new_member(id)
  return string.format('%016x', redis.call('INCR', SEQ)) .. id
end

-- Schedules `id` as `member` at `at`, and announces it if it is the new head.
local function schedule(id, member, at, channel)
  redis.call('HSET', IDS, id, member)
  redis.call('ZADD', SCHEDULE, at, member)
  if redis.call('ZRANGE', SCHEDULE, 0, 0)[1] == member then
    redis.call('PUBLISH', channel, at)
  end
end

-- The member of `id` if `attempt` is its current, still held delivery.
local function held(id, attempt)
  local member = redis.call('HGET', IDS, id)
  if not member or not redis.call('ZSCORE', LEASES, id) then return nil end
  if redis.call('HGET', ATTEMPTS, id) ~= attempt then return nil end
  return member
end

local function bury(id, member, now, reason)
  redis.call('ZREM', SCHEDULE, member)
  redis.call('ZREM', LEASES, id)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', REASONS, id, reason)
end

local function forget(id, member)
  redis.call('ZREM', SCHEDULE, member)
  redis.call('ZREM', LEASES, id)
  redis.call('ZREM', DEAD, id)
  redis.call('HDEL', REASONS, id)
  redis.call('HDEL', IDS, id)
  redis.call('HDEL', VALUES, id)
  redis.call('HDEL', ATTEMPTS, id)
end
"#,
            $body
        )
    };
}

/// ARGV: id ('' to generate one), value, 'd' (delay) or 'a' (at), ms, channel.
/// Returns `{1, id}` if inserted, `{0, id}` if the id was taken.
const INSERT: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local id = ARGV[1]
if id ~= '' and redis.call('HEXISTS', IDS, id) == 1 then return {0, id} end
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
schedule(id, member, at, ARGV[5])
return {1, id}
"#
);

/// ARGV: max, lease ms, max attempts (0 = unlimited).
/// Returns `{now, head score or -1, id, value, attempt, deadline, lease, ...}`.
const CLAIM: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local now = now_ms()
local lease, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {now, -1}
local due = redis.call('ZRANGEBYSCORE', SCHEDULE, '-inf', now, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
for i = 1, #due, 2 do
  local member = due[i]
  local id = string.sub(member, 17)
  local attempt = (tonumber(redis.call('HGET', ATTEMPTS, id)) or 0) + 1
  if limit > 0 and attempt > limit then
    bury(id, member, now, 'not acked after ' .. limit .. ' deliveries')
  else
    local lease_until = now + lease
    redis.call('HSET', ATTEMPTS, id, attempt)
    redis.call('ZADD', SCHEDULE, lease_until, member)
    redis.call('ZADD', LEASES, lease_until, id)
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', VALUES, id)
    out[#out + 1] = attempt
    out[#out + 1] = tonumber(due[i + 1])
    out[#out + 1] = lease_until
  end
end
local head = redis.call('ZRANGE', SCHEDULE, 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
return out
"#
);

/// ARGV: id, attempt. Returns 1 if acked, 0 if the lease was lost.
const ACK: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local member = held(ARGV[1], ARGV[2])
if not member then return 0 end
forget(ARGV[1], member)
return 1
"#
);

/// ARGV: id, attempt, delay ms, channel. Returns 1, or 0 if the lease was lost.
const RETRY: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local id = ARGV[1]
local member = held(id, ARGV[2])
if not member then return 0 end
redis.call('ZREM', SCHEDULE, member)
redis.call('ZREM', LEASES, id)
schedule(id, new_member(id), now_ms() + tonumber(ARGV[3]), ARGV[4])
return 1
"#
);

/// ARGV: id, attempt, lease ms. Returns the new lease end, or 0 if lost.
const EXTEND: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local member = held(ARGV[1], ARGV[2])
if not member then return 0 end
local lease_until = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', SCHEDULE, lease_until, member)
redis.call('ZADD', LEASES, lease_until, ARGV[1])
return lease_until
"#
);

/// ARGV: id, attempt, reason. Moves a held entry that never reached a
/// consumer to the dead letters; that delivery does not count.
const BURY: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local member = held(ARGV[1], ARGV[2])
if not member then return 0 end
bury(ARGV[1], member, now_ms(), ARGV[3])
redis.call('HINCRBY', ATTEMPTS, ARGV[1], -1)
return 1
"#
);

/// ARGV: id. Deletes the entry, pending, leased or dead.
const REMOVE: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local member = redis.call('HGET', IDS, ARGV[1])
if not member then return 0 end
forget(ARGV[1], member)
return 1
"#
);

/// ARGV: id, delay ms, channel. Moves a pending entry.
const RESET: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local id = ARGV[1]
local member = redis.call('HGET', IDS, id)
if not member or redis.call('ZSCORE', LEASES, id) or redis.call('ZSCORE', DEAD, id) then
  return 0
end
redis.call('ZREM', SCHEDULE, member)
schedule(id, new_member(id), now_ms() + tonumber(ARGV[2]), ARGV[3])
return 1
"#
);

/// ARGV: id. Returns the entry's score (deadline, or lease end), or nil.
const DEADLINE: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local member = redis.call('HGET', IDS, ARGV[1])
if not member then return false end
local score = redis.call('ZSCORE', SCHEDULE, member)
if not score then return false end
return tonumber(score)
"#
);

/// Returns `{pending, due, leased, dead}`.
const STATS: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local now = now_ms()
local due = redis.call('ZCOUNT', SCHEDULE, '-inf', now)
local leased = redis.call('ZCOUNT', LEASES, '(' .. now, '+inf')
local pending = redis.call('ZCARD', SCHEDULE) - due - leased
return {pending, due, leased, redis.call('ZCARD', DEAD)}
"#
);

/// ARGV: max (> 0). Returns `{{id, value, attempts, reason}, ...}`, oldest first.
const DEAD_LETTERS: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
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
"#
);

/// ARGV: id, delay ms, channel. Puts a dead letter back as pending.
const REQUEUE_DEAD: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
local id = ARGV[1]
if not redis.call('ZSCORE', DEAD, id) then return 0 end
redis.call('ZREM', DEAD, id)
redis.call('HDEL', REASONS, id)
redis.call('HDEL', ATTEMPTS, id)
schedule(id, new_member(id), now_ms() + tonumber(ARGV[2]), ARGV[3])
return 1
"#
);

/// Deletes every key of the queue.
const PURGE: &str = lua!(
    r#"
local e = wrong_type() if e then return e end
return redis.call('DEL', unpack(KEYS))
"#
);

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
});
