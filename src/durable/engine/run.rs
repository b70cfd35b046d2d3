//! A handler's task: the handler's future behind its fence and its timeout,
//! both checked in the task itself on every poll.
//!
//! Why in the task: the engine also drops a run at its fence (a timer in
//! its `select!`), but the engine is one task among many. On a busy
//! runtime it may be scheduled late, after the handler's own task was
//! woken by its I/O, past the lease end; the handler would then run on
//! while another consumer holds its entry. Checked here, the handler is
//! never polled once the lease end as the worker knows it has passed,
//! however late the engine is. Likewise a handler that returns after its
//! timeout without ever awaiting (`tokio::time::timeout` polls the future
//! before it looks at the clock) still fails.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::durable::Outcome;

/// Until when a run's lease is surely held, shared by the engine (which
/// moves it on after each extension) and the run's task (which reads it on
/// every poll).
#[derive(Debug)]
pub(super) struct Fence {
    base: Instant,
    /// Nanoseconds after `base`.
    until: AtomicU64,
}

impl Fence {
    pub(super) fn new(until: Instant) -> Arc<Fence> {
        let base = Instant::now().min(until);
        let fence = Fence {
            base,
            until: AtomicU64::new(0),
        };
        fence.set(until);
        Arc::new(fence)
    }

    /// Moves the end on (never back: an older extension's answer that
    /// arrives late changes nothing). Relaxed: a task that reads a stale,
    /// earlier end stops too early, never too late.
    pub(super) fn set(&self, until: Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        self.until.fetch_max(nanos, Ordering::Relaxed);
    }

    pub(super) fn until(&self) -> Instant {
        let nanos = self.until.load(Ordering::Relaxed);
        crate::queue::deadline_after(self.base, Duration::from_nanos(nanos))
    }

    fn passed(&self, now: Instant) -> bool {
        now >= self.until()
    }
}

/// How a handler's task ended (an abort aside).
#[derive(Debug)]
pub(super) enum Ran {
    /// What the handler said (a panic or a timeout: a retry with its
    /// message), and what made it say so.
    Said(Outcome, Cause),
    /// Its lease may have run out: not polled again, its outcome discarded.
    Fenced,
}

/// What made a run end as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// The handler returned.
    Handler,
    Panic,
    Timeout,
}

pin_project! {
    /// The handler's future, polled only while its lease is surely held
    /// and failed once it has run longer than its timeout.
    pub(super) struct Guarded<F> {
        #[pin]
        handler: F,
        #[pin]
        timer: Option<Sleep>,
        fence: Arc<Fence>,
        // When the run started and its timeout.
        limit: Option<(Instant, Duration)>,
    }
}

impl<F> Guarded<F> {
    pub(super) fn new(handler: F, fence: Arc<Fence>, timeout: Option<Duration>) -> Guarded<F> {
        let started = Instant::now();
        Guarded {
            handler,
            timer: timeout.map(|limit| {
                tokio::time::sleep_until(crate::queue::deadline_after(started, limit))
            }),
            fence,
            limit: timeout.map(|limit| (started, limit)),
        }
    }
}

fn timed_out(limit: Duration) -> Ran {
    Ran::Said(
        Outcome::retry(format_args!("timed out after {limit:?}")),
        Cause::Timeout,
    )
}

impl<F: Future<Output = (Outcome, Cause)>> Future for Guarded<F> {
    type Output = Ran;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ran> {
        let mut this = self.project();
        let longer_than_limit =
            |now: Instant, (started, limit): (Instant, Duration)| now - started > limit;
        let now = Instant::now();
        if this.fence.passed(now) {
            return Poll::Ready(Ran::Fenced);
        }
        if let Some(limit) = *this.limit {
            if longer_than_limit(now, limit) {
                return Poll::Ready(timed_out(limit.1));
            }
        }
        match this.handler.poll(cx) {
            Poll::Ready(result) => {
                // It may have run (blocked) past either end inside this poll.
                let now = Instant::now();
                if this.fence.passed(now) {
                    return Poll::Ready(Ran::Fenced);
                }
                if let Some(limit) = *this.limit {
                    if longer_than_limit(now, limit) {
                        return Poll::Ready(timed_out(limit.1));
                    }
                }
                Poll::Ready(Ran::Said(result.0, result.1))
            }
            Poll::Pending => {
                if let Some(timer) = this.timer.as_mut().as_pin_mut() {
                    ready!(timer.poll(cx));
                    if let Some((_, limit)) = *this.limit {
                        return Poll::Ready(timed_out(limit));
                    }
                }
                Poll::Pending
            }
        }
    }
}
