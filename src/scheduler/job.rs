//! One job's state machine.
//!
//! Every job lives in one place, [`Job`]: its [`Phase`] says where it is, and
//! every actor (the handle, the worker, `shutdown`) moves it through the same
//! transitions. A transition runs with the pool lock, then the job's lock,
//! held (in that order), so the pool's counters always agree with the phases.
//!
//! | from | event | to | counters |
//! |---|---|---|---|
//! | `New` | submitted | `Queued` | pending +1 |
//! | `Queued` | a worker takes it off the queue (and claims it) | `Queued`, not in the queue | - |
//! | `Queued` (claimed) | the worker starts it | `Running` | pending -1, running +1 |
//! | `Queued` | `cancel`/`abort`, a shutdown policy, `shutdown_now`, its worker gone | `Done(Cancelled)` | pending -1, cancelled +1 |
//! | `Running` | run ends, one-shot | `Done(Ok)` | running -1, completed +1 |
//! | `Running` | run ends, periodic, may go on | `Queued` (next deadline) | running -1, completed +1, pending +1 |
//! | `Running` | run ends, periodic, cancelled or shut down | `Done(Cancelled)` | running -1, completed +1, cancelled +1 |
//! | `Running` | run (or a periodic job's closure) panics | `Done(Panicked)` | running -1, panicked +1 |
//! | `Running` | `cancel` on a periodic job | `Running { cancel }` | - |
//! | `Running` | `shutdown` (periodic, not continued) | `Running { cancel }` | - |
//! | `Running` | `abort`, `shutdown_now` | `Running { cancel }`, run stopped at its next await | - |
//! | `Running` | the worker's future is dropped (runtime shut down) | `Done(Cancelled)` | running -1, cancelled +1 |
//! | `Running` | the worker unwinds (a panicking subscriber) | `Done(Panicked)` | running -1, panicked +1 |
//! | `Running` (stopped) | run aborted | `Done(Cancelled)` | running -1, cancelled +1 |
//! | `Done` | the handle collects the result | `Collected` | - |
//! | any | the handle is dropped | the same; a later `Done` goes straight to `Collected`, its result dropped | - |
//!
//! `cancel` on a one-shot `Running` job and any cancel of a finished job
//! change nothing and return `false`.
//!
//! While a job runs, the worker owns its work (the future, or the periodic
//! closure), so no lock is held while user code runs. A transition never
//! drops a user value itself: it returns a [`Cleanup`] that wakes the handle
//! and then drops them, after every lock is released, with panics contained
//! (`cleanup.rs`).

use super::begun::Begun;
use super::cleanup::{Cleanup, Contained, contain};
use super::error::{JobError, panic_message};
use super::pool::{Pool, PoolState};
use super::ticks::Cadence;
use crate::lock::{Guard, Lock};
use crate::queue::Key;
use futures::FutureExt;
use futures::future::{AbortHandle, AbortRegistration, BoxFuture};
use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::time::Instant;

/// What a job runs: a one-shot future or a periodic closure.
pub(crate) trait Work: Send + Sized + 'static {
    type Output: Send + 'static;
    const PERIODIC: bool;

    /// Starts one run: the future to run. Runs user code (a periodic job's
    /// closure), so it is never called under a lock. Takes `&mut self` so
    /// that a closure that panics is not dropped while that panic unwinds
    /// (a panicking `Drop` there would abort): it is dropped afterwards,
    /// contained.
    fn start(&mut self) -> BoxFuture<'static, Self::Output>;

    /// The deadline of the next run, given when the last one ended.
    fn reschedule(&mut self, ended: Instant) -> Instant;
}

/// A one-shot job's future, until its run starts.
pub(crate) struct Once<F>(pub(crate) Option<F>);

impl<F> Work for Once<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;
    const PERIODIC: bool = false;

    fn start(&mut self) -> BoxFuture<'static, F::Output> {
        Box::pin(self.0.take().expect("a one-shot job starts once"))
    }

    fn reschedule(&mut self, ended: Instant) -> Instant {
        ended
    }
}

/// A periodic job's closure and schedule.
pub(crate) struct Periodic<G> {
    pub(crate) make_run: G,
    pub(crate) cadence: Cadence,
    /// The deadline of the run that is queued or running.
    pub(crate) deadline: Instant,
    /// When the last run started.
    pub(crate) started: Instant,
}

