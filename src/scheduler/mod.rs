//! The scheduled executor: worker tasks taking jobs from a `DelayQueue`.

mod cleanup;
mod error;
mod handle;
mod job;
mod pool;
mod stats;

pub use error::{JobError, ScheduleError};
pub use handle::JobHandle;
pub use stats::Stats;

use crate::queue::deadline_after;
use job::{Job, Once, Periodic, Work};
use pool::{Config, Pool};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A pool of worker tasks that run one-shot and periodic jobs at their
/// deadlines (JDK `ScheduledThreadPoolExecutor`).
///
/// Jobs wait in a [`DelayQueue`](crate::DelayQueue); each worker takes the
/// next due job and runs it to completion, so the number of workers bounds
/// how many jobs run at once. Jobs run in deadline order, equal deadlines in
/// submission order. Periodic jobs are put back in the queue by the worker
/// after each run, so runs of one job never overlap.
///
/// A pending job costs one heap entry and one small allocation, not a task:
/// a million pending timeouts are cheap. A panicking job never takes a worker
/// down: its handle gets [`JobError::Panicked`], [`Stats::panicked`] counts
/// it, and a `tracing` error event records it.
///
/// A job that awaits another job's handle holds its worker while it waits:
/// with one worker, or every worker doing so, that wait never ends.
///
/// `Scheduler` is a handle: clones share the pool. Dropping the last one
/// shuts the pool down gracefully, as [`shutdown`](Scheduler::shutdown)
/// does. (A job that holds a clone keeps the pool alive.)
///
/// # Examples
///
/// ```
/// use punctual::Scheduler;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::new(4);
/// let answer = scheduler.schedule(Duration::from_secs(30), async { 6 * 7 }).unwrap();
/// let heartbeat = scheduler
///     .schedule_at_fixed_rate(Duration::from_secs(5), Duration::from_secs(10), || async {
///         // ping the upstream
///     })
///     .unwrap();
///
/// assert_eq!(answer.await.unwrap(), 42);
/// assert_eq!(heartbeat.runs(), 3); // at 5 s, 15 s and 25 s
///
/// scheduler.shutdown(); // periodic jobs are cancelled by default
/// scheduler.terminated().await;
/// assert!(heartbeat.await.unwrap_err().is_cancelled());
/// # }
/// ```
#[derive(Clone)]
pub struct Scheduler {
    owner: Arc<Owner>,
}

/// Shared by the `Scheduler` handles only (not by workers or job handles):
/// when the last handle goes, the pool shuts down.
struct Owner {
    pool: Arc<Pool>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.pool.shutdown();
    }
}

/// Configures and starts a [`Scheduler`]; returned by
/// [`Scheduler::builder`].
///
/// # Examples
///
/// ```
/// use punctual::Scheduler;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::builder()
///     .workers(2)
///     .run_delayed_after_shutdown(false)
///     .continue_periodic_after_shutdown(false)
///     .build();
/// # drop(scheduler);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    workers: Option<usize>,
    config: Config,
}

impl Builder {
    /// How many worker tasks run jobs; at most this many jobs run at once.
    /// Defaults to [`std::thread::available_parallelism`] (1 if unknown).
    ///
    /// # Panics
    ///
    /// Panics if `n` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::builder().workers(8).build();
    /// # drop(scheduler);
    /// # }
    /// ```
    #[track_caller]
    pub fn workers(mut self, n: usize) -> Self {
        assert!(n > 0, "the number of workers `n` must be at least 1, got 0");
        self.workers = Some(n);
        self
    }

