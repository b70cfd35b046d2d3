//! The delay queue kept in Redis (cargo feature `redis`): pending entries
//! survive restarts and are shared by every process that opens the queue.
//!
//! [`RedisQueue<T>`] is [`DelayQueue`](crate::DelayQueue)'s durable sibling.
//! Delivery is **at least once**: [`take`](RedisQueue::take) hands a due
//! entry to one consumer under a *lease*; the consumer [`ack`](Delivery::ack)s
//! it when done, and an entry whose lease runs out is delivered again, with
//! [`attempt`](Delivery::attempt) one higher. After `max_attempts` deliveries
//! without an ack it goes to the dead letters.
//!
//! ```no_run
//! use punctual::redis::RedisQueue;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), punctual::redis::Error> {
//! let unpaid: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "unpaid").await?;
//! unpaid.insert_with_id("order-17", &17, Duration::from_secs(30 * 60)).await?;
//!
//! // In any process, on any replica:
//! let order = unpaid.take().await?;
//! println!("order {} expired", order.value());
//! order.ack().await?;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! Every operation is one Lua script run by the server (loaded once, called
//! by SHA), reading the server's clock (`TIME`): whether an entry is due is
//! decided by one clock for every process. There is no background task that
//! moves due entries: a consumer claims them directly, and a claim is a new
//! score in the same sorted set, so an entry is never "in flight" between
//! two keys and a consumer that dies loses nothing.
//!
//! Waiting consumers of one built handle (and its clones) share one waiter:
//! the leader sleeps until the head's deadline as the server reported it, or
//! until a pub/sub message announces an earlier head (inserts, resets,
//! retries, requeues and shortened leases that make a new head publish one),
//! and asks again at least every `poll_interval`, so a lost message delays a
//! delivery by at most that. Others wait without timers. An idle queue costs
//! one request per `poll_interval` per built handle, and a `PING` on the
//! pub/sub connection when it has been silent for ten poll intervals.
//!
//! Single inserts ([`insert`](RedisQueue::insert),
//! [`insert_at`](RedisQueue::insert_at),
//! [`insert_with_id`](RedisQueue::insert_with_id)) made on one built handle
//! while another of them is on its way wait for it and go together, up to
//! 256 in one run of the insert script, each caller with its own answer, in
//! the order of the calls; a producer that awaits each insert sends each
//! alone, as before. Why: everything a handle sends shares its one
//! connection, and Redis runs one script at a time. Measured (one
//! producer with 256 inserts in flight, a worker on the same handle), one
//! script per insert cost the server 17 µs each and kept it 93% busy while
//! the producer ran, and a claim of the worker waited behind the inserts
//! sent before it, 4.3 ms to run and 1.6 ms more to be read back (p50)
//! instead of 0.25 ms in all; the worker, which takes at most its free
//! places per claim, fell behind and its p99 lateness was 269 ms against a
//! hand-written poller's 12.6 ms. Together the inserts cost 7 µs each, end
//! three times sooner, and a claim waits at most one batch (about a
//! millisecond): p99 16 ms against the poller's 13 (medians of 3, workload
//! 11 of `benches/redis.rs`).
//!
//! # Key layout and entry format
//!
//! A queue named `name` owns these keys, all under the hash tag `{name}` so a
//! Redis Cluster keeps them in one slot. A service in another language can
//! share the queue by running the same scripts: `src/redis/scripts/*.lua`,
//! each opening with its keys, arguments and reply, put together with the
//! helpers of `scripts/lib/` as `src/redis/scripts.rs` lists.
//!
//! | key | type | contents |
//! |---|---|---|
//! | `punctual:{name}:schedule` | sorted set | member `<seq><id>`, score: due time, or end of the lease while leased (ms since the Unix epoch, server clock) |
//! | `punctual:{name}:entries` | hash | `m:<id>` → the entry's record; `v:<id>` → its value as JSON (serde_json); `r:<id>` → why its last attempt failed (kept until it is acked), or why a dead letter died; `paused` → since when (ms) the queue is paused, while it is; `instance` → the queue's own id, made by the first page of [`entries`](RedisQueue::entries) that needs a cursor (a cursor carries it, so a cursor of a queue of the same name on another server is refused); `options` → set while entries with a key or a priority may exist (set by every write that adds one to `special`, deleted by a claim that finds `special` empty); `k:<id>` → the result of a finished entry, while `kept` keeps it (see below); `e:<id>` → its last 10 failed attempts, oldest first, `<attempt>,<at ms>,<reason length>:<reason>` each; `t:<id>` → the inserting span's trace context (feature `opentelemetry`); `traces` → set once an insert kept one (claims read `t:` fields from then on); `n:<id>` → a dead tick's schedule; `s:<name>` → schedule `name`'s last finished tick, `<when its run began>,<state>` (state `d` done, `x` dead, `c` cancelled); `p:<name>` → set while schedule `name` is paused: the due time of its parked tick (kept out of `schedule`), or empty when its tick is leased or was made due by `run_now`; `h:<kind><minute>` → the history's count of that minute (kind `i` inserted, ticks included, `d` done, `f` failed attempts, `x` dead; minute the ms since the epoch / 60000), written by the scripts that insert and finish (once per script; this minute's counts read with the records they read anyway), and `h:last` → the latest minute counted (its first count deletes the minutes older than a day) |
//! | `punctual:{name}:leases` | sorted set | id → end of its lease, for leased entries |
//! | `punctual:{name}:dead` | sorted set | id → when it died, for dead letters |
//! | `punctual:{name}:seq` | string | the sequence counter |
//! | `punctual:{name}:schedules` | hash | name → a recurring schedule's spec |
//! | `punctual:{name}:given_up` | sorted set | token → when, for an hour: claims given up on or sent again, whose late first sending must lease nothing |
//! | `punctual:{name}:requests` | sorted set | on a cluster only: `<request id>` and `<request id>\n<answer>` → when they may be forgotten: the answers of recent writes, for a second execution of one (see "Requests sent twice") |
//! | `punctual:{name}:special` | sorted set | as `schedule`, for the live entries that have a key or a priority other than 0 (`schedule` then holds only the others) |
//! | `punctual:{name}:ready` | sorted set | the claim's index of the entries of `special` that no live lease holds, every member scored 0 and read in lexical order: `g<key>\0<place><id>` for each one with a key, `h<place>-<id>` for each one without, and `h<place>+<key>\0<id>` for the first of each key and priority (its head); `<place>` is 4 hex digits of 32767 − priority, 11 of the due time (ms; the lease end for a lease that ran out) and the member's 16 of sequence |
//! | `punctual:{name}:held` | sorted set | id → end of its lease, for the entries of `special` whose lease holds a place of their key (a claim takes those that ran out back into `ready`) |
//! | `punctual:{name}:limits` | hash | `l:<key>` → the key's limit, `<concurrency>,<rate max>,<rate per ms>` (each empty for none; the default under `l:*`); `c:<key>` → how many of its entries `held` holds; `s:<key>` → when its recent deliveries began, 11 hex digits of ms each, oldest first (at most the rate's max, within its period; only while the key has a rate) |
//! | `punctual:{name}:unique` | sorted set | id → until when the id stays taken after its entry, inserted with a unique window, finished (expired ones are forgotten as new ones come) |
//! | `punctual:{name}:kept` | sorted set | id → until when its result (`k:<id>` in `entries`) is kept: written by the script that finishes the entry (ack, dead letter, cancel) when the finishing handle has `keep_results`; results past their time are deleted by the next script that keeps one, and never read |
//! | `punctual:{name}:marks` | sorted set | `<token>\n<id>` → until when the holder of a cancelled lease is told so at its extension (the lease's end and one lease more) |
//! | `punctual:{name}:workers` | hash | worker id → `<first heard of>,<last heard of>,<record>` (ms; the record is the worker's JSON: name, host, pid, places, refresh period, runs, stopping); refreshed by each heartbeat, deleted at shutdown; a record three refresh periods old is not listed, and deleted by the next heartbeat of any worker |
//!
//! An entry's record is `attempt,token,since,deadline,tick,member`: the
//! deliveries so far; the token of the claim that holds its lease and when
//! that claim was made (empty while pending or dead); when the current
//! delivery was due; the instant of a schedule's tick (empty for other
//! entries); its member in `schedule` or `special` (empty while dead). An
//! entry inserted with options (`insert_with`, `insert_many_with`) has one
//! more field before the member,
//! `o<priority>:<max attempts>:<unique ms>:<key length>:<key>`, each
//! empty where not set (the key's length in bytes, so a key may hold any
//! character but NUL); the field starts with `o`, which no member does (a
//! member starts with a hex digit), so a record written before options
//! existed reads as it always did. A dead letter keeps its options, and a
//! requeued one runs under them again.
//!
//! `<seq>` is 16 lowercase hex digits of a counter taken from `seq` at insert
//! (and at reset, retry and requeue), so members with equal scores sort in
//! insertion order: equal deadlines come out FIFO. A page of
//! [`entries`](RedisQueue::entries) is one script reading a range of one
//! sorted set: `schedule` (pending, stepping over the leased members; due),
//! `leases` or `dead`, from the cursor's score on (for pending and due,
//! `schedule` and `special` read side by side and merged). Generated ids
//! are `#` followed by that counter in decimal. While no live entry has a
//! key or a priority (no `options` field), a claim takes members of
//! `schedule` with score ≤ now in order, as it always did; else it walks
//! `ready`'s heads level by level, the highest priority first, level 0
//! merged with `schedule`'s due members, one entry per key per round (see
//! [`InsertOptions`](crate::durable::InsertOptions)), reading each key's
//! limit and counts in `limits` once, so a key's backlog costs a claim one
//! step per entry it takes, never the whole backlog. It sets the score and
//! `leases` to now + lease, increments the attempt and stores the claim's
//! *token*: a string the consumer made, never the same twice (not even
//! after a purge). A delivery holds its lease while
//! the record still carries its token; ack deletes the entry, retry gives it
//! a new member and clears the token. A [`Worker`](crate::durable::Worker)'s
//! claims make their tokens `<worker id>/<token>`, so a lease names its
//! holder (`EntryInfo::worker`); `since` is when the delivery began
//! (`EntryInfo::started_at`). The channel `punctual:{name}:done` carries
//! `f` and the ids of finished entries whose results are kept
//! (`<length>:<id>` each, one message per script), which `wait` listens
//! to, and `c` for each cancelled lease, on which workers extend their
//! leases at once to learn which. The channel `punctual:{name}:wake`
//! carries the new head's due time; where entries with options exist, also
//! every entry that becomes due at once (the due head may be waiting on
//! its key's limits), every place of a key at its concurrency that frees
//! while entries of the key wait, and every change of a key limit. A claim
//! that took fewer than it was asked for reports as its head the next due
//! time or lease end after now, or the time a refused key's rate window
//! opens, whichever is first: never a due entry that waits on its key.
//!
//! # Failures
//!
//! Every call waits for its reply up to
//! [`response_timeout`](RedisQueueBuilder::response_timeout) (default 10 s:
//! a server paused for a failover answers late, not never). A call that
//! gets no reply, or whose connection breaks, returns `Err`, and its
//! connection is replaced by a new one (with TCP keepalive on and capped
//! back-off between attempts; a login refused once is tried again on the
//! next call, so a password rolled out late heals by itself). The request
//! may still have run: an `Err` from a producer call does not say the write
//! did not happen, so retry with
//! [`insert_with_id`](RedisQueue::insert_with_id) where a duplicate matters.
//! Consumers handle it for you: a claim whose reply was lost is sent again
//! with the same token and returns what it leased the first time; a
//! consumer that gives up instead (a `take_timeout` that ran out, a dropped
//! future, `try_take` returning the error) leaves the token to the handle's
//! next claim, which gives back what it holds without counting an attempt.
//! That give-back, and a claim sent again, record the token in `given_up`:
//! a first sending of it that reaches the server later (after a reconnect)
//! leases nothing.
//!
//! # Requests sent twice
//!
//! A write must not apply twice when its request reaches the server twice.
//! How that holds depends on the connection:
//!
//! - **A single server.** The queue's own connection never sends a request
//!   again: a request whose reply is lost returns `Err`, having run once or
//!   not at all. Only the consumers send a claim again, on purpose, with
//!   its token and the `recover` bound above. Nothing else is recorded, and
//!   a write costs what it always did.
//! - **A Redis Cluster.** redis-rs's cluster connection sends a request
//!   again by itself after its connection to a node dropped (it reconnects
//!   first), and the first sending may have run; turning that off would
//!   also turn off its `MOVED`/`ASK` redirects. So every write carries a
//!   request identity, a token made for that one request as a claim's
//!   token is (a claim sent again by its consumer is a new request with a
//!   new identity, and the same claim token). A write that changed
//!   something keeps its answer under that identity in `requests` for
//!   twice the [`response_timeout`](RedisQueueBuilder::response_timeout)
//!   (the cluster connection gives up a request whose caller stopped
//!   waiting, after at most one response timeout). A second execution of
//!   it finds the answer, changes nothing and returns it:
//!   - [`insert`](RedisQueue::insert), [`insert_at`](RedisQueue::insert_at),
//!     [`insert_with_id`](RedisQueue::insert_with_id),
//!     [`insert_many`](RedisQueue::insert_many),
//!     [`insert_with`](RedisQueue::insert_with) and
//!     [`insert_many_with`](RedisQueue::insert_many_with) insert (or
//!     replace) once and return the ids (and `true`) of the first
//!     execution, even if the entries were taken and acked in between;
//!   - a claim (`take*`, `stream()`, a [`Worker`](crate::durable::Worker))
//!     leases nothing more and returns what the first execution leased and
//!     still holds, and the first's results of the finishes it carried;
//!   - [`ack`](Delivery::ack), [`retry`](Delivery::retry) and a worker's
//!     finishes, [`remove`](RedisQueue::remove),
//!     [`reset`](RedisQueue::reset), [`requeue_dead`](RedisQueue::requeue_dead),
//!     [`schedule_every`](RedisQueue::schedule_every),
//!     `schedule_cron` and
//!     [`unschedule`](RedisQueue::unschedule) return the first's answer
//!     (an ack that applied says so, not "lease lost");
//!   - [`pause`](RedisQueue::pause), [`resume`](RedisQueue::resume),
//!     [`run_now`](RedisQueue::run_now) (which moves the tick once),
//!     [`set_key_limit`](RedisQueue::set_key_limit),
//!     [`set_default_key_limit`](RedisQueue::set_default_key_limit),
//!     [`remove_key_limit`](RedisQueue::remove_key_limit),
//!     [`requeue_all_dead`](RedisQueue::requeue_all_dead) and
//!     [`clear_dead`](RedisQueue::clear_dead) (which return the first's
//!     count, not 0) likewise.
//!
//!   A write that changed nothing (a remove of an absent id, an
//!   `insert_with_id` of a taken one, a claim that found nothing due and
//!   carried no finish) keeps nothing: its second execution is the only
//!   one that counts, as one call made at that moment. Two writes keep
//!   nothing by design: a second [`extend`](Delivery::extend) pushes the
//!   lease end again, to its own now + lease (what one extension a moment
//!   later makes, and the end the delivery is told), and a second
//!   [`purge`](RedisQueue::purge) also deletes what was written between
//!   the two (as one purge at that later moment would: the call had not
//!   returned). On a cluster a write costs three more commands inside its
//!   script (a read of its identity, the answer's `ZADD`, a read to forget
//!   old answers), and `requests` holds two members for each recent write
//!   that changed something. An answer kept on a primary that fails before
//!   replicating it is lost with the write it describes.
//!
//! A call that returns `Err` (its caller stopped waiting) may still have
//! applied once, on either kind of deployment, as said above.
//!
//! Announcements are best effort: a user whose ACL forbids the queue's
//! channel (Redis 7 gives new users no channels) still inserts, retries and
//! resets (the scripts' `PUBLISH` runs under `pcall`); `build()` warns
//! through `tracing`, and waiting consumers find new entries by polling.
//!
//! Under `maxmemory` with the `noeviction` policy, a full server refuses a
//! script's first write (`OOM`): inserts return `Err` and consumers cannot
//! claim (they keep waiting and retrying) until memory is freed; a script
//! either writes whole or not at all, so nothing is half written.
//!
//! # Durability
//!
//! An entry is as durable as the server keeps it. With `appendonly yes` and
//! `appendfsync always`, an insert that returned `Ok` survives a crash of the
//! server; with `appendfsync everysec` (Redis's default when AOF is on) a
//! crash can lose the last second of inserts, acks and claims (a lost claim
//! or ack means a second delivery, never a lost entry, unless the insert
//! itself was lost); with RDB snapshots only, everything since the last
//! snapshot; with no persistence, everything. A replica promoted after its
//! primary failed can miss the writes that were not yet replicated to it.
//!
//! # TLS and ACL users
//!
//! With the cargo feature `redis-tls`, `rediss://` URLs connect over TLS
//! (rustls; the server's certificate is checked against the platform's
//! roots, which include a bundle named by `SSL_CERT_FILE`, and its name
//! against the URL's host). A private CA or a client certificate goes
//! through a [`client::Client`] built with `Client::build_with_tls` and
//! passed to [`RedisQueueBuilder::client`]. A user name and password in the
//! URL (`rediss://user:password@host:port/`, percent-encoded) log in as
//! that ACL user on every connection the queue opens, pub/sub included.
//!
//! The rules a queue named `orders` needs (Redis 7; on 6.2 leave out the
//! `&` channel rule, channels are open there by default):
//!
//! ```text
//! ACL SETUSER orders-app on >password resetkeys ~punctual:{orders}:* resetchannels &punctual:{orders}:wake &punctual:{orders}:done -@all +evalsha +script|load +time +type +del +get +set +incr +hset +hget +hmget +hdel +hexists +hgetall +zadd +zrem +zrange +zrangebyscore +zscore +zcard +zcount +publish +subscribe +ping +info
//! ```
//!
//! `~punctual:*` serves every queue. On a cluster add `+cluster|slots`.
//! `publish`, `subscribe`, `ping` and the channel rules are an optimisation
//! (without them `build()` warns and waiting consumers find new entries by
//! polling, every `poll_interval`; without the `done` channel alone, `wait`
//! finds results by polling and a worker learns of a cancel at its next
//! lease extension); `info` only lets `build()` check the
//! server's version. [`build`](RedisQueueBuilder::build) fails with a
//! `NOPERM` error naming every missing command (and the key it was checked
//! on) when the user may not run what the queue runs, or may not touch its
//! keys; Redis 6.2 cannot check commands ahead, so there a missing command
//! shows up on the first call that needs it.
//!
//! # Redis Cluster
//!
//! With the cargo feature `redis-cluster`,
//! [`cluster(urls)`](RedisQueueBuilder::cluster) connects through any of
//! a cluster's nodes with redis-rs's async cluster client, which follows
//! `MOVED` and `ASK` redirects and topology changes. A queue lives in one
//! hash slot (its keys share the tag `{name}`), so its order and atomic
//! scripts are those of a single server, and one queue does not spread
//! over nodes: use several queue names to spread load; they spread over
//! the primaries by their slots. Announcements use plain pub/sub, which a
//! cluster forwards to every node, so a consumer subscribes on a seed node.
//! A request the cluster connection sends twice applies once (see
//! "Requests sent twice").
//! During a failover of the queue's primary, or a migration of its slot,
//! producer calls may return `Err` (`TRYAGAIN`, `CLUSTERDOWN`, a timeout)
//! and consumers and workers wait and retry. Replication is asynchronous:
//! a replica promoted after its primary *crashed* (not a manual
//! `CLUSTER FAILOVER`, which waits for the replica to catch up) can miss
//! the last writes acknowledged to the client: inserts, but also acks,
//! which then deliver an entry again.

mod builder;
mod conn;
mod delivery;
mod discover;
mod durable;
mod error;
mod inner;
mod operations;
mod options;
mod queue;
mod results;
mod schedules;
mod scripts;
mod wait;

pub use crate::durable::ScheduleInfo;
pub use ::redis as client;
pub use builder::RedisQueueBuilder;
pub use delivery::Delivery;
pub use discover::queue_names;
pub use error::Error;
pub use queue::RedisQueue;

/// Counts of a queue's entries by state, from [`RedisQueue::stats`]: the
/// store-neutral [`QueueStats`](crate::durable::QueueStats).
pub type RedisStats = crate::durable::QueueStats;

/// An entry that was given up on, from [`RedisQueue::dead_letters`]: the
/// store-neutral [`DeadLetter`](crate::durable::DeadLetter).
pub type DeadLetter<T> = crate::durable::DeadLetter<T>;
