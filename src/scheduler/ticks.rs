//! [`MissedTicks`], and when a periodic job's next run is due.

use crate::queue::deadline_after;
use std::time::Duration;
use tokio::time::Instant;

/// What a fixed-rate job does after runs were missed: a run that overran
/// its period, or a worker that was busy with other jobs when the run came
/// due. Passed to
/// [`Scheduler::schedule_at_fixed_rate_with`](crate::Scheduler::schedule_at_fixed_rate_with).
///
/// A run's *instant* is `start + initial_delay + k * period`. When a run
/// ends before the next instant, every policy waits for that instant: the
/// policies differ only once an instant has passed. Runs of one job never
/// overlap under any policy.
///
/// The timelines below have `period` 10; the run due at 0 takes 25 (it
/// overruns by 1.5 periods) and the later runs take 2. `[a-b]` is a run
/// from `a` to `b`.
///
/// ```text
/// instants:  0    10   20   30   40   50
///            |    |    |    |    |    |
/// Burst:     [0-----------25][25-27][27-29][30-32][40-42][50-52]
///                            due 10  due 20  back on the grid
/// Delay:     [0-----------25][25-27]   [35-37]   [45-47]
///                            at once, then every 10 from it
/// Skip:      [0-----------25]     [30-32][40-42][50-52]
///                            10 and 20 dropped; first instant after 25
/// ```
///
/// A stalled worker: `period` 10, `initial_delay` 5, the only worker is busy
/// with another job until 28, runs take 2:
///
/// ```text
/// instants:    5    15   25   35   45
///              |    |    |    |    |
/// worker:  [other job-----------28]
/// Burst:                        [28-30][30-32][32-34][35-37][45-47]
///                               due 5  due 15 due 25
/// Delay:                        [28-30]   [38-40]   [48-50]
///                               late: the schedule restarts from 28
/// Skip:                         [28-30]  [35-37]   [45-47]
///                               15 and 25 dropped
/// ```
///
/// A worker stalled for less than a period delays that one run only: every
/// policy then keeps the grid.
///
/// # Examples
///
/// ```
/// use punctual::{MissedTicks, Scheduler};
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tokio::time::{Instant, sleep};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::new(1);
/// let start = Instant::now();
/// let starts = Arc::new(Mutex::new(Vec::new()));
/// let log = starts.clone();
/// let mut first = true;
/// scheduler
///     .schedule_at_fixed_rate_with(Duration::ZERO, Duration::from_secs(10), MissedTicks::Skip, move || {
///         let slow = std::mem::take(&mut first);
///         let log = log.clone();
///         async move {
///             log.lock().unwrap().push(start.elapsed().as_secs());
///             if slow {
///                 sleep(Duration::from_secs(25)).await;
///             }
///         }
///     })
///     .unwrap();
/// sleep(Duration::from_secs(45)).await;
/// assert_eq!(*starts.lock().unwrap(), vec![0, 30, 40]);
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissedTicks {
    /// Missed runs follow back to back, as soon as the previous one ends,
    /// until the schedule has caught up (the JDK's behaviour, and what
    /// [`schedule_at_fixed_rate`](crate::Scheduler::schedule_at_fixed_rate)
    /// does). Every instant gets its run, possibly late.
    #[default]
    Burst,
    /// The next run starts at once and the schedule restarts from it:
    /// `period` after it, and so on. A run that started after the next
    /// instant had already passed (a stalled worker) counts as that run: the
    /// schedule restarts from its start.
    Delay,
    /// Missed runs are dropped: the next run is at the first instant
    /// `start + initial_delay + k * period` strictly after the end of the
    /// run that overran. Unlike [`tokio::time::MissedTickBehavior::Skip`],
    /// no run happens at once.
    Skip,
}