impl<G, Fut> Work for Periodic<G>
where
    G: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    type Output = ();
    const PERIODIC: bool = true;

    fn start(&mut self) -> BoxFuture<'static, ()> {
        self.started = Instant::now();
        Box::pin((self.make_run)())
    }

    fn reschedule(&mut self, ended: Instant) -> Instant {
        self.deadline = self.cadence.next_run(self.deadline, self.started, ended);
        self.deadline
    }
}

/// How a finished job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Completed,
    Cancelled,
    Panicked,
}

pub(crate) enum Phase<W: Work> {
    /// Created, not yet queued (only inside `submit`).
    New(W),
    /// In the queue under `key`.
    Queued { key: Key, work: W },
    /// A worker owns the work. `cancel`: no later run, whatever the policy.
    Running { cancel: bool, abort: AbortHandle },
    /// Finished; the handle has not collected the result yet.
    Done(Result<W::Output, JobError>),
    /// Finished, result collected.
    Collected(End),
    /// Transient, inside a transition that moves the work out.
    Moving,
}

struct JobState<W: Work> {
    phase: Phase<W>,
    /// The handle's waker, woken once the job is `Done`.
    waker: Option<Waker>,
    /// Completed runs.
    runs: u64,
    /// The handle was dropped: a result is dropped (contained) at once
    /// instead of waiting in `Done` for the last `Arc` to go, which could
    /// be a worker's, outside any `catch_unwind`.
    detached: bool,
}

pub(crate) struct Job<W: Work> {
    id: u64,
    state: Lock<JobState<W>>,
}

/// The type-erased view of a job that the pool's queue holds.
pub(crate) trait Task: Send + Sync + 'static {
    fn is_periodic(&self) -> bool;

    /// Runs the job once on worker `worker`: starts it (unless it was
    /// cancelled meanwhile), runs it, and ends the run.
    fn run(self: Arc<Self>, pool: Arc<Pool>, worker: usize) -> BoxFuture<'static, ()>;

    /// A shutdown policy removed this job from the queue, or found it taken
    /// off the queue by a worker that has not started it: cancel it.
    /// `None` if it was no longer queued (already cancelled or started).
    fn cancel_queued(&self, pool: &mut PoolState) -> Option<Cleanup>;

    /// A shutdown: no run after the one in progress; with `abort`
    /// (`shutdown_now`), stop that run at its next await point too.
    fn stop_run(&self, abort: bool) -> Cleanup;
}

/// The typed view of a job that its handle holds.
pub(crate) trait Control<T>: Send + Sync {
    fn id(&self) -> u64;
    fn cancel(&self, pool: &Pool, abort: bool) -> bool;
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<T, JobError>>;
    fn end(&self) -> Option<End>;
    /// Ended cancelled, or a cancel of the run in progress was accepted.
    fn is_cancelled(&self) -> bool;
    fn next_run(&self, pool: &Pool) -> Option<Instant>;
    fn runs(&self) -> u64;
    /// The handle is dropped: a result already there, or any later one, is
    /// dropped at once (contained), not kept.
    fn detach(&self);
}

/// How a run ended.
enum Outcome<T> {
    Returned(T),
    Panicked(Box<dyn Any + Send>),
    Aborted,
}

impl<W: Work> Job<W> {
    pub(crate) fn new(id: u64, work: W) -> Self {
        Job {
            id,
            state: Lock::new(JobState {
                phase: Phase::New(work),
                waker: None,
                runs: 0,
                detached: false,
            }),
        }
    }