    /// Whether one-shot jobs still pending at [`Scheduler::shutdown`] run at
    /// their deadline (`true`, the default), or those not yet due are
    /// cancelled (`false`).
    ///
    /// ```text
    /// jobs due at:          A(t1)      B(t3)
    /// shutdown at t2:  ---t1----t2------t3---->
    /// true (default):      A runs     B runs at t3, then workers exit
    /// false:               A runs     B cancelled at t2, workers exit at t2
    /// ```
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::builder().run_delayed_after_shutdown(false).build();
    /// let job = scheduler.schedule(Duration::from_secs(60), async {}).unwrap();
    /// scheduler.shutdown();
    /// assert!(job.is_cancelled());
    /// # }
    /// ```
    pub fn run_delayed_after_shutdown(mut self, yes: bool) -> Self {
        self.config.run_delayed = yes;
        self
    }

    /// Whether periodic jobs keep running after [`Scheduler::shutdown`]
    /// (`true`), or are cancelled (`false`, the default). A run in progress
    /// at shutdown finishes either way; with `false` it is the last.
    ///
    /// ```text
    /// fixed rate, period p:  run  run  run  run  run
    /// shutdown at s:        --|----|--s-|----|----|--->
    /// false (default):        run  run  (cancelled at s)
    /// true:                   run  run    run  run  run ... until shutdown_now
    /// ```
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::builder().continue_periodic_after_shutdown(true).build();
    /// let tick = scheduler
    ///     .schedule_at_fixed_rate(Duration::ZERO, Duration::from_secs(1), || async {})
    ///     .unwrap();
    /// scheduler.shutdown();
    /// tokio::time::sleep(Duration::from_millis(2500)).await;
    /// assert_eq!(tick.runs(), 3);
    /// scheduler.shutdown_now();
    /// # }
    /// ```
    pub fn continue_periodic_after_shutdown(mut self, yes: bool) -> Self {
        self.config.continue_periodic = yes;
        self
    }

    /// Spawns the workers on the current Tokio runtime and returns the
    /// scheduler.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::builder().workers(1).build();
    /// assert!(!scheduler.is_shutdown());
    /// # }
    /// ```
    #[track_caller]
    pub fn build(self) -> Scheduler {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            panic!("Scheduler must be built within a Tokio runtime");
        };
        let workers = self
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let pool = Arc::new(Pool::new(self.config, workers));
        for index in 0..workers {
            runtime.spawn(pool::worker(pool.clone(), index));
        }
        Scheduler {
            owner: Arc::new(Owner { pool }),
        }
    }
}

impl Scheduler {
    /// Starts a scheduler with `workers` worker tasks and the default
    /// shutdown policies.
    ///
    /// # Panics
    ///
    /// Panics if `workers` is 0 or if called outside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(4);
    /// assert_eq!(scheduler.stats().running, 0);
    /// # }
    /// ```
    #[track_caller]
    pub fn new(workers: usize) -> Self {
        Self::builder().workers(workers).build()
    }

    /// A [`Builder`] with the defaults: available parallelism workers,
    /// delayed jobs run after shutdown, periodic jobs don't.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::builder().workers(2).build();
    /// # drop(scheduler);
    /// # }
    /// ```
    pub fn builder() -> Builder {
        Builder {
            workers: None,
            config: Config {
                run_delayed: true,
                continue_periodic: false,
            },
        }
    }

