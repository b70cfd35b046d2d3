//! [`RedisQueue`]: the handle, its operations and the consumers' wait loop.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::Stream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::builder::RedisQueueBuilder;
use super::delivery::Delivery;
use super::error::{Error, check_id};
use super::inner::{Attempt, Claim, Claimed, Held, Inner, MAX_BATCH, Put, millis, system_time};
use super::scripts::SCRIPTS;
use super::{DeadLetter, RedisStats};
use crate::durable::store::{Sealed, Taken};
use crate::durable::wait::Backoff;
use crate::queue::deadline_after;

/// A value this long (JSON bytes) or longer is inserted alone, never with
/// other inserts: the smallest `proto-max-bulk-len` a server may have is
/// 1 MiB, and a server that cannot read a request closes its connection.
pub(crate) const ALONE_FROM: usize = 1 << 20;

/// A delay queue kept in Redis, shared by every process that opens it by
/// name; see the [module docs](super) for its guarantees and key layout.
///
/// A clone is another handle to the same queue and shares its connection.
pub struct RedisQueue<T> {
    inner: Arc<Inner>,
    _values: PhantomData<fn(T) -> T>,
}

impl<T> Clone for RedisQueue<T> {
    fn clone(&self) -> Self {
        RedisQueue {
            inner: Arc::clone(&self.inner),
            _values: PhantomData,
        }
    }
}