    /// User code never runs under this lock.
    fn lock(&self) -> Guard<'_, JobState<W>> {
        self.state.lock()
    }

    /// `New` → `Queued` at `deadline`; returns the queue key. The caller
    /// holds the pool lock, so no worker can start the job before its key is
    /// recorded.
    pub(crate) fn enqueue(
        self: &Arc<Self>,
        pool: &Pool,
        ps: &mut PoolState,
        deadline: Instant,
    ) -> Option<Key> {
        let mut st = self.lock();
        if let Phase::New(work) = std::mem::replace(&mut st.phase, Phase::Moving) {
            let key = pool.queue.insert_at(self.clone(), deadline);
            st.phase = Phase::Queued { key, work };
            ps.stats.pending += 1;
            return Some(key);
        }
        None
    }

    /// `Queued` → `Running`, or → `Done(Cancelled)` if the scheduler stopped
    /// or shut down (policies apply to a job a worker took off the queue at
    /// that very moment). Returns the work to run and its abort registration.
    fn begin(self: &Arc<Self>, pool: &Pool, worker: usize) -> Option<(W, AbortRegistration)> {
        let mut ps = pool.lock();
        pool.unclaim(worker);
        let mut st = self.lock();
        // Not queued: cancelled (by its handle or a shutdown) just as the
        // worker took it off the queue.
        let (_, work) = take_queued(&mut st.phase)?;
        ps.stats.pending -= 1;
        // Shutdowns cancel claimed jobs themselves (see `Pool::shutdown`);
        // this only guards the rule that nothing starts once stopped.
        if ps.stopped || (ps.shutdown && W::PERIODIC && !pool.config.continue_periodic) {
            ps.stats.cancelled += 1;
            let cleanup = finish(self.id, &mut st, Err(JobError::Cancelled), Some(work));
            drop(st);
            pool.unlock(ps);
            cleanup.run();
            return None;
        }
        let (abort, registration) = AbortHandle::new_pair();
        st.phase = Phase::Running {
            cancel: false,
            abort,
        };
        ps.stats.running += 1;
        ps.running[worker] = Some(self.clone() as Arc<dyn Task>);
        drop(st);
        drop(ps);
        Some((work, registration))
    }

    /// Ends a run: `Running` → `Queued` again (periodic) or `Done`.
    fn end(
        self: &Arc<Self>,
        pool: &Pool,
        worker: usize,
        work: Option<W>,
        outcome: Outcome<W::Output>,
    ) {
        let mut ps = pool.lock();
        let mut st = self.lock();
        ps.stats.running -= 1;
        ps.running[worker] = None;
        let cancel = matches!(st.phase, Phase::Running { cancel: true, .. });
        let cleanup = match outcome {
            Outcome::Aborted => {
                ps.stats.cancelled += 1;
                finish(self.id, &mut st, Err(JobError::Cancelled), work)
            }
            Outcome::Panicked(payload) => {
                ps.stats.panicked += 1;
                finish(self.id, &mut st, Err(JobError::Panicked(payload)), work)
            }
            // `abort` won the race against a one-shot run that had already
            // returned: `abort` said it cancelled the job, so it did.
            Outcome::Returned(output) if cancel && !W::PERIODIC => {
                ps.stats.cancelled += 1;
                finish(self.id, &mut st, Err(JobError::Cancelled), work)
                    .with_garbage(Box::new(output))
            }
            Outcome::Returned(output) => {
                st.runs += 1;
                ps.stats.completed += 1;
                let shut = ps.stopped || (ps.shutdown && !pool.config.continue_periodic);
                match work {
                    Some(mut work) if !cancel && !shut => {
                        let deadline = work.reschedule(Instant::now());
                        let key = pool.queue.insert_at(self.clone(), deadline);
                        st.phase = Phase::Queued { key, work };
                        ps.stats.pending += 1;
                        Cleanup::NONE
                    }
                    Some(work) => {
                        ps.stats.cancelled += 1;
                        finish(self.id, &mut st, Err(JobError::Cancelled), Some(work))
                    }
                    None => finish(self.id, &mut st, Ok(output), None),
                }
            }
        };
        drop(st);
        pool.unlock(ps);
        cleanup.run();
    }

    /// One whole run, as the worker sees it.
    async fn run_once(self: Arc<Self>, pool: Arc<Pool>, worker: usize) {
        let Some((work, registration)) = self.begin(&pool, worker) else {
            return;
        };
        // From here the job is `Running`: if this future is dropped (the
        // runtime shuts down) or the worker unwinds before `end`, the guard
        // ends the job so that its handle still resolves.
        let mut guard = RunGuard {
            job: &self,
            pool: &pool,
            worker,
            armed: true,
        };
        // A periodic job's closure is user code too: a panic there ends the
        // job like a panic in its future. The work is held contained across
        // the await: if this future is dropped there, its `Drop` is too.
        let mut work = Contained::new(self.id, work);
        let outcome = match catch_unwind(AssertUnwindSafe(|| work.get_mut().start())) {
            Err(payload) => Outcome::Panicked(payload),
            Ok(run) => {
                // Polled once before an abort can stop it: a job counted as
                // started always reaches its first await (see `begun.rs`).
                let run = AssertUnwindSafe(run).catch_unwind();
                let run = Begun::new(run, registration);
                let mut run = Contained::new(self.id, run);
                let result = run.get_mut().await;
                drop(run);
                match result {
                    Ok(Ok(output)) => Outcome::Returned(output),
                    Ok(Err(payload)) => Outcome::Panicked(payload),
                    Err(_aborted) => Outcome::Aborted,
                }
            }
        };
        // A one-shot job's work is spent; only periodic work may run again.
        let work = W::PERIODIC.then(|| work.into_inner());
        if let Outcome::Panicked(payload) = &outcome {
            // Before `end` takes the locks: a subscriber is user code too.
            // One that panics here takes the worker down; the guard ends the
            // job and the pool replaces the worker.
            report_panic(self.id, W::PERIODIC, payload.as_ref());
        }
        guard.armed = false;
        // `end` drops no user value itself: it hands them to a cleanup,
        // which contains their panics.
        self.end(&pool, worker, work, outcome);
    }

    /// Ends a `Running` job whose run will never come back: its worker's
    /// future was dropped (the runtime shut down), or the worker is
    /// unwinding.
    fn abandon(&self, pool: &Pool, worker: usize) {
        // Unwinding out of its own worker's poll, or dropped because the
        // runtime goes away (maybe while the thread unwinds for a reason
        // of its own): only the first is this job's panic.
        let panicking = std::thread::panicking() && super::pool::in_worker_poll();
        let mut ps = pool.lock();
        let mut st = self.lock();
        if !matches!(st.phase, Phase::Running { .. }) {
            return;
        }
        ps.stats.running -= 1;
        ps.running[worker] = None;
        let result = if panicking {
            ps.stats.panicked += 1;
            let why = "the worker running this job panicked";
            Err(JobError::Panicked(Box::new(why)))
        } else {
            ps.stats.cancelled += 1;
            Err(JobError::Cancelled)
        };
        let cleanup = finish(self.id, &mut st, result, None);
        drop(st);
        pool.unlock(ps);
        cleanup.run();
    }
}

