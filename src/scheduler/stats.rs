//! [`Stats`]: a snapshot of a scheduler's counters.

/// A consistent snapshot of a [`Scheduler`](crate::Scheduler)'s counters,
/// returned by [`Scheduler::stats`](crate::Scheduler::stats).
///
/// # Examples
///
/// ```
/// use punctual::{Scheduler, Stats};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::new(1);
/// let job = scheduler.schedule(Duration::from_secs(1), async {}).unwrap();
/// assert_eq!(scheduler.stats(), Stats { pending: 1, ..Stats::default() });
/// job.await.unwrap();
/// assert_eq!(scheduler.stats(), Stats { completed: 1, ..Stats::default() });
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Jobs waiting in the queue, periodic jobs between runs included.
    pub pending: usize,
    /// Jobs a worker is running now (a job that calls `stats()` counts
    /// itself).
    pub running: usize,
    /// Runs that completed, over the scheduler's lifetime (each run of a
    /// periodic job counts).
    pub completed: u64,
    /// Jobs cancelled, by `cancel`, `abort`, a shutdown policy or
    /// `shutdown_now`, over the scheduler's lifetime.
    pub cancelled: u64,
    /// Runs that panicked, over the scheduler's lifetime.
    pub panicked: u64,
}
