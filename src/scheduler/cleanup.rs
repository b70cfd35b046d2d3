//! What a job transition leaves to do once every lock is released, and the
//! one place where the scheduler lets user code run outside a job's run.
//!
//! Ground rules:
//!
//! - Transitions decide under the locks and return a [`Cleanup`]; the caller
//!   releases the locks, then runs it.
//! - A cleanup signals first (aborts the run, wakes the handle) and drops user
//!   values last, so a `Drop` that panics can never leave a handle unwoken.
//!   [`Cleanup::run_all`] signals every job of a batch before it drops any
//!   value of the batch.
//! - Every user value (a job's future or closure, its output, a panic
//!   payload) and every waker is handled inside [`contain`]: a panic there is
//!   reported through `tracing` and goes no further, so it reaches neither the
//!   caller of a scheduler method nor a worker.

use super::error::panic_message;
use futures::future::AbortHandle;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Waker;

/// A user value whose `Drop` may run user code.
pub(crate) type Garbage = Box<dyn Any + Send>;

/// What a transition leaves to do once every lock is released.
#[must_use = "a cleanup decided under the locks must be run after them"]
pub(crate) struct Cleanup {
    /// The job, for reports.
    pub(crate) job: u64,
    pub(crate) abort: Option<AbortHandle>,
    pub(crate) waker: Option<Waker>,
    /// At most a job's work and its result are dropped by one transition.
    pub(crate) garbage: [Option<Garbage>; 2],
}

impl Cleanup {
    pub(crate) const NONE: Cleanup = Cleanup {
        job: 0,
        abort: None,
        waker: None,
        garbage: [None, None],
    };

    /// Adds a user value to drop after the signals.
    pub(crate) fn with_garbage(mut self, value: Garbage) -> Cleanup {
        match self.garbage.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(value),
            // Never more than two: the work and the result.
            None => contain(self.job, "a job's value", move || drop(value)),
        }
        self
    }

    /// Fires the abort, wakes the handle, then drops the user values.
    pub(crate) fn run(mut self) {
        self.signal();
        self.drop_garbage();
    }

    /// Runs a batch: every signal first, then every drop.
    pub(crate) fn run_all(mut cleanups: Vec<Cleanup>) {
        cleanups.iter_mut().for_each(Cleanup::signal);
        cleanups.into_iter().for_each(Cleanup::drop_garbage);
    }

    fn signal(&mut self) {
        if let Some(abort) = self.abort.take() {
            abort.abort();
        }
        if let Some(waker) = self.waker.take() {
            contain(self.job, "waking a job's handle", move || waker.wake());
        }
    }

    fn drop_garbage(self) {
        for value in self.garbage.into_iter().flatten() {
            contain(self.job, "dropping a job's value", move || drop(value));
        }
    }
}

/// Runs `f`, which runs user code, so that a panic in it goes no further
/// than a `tracing` error event.
///
/// This may run in a `Drop` while the thread unwinds (a worker dropped mid-run
/// as its runtime goes away during a panic), where a second panic escaping
/// would abort the process: so the report, which runs the subscriber's code,
/// is contained as well, and the payload's own `Drop` too.
pub(crate) fn contain(job: u64, what: &'static str, f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        let reported = catch_unwind(AssertUnwindSafe(|| {
            let message = panic_message(payload.as_ref()).unwrap_or("(non-string payload)");
            tracing::error!(job, panic = message, "{what} panicked");
        }));
        for value in [Some(payload), reported.err()].into_iter().flatten() {
            if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
                std::mem::forget(again);
            }
        }
    }
}

/// Holds a user value (a job's future or closure while it runs) so that it
/// is dropped inside [`contain`] on every path, including when the worker's
/// future is dropped mid-run because the runtime shuts down.
pub(crate) struct Contained<T> {
    job: u64,
    value: Option<T>,
}

impl<T> Contained<T> {
    pub(crate) fn new(job: u64, value: T) -> Self {
        Contained {
            job,
            value: Some(value),
        }
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value
            .as_mut()
            .expect("a contained value is present until dropped")
    }

    pub(crate) fn into_inner(mut self) -> T {
        self.value
            .take()
            .expect("a contained value is present until dropped")
    }
}

impl<T> Drop for Contained<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            contain(self.job, "dropping a job's value", move || drop(value));
        }
    }
}