/// Ends a `Running` job if its run is dropped before it ended normally.
struct RunGuard<'a, W: Work> {
    job: &'a Job<W>,
    pool: &'a Pool,
    worker: usize,
    armed: bool,
}

impl<W: Work> Drop for RunGuard<'_, W> {
    fn drop(&mut self) {
        if self.armed {
            self.job.abandon(self.pool, self.worker);
        }
    }
}

/// Takes the work out of a `Queued` phase; leaves any other phase as it was.
fn take_queued<W: Work>(phase: &mut Phase<W>) -> Option<(Key, W)> {
    match std::mem::replace(phase, Phase::Moving) {
        Phase::Queued { key, work } => Some((key, work)),
        other => {
            *phase = other;
            None
        }
    }
}

/// Moves the job to `Done(result)`. The work (if any) is dropped by the
/// returned cleanup, and so is the result if nobody will collect it.
fn finish<W: Work>(
    id: u64,
    st: &mut JobState<W>,
    result: Result<W::Output, JobError>,
    work: Option<W>,
) -> Cleanup {
    let mut cleanup = Cleanup {
        job: id,
        waker: st.waker.take(),
        ..Cleanup::NONE
    };
    if let Some(work) = work {
        cleanup = cleanup.with_garbage(Box::new(work));
    }
    if st.detached {
        st.phase = Phase::Collected(end_of(&result));
        cleanup.with_garbage(Box::new(result))
    } else {
        st.phase = Phase::Done(result);
        cleanup
    }
}

fn end_of<T>(result: &Result<T, JobError>) -> End {
    match result {
        Ok(_) => End::Completed,
        Err(JobError::Cancelled) => End::Cancelled,
        Err(JobError::Panicked(_)) => End::Panicked,
    }
}

/// A stopped job must never be silent, least of all a periodic one.
fn report_panic(id: u64, periodic: bool, payload: &(dyn Any + Send)) {
    let message = panic_message(payload).unwrap_or("(non-string payload)");
    if periodic {
        tracing::error!(
            job = id,
            panic = message,
            "periodic job panicked; it will not run again"
        );
    } else {
        tracing::error!(job = id, panic = message, "job panicked");
    }
}

impl<W: Work> Task for Job<W> {
    fn is_periodic(&self) -> bool {
        W::PERIODIC
    }

