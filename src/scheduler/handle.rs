//! [`JobHandle`]: await, cancel and inspect one scheduled job.

use super::error::JobError;
use super::job::Control;
use super::pool::Pool;
use crate::queue::Key;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// A handle to one job scheduled on a [`Scheduler`](crate::Scheduler).
///
/// Awaiting it yields the job's output (`()` for periodic jobs, once they
/// end), or a [`JobError`] if the job was cancelled or panicked. Dropping it
/// detaches: the job still runs. It is not a handle to the scheduler: holding
/// one does not keep the scheduler from shutting down when its last
/// `Scheduler` handle is dropped.
///
/// # Panics
///
/// Polling the handle again after it returned its result panics.
///
/// # Examples
///
/// ```
/// use punctual::Scheduler;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::new(2);
/// let reminder = scheduler
///     .schedule(Duration::from_secs(7 * 86_400), async { "send the reminder" })
///     .unwrap();
/// assert!(reminder.next_run().is_some());
///
/// // The user acted in time: the reminder is dropped from the queue at once.
/// assert!(reminder.cancel());
/// assert!(reminder.await.unwrap_err().is_cancelled());
/// assert_eq!(scheduler.stats().pending, 0);
/// # }
/// ```
pub struct JobHandle<T> {
    job: Arc<dyn Control<T>>,
    pool: Arc<Pool>,
    /// The slot index of the job's first queue key (`u32::MAX` if none):
    /// only a hint for warming the cache (see `warm`); a later run's key,
    /// or a slot reused since, makes it useless, never wrong.
    slot_hint: u32,
}

impl<T> JobHandle<T> {
    pub(crate) fn new(job: Arc<dyn Control<T>>, pool: Arc<Pool>, key: Option<Key>) -> Self {
        JobHandle {
            job,
            pool,
            slot_hint: key.map_or(u32::MAX, Key::slot_index),
        }
    }

    /// Reads the job and its queue slot at once, before a cancel locks and
    /// reads them one after the other: the two cache misses of a job long
    /// queued (among a million, say) then cost about one.
    fn warm(&self) {
        self.pool.queue.warm(self.slot_hint, || self.job.id());
    }

    /// Cancels the job if it has not started: it is removed from the queue
    /// by its key at once (O(log n)) and the handle resolves to
    /// [`JobError::Cancelled`]. On a periodic job it also prevents every
    /// later run; a run in progress may finish, then the handle resolves to
    /// `Err(JobError::Cancelled)`.
    ///
    /// Returns `true` if this call cancelled the job. A one-shot job that
    /// already started cannot be cancelled (it completes normally; see
    /// [`abort`](JobHandle::abort)), and cancelling a finished job returns
    /// `false` and changes nothing. A job may cancel itself.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// let job = scheduler.schedule(Duration::from_secs(60), async {}).unwrap();
    /// assert!(job.cancel());
    /// assert!(!job.cancel(), "already cancelled");
    /// assert!(job.is_cancelled());
    /// # }
    /// ```
    pub fn cancel(&self) -> bool {
        self.warm();
        self.job.cancel(&self.pool, false)
    }

    /// Does what [`cancel`](JobHandle::cancel) does, and also stops a run in
    /// progress (one-shot or periodic) at its next await point: the code
    /// after that point never runs, and the handle resolves to
    /// `Err(JobError::Cancelled)`. Returns `true` if this call cancelled the
    /// job; aborting a finished job returns `false` and changes nothing.
    ///
    /// Once `abort` returned `true`, the handle resolves to
    /// `Err(JobError::Cancelled)` even if the run returned before reaching
    /// another await point (a job aborting itself, say): its output is
    /// discarded.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// let job = scheduler
    ///     .schedule(Duration::ZERO, async {
    ///         tokio::time::sleep(Duration::from_secs(3600)).await;
    ///         unreachable!("aborted at the sleep");
    ///     })
    ///     .unwrap();
    /// tokio::time::sleep(Duration::from_millis(1)).await; // let it start
    /// assert!(job.abort());
    /// assert!(job.await.unwrap_err().is_cancelled());
    /// # }
    /// ```
    pub fn abort(&self) -> bool {
        self.warm();
        self.job.cancel(&self.pool, true)
    }

    /// Whether the job was cancelled or aborted (by its handle, a shutdown
    /// policy or `shutdown_now`). True as soon as `cancel` or `abort`
    /// succeeded, even while a run in progress is finishing.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// let job = scheduler.schedule(Duration::from_secs(1), async {}).unwrap();
    /// assert!(!job.is_cancelled());
    /// job.cancel();
    /// assert!(job.is_cancelled());
    /// # }
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.job.is_cancelled()
    }

    /// Whether the job is over: completed, cancelled or panicked. A periodic
    /// job is over only once cancelled or panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// let job = scheduler.schedule(Duration::from_secs(1), async { 42 }).unwrap();
    /// assert!(!job.is_finished());
    /// tokio::time::sleep(Duration::from_secs(2)).await;
    /// assert!(job.is_finished());
    /// assert_eq!(job.await.unwrap(), 42);
    /// # }
    /// ```
    pub fn is_finished(&self) -> bool {
        self.job.end().is_some()
    }

    /// The deadline of the job's pending run (JDK `getDelay`): `None` while a
    /// run is in progress, and once the job is finished or cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// let start = Instant::now();
    /// let job = scheduler
    ///     .schedule_at_fixed_rate(Duration::from_secs(1), Duration::from_secs(10), || async {})
    ///     .unwrap();
    /// assert_eq!(job.next_run(), Some(start + Duration::from_secs(1)));
    /// tokio::time::sleep(Duration::from_secs(2)).await;
    /// assert_eq!(job.next_run(), Some(start + Duration::from_secs(11)));
    /// # }
    /// ```
    pub fn next_run(&self) -> Option<Instant> {
        self.job.next_run(&self.pool)
    }

    /// How many runs completed (a panicked or aborted run is not counted).
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// let job = scheduler
    ///     .schedule_with_fixed_delay(Duration::ZERO, Duration::from_secs(1), || async {})
    ///     .unwrap();
    /// tokio::time::sleep(Duration::from_millis(2500)).await;
    /// assert_eq!(job.runs(), 3);
    /// # }
    /// ```
    pub fn runs(&self) -> u64 {
        self.job.runs()
    }
}

impl<T> Future for JobHandle<T> {
    type Output = Result<T, JobError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.job.poll_result(cx)
    }
}

impl<T> Drop for JobHandle<T> {
    fn drop(&mut self) {
        // Detaching: the job goes on, and its result, when there is one, is
        // dropped by the scheduler (panics contained) rather than by
        // whichever owner of the job happens to let go of it last.
        self.job.detach();
    }
}

impl<T> fmt::Debug for JobHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobHandle")
            .field("id", &self.job.id())
            .field("end", &self.job.end())
            .field("runs", &self.job.runs())
            .finish()
    }
}
