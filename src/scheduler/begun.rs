//! [`Begun`]: an abortable run that always gets to its first await point.
//!
//! A worker counts a job as started (`Running`, no longer one of the jobs
//! `shutdown_now` reports as never started) from the moment it takes it, a
//! step before it first polls the job's future. A plain [`Abortable`] looks
//! for an abort before every poll, the first included, so an abort landing in
//! that step would end a job whose code never ran, while `shutdown_now`
//! counted it as started. `Begun` polls the run once without looking; from
//! then on an abort stops it at its next await point, as documented for
//! `abort` and `shutdown_now`.
//!
//! The abort signal is an [`Abortable`] around a future that never finishes:
//! polling it registers the task's waker with the abort handle and reports an
//! abort, without ever polling the run itself twice in one call.

use futures::future::{AbortRegistration, Abortable, Aborted, Pending, pending};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// A run polled once before an abort can stop it.
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct Begun<F> {
        #[pin]
        run: F,
        abort: Abortable<Pending<()>>,
        polled: bool,
    }
}

impl<F> Begun<F> {
    pub(crate) fn new(run: F, registration: AbortRegistration) -> Self {
        Begun {
            run,
            abort: Abortable::new(pending(), registration),
            polled: false,
        }
    }
}

impl<F: Future> Future for Begun<F> {
    type Output = Result<F::Output, Aborted>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let first = !std::mem::replace(this.polled, true);
        // After the first poll, an abort wins before the run is polled again.
        if !first && Pin::new(&mut *this.abort).poll(cx).is_ready() {
            return Poll::Ready(Err(Aborted));
        }
        if let Poll::Ready(output) = this.run.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        // The first poll reached an await: from now on an abort stops the
        // run, so register for it (and see one that already came).
        if first && Pin::new(&mut *this.abort).poll(cx).is_ready() {
            return Poll::Ready(Err(Aborted));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::AbortHandle;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio_test::{assert_pending, assert_ready, task};

    /// Counts its polls; pending (without waking itself) until polled
    /// `ready_at` times.
    struct Steps {
        polls: Arc<AtomicUsize>,
        ready_at: usize,
    }

    impl Future for Steps {
        type Output = usize;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<usize> {
            let n = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= self.ready_at {
                Poll::Ready(n)
            } else {
                Poll::Pending
            }
        }
    }

    fn begun(ready_at: usize) -> (Begun<Steps>, AbortHandle, Arc<AtomicUsize>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let (handle, registration) = AbortHandle::new_pair();
        let steps = Steps {
            polls: polls.clone(),
            ready_at,
        };
        let run = Begun::new(steps, registration);
        (run, handle, polls)
    }

    #[test]
    fn an_abort_before_the_first_poll_still_lets_the_run_reach_its_first_await() {
        let (run, handle, polls) = begun(5);
        handle.abort();
        let mut run = task::spawn(run);
        assert_eq!(assert_ready!(run.poll()), Err(Aborted));
        assert_eq!(polls.load(Ordering::SeqCst), 1, "polled exactly once");
    }

    #[test]
    fn a_run_that_finishes_in_its_first_poll_returns_its_output() {
        let (run, handle, _) = begun(1);
        handle.abort();
        let mut run = task::spawn(run);
        assert_eq!(assert_ready!(run.poll()), Ok(1));
    }

    #[test]
    fn an_abort_after_the_first_poll_wakes_the_run_and_stops_it() {
        let (run, handle, polls) = begun(5);
        let mut run = task::spawn(run);
        assert_pending!(run.poll());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "not polled twice in one call"
        );
        // The abort handle knows the waker from the first poll.
        handle.abort();
        assert!(run.is_woken());
        assert_eq!(assert_ready!(run.poll()), Err(Aborted));
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "not polled after the abort"
        );
    }

    #[test]
    fn without_an_abort_every_poll_reaches_the_run_once() {
        let (run, _handle, polls) = begun(3);
        let mut run = task::spawn(run);
        assert_pending!(run.poll());
        assert_pending!(run.poll());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(assert_ready!(run.poll()), Ok(3));
    }
}