    /// Runs `job` once, `delay` from now (a `delay` too large to add to now
    /// saturates to a far-future deadline, about 30 years ahead). Awaiting
    /// the handle yields the job's output.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown);
    /// `job` is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::ScheduleError> {
    /// let scheduler = Scheduler::new(1);
    /// let job = scheduler.schedule(Duration::from_secs(5), async { "done" })?;
    /// assert_eq!(job.await.unwrap(), "done");
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule<F>(
        &self,
        delay: Duration,
        job: F,
    ) -> Result<JobHandle<F::Output>, ScheduleError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.schedule_at(deadline_after(Instant::now(), delay), job)
    }

    /// Runs `job` once at `deadline` (at once if it has passed).
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown);
    /// `job` is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::ScheduleError> {
    /// let scheduler = Scheduler::new(1);
    /// let at = Instant::now() + Duration::from_secs(60);
    /// let job = scheduler.schedule_at(at, async { Instant::now() })?;
    /// assert_eq!(job.await.unwrap(), at);
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule_at<F>(
        &self,
        deadline: Instant,
        job: F,
    ) -> Result<JobHandle<F::Output>, ScheduleError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.submit(Once(Some(job)), deadline, false)
    }

    /// Runs `job()` periodically at a fixed rate: run k starts at
    /// `now + initial_delay + k * period` (JDK `scheduleAtFixedRate`).
    ///
    /// A run that overruns its period delays the next one (runs of one job
    /// never overlap); late runs then follow back to back until the schedule
    /// is caught up:
    ///
    /// ```text
    /// period 10, run 1 takes 25:
    /// deadlines:  0    10   20   30   40
    /// runs:       [0-------25][25][30][40]
    ///                          ^ run 2 (due 10) starts at 25, run 3 (due 20) right after
    /// ```
    ///
    /// The handle resolves once the job is cancelled (`Err(Cancelled)`) or
    /// panics (`Err(Panicked)`); a panic stops all later runs.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown)
    /// (this error wins), [`ScheduleError::ZeroPeriod`] if `period` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::ScheduleError> {
    /// let scheduler = Scheduler::new(1);
    /// let flush = scheduler.schedule_at_fixed_rate(
    ///     Duration::from_secs(10),
    ///     Duration::from_secs(10),
    ///     || async { /* flush metrics */ },
    /// )?;
    /// tokio::time::sleep(Duration::from_secs(35)).await;
    /// assert_eq!(flush.runs(), 3); // at 10 s, 20 s, 30 s
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule_at_fixed_rate<F, Fut>(
        &self,
        initial_delay: Duration,
        period: Duration,
        job: F,
    ) -> Result<JobHandle<()>, ScheduleError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.submit_periodic(initial_delay, period, true, job)
    }

    /// Runs `job()` periodically, each run starting `delay` after the
    /// previous one ended (JDK `scheduleWithFixedDelay`). The first run
    /// starts `initial_delay` from now.
    ///
    /// ```text
    /// delay 10, runs take 3:
    /// runs:  [0-3]          [13-16]          [26-29]
    ///            <---10--->        <---10--->
    /// ```
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown)
    /// (this error wins), [`ScheduleError::ZeroPeriod`] if `delay` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::ScheduleError> {
    /// let scheduler = Scheduler::new(1);
    /// let refresh = scheduler.schedule_with_fixed_delay(
    ///     Duration::ZERO,
    ///     Duration::from_secs(30),
    ///     || async { tokio::time::sleep(Duration::from_secs(5)).await },
    /// )?;
    /// tokio::time::sleep(Duration::from_secs(41)).await;
    /// assert_eq!(refresh.runs(), 2); // 0-5 s, then 35-40 s
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule_with_fixed_delay<F, Fut>(
        &self,
        initial_delay: Duration,
        delay: Duration,
        job: F,
    ) -> Result<JobHandle<()>, ScheduleError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.submit_periodic(initial_delay, delay, false, job)
    }

    fn submit_periodic<F, Fut>(
        &self,
        initial_delay: Duration,
        period: Duration,
        fixed_rate: bool,
        job: F,
    ) -> Result<JobHandle<()>, ScheduleError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let deadline = deadline_after(Instant::now(), initial_delay);
        let work = Periodic {
            make_run: job,
            period,
            fixed_rate,
            deadline,
        };
        self.submit(work, deadline, period.is_zero())
    }

    fn submit<W: Work>(
        &self,
        work: W,
        deadline: Instant,
        zero_period: bool,
    ) -> Result<JobHandle<W::Output>, ScheduleError> {
        let pool = &self.owner.pool;
        let id = pool.next_id();
        let job = Arc::new(Job::new(id, work));
        let mut ps = pool.lock();
        let refused = if ps.shutdown {
            Some(ScheduleError::Shutdown)
        } else if zero_period {
            Some(ScheduleError::ZeroPeriod)
        } else {
            None
        };
        if let Some(error) = refused {
            drop(ps);
            // The user's future or closure is dropped here, unlocked, and a
            // panic in its `Drop` does not reach the caller.
            cleanup::contain(id, "dropping a refused job", move || drop(job));
            return Err(error);
        }
        job.enqueue(pool, &mut ps, deadline);
        drop(ps);
        Ok(JobHandle::new(job, pool.clone()))
    }

    /// Starts an orderly shutdown (JDK `shutdown`): no new jobs are accepted;
    /// pending one-shot jobs still run at their deadline unless
    /// [`run_delayed_after_shutdown(false)`](Builder::run_delayed_after_shutdown),
    /// and periodic jobs are cancelled unless
    /// [`continue_periodic_after_shutdown(true)`](Builder::continue_periodic_after_shutdown).
    /// A periodic run in progress finishes, is not run again, and resolves to
    /// `Err(JobError::Cancelled)`.
    ///
    /// The policies are applied before this returns: cancelled jobs report
    /// `is_cancelled()` and have left `stats().pending`. Workers exit once
    /// nothing is left to run; then [`terminated`](Scheduler::terminated)
    /// resolves. Calling it again does nothing.
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
    /// let last_words = scheduler.schedule(Duration::from_secs(1), async { "bye" }).unwrap();
    /// scheduler.shutdown();
    /// scheduler.terminated().await;
    /// assert_eq!(last_words.await.unwrap(), "bye");
    /// # }
    /// ```
    pub fn shutdown(&self) {
        self.owner.pool.shutdown();
    }

    /// Stops now (JDK `shutdownNow`): cancels every job that has not started
    /// (periodic jobs waiting for their next run included), aborts running
    /// jobs at their next await point, and returns how many not-yet-started
    /// jobs it cancelled (0 when none are left).
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
    /// for i in 0..3 {
    ///     let _ = scheduler.schedule(Duration::from_secs(60), async move { i });
    /// }
    /// assert_eq!(scheduler.shutdown_now(), 3);
    /// assert_eq!(scheduler.shutdown_now(), 0);
    /// scheduler.terminated().await;
    /// # }
    /// ```
    pub fn shutdown_now(&self) -> usize {
        self.owner.pool.shutdown_now()
    }

    /// Resolves once the scheduler is shut down and every worker has exited.
    ///
    /// A job must not await this on its own scheduler: the scheduler cannot
    /// terminate while that job runs.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(2);
    /// scheduler.shutdown();
    /// scheduler.terminated().await;
    /// assert!(scheduler.is_terminated());
    /// # }
    /// ```
    pub async fn terminated(&self) {
        self.owner.pool.terminated().await;
    }

    /// Whether [`shutdown`](Scheduler::shutdown) or
    /// [`shutdown_now`](Scheduler::shutdown_now) was called.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// scheduler.shutdown();
    /// assert!(scheduler.is_shutdown());
    /// # }
    /// ```
    pub fn is_shutdown(&self) -> bool {
        self.owner.pool.is_shutdown()
    }

    /// Whether the scheduler is shut down and every worker has exited.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Scheduler;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::new(1);
    /// assert!(!scheduler.is_terminated());
    /// scheduler.shutdown_now();
    /// scheduler.terminated().await;
    /// assert!(scheduler.is_terminated());
    /// # }
    /// ```
    pub fn is_terminated(&self) -> bool {
        self.owner.pool.is_terminated()
    }

    /// A consistent snapshot of the counters: see [`Stats`].
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
    /// job.cancel();
    /// let stats = scheduler.stats();
    /// assert_eq!((stats.pending, stats.cancelled), (0, 1));
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.owner.pool.stats()
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("stats", &self.stats())
            .field("shutdown", &self.is_shutdown())
            .field("terminated", &self.is_terminated())
            .finish()
    }
}
