//! [`MemoryQueueBuilder`]: the memory queue's settings.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::clock::Clock;
use super::inner::Inner;
use super::queue::MemoryQueue;
use super::state::Rules;

/// Builds a [`MemoryQueue`]: `MemoryQueue::builder(name)`, then the
/// settings, then [`build`](Self::build).
pub struct MemoryQueueBuilder<T> {
    name: String,
    lease: Duration,
    max_attempts: u32,
    dead_max_age: Option<Duration>,
    dead_max_count: Option<u64>,
    keep_results: Duration,
    start_at: Option<SystemTime>,
    /// The queue to join, instead of making one.
    join: Option<Arc<Inner>>,
    _values: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for MemoryQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryQueueBuilder")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("max_attempts", &self.max_attempts)
            .field("dead_max_age", &self.dead_max_age)
            .field("dead_max_count", &self.dead_max_count)
            .field("keep_results", &self.keep_results)
            .field("start_at", &self.start_at)
            .field("joins", &self.join.is_some())
            .finish()
    }
}

impl<T> MemoryQueueBuilder<T> {
    pub(crate) fn new(name: &str) -> Self {
        MemoryQueueBuilder {
            name: name.to_owned(),
            lease: Duration::from_secs(30),
            max_attempts: 10,
            dead_max_age: None,
            dead_max_count: None,
            keep_results: Duration::ZERO,
            start_at: None,
            join: None,
            _values: PhantomData,
        }
    }

    /// How long a taken entry stays leased before it is delivered again;
    /// default 30 s.
    ///
    /// # Panics
    ///
    /// If `lease` is zero.
    #[track_caller]
    pub fn lease(mut self, lease: Duration) -> Self {
        assert!(
            !lease.is_zero(),
            "MemoryQueueBuilder::lease: the lease must not be zero"
        );
        self.lease = lease;
        self
    }

    /// Deliveries before an entry goes to the dead letters; default 10; 0
    /// never dead-letters.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Dead letters older than `age` are deleted right after each death
    /// through this handle; default: kept whatever their age.
    pub fn dead_max_age(mut self, age: Duration) -> Self {
        self.dead_max_age = Some(age);
        self
    }

    /// How long the result of an entry that finished through this handle
    /// (acked, dead-lettered, cancelled) is kept for `result` and `wait`;
    /// default 0: nothing is kept once an entry finishes.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::durable::Finished;
    /// use punctual::memory::MemoryQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let jobs: MemoryQueue<u64> = MemoryQueue::builder("jobs")
    ///     .keep_results(Duration::from_secs(24 * 3600))
    ///     .build();
    /// let id = jobs.insert(&7, Duration::ZERO).await?;
    /// jobs.take().await?.ack().await?;
    /// assert_eq!(jobs.result(&id).await?.unwrap().state, Finished::Done);
    /// # Ok(()) }
    /// ```
    pub fn keep_results(mut self, for_: Duration) -> Self {
        self.keep_results = for_;
        self
    }

    /// At most `n` dead letters are kept, the oldest deleted first, right
    /// after each death through this handle; default: no limit.
    pub fn dead_max_count(mut self, n: u64) -> Self {
        self.dead_max_count = Some(n);
        self
    }

    /// The time the queue's clock reads when it is built (default: the
    /// system's clock then). From there it moves with Tokio's clock, so a
    /// test under paused time starts at a chosen moment, such as the night
    /// before a change of daylight saving time.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::memory::MemoryQueue;
    /// use std::time::{Duration, SystemTime, UNIX_EPOCH};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 2026-10-24 22:00 UTC, the evening before Europe/Berlin falls back.
    /// let evening = UNIX_EPOCH + Duration::from_secs(1_792_879_200);
    /// let jobs: MemoryQueue<String> = MemoryQueue::builder("jobs").start_at(evening).build();
    /// assert_eq!(jobs.now().await.unwrap(), evening);
    /// tokio::time::sleep(Duration::from_secs(3600)).await;
    /// assert_eq!(jobs.now().await.unwrap(), evening + Duration::from_secs(3600));
    /// # }
    /// ```
    pub fn start_at(mut self, at: SystemTime) -> Self {
        self.start_at = Some(at);
        self
    }

    /// Builds a handle to `queue`'s queue (its entries, schedules, waiting
    /// consumers and clock; `start_at` is then ignored) rather than a new
    /// queue, with this builder's `lease`, `max_attempts` and retention for the calls
    /// made through it, as on the other stores two replicas with different
    /// settings share one queue. Its value type may differ too (see
    /// [`MemoryQueue::typed`]).
    ///
    /// # Panics
    ///
    /// [`build`](Self::build) panics if this builder's name is not `queue`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::memory::MemoryQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let patient: MemoryQueue<u64> = MemoryQueue::new("jobs");
    /// let strict: MemoryQueue<u64> = MemoryQueue::builder("jobs").max_attempts(1).join(&patient).build();
    /// patient.insert(&1, Duration::ZERO).await?;
    /// assert_eq!(strict.stats().await?.due, 1);
    /// # Ok(()) }
    /// ```
    pub fn join<U>(mut self, queue: &MemoryQueue<U>) -> Self {
        self.join = Some(Arc::clone(queue.inner()));
        self
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> MemoryQueueBuilder<T> {
    /// The queue. Two queues built with the same name are two queues: a
    /// queue is its handle and that handle's clones.
    ///
    /// # Panics
    ///
    /// If the name breaks the queue-name rules every store keeps (empty,
    /// over 512 bytes, a brace or a NUL character): a caller's bug, since
    /// no I/O can fail here; and if called outside a Tokio runtime.
    #[track_caller]
    pub fn build(self) -> MemoryQueue<T> {
        if let Some(why) = crate::durable::rules::name_problem(&self.name) {
            panic!("MemoryQueue: invalid queue name: {why}");
        }
        let rules = Rules {
            limit: self.max_attempts,
            dead_max_age: self.dead_max_age.map(crate::durable::ops::millis),
            dead_max_count: self.dead_max_count,
            keep: crate::durable::ops::millis(self.keep_results),
        };
        if let Some(inner) = self.join {
            assert!(
                inner.name == self.name,
                "MemoryQueueBuilder::join: the builder's name `{}` is not the joined queue's `{}`",
                self.name,
                inner.name
            );
            return MemoryQueue::from_parts(inner, self.lease, rules);
        }
        if tokio::runtime::Handle::try_current().is_err() {
            panic!("MemoryQueueBuilder::build must be called inside a Tokio runtime");
        }
        // The one reading of the system's clock: the queue's clock starts
        // there and moves with Tokio's (paused time included).
        let start = tokio::time::Instant::now();
        #[allow(clippy::disallowed_methods)]
        let at = self.start_at.unwrap_or_else(SystemTime::now);
        let inner = Arc::new(Inner::new(self.name, Clock::new(start, at)));
        MemoryQueue::from_parts(inner, self.lease, rules)
    }
}