impl<T> fmt::Debug for RedisQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisQueue")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("max_attempts", &self.inner.max_attempts)
            .field("poll_interval", &self.inner.poll_interval)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> RedisQueue<T> {
    /// Connects to the queue `name` on the server at `url`, with the default
    /// settings of [`RedisQueueBuilder`].
    ///
    /// # Errors
    ///
    /// As [`RedisQueueBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::redis::RedisQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, name: &str) -> Result<Self, Error> {
        Self::builder(name).url(url).build().await
    }

    /// A builder for the queue `name`.
    pub fn builder(name: &str) -> RedisQueueBuilder<T> {
        RedisQueueBuilder::new(name)
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The server's clock (`TIME`), which decides what is due.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1/", "orders").await?;
    /// println!("the server's clock reads {:?}", orders.now().await?);
    /// # Ok(()) }
    /// ```
    pub async fn now(&self) -> Result<SystemTime, Error> {
        let invocation = self.inner.script(&SCRIPTS.now);
        let ms: i64 = self.inner.run(&invocation).await?;
        Ok(system_time(ms))
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        RedisQueue {
            inner: Arc::new(inner),
            _values: PhantomData,
        }
    }

    /// Inserts `value`, due `delay` from now (the server's now), under a new
    /// unique id, which it returns.
    ///
    /// Delays are rounded down to milliseconds; huge ones saturate. Inserts
    /// made on this handle (and its clones) while another is on its way
    /// wait for it and go to Redis together, in one script, each with its
    /// own answer (see [How it works](crate::redis#how-it-works)); now is
    /// then when that script runs.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if `value` does not serialize, [`Error::Redis`] if
    /// Redis cannot be reached; the queue is unchanged either way.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// let id = orders.insert(&17, Duration::from_secs(30 * 60)).await?;
    /// orders.remove(&id).await?; // paid in time
    /// # Ok(()) }
    /// ```
    pub async fn insert(&self, value: &T, delay: Duration) -> Result<String, Error> {
        self.put("", value, "d", millis(delay))
            .await
            .map(|(_, id)| id)
    }

    /// Inserts `value`, due at `at`, under a new unique id, which it returns.
    /// A time before the epoch is due at once.
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    pub async fn insert_at(&self, value: &T, at: SystemTime) -> Result<String, Error> {
        let at = at.duration_since(UNIX_EPOCH).map_or(0, millis);
        self.put("", value, "a", at).await.map(|(_, id)| id)
    }

    /// Inserts `value` under the caller's `id`, due `delay` from now. If an
    /// entry with this id is in the queue (pending, leased or dead), nothing
    /// changes and it returns `Ok(false)`, so a retried insert never
    /// duplicates.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an empty id or one over 512 bytes; otherwise
    /// as [`insert`](Self::insert).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// // A retried request inserts once.
    /// assert!(orders.insert_with_id("order-17", &17, Duration::from_secs(1800)).await?);
    /// assert!(!orders.insert_with_id("order-17", &17, Duration::from_secs(1800)).await?);
    /// # Ok(()) }
    /// ```
    pub async fn insert_with_id(
        &self,
        id: &str,
        value: &T,
        delay: Duration,
    ) -> Result<bool, Error> {
        check_id(id)?;
        self.put(id, value, "d", millis(delay))
            .await
            .map(|(inserted, _)| inserted)
    }

    /// One insert, sent alone or with the inserts of this handle made
    /// while another request of them is on its way (see
    /// `durable/batch.rs`).
    async fn put(
        &self,
        id: &str,
        value: &T,
        kind: &'static str,
        ms: u64,
    ) -> Result<(bool, String), Error> {
        let json = serde_json::to_string(value).map_err(Error::Encode)?;
        let put = Put {
            id: id.to_owned(),
            json,
            kind,
            ms,
            trace: crate::durable::trace::current(),
        };
        if put.json.len() >= ALONE_FROM {
            // It may be too large for the server, which then drops the
            // connection while reading the request: sent with others, or
            // beside them on one connection, it would fail them too.
            return self.inner.insert_apart(put).await;
        }
        let inner = Arc::clone(&self.inner);
        let send = move |puts: Vec<Put>| {
            let inner = Arc::clone(&inner);
            async move { inner.insert_batch(puts).await }
        };
        self.inner.inserts.call(put, send, lost_insert).await
    }

    /// Deletes the entry `id`, whether pending, leased or dead; `true` if it
    /// was there.
    ///
    /// `true` means the entry was there and is gone: it is never delivered
    /// again. It does not stop a handler already under way: a consumer that
    /// took the entry before (it was leased) may still be running its
    /// handler, whose [`ack`](crate::redis::Delivery::ack) then returns
    /// `Ok(false)`. A [`Worker`](crate::durable::Worker) drops such a handler
    /// at its next await once a lease extension finds the entry gone, which
    /// may be after the handler did its work. So guard the effect in the
    /// handler itself (expire an order only if it is still unpaid), not by
    /// `remove`'s answer.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], or [`Error::Redis`] if Redis cannot be reached.
    pub async fn remove(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        let mut invocation = self.inner.script(&SCRIPTS.remove);
        invocation.arg(id).arg("e");
        self.inner.identify(&mut invocation);
        // A leased entry's place of its key frees: announced when entries
        // of the key wait for one.
        invocation.arg(&self.inner.keys.channel);
        self.inner.run(&invocation).await
    }

    /// Moves the pending entry `id` to `delay` from now, ordered as if
    /// inserted now; `false` for an entry that is leased, dead or absent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], or [`Error::Redis`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// // The customer asked for more time.
    /// orders.reset("order-17", Duration::from_secs(3600)).await?;
    /// let due = orders.deadline("order-17").await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset(&self, id: &str, delay: Duration) -> Result<bool, Error> {
        check_id(id)?;
        let mut invocation = self.inner.script(&SCRIPTS.reset);
        invocation
            .arg(id)
            .arg(millis(delay))
            .arg(&self.inner.keys.channel);
        self.inner.identify(&mut invocation);
        invocation.arg("0"); // any pending entry, not only a tick
        self.inner.run(&invocation).await
    }

    /// When the entry `id` is due: its deadline while pending, the end of
    /// its lease while leased; `None` if it is absent or dead.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], or [`Error::Redis`] if Redis cannot be reached.
    pub async fn deadline(&self, id: &str) -> Result<Option<SystemTime>, Error> {
        check_id(id)?;
        let mut invocation = self.inner.script(&SCRIPTS.deadline);
        invocation.arg(id);
        let score: Option<i64> = self.inner.run(&invocation).await?;
        Ok(score.map(system_time))
    }

    /// Waits until an entry is due and takes it under a lease.
    ///
    /// # Errors
    ///
    /// Only for errors a retry cannot fix (authentication, a key of the
    /// wrong type); a lost connection is retried with capped back-off and
    /// reported through `tracing`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses no entry: an entry it had claimed but not
    /// returned is given back by the handle's next claim or finish (no
    /// attempt counted), or else delivered again when its lease runs out.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// loop {
    ///     let delivery = orders.take().await?;
    ///     println!("order {} expired", delivery.value());
    ///     delivery.ack().await?;
    /// }
    /// # }
    /// ```
    pub async fn take(&self) -> Result<Delivery<T>, Error> {
        let mut taken = self.take_until(1, None).await?;
        Ok(taken.pop().expect("an untimed take returns an entry"))
    }

    /// As [`take`](Self::take), giving up after `timeout` with `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub async fn take_timeout(&self, timeout: Duration) -> Result<Option<Delivery<T>>, Error> {
        let until = deadline_after(Instant::now(), timeout);
        let mut taken = self.take_until(1, Some(until)).await?;
        Ok(taken.pop())
    }

    /// Takes a due entry if there is one, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached, or anything
    /// [`take`](Self::take) reports.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// while let Some(expired) = orders.try_take().await? {
    ///     expired.ack().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_take(&self) -> Result<Option<Delivery<T>>, Error> {
        let mut pending = Abandon(&self.inner, Attempt::new());
        loop {
            let mut batch = Sealed::claim(self, &mut pending.1, 1, &[]).await?;
            if let Some(taken) = batch.taken.pop() {
                return Ok(Some(self.delivery(taken)));
            }
            if !batch.more_due {
                return Ok(None);
            }
            pending.1 = Attempt::new();
        }
    }

    /// Waits until at least one entry is due, then takes between 1 and `max`
    /// due entries, in order, in one round trip. `max == 0` returns an empty
    /// vector at once; one call takes at most 1024, however large `max` is.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// for expired in orders.take_many(16).await? {
    ///     println!("order {} expired", expired.value());
    ///     expired.ack().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn take_many(&self, max: usize) -> Result<Vec<Delivery<T>>, Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.take_until(max.min(MAX_BATCH), None).await
    }

    /// A stream of deliveries: [`take`](Self::take) in a loop. It never ends:
    /// an error is yielded and the stream goes on, after a pause that grows
    /// (20 ms, 40 ms, ... up to 1 s) while errors repeat.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take): dropping the stream (or a `next()` future)
    /// loses no entry.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// use futures::StreamExt;
    ///
    /// let mut expired = std::pin::pin!(orders.stream());
    /// while let Some(order) = expired.next().await {
    ///     order?.ack().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream(&self) -> impl Stream<Item = Result<Delivery<T>, Error>> + Send + 'static {
        let failing = Backoff::default();
        futures::stream::unfold((self.clone(), failing), |(queue, mut failing)| async move {
            if failing.failed() {
                // Not a busy loop on an error that the next take repeats.
                tokio::time::sleep(failing.next()).await;
            }
            let next = queue.take().await;
            match next {
                Ok(_) => failing.reset(),
                Err(_) => failing.fail(),
            }
            Some((next, (queue, failing)))
        })
    }

    /// Counts the queue's entries by state.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// let stats = orders.stats().await?;
    /// println!("{} pending, {} due, {} leased, {} dead", stats.pending, stats.due, stats.leased, stats.dead);
    /// # Ok(()) }
    /// ```
    pub async fn stats(&self) -> Result<RedisStats, Error> {
        let invocation = self.inner.script(&SCRIPTS.stats);
        let (pending, due, leased, dead): (u64, u64, u64, u64) =
            self.inner.run(&invocation).await?;
        Ok(RedisStats {
            pending,
            due,
            leased,
            dead,
        })
    }

    /// Up to `max` dead letters, oldest first. `value` is `None` for a value
    /// that no longer decodes as `T`.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn dead_letters(&self, max: usize) -> Result<Vec<DeadLetter<T>>, Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut invocation = self.inner.script(&SCRIPTS.dead_letters);
        invocation.arg(max.min(MAX_LIST));
        let rows: Vec<(String, Option<Vec<u8>>, u32, String)> = self.inner.run(&invocation).await?;
        Ok(rows
            .into_iter()
            .map(|(id, value, attempts, reason)| DeadLetter {
                id,
                value: value.and_then(|json| serde_json::from_slice(&json).ok()),
                attempts,
                reason,
            })
            .collect())
    }

    /// Puts the dead letter `id` back as pending, due `delay` from now, with
    /// its attempts reset to 0; `false` if there is no such dead letter.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], or [`Error::Redis`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// for letter in orders.dead_letters(100).await? {
    ///     println!("{} died after {} attempts: {}", letter.id, letter.attempts, letter.reason);
    ///     orders.requeue_dead(&letter.id, Duration::ZERO).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn requeue_dead(&self, id: &str, delay: Duration) -> Result<bool, Error> {
        check_id(id)?;
        let mut invocation = self.inner.script(&SCRIPTS.requeue_dead);
        invocation
            .arg(id)
            .arg(millis(delay))
            .arg(&self.inner.keys.channel);
        self.inner.identify(&mut invocation);
        invocation.arg("0"); // any pending entry, not only a tick
        self.inner.run(&invocation).await
    }

    /// Deletes every key of this queue: entries, leases, dead letters and
    /// schedules.
    ///
    /// The id sequence restarts too, so an entry inserted after a purge may
    /// get the id of one from before it; a delivery taken before the purge
    /// still cannot touch it (its lease belongs to its own claim's token,
    /// and tokens never repeat): its `ack`, `retry` and `extend` return
    /// `Ok(false)`.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn purge(&self) -> Result<(), Error> {
        let invocation = self.inner.script(&SCRIPTS.purge);
        let _deleted: i64 = self.inner.run(&invocation).await?;
        Ok(())
    }

    /// The consumers' loop: claims up to `max` entries, waiting between
    /// claims as leader or follower, until it has some or `until` passes.
    async fn take_until(
        &self,
        max: usize,
        until: Option<Instant>,
    ) -> Result<Vec<Delivery<T>>, Error> {
        let taken = crate::durable::take::take_until(self, max, until).await?;
        Ok(taken
            .into_iter()
            .map(|taken| self.delivery(taken))
            .collect())
    }

    fn delivery(&self, taken: Taken<T, Held>) -> Delivery<T> {
        Delivery::new(Arc::clone(&self.inner), taken)
    }

    /// The claimed entries whose values decode; the others are failed
    /// attempts (and cron ticks the claim marked are buried).
    pub(crate) async fn decoded(&self, claim: Claim) -> Vec<Taken<T, Held>> {
        let mut taken = Vec::with_capacity(claim.items.len());
        let mut buried = Vec::new();
        for claimed in claim.items {
            let Claimed {
                held,
                json,
                attempt,
                deadline,
                lease_until,
                bury,
                key,
                priority,
                trace,
            } = claimed;
            match crate::durable::ops::decode::<T>(bury, json.as_deref()) {
                Ok(value) => taken.push(Taken {
                    id: held.id.clone(),
                    schedule: held.tick.is_some().then(|| held.id.clone()),
                    value,
                    attempt,
                    deadline,
                    lease_until,
                    key,
                    priority,
                    trace,
                    lease: held,
                }),
                Err(refused) => {
                    tracing::warn!(queue = %self.inner.name, id = held.id, attempt,
                        reason = refused.reason(), "not handed out");
                    buried.push(refused.op(&held, attempt));
                }
            }
        }
        if !buried.is_empty() {
            if let Err(error) = self.inner.finish(&buried).await {
                // Their leases run out and the next claim tries again.
                tracing::warn!(queue = %self.inner.name, %error,
                    "could not move entries to the dead letters");
            }
        }
        taken
    }
}

/// Leaves a claim in doubt to the handle's next claim when dropped: a claim
/// whose reply was lost and that is not sent again gives back what it holds.
struct Abandon<'a>(&'a Inner, Attempt);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        let _ = self.0.abandon(&self.1);
    }
}

/// The most dead letters one call lists (an integer Lua keeps exact).
const MAX_LIST: usize = 1 << 31;

/// The error of an insert whose request could not be sent or whose answer
/// was lost (it may have applied).
fn lost_insert() -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::other(
        "the request carrying this insert was lost; it may have applied",
    )))
}
