//! One process's waiting consumers share one waiter (Leader-Follower).
//!
//! The leader sleeps until the head's deadline as the server reported it, a
//! pub/sub notification (`kick`), or `poll_interval`, whichever comes first,
//! then asks Redis again; followers wait untimed on `followers` and are woken
//! one at a time: when the leader leaves (with an entry, or dropped) and when
//! a claim saw more entries due than it took. So an idle queue costs one
//! request per `poll_interval` per process however many consumers wait.
//! A consumer that starts waiting (one coming back for more, or a follower
//! taking over from a leader that left) does not ask Redis if the last claim
//! of the process said nothing is due yet: it waits until then. Only an
//! insert, reset, retry or requeue can make an entry due earlier, and those
//! announce themselves, which cuts the leader's nap short.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

#[derive(Debug, Default)]
pub(crate) struct Waiter {
    /// Whether some consumer of this process is the leader.
    leader: Mutex<bool>,
    /// Followers park here.
    pub(crate) followers: Notify,
    /// Notified by the listener on every announcement of a new head. Holds a
    /// permit when no leader waits, so an announcement that arrives between a
    /// leader's claim and its sleep is not lost.
    pub(crate) kick: Arc<Notify>,
    /// When the head is due, as the last claim of this process reported it.
    next_due: Mutex<Option<Instant>>,
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

impl Waiter {
    /// Becomes the leader if there is none.
    pub(crate) fn try_lead(&self) -> Option<Lead<'_>> {
        let mut leader = lock(&self.leader);
        if *leader {
            return None;
        }
        *leader = true;
        Some(Lead(self))
    }

    pub(crate) fn set_next_due(&self, at: Instant) {
        *lock(&self.next_due) = Some(at);
    }

    pub(crate) fn next_due(&self) -> Option<Instant> {
        *lock(&self.next_due)
    }

    /// Starts the task that turns announcements on `channel` into kicks, once.
    pub(crate) fn listen(&self, client: &redis::Client, channel: &str, queue: &str) {
        let mut listener = lock(&self.listener);
        if listener.is_some() {
            return;
        }
        let (stop_tx, stop) = oneshot::channel();
        *listener = Some(stop_tx);
        tokio::spawn(listen(
            client.clone(),
            channel.to_owned(),
            queue.to_owned(),
            Arc::clone(&self.kick),
            stop,
        ));
    }
}

/// Subscribes to `channel` and kicks the leader on each message, until
/// `stop` closes. Reconnects with capped back-off; a (re)subscription kicks
/// once, since announcements made while it was down are lost.
async fn listen(
    client: redis::Client,
    channel: String,
    queue: String,
    kick: Arc<Notify>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut backoff = Backoff::default();
    loop {
        let session = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            kick.notify_one();
            let mut messages = pubsub.on_message();
            while messages.next().await.is_some() {
                kick.notify_one();
            }
            Ok::<(), redis::RedisError>(())
        };
        tokio::select! {
            _ = &mut stop => return,
            result = session => match result {
                Ok(()) => {
                    backoff.reset();
                    tracing::debug!(queue, "redis pub/sub connection closed; reconnecting");
                }
                Err(error) => tracing::warn!(queue, %error, "redis pub/sub failed; reconnecting"),
            },
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff.next()) => {}
        }
    }
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
