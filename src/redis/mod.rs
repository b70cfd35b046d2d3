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
//! Waiting consumers of one process share one waiter: the leader sleeps until
//! the head's deadline as the server reported it, or until a pub/sub message
//! announces an earlier head (inserts, resets, retries and requeues that
//! become the head publish one), and asks again at least every
//! `poll_interval`, so a lost message delays a delivery by at most that.
//! Others wait without timers. An idle queue costs one request per
//! `poll_interval` per process.
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
//! | `punctual:{name}:ids` | hash | id → its member in `schedule` |
//! | `punctual:{name}:values` | hash | id → the value as JSON (serde_json) |
//! | `punctual:{name}:attempts` | hash | id → deliveries so far |
//! | `punctual:{name}:leases` | sorted set | id → end of its lease, for leased entries |
//! | `punctual:{name}:dead` | sorted set | id → when it died, for dead letters |
//! | `punctual:{name}:reasons` | hash | id → why it died |
//! | `punctual:{name}:seq` | string | the sequence counter |
//!
//! `<seq>` is 16 lowercase hex digits of a counter taken from `seq` at insert
//! (and at reset, retry and requeue), so members with equal scores sort in
//! insertion order: equal deadlines come out FIFO. Generated ids are `#`
//! followed by that counter in decimal. A claim takes members with score ≤
//! now in order, sets the score and `leases` to now + lease and increments
//! `attempts`; ack deletes the id from every key. A delivery is identified by
//! its member and attempt: its lease is held while `leases` has the id, `ids`
//! still maps the id to that member (insert, retry, reset and requeue give a
//! new one) and `attempts` is still that attempt. The channel
//! `punctual:{name}:wake` carries the new head's due time.
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
//! # Redis Cluster
//!
//! A queue lives in one hash slot, so it works on a cluster node, but one
//! queue does not spread over nodes (use several queue names to spread
//! load). The connection is to one node: redirects (`MOVED`) are not
//! followed, so point the queue at the node that owns its slot.

mod builder;
mod conn;
mod delivery;
mod error;
mod inner;
mod queue;
mod scripts;
mod wait;

pub use ::redis as client;
pub use builder::RedisQueueBuilder;
pub use delivery::Delivery;
pub use error::Error;
pub use queue::RedisQueue;

/// Counts of a queue's entries by state, from [`RedisQueue::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Not yet due.
    pub pending: u64,
    /// Due and not leased (an entry whose lease ran out counts here).
    pub due: u64,
    /// Leased to a consumer.
    pub leased: u64,
    /// In the dead-letter set.
    pub dead: u64,
}

/// An entry that was given up on, from [`RedisQueue::dead_letters`].
#[derive(Debug)]
pub struct DeadLetter<T> {
    /// The entry's id.
    pub id: String,
    /// The value, or `None` if it no longer decodes as `T`.
    pub value: Option<T>,
    /// Deliveries made before it died.
    pub attempts: u32,
    /// Why it died.
    pub reason: String,
}
