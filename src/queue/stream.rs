//! [`TakeStream`]: `take()` in a loop, as a `Stream`.

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
/// `Ready(None)`).
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
