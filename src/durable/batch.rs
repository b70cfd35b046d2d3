//! Single inserts of one handle made at the same time, sent together: while
//! a request of them is on its way, the calls that come meanwhile wait and
//! go out as the next request (one script, one statement), as a database's
//! group commit does with its flushes.
//!
//! Why: a service inserts from many requests at once. Sent one by one, 256
//! inserts in flight on one handle are 256 script runs (Redis) or 256
//! transactions (PostgreSQL), and a worker's claim on the same connection
//! or pool waits behind all of them; sent together they are a few requests
//! that cost the store a fraction of that (see "Lateness under load" in the module docs
//! of [`engine`](super::engine)). A producer that awaits each insert before
//! the next never waits here: its call finds nothing on its way and is sent
//! at once, alone, from its own future.
//!
//! Ground rules. `state` (a short lock, never held across an await, a
//! spawn or a reply) holds the calls waiting to be sent and how many
//! requests are on their way (at most `max_in_flight`). A call that finds
//! room sends its item alone, in its own future; one that finds none
//! queues, and only then (so `queued` is empty whenever there is room, but
//! for the moment between a request's end and the batch after it). When a
//! request ends, or its caller's future is dropped before it ended (the
//! [`Handover`] guard), the calls queued meanwhile go out together from a
//! task spawned for them, which goes on with the calls queued during each
//! of its requests until none is left; the room it held is then given
//! back. A call dropped while queued is left out (nothing of it was sent);
//! one dropped after its request was sent may still have applied, as any
//! request may.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::lock::Lock;

/// Batches the calls of one handle; see the module docs.
pub(crate) struct Batcher<I, O, E> {
    state: Lock<State<I, O, E>>,
    /// The most items in one request.
    cap: usize,
    max_in_flight: usize,
}

struct State<I, O, E> {
    queued: Vec<Waiting<I, O, E>>,
    in_flight: usize,
}

struct Waiting<I, O, E> {
    item: I,
    reply: oneshot::Sender<Result<O, E>>,
}

impl<I, O, E> std::fmt::Debug for Batcher<I, O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Batcher")
            .field("queued", &state.queued.len())
            .field("in_flight", &state.in_flight)
            .finish_non_exhaustive()
    }
}

impl<I, O, E> Batcher<I, O, E>
where
    I: Send + 'static,
    O: Send + 'static,
    E: Send + 'static,
{
    /// At most `cap` items in one request, `max_in_flight` requests at a
    /// time.
    pub(crate) fn new(cap: usize, max_in_flight: usize) -> Arc<Self> {
        Arc::new(Batcher {
            state: Lock::new(State {
                queued: Vec::new(),
                in_flight: 0,
            }),
            cap: cap.max(1),
            max_in_flight: max_in_flight.max(1),
        })
    }

    /// Sends `item` alone if there is room, else with the calls queued with
    /// it, by `send` (one result per item, in order); `lost()` if its
    /// request could not be sent or its answer was lost (no runtime to
    /// send it from, a panic).
    pub(crate) async fn call<S, F>(
        self: &Arc<Self>,
        item: I,
        send: S,
        lost: impl FnOnce() -> E,
    ) -> Result<O, E>
    where
        S: Fn(Vec<I>) -> F + Send + Sync + 'static,
        F: Future<Output = Vec<Result<O, E>>> + Send + 'static,
    {
        let queued = {
            let mut state = self.state.lock();
            if state.in_flight < self.max_in_flight {
                state.in_flight += 1;
                Err(item)
            } else {
                let (reply, answer) = oneshot::channel();
                state.queued.push(Waiting { item, reply });
                Ok(answer)
            }
        };
        match queued {
            Ok(answer) => answer.await.unwrap_or_else(|_| Err(lost())),
            Err(item) => {
                // Whatever becomes of this future, the calls queued behind
                // its request go out when it ends.
                let handover = Handover {
                    batcher: Arc::clone(self),
                    send: Some(send),
                };
                let request = (handover.send.as_ref().expect("set above"))(vec![item]);
                let result = request.await.into_iter().next();
                drop(handover);
                result.unwrap_or_else(|| Err(lost()))
            }
        }
    }

    /// A request ended: the room it held goes to the calls queued
    /// meanwhile, sent from a task, or is given back.
    fn release<S, F>(self: &Arc<Self>, send: S)
    where
        S: Fn(Vec<I>) -> F + Send + Sync + 'static,
        F: Future<Output = Vec<Result<O, E>>> + Send + 'static,
    {
        {
            let mut state = self.state.lock();
            if state.queued.is_empty() {
                state.in_flight -= 1;
                return;
            }
        }
        let runtime = tokio::runtime::Handle::try_current();
        match runtime {
            Ok(runtime) => {
                let batcher = Arc::clone(self);
                runtime.spawn(async move { batcher.run(send).await });
            }
            Err(_) => {
                // No runtime to send them from (a handle dropped outside
                // one): they fail as lost.
                let dropped = {
                    let mut state = self.state.lock();
                    state.in_flight -= 1;
                    std::mem::take(&mut state.queued)
                };
                drop(dropped);
            }
        }
    }

    /// Sends the queued calls, `cap` at a time, until none is left.
    async fn run<S, F>(self: Arc<Self>, send: S)
    where
        S: Fn(Vec<I>) -> F + Send + Sync + 'static,
        F: Future<Output = Vec<Result<O, E>>> + Send + 'static,
    {
        let mut running = Running {
            batcher: &self,
            done: false,
        };
        loop {
            let batch: Vec<Waiting<I, O, E>> = {
                let mut state = self.state.lock();
                // Calls whose caller is gone are left out: nothing of them
                // was sent.
                state.queued.retain(|waiting| !waiting.reply.is_closed());
                if state.queued.is_empty() {
                    state.in_flight -= 1;
                    running.done = true;
                    return;
                }
                let take = state.queued.len().min(self.cap);
                state.queued.drain(..take).collect()
            };
            let (items, replies): (Vec<I>, Vec<_>) = batch
                .into_iter()
                .map(|waiting| (waiting.item, waiting.reply))
                .unzip();
            let results = send(items).await;
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
    }
}

/// Hands the room of a call's own request over when it ends (or its
/// future is dropped).
struct Handover<I, O, E, S, F>
where
    I: Send + 'static,
    O: Send + 'static,
    E: Send + 'static,
    S: Fn(Vec<I>) -> F + Send + Sync + 'static,
    F: Future<Output = Vec<Result<O, E>>> + Send + 'static,
{
    batcher: Arc<Batcher<I, O, E>>,
    send: Option<S>,
}

impl<I, O, E, S, F> Drop for Handover<I, O, E, S, F>
where
    I: Send + 'static,
    O: Send + 'static,
    E: Send + 'static,
    S: Fn(Vec<I>) -> F + Send + Sync + 'static,
    F: Future<Output = Vec<Result<O, E>>> + Send + 'static,
{
    fn drop(&mut self) {
        if let Some(send) = self.send.take() {
            self.batcher.release(send);
        }
    }
}

/// Gives the room back and fails the queued calls if the task sending
/// them ends otherwise than by finding none left (a panic in `send`).
struct Running<'a, I, O, E> {
    batcher: &'a Batcher<I, O, E>,
    done: bool,
}

impl<I, O, E> Drop for Running<'_, I, O, E> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let dropped = {
            let mut state = self.batcher.state.lock();
            state.in_flight -= 1;
            std::mem::take(&mut state.queued)
        };
        drop(dropped);
    }
}
