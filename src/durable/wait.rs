//! The waiting consumers of one built handle of a durable queue share one
//! waiter (Leader-Follower); every store uses this one.
//!
//! The leader sleeps until the head's deadline as the server reported it, a
//! pub/sub notification (a new count in `kicks`), or `poll_interval`,
//! whichever comes first,
//! then asks the store again; followers wait untimed on `followers` and are woken
//! one at a time: when the leader leaves (with an entry, or dropped) and when
//! a claim saw more entries due than it took. So an idle queue costs one
//! request per `poll_interval` per built handle however many consumers wait.
//! A consumer that starts waiting (one coming back for more, or a follower
//! taking over from a leader that left) does not ask the store if the last claim
//! of the process said nothing is due yet: it waits until then. Only an
//! insert, reset, retry, requeue or shortened lease can make an entry due
//! earlier, and those announce themselves, which cuts the leader's nap short
//! and makes the recorded head stale. A durable worker on the handle naps
//! the same way, outside the leader's protocol (it watches `kicks` too).
//!
//! (The memory store announces in process and needs no listener.)

#![cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

#[derive(Debug)]
pub struct Waiter {
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

    /// Announces a new head (a store whose writes are seen in this
    /// process: the memory store).
    pub(crate) fn kick(&self) {
        self.kicks
            .send_modify(|count| *count = count.wrapping_add(1));
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

    /// Starts the task that turns a store's announcements into kicks,
    /// once: `task(kicks, stop)` runs until `stop` closes (when the queue's
    /// last handle is dropped).
    pub(crate) fn listen<F>(
        &self,
        task: impl FnOnce(watch::Sender<u64>, oneshot::Receiver<()>) -> F,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut slot = lock(&self.listener);
        if slot.is_some() {
            return;
        }
        let (stop_tx, stop) = oneshot::channel();
        *slot = Some(stop_tx);
        tokio::spawn(task(self.kicks.clone(), stop));
    }
}

/// Capped exponential back-off between attempts to reach a store: 10 ms,
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
