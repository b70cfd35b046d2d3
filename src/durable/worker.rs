//! [`Worker`]: runs a handler for each due entry of a durable queue; the
//! task doing the work is the engine (`engine.rs`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Durable;
use super::backoff::Backoff;
use super::engine::Engine;
use super::job::Job;
use super::outcome::Outcome;

/// Runs a handler for each due entry of a durable queue, at most
/// `concurrency` at once, keeping their leases alive and finishing each by
/// its outcome; made by [`Worker::builder`].
///
/// `Ok(())` acks the entry. `Err(e)`, a panic, or a run longer than
/// [`timeout`](WorkerBuilder::timeout) is a failed attempt: retried after
/// [`Backoff::delay`]`(attempt)`, or moved to the dead letters with `e`'s
/// `Display` (the panic message, or "timed out after ...") as its reason
/// once the queue's `max_attempts` is reached. A panic never takes the
/// worker down. While a handler runs, the worker extends its lease every
/// third of the queue's lease (all of its leases in one request); a handler
/// whose lease was lost (the entry was removed, or delivered elsewhere
/// after the worker could not reach the store in time) is dropped at its
/// next await and its outcome discarded. The handler's own task checks,
/// on every poll, that its lease is still surely held and that it has not
/// run longer than `timeout`, so neither depends on the worker's own task
/// being scheduled in time on a busy runtime; a handler that returns after
/// its timeout, even without awaiting, has failed. Each run is inside a `tracing`
/// span `punctual.run` (queue, id, attempt, schedule, and OpenTelemetry's
/// `messaging.*` attributes; with the feature `opentelemetry`, its parent is
/// the trace of the insert); failures and lost
/// leases are events.
///
/// The worker claims in batches, as many entries as it has free places (an
/// entry it could not start at once is left to another replica). On Redis
/// it sends the outcomes of finished runs with its next claim, one round
/// trip per batch when busy; on PostgreSQL it sends them in a request of
/// their own beside the next claim, so that the claim need not wait for
/// their writes.
///
/// Dropping the `Worker` detaches it: it keeps running on the runtime.
/// [`shutdown`](Self::shutdown) stops it.
///
/// # Examples
///
/// ```no_run
/// use punctual::durable::{Backoff, Worker};
/// use punctual::redis::RedisQueue;
/// use std::time::Duration;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), punctual::redis::Error> {
/// let reminders: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "reminders").await?;
/// let worker = Worker::builder(reminders.clone())
///     .concurrency(8)
///     .backoff(Backoff::exponential(Duration::from_secs(5)).max(Duration::from_secs(600)))
///     .timeout(Duration::from_secs(60))
///     .spawn(|job| async move {
///         println!("remind {} (attempt {})", job.value(), job.attempt());
///         Ok::<(), std::io::Error>(())
///     });
/// reminders.insert(&"alice@example.com".to_owned(), Duration::from_secs(3600)).await?;
/// // ... on SIGTERM:
/// let stats = worker.shutdown(Duration::from_secs(10)).await;
/// println!("{} runs acked", stats.completed);
/// # Ok(()) }
/// ```
pub struct Worker {
    counters: Arc<Counters>,
    stop: watch::Sender<Option<Duration>>,
    /// Set by the engine when `shutdown` may return.
    answered: watch::Receiver<bool>,
    engine: JoinHandle<()>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Counts of a [`Worker`]'s runs, from [`Worker::stats`] and
/// [`Worker::shutdown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Handlers running now.
    pub running: usize,
    /// Runs acked.
    pub completed: u64,
    /// Failed attempts (`Err`, panic, timeout), those that dead-lettered
    /// included.
    pub failed: u64,
    /// Entries this worker moved to the dead letters.
    pub dead: u64,
    /// Runs dropped (or whose outcome was discarded) because their lease
    /// was lost. A run dropped at shutdown counts in none.
    pub lost: u64,
}

/// The counts behind [`WorkerStats`], written by the engine alone.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) running: AtomicUsize,
    pub(super) completed: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) dead: AtomicU64,
    pub(super) lost: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            running: self.running.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }

    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Worker {
    /// A builder of a worker for `queue` (any durable queue: a
    /// `RedisQueue` or `PgQueue` clone, for instance).
    pub fn builder<Q: Durable>(queue: Q) -> WorkerBuilder<Q> {
        WorkerBuilder {
            queue,
            concurrency: 16,
            backoff: Backoff::default(),
            timeout: None,
            name: None,
            prefetch: 0,
        }
    }

    /// The worker's counts now.
    pub fn stats(&self) -> WorkerStats {
        self.counters.snapshot()
    }

    /// Stops the worker: it stops taking at once and gives back the entries
    /// taken but not started (no attempt counted); running handlers may
    /// finish within `grace` (acked or retried as usual); the rest are then
    /// dropped at their next await and their entries given back due at once
    /// (that attempt counts). Returns the final stats as soon as no handler
    /// runs and what it held is back, and by `grace` at the latest (plus a
    /// tenth of a second for dropped handlers to end and their give-backs
    /// to land), even when the store cannot be reached: what is still on
    /// its way then goes on in the background, and what cannot be given
    /// back comes back after its lease.
    ///
    /// A handler that cannot be dropped (it blocks its thread and never
    /// reaches an await) is still counted in `running` when this returns;
    /// its lease keeps being extended in the background until its task
    /// ends, then its entry is given back (or acked, if it returned `Ok`):
    /// it is never handed to another consumer while it runs.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the shutdown: the worker goes on
    /// with it in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::durable::Worker;
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let queue: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
    /// let worker = Worker::builder(queue).spawn(|_job| async { Ok::<(), String>(()) });
    /// tokio::signal::ctrl_c().await.ok();
    /// let stats = worker.shutdown(Duration::from_secs(30)).await;
    /// assert_eq!(stats.running, 0);
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(mut self, grace: Duration) -> WorkerStats {
        self.stop.send_replace(Some(grace));
        // An error: the engine has ended (or its runtime is going away).
        let _ = self.answered.wait_for(|answered| *answered).await;
        // The engine goes on in the background with what is left: dropping
        // the handle detaches it.
        drop(self.engine);
        self.counters.snapshot()
    }
}

