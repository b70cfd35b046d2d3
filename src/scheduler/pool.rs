//! The worker pool: shared state, shutdown, and the worker loop.
//!
//! Ground rules:
//!
//! - Lock order: the pool lock ([`PoolState`]), then a job's lock, then the
//!   queue's internal lock. Job transitions take the first two; queue calls
//!   under them take the third.
//! - No lock is held while user code runs or a user value is dropped: job
//!   transitions return a [`Cleanup`] that runs after unlocking.
//! - `PoolState::stats` changes only together with the job phases it counts,
//!   under the pool lock, which is what makes `stats()` a consistent
//!   snapshot.
//! - Once shut down with nothing pending or running, nothing can be added
//!   (submissions are refused, periodic jobs are only re-queued by a running
//!   run), so the pool is *done*: idle workers are told to exit, and the last
//!   one out marks it terminated.

use super::Stats;
use super::job::{Cleanup, Task};
use crate::queue::DelayQueue;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) run_delayed: bool,
    pub(crate) continue_periodic: bool,
    pub(crate) max_pending: Option<usize>,
}

pub(crate) struct Pool {
    pub(crate) queue: DelayQueue<Arc<dyn Task>>,
    pub(crate) config: Config,
    state: Mutex<PoolState>,
    /// Tells idle workers that the pool is done.
    done: Notify,
    terminated: Notify,
    next_id: AtomicU64,
}

pub(crate) struct PoolState {
    pub(crate) shutdown: bool,
    /// `shutdown_now` was called: nothing more starts.
    pub(crate) stopped: bool,
    pub(crate) stats: Stats,
    /// The job each worker is running, for `shutdown_now` to stop.
    pub(crate) running: Vec<Option<Arc<dyn Task>>>,
    workers: usize,
    done: bool,
    terminated: bool,
}

impl Pool {
    pub(crate) fn new(config: Config, workers: usize) -> Self {
        Pool {
            queue: DelayQueue::new(),
            config,
            state: Mutex::new(PoolState {
                shutdown: false,
                stopped: false,
                stats: Stats::default(),
                running: (0..workers).map(|_| None).collect(),
                workers,
                done: false,
                terminated: false,
            }),
            done: Notify::new(),
            terminated: Notify::new(),
            next_id: AtomicU64::new(1),
        }
    }

    pub(crate) fn next_id(&self) -> u64 {
        // Only uniqueness matters.
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// User code never runs under this lock, so poisoning is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the pool lock after a change that may have left the pool
    /// done, and tells the idle workers if so.
    pub(crate) fn unlock(&self, mut ps: MutexGuard<'_, PoolState>) {
        let now_done = !ps.done && ps.shutdown && ps.stats.pending == 0 && ps.stats.running == 0;
        ps.done |= now_done;
        drop(ps);
        if now_done {
            self.done.notify_waiters();
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        self.lock().stats
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.lock().shutdown
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.lock().terminated
    }

    /// JDK `shutdown`: refuse new jobs and apply the shutdown policies to the
    /// queued ones before returning. Idempotent.
    pub(crate) fn shutdown(&self) {
        let mut ps = self.lock();
        if ps.shutdown {
            return;
        }
        ps.shutdown = true;
        let Config {
            run_delayed,
            continue_periodic,
            ..
        } = self.config;
        let now = Instant::now();
        let removed = self.queue.remove_if(|task, deadline| {
            if task.is_periodic() {
                !continue_periodic
            } else {
                !run_delayed && deadline > now
            }
        });
        let cleanups = self.cancel_removed(&mut ps, &removed);
        self.unlock(ps);
        drop(removed);
        cleanups.into_iter().for_each(Cleanup::run);
    }

    /// JDK `shutdownNow`: cancel every job not started and stop the running
    /// ones; returns how many not-started jobs were cancelled.
    pub(crate) fn shutdown_now(&self) -> usize {
        let mut ps = self.lock();
        ps.shutdown = true;
        ps.stopped = true;
        // Every pending job is cancelled: those in the queue here, and one a
        // worker took off the queue at this very moment when it tries to
        // start it (`stopped` is set).
        let count = ps.stats.pending;
        let removed = self.queue.remove_if(|_, _| true);
        let mut cleanups = self.cancel_removed(&mut ps, &removed);
        cleanups.extend(ps.running.iter().flatten().map(|task| task.stop_run()));
        self.unlock(ps);
        drop(removed);
        cleanups.into_iter().for_each(Cleanup::run);
        count
    }

    fn cancel_removed(&self, ps: &mut PoolState, removed: &[Arc<dyn Task>]) -> Vec<Cleanup> {
        removed.iter().map(|task| task.cancel_removed(ps)).collect()
    }

    /// Resolves once every worker has exited.
    pub(crate) async fn terminated(&self) {
        loop {
            let mut notified = pin!(self.terminated.notified());
            // Enabled before the check, so the last worker's notification
            // cannot slip between the check and the await.
            notified.as_mut().enable();
            if self.is_terminated() {
                return;
            }
            notified.await;
        }
    }

    fn worker_exited(&self) {
        let mut ps = self.lock();
        ps.workers -= 1;
        let last = ps.workers == 0;
        ps.terminated |= last;
        drop(ps);
        if last {
            self.terminated.notify_waiters();
        }
    }
}

/// Records a worker's exit even if its task is dropped (runtime shutdown).
struct ExitGuard(Arc<Pool>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.worker_exited();
    }
}

/// One worker: take the next due job, run it to completion, repeat, until
/// the pool is done.
pub(crate) async fn worker(pool: Arc<Pool>, index: usize) {
    let guard = ExitGuard(pool);
    let pool = &guard.0;
    loop {
        let mut done = pin!(pool.done.notified());
        // Enabled before the check: `notify_waiters` only reaches enabled
        // waiters.
        done.as_mut().enable();
        if pool.lock().done {
            return;
        }
        // `take` is cancel safe: losing the race to `done` loses no job.
        let task = tokio::select! {
            biased;
            _ = done => return,
            task = pool.queue.take() => task,
        };
        task.run(pool.clone(), index).await;
    }
}
