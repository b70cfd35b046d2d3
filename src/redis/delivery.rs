//! [`Delivery`]: one entry handed to one consumer under a lease.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::error::Error;
use super::inner::{Held, Inner, Op};
use crate::durable::store::{Applied, Taken};

/// An entry taken from a [`RedisQueue`](super::RedisQueue), leased to this
/// consumer until [`lease_until`](Self::lease_until).
///
/// Finish with [`ack`](Self::ack) (done) or [`retry`](Self::retry) (give it
/// back). Dropped without either, the entry stays leased until its lease
/// runs out, then is delivered again with `attempt + 1`.
pub struct Delivery<T> {
    queue: Arc<Inner>,
    held: Held,
    attempt: u32,
    value: T,
    deadline: SystemTime,
    lease_until: SystemTime,
    key: Option<String>,
    priority: i16,
}

impl<T: fmt::Debug> fmt::Debug for Delivery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.held.id)
            .field("value", &self.value)
            .field("attempt", &self.attempt)
            .field("deadline", &self.deadline)
            .field("lease_until", &self.lease_until)
            .field("key", &self.key)
            .field("priority", &self.priority)
            .finish()
    }
}

impl<T> Delivery<T> {
    pub(crate) fn new(queue: Arc<Inner>, taken: Taken<T, Held>) -> Self {
        Delivery {
            queue,
            held: taken.lease,
            attempt: taken.attempt,
            value: taken.value,
            deadline: taken.deadline,
            lease_until: taken.lease_until,
            key: taken.key,
            priority: taken.priority,
        }
    }

    /// The entry's id.
    pub fn id(&self) -> &str {
        &self.held.id
    }

    /// The entry's value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The value, giving up this handle on the lease: the entry stays leased
    /// until the lease runs out, then is delivered again.
    pub fn into_value(self) -> T {
        self.value
    }

    /// Which delivery of the entry this is: 1 on the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the entry was due (for a re-delivery: when the previous lease
    /// ran out; for a schedule's tick: its instant, on every attempt), by
    /// the server's clock.
    pub fn deadline(&self) -> SystemTime {
        self.deadline
    }

    /// When the lease runs out, by the server's clock.
    pub fn lease_until(&self) -> SystemTime {
        self.lease_until
    }

    /// The key whose limits the entry runs under, if it has one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The entry's priority (0 by default).
    pub fn priority(&self) -> i16 {
        self.priority
    }

    /// Deletes the entry: the work is done. `Ok(false)` if the lease was
    /// lost (the entry was delivered again, removed or dead-lettered); then
    /// nothing changes.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached or its reply did not come
    /// in time; then the ack may or may not have happened (if not, the entry
    /// is delivered again after its lease).
    ///
    /// # Cancel safety
    ///
    /// Dropped before it finished, the ack may or may not have happened; if
    /// not, the entry is delivered again after its lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// let expired = orders.take().await?;
    /// // ... release the order's stock ...
    /// if !expired.ack().await? {
    ///     // The lease was lost: another consumer has (or had) this order too.
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn ack(self) -> Result<bool, Error> {
        self.finish(Op::ack(&self.held)).await
    }

    async fn finish(&self, op: Op) -> Result<bool, Error> {
        let done = self.queue.finish(std::slice::from_ref(&op)).await?;
        Ok(done
            .first()
            .is_some_and(|applied| *applied != Applied::Lost))
    }

    /// Gives the entry back, due `delay` from now (ordered as if inserted
    /// then), keeping its attempt count. `Ok(false)` if the lease was lost.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached or its reply did not come
    /// in time; then the retry may or may not have happened.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it finished, the retry may or may not have happened;
    /// if not, the entry is delivered again after its lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// let expired = orders.take().await?;
    /// // The stock service is down: try again in a minute.
    /// expired.retry(Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn retry(self, delay: Duration) -> Result<bool, Error> {
        self.finish(Op::retry(&self.held, delay)).await
    }

    /// Pushes the end of the lease to `lease` from now, if the lease is still
    /// held; `Ok(false)` if it was lost.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached or its reply did not come
    /// in time; then the lease may or may not have been extended, and
    /// [`lease_until`](Self::lease_until) keeps the old end.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it finished, the lease may or may not have been
    /// extended; [`lease_until`](Self::lease_until) keeps the old end.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let orders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1:6379/", "orders").await?;
    /// let mut expired = orders.take().await?;
    /// // A long job: keep the lease while working.
    /// if !expired.extend(Duration::from_secs(60)).await? {
    ///     return Ok(()); // lost: someone else has it now
    /// }
    /// expired.ack().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&mut self, lease: Duration) -> Result<bool, Error> {
        let ends = self.queue.extend(&[&self.held], lease).await?;
        match ends.first().copied().flatten() {
            Some(until) => {
                self.lease_until = until;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
