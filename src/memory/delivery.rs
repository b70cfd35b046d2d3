//! [`Delivery`]: one entry of a memory queue handed to one consumer under a
//! lease.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::clock::system_time;
use super::error::Error;
use super::inner::Inner;
use super::state::Rules;
use crate::durable::ops::{Held, Op};
use crate::durable::store::{Applied, Taken};

/// An entry taken from a [`MemoryQueue`](super::MemoryQueue), leased to this
/// consumer until [`lease_until`](Self::lease_until).
///
/// Finish with [`ack`](Self::ack) (done) or [`retry`](Self::retry) (give it
/// back). Dropped without either, the entry stays leased until its lease
/// runs out, then is delivered again with `attempt + 1`.
pub struct Delivery<T> {
    queue: Arc<Inner>,
    /// The taking handle's rules of death.
    rules: Rules,
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
    pub(crate) fn new(queue: Arc<Inner>, rules: Rules, taken: Taken<T, Held>) -> Self {
        Delivery {
            queue,
            rules,
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
    /// the queue's clock.
    pub fn deadline(&self) -> SystemTime {
        self.deadline
    }

    /// When the lease runs out, by the queue's clock.
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
    /// None in memory; `Result` keeps the signature of every store.
    ///
    /// # Examples
    ///
    /// ```
    /// # use punctual::memory::MemoryQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let orders: MemoryQueue<u64> = MemoryQueue::new("orders");
    /// orders.insert(&17, Duration::from_secs(1800)).await?;
    /// let expired = orders.take().await?;
    /// assert!(expired.ack().await?);
    /// # Ok(()) }
    /// ```
    pub async fn ack(self) -> Result<bool, Error> {
        Ok(self.finish(&Op::ack(&self.held)))
    }

    fn finish(&self, op: &Op) -> bool {
        let done = self.queue.finish(std::slice::from_ref(op), self.rules);
        done.first()
            .is_some_and(|applied| *applied != Applied::Lost)
    }

    /// Gives the entry back, due `delay` from now (ordered as if inserted
    /// then), keeping its attempt count. `Ok(false)` if the lease was lost.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn retry(self, delay: Duration) -> Result<bool, Error> {
        Ok(self.finish(&Op::retry(&self.held, delay)))
    }

    /// Pushes the end of the lease to `lease` from now, if the lease is still
    /// held; `Ok(false)` if it was lost.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn extend(&mut self, lease: Duration) -> Result<bool, Error> {
        let ends = self.queue.extend(&[&self.held], lease);
        match ends.first().copied().flatten() {
            Some(until) => {
                self.lease_until = system_time(until);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