impl MissedTicks {
    /// The deadline of the run after the one `due` at, that `started` and
    /// `ended` at the given instants.
    pub(crate) fn next_run(
        self,
        due: Instant,
        started: Instant,
        ended: Instant,
        period: Duration,
    ) -> Instant {
        let next = deadline_after(due, period);
        match self {
            MissedTicks::Burst => next,
            MissedTicks::Delay => {
                let from = if next < started { started } else { due };
                deadline_after(from, period).max(ended)
            }
            MissedTicks::Skip if next >= ended => next,
            MissedTicks::Skip => first_instant_after(due, period, ended),
        }
    }
}

/// The first `origin + k * period` (k >= 1) strictly after `now`.
fn first_instant_after(origin: Instant, period: Duration, now: Instant) -> Instant {
    let behind = now.saturating_duration_since(origin).as_nanos();
    let k = behind / period.as_nanos() + 1;
    deadline_after(origin, from_nanos(k * period.as_nanos()))
}

/// A `Duration` of `nanos`, saturating (`deadline_after` then saturates
/// the instant too).
fn from_nanos(nanos: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / PER_SEC).unwrap_or(u64::MAX);
    Duration::new(secs, (nanos % PER_SEC) as u32)
}

/// When a periodic job's next run is due.
pub(crate) enum Cadence {
    /// Run k at `start + initial_delay + k * period`, with a policy for
    /// missed runs.
    FixedRate {
        period: Duration,
        missed: MissedTicks,
    },
    /// Each run `delay` after the previous one ended.
    FixedDelay { delay: Duration },
    /// At the instants of a cron expression.
    #[cfg(feature = "cron")]
    Cron(Box<super::cron::CronCadence>),
}

impl Cadence {
    /// The deadline of the next run, after the run `due` at ran from
    /// `started` to `ended`.
    pub(crate) fn next_run(&mut self, due: Instant, started: Instant, ended: Instant) -> Instant {
        match self {
            Cadence::FixedRate { period, missed } => missed.next_run(due, started, ended, *period),
            Cadence::FixedDelay { delay } => deadline_after(ended, *delay),
            #[cfg(feature = "cron")]
            Cadence::Cron(cron) => cron.next_run(due, ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_millis(10);

    fn at(origin: Instant, ms: u64) -> Instant {
        origin + Duration::from_millis(ms)
    }

    #[test]
    fn on_time_runs_keep_the_grid_under_every_policy() {
        let o = Instant::now();
        for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
            // Ended before, and exactly at, the next instant.
            assert_eq!(missed.next_run(o, o, at(o, 3), P), at(o, 10));
            assert_eq!(missed.next_run(o, o, at(o, 10), P), at(o, 10));
            // Started late, but before the next instant.
            assert_eq!(missed.next_run(o, at(o, 9), at(o, 10), P), at(o, 10));
        }
    }

    #[test]
    fn skip_lands_strictly_after_the_end() {
        let o = Instant::now();
        assert_eq!(MissedTicks::Skip.next_run(o, o, at(o, 11), P), at(o, 20));
        assert_eq!(MissedTicks::Skip.next_run(o, o, at(o, 20), P), at(o, 30));
        assert_eq!(MissedTicks::Skip.next_run(o, o, at(o, 105), P), at(o, 110));
    }

    #[test]
    fn delay_restarts_from_the_end_or_a_late_start() {
        let o = Instant::now();
        assert_eq!(MissedTicks::Delay.next_run(o, o, at(o, 25), P), at(o, 25));
        assert_eq!(
            MissedTicks::Delay.next_run(o, at(o, 20), at(o, 22), P),
            at(o, 30)
        );
        assert_eq!(
            MissedTicks::Delay.next_run(o, at(o, 20), at(o, 45), P),
            at(o, 45)
        );
    }

    #[test]
    fn huge_periods_saturate_instead_of_panicking() {
        let o = Instant::now();
        let max = Duration::MAX;
        for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
            assert!(missed.next_run(o, o, at(o, 1), max) > at(o, 1));
        }
        assert!(first_instant_after(o, Duration::from_nanos(1), at(o, 5)) > at(o, 5));
    }
}
