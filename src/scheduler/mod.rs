//! The scheduled executor: worker tasks taking jobs from a `DelayQueue`.
//!
//! How it is built: `job.rs` holds each job's state machine, with its
//! transition table in its module docs; `pool.rs` holds shutdown and the
//! worker loop; `cleanup.rs` is the one place where user values are dropped
//! and handles woken after a transition, wakes first, every panic contained
//! and reported. If the runtime goes away, every pending or running job's
//! handle resolves to `Err(JobError::Cancelled)`.

mod begun;
mod cleanup;
#[cfg(feature = "cron")]
mod cron;
mod error;
mod handle;
mod job;
mod pool;
mod stats;
mod ticks;

pub use error::{JobError, ScheduleError};
pub use handle::JobHandle;
pub use stats::Stats;
pub use ticks::MissedTicks;

use crate::queue::deadline_after;
use job::{Job, Once, Periodic, Work};
use pool::{Config, Pool};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use ticks::Cadence;
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

    /// The most jobs that may be pending at once (Netty's
    /// `maxPendingTimeouts`): a `schedule*` call that would make more than
    /// `n` jobs pending returns [`ScheduleError::Full`] and drops its job.
    /// Pending counts as [`Stats::pending`] does: a job waiting for its
    /// deadline, a periodic job between runs (once). A job that has started
    /// no longer counts, so its place is free while it runs. Default:
    /// unbounded.
    ///
    /// The bound applies to `schedule*` calls only: a periodic job whose run
    /// ends is queued again even if new jobs took every place meanwhile, so
    /// `pending` can exceed `n` by the number of periodic jobs running.
    ///
    /// # Panics
    ///
    /// Panics if `n` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::{ScheduleError, Scheduler};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let scheduler = Scheduler::builder().max_pending(2).build();
    /// let first = scheduler.schedule(Duration::from_secs(60), async {}).unwrap();
    /// scheduler.schedule(Duration::from_secs(60), async {}).unwrap();
    /// let refused = scheduler.schedule(Duration::from_secs(60), async {});
    /// assert_eq!(refused.unwrap_err(), ScheduleError::Full);
    ///
    /// first.cancel(); // frees its place at once
    /// assert!(scheduler.schedule(Duration::from_secs(60), async {}).is_ok());
    /// # }
    /// ```
    #[track_caller]
    pub fn max_pending(mut self, n: usize) -> Self {
        assert!(
            n > 0,
            "the bound `n` on pending jobs must be at least 1, got 0"
        );
        self.config.max_pending = Some(n);
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
    /// delayed jobs run after shutdown, periodic jobs don't, no bound on
    /// pending jobs.
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
                max_pending: None,
            },
        }
    }

    /// Runs `job` once, `delay` from now (a `delay` too large to add to now
    /// saturates to a far-future deadline, about 30 years ahead). Awaiting
    /// the handle yields the job's output.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown)
    /// (this error wins), [`ScheduleError::Full`] if
    /// [`max_pending`](Builder::max_pending) jobs are pending; `job` is
    /// dropped.
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
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown)
    /// (this error wins), [`ScheduleError::Full`] if
    /// [`max_pending`](Builder::max_pending) jobs are pending; `job` is
    /// dropped.
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
        self.submit(Once(Some(job)), deadline, None)
    }

    /// Runs `job()` periodically at a fixed rate: run k starts at
    /// `now + initial_delay + k * period` (JDK `scheduleAtFixedRate`).
    ///
    /// A run that overruns its period delays the next one (runs of one job
    /// never overlap); late runs then follow back to back until the schedule
    /// is caught up ([`MissedTicks::Burst`]; see
    /// [`schedule_at_fixed_rate_with`](Scheduler::schedule_at_fixed_rate_with)
    /// for the other policies):
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
    /// (this error wins), [`ScheduleError::ZeroPeriod`] if `period` is zero,
    /// [`ScheduleError::Full`] if [`max_pending`](Builder::max_pending) jobs
    /// are pending.
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
        self.schedule_at_fixed_rate_with(initial_delay, period, MissedTicks::Burst, job)
    }

    /// Runs `job()` periodically at a fixed rate, like
    /// [`schedule_at_fixed_rate`](Scheduler::schedule_at_fixed_rate), with
    /// `missed` saying what happens after runs were missed (a run that
    /// overran its period, a stalled worker): run them back to back
    /// ([`Burst`](MissedTicks::Burst)), run once at once and restart the
    /// schedule from there ([`Delay`](MissedTicks::Delay)), or drop them
    /// ([`Skip`](MissedTicks::Skip)). Runs never overlap.
    ///
    /// ```text
    /// period 10, the run due at 0 takes 25, later runs take 2:
    /// Burst:  [0-----------25][25-27][27-29][30-32][40-42]
    /// Delay:  [0-----------25][25-27]   [35-37]   [45-47]
    /// Skip:   [0-----------25]     [30-32][40-42][50-52]
    /// ```
    ///
    /// [`MissedTicks`] has the full timelines, stalled worker included.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown)
    /// (this error wins), [`ScheduleError::ZeroPeriod`] if `period` is zero,
    /// [`ScheduleError::Full`] if [`max_pending`](Builder::max_pending) jobs
    /// are pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::{MissedTicks, Scheduler};
    /// use std::time::Duration;
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::ScheduleError> {
    /// let scheduler = Scheduler::new(1);
    /// // A poll that sometimes hangs for minutes: never poll twice in a row.
    /// let poll = scheduler.schedule_at_fixed_rate_with(
    ///     Duration::ZERO,
    ///     Duration::from_secs(10),
    ///     MissedTicks::Delay,
    ///     || async { sleep(Duration::from_secs(25)).await },
    /// )?;
    /// sleep(Duration::from_secs(30)).await;
    /// // The first run ended at 25 s; the second started then, not at 10 s.
    /// assert_eq!(poll.runs(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule_at_fixed_rate_with<F, Fut>(
        &self,
        initial_delay: Duration,
        period: Duration,
        missed: MissedTicks,
        job: F,
    ) -> Result<JobHandle<()>, ScheduleError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let cadence = Cadence::FixedRate { period, missed };
        self.submit_periodic(initial_delay, cadence, zero_period(period), job)
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
    /// (this error wins), [`ScheduleError::ZeroPeriod`] if `delay` is zero,
    /// [`ScheduleError::Full`] if [`max_pending`](Builder::max_pending) jobs
    /// are pending.
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
        let cadence = Cadence::FixedDelay { delay };
        self.submit_periodic(initial_delay, cadence, zero_period(delay), job)
    }

    /// Runs `job()` at every instant the cron expression `expr` names, in
    /// UTC or in the time zone of a `CRON_TZ=` prefix. Available with the
    /// cargo feature `cron`.
    ///
    /// `expr` has 5 fields (minute, hour, day of month, month, day of week),
    /// or 6 with seconds first, or is a nickname: `@yearly`, `@annually`,
    /// `@monthly`, `@weekly`, `@daily`, `@hourly`. Fields take `*`, numbers,
    /// ranges `a-b`, lists `a,b`, steps `*/n`, month and day names, `L` (last
    /// day of the month, or last given weekday: `5L`), `W` and `#`. Day of
    /// month and day of week match when either does, as in Vixie cron.
    ///
    /// `CRON_TZ=<IANA zone> ` before the fields (as robfig/cron and
    /// Kubernetes CronJobs take it), e.g. `CRON_TZ=Europe/Berlin 0 3 * * *`,
    /// makes the fields local times of that zone; without it they are UTC.
    /// Across a daylight saving change (the rule of the Open Cron Pattern
    /// Specification):
    ///
    /// - an hour field naming fixed hours (`3`, `1,13`, `1-3`, `1-9/2`) runs
    ///   each named local time once: one the clock skips (spring forward)
    ///   runs at the first instant after the jump, once however many named
    ///   times the jump skipped or lands on; one the clock repeats (fall back)
    ///   runs at its first occurrence only;
    /// - an hour field `*` or `*/n` follows the real clock: it runs in both
    ///   occurrences of a repeated hour, and the times of a skipped hour do
    ///   not exist.
    ///
    /// ```text
    /// Europe/Berlin, 2027-03-28, 02:00 CET jumps to 03:00 CEST:
    ///   `30 2 * * *`   runs at 03:00 CEST
    ///   `30 * * * *`   runs at 01:30 CET, 03:30 CEST (no 02:30)
    /// Europe/Berlin, 2027-10-31, 03:00 CEST falls back to 02:00 CET:
    ///   `30 2 * * *`   runs at 02:30 CEST only
    ///   `30 * * * *`   runs at 02:30 CEST and 02:30 CET
    /// ```
    ///
    /// The job reads the wall clock as `max(system clock, previous instant +
    /// Tokio time elapsed since that instant was due)`; when scheduled and
    /// after each run, its next instant is the first one strictly after that
    /// reading, and it waits the difference on the Tokio clock. So:
    ///
    /// - a run that overruns the next instant skips it (no burst):
    ///
    ///   ```text
    ///   every minute, the run at 03:00 takes 90 s:
    ///   instants:  03:00     03:01     03:02     03:03
    ///   runs:      [03:00--------03:01:30]
    ///                                    [03:02]   [03:03]
    ///              03:01 skipped; 03:02 is the first instant after 03:01:30
    ///   ```
    ///
    /// - a system clock that jumps ahead is followed; one that jumps back
    ///   (an NTP step) never repeats a run;
    /// - paused-time tests drive cron jobs: under paused time the system
    ///   clock stands still and the Tokio term of the reading moves.
    ///
    /// Cancel, abort, panics, [`Stats`] and shutdown treat a cron job as a
    /// periodic job: its handle resolves once it is cancelled or panics,
    /// and [`next_run`](JobHandle::next_run) is the Tokio instant of its
    /// next run.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after [`shutdown`](Scheduler::shutdown)
    /// (this error wins), [`ScheduleError::InvalidCron`] if `expr` does not
    /// parse, names a time zone the IANA database does not know, or names no
    /// instant from now on (the string says why, naming the field at fault or
    /// the unknown zone), [`ScheduleError::Full`] if
    /// [`max_pending`](Builder::max_pending) jobs are pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::{ScheduleError, Scheduler};
    /// use std::time::Duration;
    /// use tokio::time::{Instant, sleep_until};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ScheduleError> {
    /// let scheduler = Scheduler::new(1);
    /// let nightly = scheduler.schedule_cron("0 3 * * *", || async { /* compact the db */ })?;
    /// let first = nightly.next_run().unwrap();
    /// assert!(first <= Instant::now() + Duration::from_secs(86_400));
    ///
    /// // 03:00 on Berlin's clock, summer and winter alike.
    /// let report = scheduler.schedule_cron("CRON_TZ=Europe/Berlin 0 3 * * *", || async {})?;
    /// assert!(report.next_run().unwrap() <= Instant::now() + Duration::from_secs(86_400));
    ///
    /// let probe = scheduler.schedule_cron("*/15 * * * * *", || async {})?;
    /// let first = probe.next_run().unwrap();
    /// sleep_until(first + Duration::from_secs(46)).await;
    /// assert_eq!(probe.runs(), 4); // at first, +15 s, +30 s, +45 s
    ///
    /// let typo = scheduler.schedule_cron("0 25 * * *", || async {});
    /// assert_eq!(
    ///     typo.unwrap_err().to_string(),
    ///     "invalid cron expression: `0 25 * * *`: hour field `25`: number out of bounds"
    /// );
    ///
    /// let typo = scheduler.schedule_cron("CRON_TZ=Europe/Berln 0 3 * * *", || async {});
    /// assert!(typo.unwrap_err().to_string().contains("unknown time zone `Europe/Berln`"));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "cron")]
    pub fn schedule_cron<F, Fut>(&self, expr: &str, job: F) -> Result<JobHandle<()>, ScheduleError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let now = Instant::now();
        match cron::CronCadence::start(expr, now) {
            Ok((cadence, deadline)) => {
                let cadence = Cadence::Cron(Box::new(cadence));
                self.submit(periodic(job, cadence, deadline, now), deadline, None)
            }
            // Refused through `submit` all the same, so that `Shutdown` wins
            // and the job is dropped like any refused job. The cadence is a
            // placeholder: the job is never queued.
            Err(invalid) => {
                let cadence = Cadence::FixedDelay {
                    delay: Duration::MAX,
                };
                self.submit(periodic(job, cadence, now, now), now, Some(invalid))
            }
        }
    }

    fn submit_periodic<F, Fut>(
        &self,
        initial_delay: Duration,
        cadence: Cadence,
        invalid: Option<ScheduleError>,
        job: F,
    ) -> Result<JobHandle<()>, ScheduleError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let now = Instant::now();
        let deadline = deadline_after(now, initial_delay);
        self.submit(periodic(job, cadence, deadline, now), deadline, invalid)
    }

    fn submit<W: Work>(
        &self,
        work: W,
        deadline: Instant,
        invalid: Option<ScheduleError>,
    ) -> Result<JobHandle<W::Output>, ScheduleError> {
        let pool = &self.owner.pool;
        let id = pool.next_id();
        let job = Arc::new(Job::new(id, work));
        let mut ps = pool.lock();
        let full = pool
            .config
            .max_pending
            .is_some_and(|max| ps.stats.pending >= max);
        let refused = if ps.shutdown {
            Some(ScheduleError::Shutdown)
        } else if invalid.is_some() {
            invalid
        } else if full {
            Some(ScheduleError::Full)
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
        let key = job.enqueue(pool, &mut ps, deadline);
        drop(ps);
        Ok(JobHandle::new(job, pool.clone(), key))
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

/// `ZeroPeriod` if a periodic job's `period` is zero.
fn zero_period(period: Duration) -> Option<ScheduleError> {
    period.is_zero().then_some(ScheduleError::ZeroPeriod)
}

/// A periodic job's work, first due at `deadline`.
fn periodic<F>(make_run: F, cadence: Cadence, deadline: Instant, now: Instant) -> Periodic<F> {
    Periodic {
        make_run,
        cadence,
        deadline,
        started: now,
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
