//! [`TakeStream`]: the queue's values as a `Stream`.
//!
//! A stream waits apart from the Leader-Follower protocol of `take` (see
//! `state.rs`): with its own timer for the head's deadline, woken early by a
//! broadcast when the head moves forward. So a stream that is kept but not
//! polled (its `next()` lost a `select!`, and the loop body is busy) holds
//! nothing another consumer needs: no leader's timer, no hand-off wake-up.
//! The price is one timer per waiting stream, and one wake-up of every
//! waiting stream when the head comes due or moves forward.

use super::DelayQueue;
use super::state::{Shared, Wake};
use futures::Stream;
use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::{Instant, sleep_until};

type WaitFuture<T> = Pin<Box<dyn Future<Output = Option<T>> + Send + Sync>>;

/// A [`Stream`] of a [`DelayQueue`]'s values as they come due, returned by
/// [`DelayQueue::stream`].
///
/// It owns a handle to the queue and never ends (`poll_next` never returns
/// `Ready(None)`).
///
/// A waiting stream keeps its own timer instead of taking part in the
/// Leader-Follower hand-off of [`take`](DelayQueue::take): a stream kept
/// across `select!` iterations, whose `next()` lost a race and which is not
/// polled again for a while, never keeps another consumer from an entry
/// that is due. The cost is that every waiting stream is woken when the
/// earliest entry comes due or moves earlier, so for many consumers of one
/// queue, `take` in a loop wakes fewer tasks.
///
/// # Cancel safety
///
/// Dropping the stream, or a `next()` future, while it waits loses no entry:
/// an entry is removed only in the same step that returns it.
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use punctual::DelayQueue;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = DelayQueue::new();
/// let mut expired = queue.stream();
/// queue.insert("b", Duration::from_secs(2));
/// queue.insert("a", Duration::from_secs(1));
/// assert_eq!(expired.next().await, Some("a"));
/// assert_eq!(expired.next().await, Some("b"));
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct TakeStream<T> {
    queue: DelayQueue<T>,
    pending: Option<WaitFuture<T>>,
}

impl<T> TakeStream<T> {
    pub(super) fn new(queue: DelayQueue<T>) -> Self {
        TakeStream {
            queue,
            pending: None,
        }
    }
}

impl<T: Send + 'static> Stream for TakeStream<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        loop {
            let pending = this
                .pending
                .get_or_insert_with(|| Box::pin(take_or_wait(this.queue.shared.clone())));
            let taken = std::task::ready!(pending.as_mut().poll(cx));
            this.pending = None;
            if let Some(value) = taken {
                return Poll::Ready(Some(value));
            }
        }
    }
}

/// Takes the head if it is due; else waits until the head's deadline or
/// until the head moves forward, and returns `None` to be asked again.
async fn take_or_wait<T>(shared: Arc<Shared<T>>) -> Option<T> {
    let mut moved = pin!(shared.stream_notify.notified());
    // Enabled before the state is read, so a broadcast sent between the
    // look and the await is kept (`notify_waiters` stores no permit).
    moved.as_mut().enable();
    let head = {
        let mut state = shared.lock();
        if let Some(value) = state.heap.pop_due(Instant::now()) {
            // As for any consumer that leaves: hand the duty on if nobody
            // times the rest.
            let wake = state.after_leave();
            shared.unlock_and_wake(state, wake);
            return Some(value);
        }
        state.streams += 1;
        let head = state.heap.peek_deadline();
        shared.unlock_and_wake(state, Wake::NONE);
        head
    };
    let _waiting = Waiting(&shared);
    match head {
        Some(deadline) => {
            let timer = pin!(sleep_until(deadline));
            futures::future::select(moved, timer).await;
        }
        None => moved.await,
    }
    None
}

/// Counts a waiting stream until it stops waiting, however it stops.
struct Waiting<'a, T>(&'a Shared<T>);

impl<T> Drop for Waiting<'_, T> {
    fn drop(&mut self) {
        self.0.lock().streams -= 1;
    }
}

impl<T> fmt::Debug for TakeStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TakeStream")
            .field("queue", &self.queue)
            .field("waiting", &self.pending.is_some())
            .finish()
    }
}
