//! The worker pool: shared state, shutdown, and the worker loop.
//!
//! Ground rules:
//!
//! - Lock order: the pool lock ([`PoolState`]), then a job's lock, then the
//!   queue's internal lock, then a worker's claim slot. Job transitions take
//!   the first two; queue calls under them take the third; a claim slot is
//!   a leaf, taken under any of them and holding nothing while taken.
//! - No lock is held while user code runs or a user value is dropped: job
//!   transitions return a [`Cleanup`] that runs after unlocking and contains
//!   panics.
//! - `PoolState::stats` changes only together with the job phases it counts,
//!   under the pool lock, which is what makes `stats()` a consistent
//!   snapshot.
//! - Under the pool lock, every job in the `Queued` phase is either in the
//!   queue or in exactly one worker's claim slot: a worker takes a job off
//!   the queue and claims it in one step under the queue's lock, and clears
//!   the claim when it starts the job, under the pool lock. So a shutdown,
//!   holding the pool lock, reaches every job that has not started.
//! - Once shut down with nothing pending or running, nothing can be added
//!   (submissions are refused, periodic jobs are only re-queued by a running
//!   run), so the pool is *done*: idle workers are told to exit, and the last
//!   one out marks it terminated.
//! - A worker that unwinds (only a panicking `tracing` subscriber can make
//!   it: user code runs inside `catch_unwind`) is replaced, not counted as
//!   an exit. Workers that are all gone while work is left (the runtime shut
//!   down) cancel whatever is left, so that every handle resolves.

use super::Stats;
use super::cleanup::{Cleanup, contain};
use super::error::panic_message;
use super::job::Task;
use crate::lock::{Guard, Lock};
use crate::queue::DelayQueue;
use std::cell::Cell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
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
    state: Lock<PoolState>,
    /// Tells idle workers that the pool is done.
    done: Notify,
    terminated: Notify,
    next_id: AtomicU64,
    /// Per worker: the job it took off the queue and has not started yet.
    claims: Box<[Claim]>,
}

/// A worker's claim slot: the job it took off the queue, until it starts it.
type Claim = Lock<Option<Arc<dyn Task>>>;

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
            state: Lock::new(PoolState {
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
            claims: (0..workers).map(|_| Lock::new(None)).collect(),
        }
    }

    fn claim_slot(&self, worker: usize) -> Guard<'_, Option<Arc<dyn Task>>> {
        self.claims[worker].lock()
    }

    /// The job worker `worker` took off the queue but has not started.
    fn claimed(&self, worker: usize) -> Option<Arc<dyn Task>> {
        self.claim_slot(worker).clone()
    }

    /// Worker `worker` starts (or drops) the job it claimed. Called under
    /// the pool lock; the worker holds its own reference to the job, so
    /// this never drops the last one.
    pub(crate) fn unclaim(&self, worker: usize) {
        self.claim_slot(worker).take();
    }

    pub(crate) fn next_id(&self) -> u64 {
        // Only uniqueness matters.
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// User code never runs under this lock.
    pub(crate) fn lock(&self) -> Guard<'_, PoolState> {
        self.state.lock()
    }

    /// Releases the pool lock after a change that may have left the pool
    /// done, and tells the idle workers if so.
    pub(crate) fn unlock(&self, mut ps: Guard<'_, PoolState>) {
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
    /// jobs that have not started before returning. Idempotent.
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
        let mut cleanups: Vec<Cleanup> = removed
            .iter()
            .filter_map(|task| task.cancel_queued(&mut ps))
            .collect();
        if !continue_periodic {
            // A claimed job was due when it was taken, so only the periodic
            // policy applies to it.
            for worker in 0..self.claims.len() {
                if let Some(task) = self.claimed(worker).filter(|task| task.is_periodic()) {
                    cleanups.extend(task.cancel_queued(&mut ps));
                }
            }
            // A periodic run in progress is the last one: it is cancelled
            // now (`is_cancelled()`), and ends when the run returns.
            let running = ps
                .running
                .iter()
                .flatten()
                .filter(|task| task.is_periodic());
            cleanups.extend(running.map(|task| task.stop_run(false)));
        }
        self.unlock(ps);
        Cleanup::run_all(cleanups);
        // The queue's references; the jobs' user values went with the
        // cleanups, so none is dropped here.
        contain(0, "dropping cancelled jobs", move || drop(removed));
    }

    /// JDK `shutdownNow`: cancel every job not started and stop the running
    /// ones; returns how many not-started jobs this call cancelled.
    pub(crate) fn shutdown_now(&self) -> usize {
        let mut ps = self.lock();
        ps.shutdown = true;
        ps.stopped = true;
        let removed = self.queue.remove_if(|_, _| true);
        let mut cleanups: Vec<Cleanup> = removed
            .iter()
            .filter_map(|task| task.cancel_queued(&mut ps))
            .collect();
        for worker in 0..self.claims.len() {
            if let Some(task) = self.claimed(worker) {
                cleanups.extend(task.cancel_queued(&mut ps));
            }
        }
        let count = cleanups.len();
        cleanups.extend(ps.running.iter().flatten().map(|task| task.stop_run(true)));
        self.unlock(ps);
        Cleanup::run_all(cleanups);
        contain(0, "dropping cancelled jobs", move || drop(removed));
        count
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

    /// A worker is gone for good: it found the pool done (`normal`), or its
    /// task was dropped (the runtime shut down). When the last one goes
    /// with work left, that work can never run: it is cancelled, so that
    /// every handle resolves.
    fn worker_exited(&self, normal: bool) {
        let mut ps = self.lock();
        ps.workers -= 1;
        let last = ps.workers == 0;
        drop(ps);
        if last && !normal {
            // Running jobs were ended by their run guards already.
            self.shutdown_now();
        }
        if last {
            self.lock().terminated = true;
            self.terminated.notify_waiters();
        }
    }

    /// Cancels the job worker `worker` claimed but will never start.
    fn cancel_claim(&self, worker: usize) {
        let mut ps = self.lock();
        // Out of the slot first: the slot is a leaf lock, never held while
        // the job's lock is taken.
        let claimed = self.claim_slot(worker).take();
        let cleanup = claimed.and_then(|task| task.cancel_queued(&mut ps));
        self.unlock(ps);
        if let Some(cleanup) = cleanup {
            cleanup.run();
        }
    }
}

