//! [`TakeStream`]: `take()` in a loop, as a `Stream`, and [`StreamNext`], its
//! `next()` that gives its place up when dropped.

use super::DelayQueue;
use futures::Stream;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type TakeFuture<T> = Pin<Box<dyn Future<Output = T> + Send + Sync>>;

/// A [`Stream`] of a [`DelayQueue`]'s values as they come due, returned by
/// [`DelayQueue::stream`].
///
/// It owns a handle to the queue and never ends (`poll_next` never returns
/// `Ready(None)`). While it waits, it is one of the queue's waiting
/// consumers, exactly like a pending [`take`](DelayQueue::take).
///
/// Its inherent [`next`](TakeStream::next) shadows `StreamExt::next` and
/// gives the stream's place up when its future is dropped: a stream kept
/// across `select!` iterations, whose `next()` lost a race, never holds the
/// timer or the wake-up another consumer needs while the loop body runs. A
/// stream polled through [`Stream::poll_next`] by some other means keeps its
/// place until it is polled again or dropped, like a `take` future (see
/// [`take`](DelayQueue::take)).
///
/// # Cancel safety
///
/// Dropping the stream, or a `next()` future, while it waits loses no entry:
/// the stream holds at most one pending `take`, which is cancel safe.
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
    pending: Option<TakeFuture<T>>,
}

impl<T> TakeStream<T> {
    pub(super) fn new(queue: DelayQueue<T>) -> Self {
        TakeStream {
            queue,
            pending: None,
        }
    }

    /// The next value to come due; `None` never comes. Same as
    /// `StreamExt::next`, except that dropping the future before it is
    /// ready gives the stream's place among the waiting consumers up at
    /// once, as dropping a [`take`](DelayQueue::take) future does.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropping the future loses no entry, and
    /// hands the duty of timing the earliest entry on to another waiting
    /// consumer if this stream held it.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let mut expired = queue.stream();
    /// let mut ticks = tokio::time::interval(Duration::from_secs(1));
    /// queue.insert("session 7", Duration::from_millis(2500));
    /// let mut seen = Vec::new();
    /// while seen.len() < 4 {
    ///     tokio::select! {
    ///         // Losing this branch drops the `next()` future, which gives
    ///         // the stream's place up while the other branch's body runs.
    ///         Some(session) = expired.next() => seen.push(session),
    ///         _ = ticks.tick() => seen.push("tick"),
    ///     }
    /// }
    /// assert_eq!(seen, ["tick", "tick", "tick", "session 7"]);
    /// # }
    /// ```
    // Deliberately named like `StreamExt::next`, which it shadows: the
    // future it returns differs only in giving the place up on drop.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> StreamNext<'_, T>
    where
        T: Send + 'static,
    {
        StreamNext { stream: self }
    }
}

impl<T: Send + 'static> Stream for TakeStream<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        let pending = this.pending.get_or_insert_with(|| {
            let queue = this.queue.clone();
            Box::pin(async move { queue.take().await })
        });
        let value = std::task::ready!(pending.as_mut().poll(cx));
        this.pending = None;
        Poll::Ready(Some(value))
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

/// Future returned by [`TakeStream::next`].
///
/// Dropping it before it is ready drops the stream's pending `take`, which
/// hands on whatever duty it held; no entry is lost.
#[must_use = "futures do nothing unless polled"]
pub struct StreamNext<'a, T> {
    stream: &'a mut TakeStream<T>,
}

impl<T: Send + 'static> Future for StreamNext<'_, T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut *self.stream).poll_next(cx)
    }
}

impl<T> Drop for StreamNext<'_, T> {
    fn drop(&mut self) {
        // Ready or not, the stream keeps no waiter of its own behind this
        // future: the `take` it held (if any) leaves the queue's waiters.
        self.stream.pending = None;
    }
}

impl<T> fmt::Debug for StreamNext<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamNext")
            .field("stream", &self.stream)
            .finish()
    }
}