    fn run(self: Arc<Self>, pool: Arc<Pool>, worker: usize) -> BoxFuture<'static, ()> {
        Box::pin(self.run_once(pool, worker))
    }

    fn cancel_queued(&self, ps: &mut PoolState) -> Option<Cleanup> {
        let mut st = self.lock();
        let (_, work) = take_queued(&mut st.phase)?;
        ps.stats.pending -= 1;
        ps.stats.cancelled += 1;
        Some(finish(
            self.id,
            &mut st,
            Err(JobError::Cancelled),
            Some(work),
        ))
    }

    fn stop_run(&self, abort: bool) -> Cleanup {
        let mut st = self.lock();
        match &mut st.phase {
            Phase::Running { cancel, abort: run } => {
                *cancel = true;
                Cleanup {
                    job: self.id,
                    abort: abort.then(|| run.clone()),
                    ..Cleanup::NONE
                }
            }
            _ => Cleanup::NONE,
        }
    }
}

impl<W: Work> Control<W::Output> for Job<W> {
    fn id(&self) -> u64 {
        self.id
    }

    fn cancel(&self, pool: &Pool, abort: bool) -> bool {
        let mut ps = pool.lock();
        let mut st = self.lock();
        let mut removed = None;
        let mut unrun = None;
        let (cancelled, cleanup) = if let Some((key, work)) = take_queued(&mut st.phase) {
            // Removed by key at once: no cancelled garbage waits in the
            // queue for its deadline.
            removed = pool.queue.remove(key);
            ps.stats.pending -= 1;
            ps.stats.cancelled += 1;
            unrun = Some(work);
            let cleanup = finish(self.id, &mut st, Err(JobError::Cancelled), None);
            (true, cleanup)
        } else {
            match &mut st.phase {
                // A one-shot run in progress can only be aborted; a periodic
                // one may finish, but is not run again.
                Phase::Running { cancel, abort: run } if abort || W::PERIODIC => {
                    let first = !*cancel;
                    *cancel = true;
                    let cleanup = Cleanup {
                        job: self.id,
                        abort: abort.then(|| run.clone()),
                        ..Cleanup::NONE
                    };
                    (first, cleanup)
                }
                _ => (false, Cleanup::NONE),
            }
        };
        drop(st);
        pool.unlock(ps);
        cleanup.run();
        // Dropped last and contained, as the cleanup's own garbage is, but
        // without boxing it first.
        if let Some(work) = unrun {
            contain(self.id, "dropping a job's value", move || drop(work));
        }
        // The queue's reference to this job: never the last one (the handle
        // calling this holds another), so no user value is dropped here.
        drop(removed);
        cancelled
    }

    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<W::Output, JobError>> {
        let mut st = self.lock();
        match std::mem::replace(&mut st.phase, Phase::Moving) {
            Phase::Done(result) => {
                st.phase = Phase::Collected(end_of(&result));
                Poll::Ready(result)
            }
            Phase::Collected(_) => panic!("`JobHandle` polled after it returned its result"),
            other => {
                st.phase = other;
                if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    fn end(&self) -> Option<End> {
        match &self.lock().phase {
            Phase::Done(Ok(_)) => Some(End::Completed),
            Phase::Done(Err(JobError::Cancelled)) => Some(End::Cancelled),
            Phase::Done(Err(JobError::Panicked(_))) => Some(End::Panicked),
            Phase::Collected(end) => Some(*end),
            _ => None,
        }
    }

    fn is_cancelled(&self) -> bool {
        matches!(
            self.lock().phase,
            Phase::Running { cancel: true, .. }
                | Phase::Done(Err(JobError::Cancelled))
                | Phase::Collected(End::Cancelled)
        )
    }

    fn next_run(&self, pool: &Pool) -> Option<Instant> {
        match &self.lock().phase {
            Phase::Queued { key, .. } => pool.queue.deadline(*key),
            _ => None,
        }
    }

    fn runs(&self) -> u64 {
        self.lock().runs
    }

    fn detach(&self) {
        let mut st = self.lock();
        st.detached = true;
        let waker = st.waker.take();
        let result = match std::mem::replace(&mut st.phase, Phase::Moving) {
            Phase::Done(result) => {
                st.phase = Phase::Collected(end_of(&result));
                Some(result)
            }
            other => {
                st.phase = other;
                None
            }
        };
        drop(st);
        contain(self.id, "dropping a job's result", move || {
            drop(waker);
            drop(result);
        });
    }
}