/// Configures and spawns a [`Worker`]; made by [`Worker::builder`].
pub struct WorkerBuilder<Q> {
    queue: Q,
    concurrency: usize,
    backoff: Backoff,
    timeout: Option<Duration>,
    name: Option<String>,
    prefetch: usize,
}

impl<Q: fmt::Debug> fmt::Debug for WorkerBuilder<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("queue", &self.queue)
            .field("concurrency", &self.concurrency)
            .field("backoff", &self.backoff)
            .field("timeout", &self.timeout)
            .field("name", &self.name)
            .field("prefetch", &self.prefetch)
            .finish()
    }
}

impl<Q: Durable> WorkerBuilder<Q> {
    /// How many handlers run at once; default 16. The worker claims as
    /// many entries as it has free places (at most 1024 per claim).
    ///
    /// # Panics
    ///
    /// Panics if `n` is zero.
    #[track_caller]
    pub fn concurrency(mut self, n: usize) -> Self {
        assert!(n > 0, "`concurrency` must be greater than zero");
        self.concurrency = n;
        self
    }

    /// The delay before a failed entry's next attempt; default
    /// `Backoff::exponential(1 s).max(1 h).jitter(true)`.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// A run longer than `limit` fails (it is dropped at its next await,
    /// with the reason "timed out after `limit`"); default none.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// While a backlog lasts, claim up to `n` entries beyond the free
    /// places, so that one round trip (one commit, on PostgreSQL) carries
    /// many jobs; default 0: a worker claims as many entries as it has free
    /// places, and an entry it could not start at once is left to another
    /// replica. Entries claimed ahead are leased to this worker (their
    /// leases extended with the runs'), started as places free, never once
    /// their lease may have run out, and given back at once by a shutdown;
    /// a crash leaves them to come back after their lease, as any lease.
    /// Raise it where many jobs wait and the store's round trip, not the
    /// handlers, bounds the drain; keep it at 0 where replicas should
    /// share a short queue evenly.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::durable::Worker;
    /// use punctual::memory::MemoryQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let imports: MemoryQueue<u64> = MemoryQueue::new("imports");
    /// let worker = Worker::builder(imports)
    ///     .concurrency(8)
    ///     .prefetch(64)
    ///     .spawn(|_job| async { Ok::<(), String>(()) });
    /// # worker.shutdown(std::time::Duration::ZERO).await;
    /// # }
    /// ```
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n.min(crate::durable::store::MAX_CLAIM);
        self
    }

    /// A label for the worker, shown by the queue's `workers()` (and the
    /// dashboard) beside its host and process id; default none.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::durable::Worker;
    /// use punctual::memory::MemoryQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let mail: MemoryQueue<String> = MemoryQueue::new("mail");
    /// let worker = Worker::builder(mail.clone())
    ///     .name("mailer")
    ///     .spawn(|_job| async { Ok::<(), String>(()) });
    /// tokio::time::sleep(Duration::from_millis(10)).await;
    /// let workers = mail.workers().await?;
    /// assert_eq!(workers[0].name.as_deref(), Some("mailer"));
    /// # worker.shutdown(Duration::ZERO).await;
    /// # Ok(()) }
    /// ```
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Starts the worker on the current Tokio runtime, running `handler`
    /// for each due entry.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime.
    #[track_caller]
    pub fn spawn<H, Fut>(self, handler: H) -> Worker
    where
        H: Fn(Job<Q::Item>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Into<Outcome>,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            panic!("`WorkerBuilder::spawn` must be called inside a Tokio runtime");
        };
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = watch::channel(None);
        let (answer, answered) = watch::channel(false);
        #[cfg(feature = "metrics")]
        let queue = self.queue.clone();
        let engine = Engine::new(
            self.queue,
            handler,
            self.concurrency,
            self.backoff,
            self.timeout,
            self.name,
            self.prefetch,
            Arc::clone(&counters),
            stopped,
            answer,
        );
        #[cfg(feature = "metrics")]
        runtime.spawn(report_entries(queue, answered.clone()));
        Worker {
            counters,
            stop,
            answered,
            engine: runtime.spawn(engine.run()),
        }
    }
}

/// Reports the queue's counts (`punctual.queue.entries`) every
/// [`STATS_EVERY`](super::metrics::STATS_EVERY) while the worker runs (until
/// its shutdown has answered, or its engine has ended).
#[cfg(feature = "metrics")]
async fn report_entries<Q: Durable>(queue: Q, mut answered: watch::Receiver<bool>) {
    loop {
        match queue.stats().await {
            Ok(stats) => super::metrics::entries(queue.store_kind(), queue.queue_name(), &stats),
            Err(error) => tracing::debug!(queue = queue.queue_name(), %error,
                "could not read the queue's counts for metrics"),
        }
        tokio::select! {
            _ = tokio::time::sleep(super::metrics::STATS_EVERY) => {}
            changed = answered.wait_for(|answered| *answered) => {
                let _ = changed;
                return;
            }
        }
    }
}