/// Accounts for a worker that ends without being replaced: it exits
/// normally, or its task is dropped (the runtime goes away), before or
/// after it first ran.
struct ExitGuard {
    pool: Arc<Pool>,
    index: usize,
    exit: Exit,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// The task was dropped before it ended: the runtime goes away.
    Dropped,
    /// It found the pool done.
    Normal,
    /// It panicked and a new worker took its place.
    Replaced,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        if self.exit == Exit::Replaced {
            return;
        }
        let normal = self.exit == Exit::Normal;
        if !normal {
            self.pool.cancel_claim(self.index);
        }
        self.pool.worker_exited(normal);
    }
}

thread_local! {
    /// How many workers' polls are on this thread's stack.
    static POLLING: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread is inside a worker's poll: a run guard dropped while
/// unwinding tells its worker's own panic from a runtime dropped during an
/// unwind that has nothing to do with it.
pub(crate) fn in_worker_poll() -> bool {
    POLLING.with(Cell::get) > 0
}

struct Polling;

impl Polling {
    fn enter() -> Polling {
        POLLING.with(|n| n.set(n.get() + 1));
        Polling
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        POLLING.with(|n| n.set(n.get() - 1));
    }
}

/// One worker: take the next due job, run it to completion, repeat, until
/// the pool is done. Its guard exists before the future is first polled,
/// so even a worker that never runs is accounted for.
pub(crate) fn worker(pool: Arc<Pool>, index: usize) -> Worker {
    Worker {
        serve: Box::pin(serve(pool.clone(), index)),
        guard: Some(ExitGuard {
            pool,
            index,
            exit: Exit::Dropped,
        }),
    }
}

/// A worker's task. A panic that escapes a poll (user code runs inside
/// `catch_unwind`, so only a panicking `tracing` subscriber can cause one)
/// is caught here, in the poll, not in a `Drop` during the unwind: the
/// worker is replaced by a new one and this task ends, uncounted.
pub(crate) struct Worker {
    serve: Pin<Box<dyn Future<Output = ()> + Send>>,
    guard: Option<ExitGuard>,
}

impl Worker {
    /// Ends this task's accounting as `exit` says.
    fn end(&mut self, exit: Exit) -> (Arc<Pool>, usize) {
        let mut guard = self.guard.take().expect("a worker ends once");
        guard.exit = exit;
        (guard.pool.clone(), guard.index)
    }
}

impl Future for Worker {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let polled = {
            let _polling = Polling::enter();
            catch_unwind(AssertUnwindSafe(|| self.serve.as_mut().poll(cx)))
        };
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => {
                self.end(Exit::Normal);
                Poll::Ready(())
            }
            Err(payload) => {
                let (pool, index) = self.end(Exit::Replaced);
                // Its claim (if it died between taking and starting a job)
                // is cancelled; its running job was ended by its run guard.
                pool.cancel_claim(index);
                tokio::spawn(worker(pool, index));
                contain(0, "reporting a worker's panic", move || {
                    let message = panic_message(payload.as_ref()).unwrap_or("(non-string payload)");
                    tracing::error!(
                        worker = index,
                        panic = message,
                        "a scheduler worker panicked; a new worker replaces it"
                    );
                });
                Poll::Ready(())
            }
        }
    }
}

async fn serve(pool: Arc<Pool>, index: usize) {
    loop {
        let mut done = pin!(pool.done.notified());
        // Enabled before the check: `notify_waiters` only reaches enabled
        // waiters.
        done.as_mut().enable();
        if pool.lock().done {
            return;
        }
        // `take_claimed` is cancel safe: losing the race to `done` loses no
        // job; a job it returns is in this worker's claim slot.
        let claim = |task: &Arc<dyn Task>| *pool.claim_slot(index) = Some(task.clone());
        let task = tokio::select! {
            biased;
            _ = done => return,
            task = pool.queue.take_claimed(claim) => task,
        };
        task.run(pool.clone(), index).await;
    }
}
