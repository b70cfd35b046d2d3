//! The waiting consumers of one built handle share one waiter
//! (Leader-Follower).
//!
//! The leader sleeps until the head's deadline as the server reported it, a
//! pub/sub notification (a new count in `kicks`), or `poll_interval`,
//! whichever comes first,
//! then asks Redis again; followers wait untimed on `followers` and are woken
//! one at a time: when the leader leaves (with an entry, or dropped) and when
//! a claim saw more entries due than it took. So an idle queue costs one
//! request per `poll_interval` per built handle however many consumers wait.
//! A consumer that starts waiting (one coming back for more, or a follower
//! taking over from a leader that left) does not ask Redis if the last claim
//! of the process said nothing is due yet: it waits until then. Only an
//! insert, reset, retry, requeue or shortened lease can make an entry due
//! earlier, and those announce themselves, which cuts the leader's nap short
//! and makes the recorded head stale. A durable worker on the handle naps
//! the same way, outside the leader's protocol (it watches `kicks` too).

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Waiter {
    /// Whether some consumer of this process is the leader.
    leader: Mutex<bool>,
    /// Followers park here.
    pub(crate) followers: Notify,
    /// Counts the announcements of a new head (and the listener's
    /// subscriptions, after which announcements may have been missed). A
    /// consumer reads the count before it claims and naps until the count
    /// moves on, so an announcement that arrives between a claim and the
    /// nap after it is not lost.
    kicks: watch::Sender<u64>,
    /// When the head is due, as the last claim of this handle reported it,
    /// and the count of kicks read before that claim.
    next_due: Mutex<Option<(Instant, u64)>>,
    /// Stops the listener task when the queue's last handle is dropped.
    listener: Mutex<Option<oneshot::Sender<()>>>,
}

/// Leadership, given up (and passed to a follower) on drop.
#[derive(Debug)]
pub(crate) struct Lead<'a>(&'a Waiter);

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        *lock(&self.0.leader) = false;
        // Any follower parked before this point was enabled before it saw
        // `leader == true`, so it gets this notification (or a permit waits
        // for the next follower, which then makes one extra request).
        self.0.followers.notify_one();
    }
}

impl Default for Waiter {
    fn default() -> Self {
        Waiter {
            leader: Mutex::new(false),
            followers: Notify::new(),
            kicks: watch::Sender::new(0),
            next_due: Mutex::new(None),
            listener: Mutex::new(None),
        }
    }
}

impl Waiter {
    /// A watch of the announcements; its current count is seen.
    pub(crate) fn kicks(&self) -> watch::Receiver<u64> {
        self.kicks.subscribe()
    }

    /// Becomes the leader if there is none.
    pub(crate) fn try_lead(&self) -> Option<Lead<'_>> {
        let mut leader = lock(&self.leader);
        if *leader {
            return None;
        }
        *leader = true;
        Some(Lead(self))
    }

    /// Records when the head is due, as a claim made after `seen` kicks
    /// reported it.
    pub(crate) fn set_next_due(&self, at: Instant, seen: u64) {
        *lock(&self.next_due) = Some((at, seen));
    }

    /// When the head is due, unless an announcement came since the claim
    /// that said so (the head may be earlier now), or that time has passed.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let (at, seen) = (*lock(&self.next_due))?;
        (seen == *self.kicks.borrow() && at > Instant::now()).then_some(at)
    }

    /// Starts the task that turns announcements on `channel` into kicks, once.
    pub(crate) fn listen(&self, listener: impl FnOnce() -> Listener) {
        let mut slot = lock(&self.listener);
        if slot.is_some() {
            return;
        }
        let (stop_tx, stop) = oneshot::channel();
        *slot = Some(stop_tx);
        tokio::spawn(listener().run(self.kicks.clone(), stop));
    }
}

/// What the listener task needs.
#[derive(Debug)]
pub(crate) struct Listener {
    /// Where to subscribe: the server, or a cluster's seed nodes, tried in
    /// turn (a cluster forwards every `PUBLISH` to every node).
    pub(crate) clients: Vec<redis::Client>,
    pub(crate) channel: String,
    pub(crate) queue: String,
    /// The longest wait for a reply (the subscription, a PING).
    pub(crate) response_timeout: Duration,
    /// How long the connection may stay silent before a PING checks it.
    pub(crate) ping_after: Duration,
}

impl Listener {
    /// Subscribes to the channel and kicks the leader on each message, until
    /// `stop` closes. A connection that stays silent is PINGed, and replaced
    /// when the answer does not come within the response timeout (a
    /// half-open connection delivers nothing and says nothing). Reconnects
    /// with capped back-off; a (re)subscription kicks once, since
    /// announcements made while it was down are lost. A user without the
    /// right to subscribe gets a warning, and consumers rely on polling.
    async fn run(self, kicks: watch::Sender<u64>, mut stop: oneshot::Receiver<()>) {
        let kick = || kicks.send_modify(|count| *count = count.wrapping_add(1));
        let queue = &self.queue;
        let mut backoff = Backoff::default();
        let mut next = 0;
        loop {
            let Some(client) = self.clients.get(next % self.clients.len().max(1)) else {
                return;
            };
            let session = async {
                let pubsub = tokio::time::timeout(self.response_timeout, client.get_async_pubsub())
                    .await
                    .map_err(|_| timed_out("a pub/sub connection"))??;
                let (mut sink, mut messages) = pubsub.split();
                tokio::time::timeout(self.response_timeout, sink.subscribe(&self.channel))
                    .await
                    .map_err(|_| timed_out("the subscription"))??;
                backoff.reset();
                kick();
                loop {
                    match tokio::time::timeout(self.ping_after, messages.next()).await {
                        Ok(Some(_)) => kick(),
                        Ok(None) => return Ok::<(), redis::RedisError>(()),
                        Err(_) => {
                            let pong = tokio::time::timeout(
                                self.response_timeout,
                                sink.ping::<redis::Value>(),
                            );
                            pong.await.map_err(|_| timed_out("a PING"))??;
                        }
                    }
                }
            };
            tokio::select! {
                _ = &mut stop => return,
                result = session => match result {
                    Ok(()) => tracing::debug!(queue, "redis pub/sub connection closed; reconnecting"),
                    Err(error) if error.code() == Some("NOPERM") => {
                        tracing::warn!(queue, %error,
                            "this user may not subscribe to the queue's channel: \
                             consumers rely on polling (poll_interval)");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(queue, %error, "redis pub/sub failed; reconnecting");
                        // The next seed node of a cluster, in case this one is gone.
                        next += 1;
                    }
                },
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(backoff.next()) => {}
            }
        }
    }
}

fn timed_out(what: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer to {what} in time"),
    ))
}

/// Capped exponential back-off between attempts to reach Redis: 10 ms,
/// 20 ms, ... up to 1 s.
#[derive(Debug, Default)]
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn next(&mut self) -> Duration {
        let pause = Duration::from_millis(10 << self.0.min(7)).min(Duration::from_secs(1));
        self.0 = self.0.saturating_add(1);
        pause
    }

    pub(crate) fn reset(&mut self) {
        self.0 = 0;
    }

    /// Counts a failure without pausing: the next `next()` pauses.
    pub(crate) fn fail(&mut self) {
        self.0 = self.0.saturating_add(1);
    }

    pub(crate) fn failed(&self) -> bool {
        self.0 > 0
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // No user code runs under these locks; a poisoned one holds a valid value.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
