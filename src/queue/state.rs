//! State shared by every handle of one queue, and the wake-up rules.
//!
//! Ground rules:
//!
//! - One lock ([`Lock`](crate::lock::Lock)) guards [`State`]: the timers
//!   (wheel and near side) and the bookkeeping of waiting consumers. It is
//!   never held across an `.await`, never held while waking a task, and never
//!   held while a user value is dropped (a `Drop` impl may call back into the
//!   queue).
//! - Waiting consumers park on one [`Notify`]. A parked consumer always
//!   enabled its `Notified` *before* it last looked at the state, so a
//!   `notify_one` issued after that look reaches it (or another parked
//!   consumer) and is never lost.
//! - Invariant, checked in debug builds whenever the lock is released by a
//!   mutation: if consumers are parked and entries are queued, then either a
//!   leader is timing the head, or a wake-up is in flight (`waking`) to a
//!   consumer that has not yet looked at the state. Whoever looks at the state
//!   next clears `waking` and takes on the duty: it takes the head, leads, or
//!   follows a leader that exists.

use super::timers::{HeadId, Timers};
use crate::lock::{Guard, Lock};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

/// Queue identities are handed out once per process and never reused, so a
/// key from another queue (or from before a `clear`) can never match.
static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_queue_id() -> u64 {
    // Only uniqueness matters, not ordering with other memory.
    NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed)
}

#[derive(Debug)]
pub(crate) struct Shared<T> {
    state: Lock<State<T>>,
    pub(crate) notify: Notify,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct State<T> {
    pub(crate) timers: Timers<T>,
    /// This queue's identity; `clear` gives it a new one.
    pub(crate) id: u64,
    /// The waiter timing the head's deadline, if any.
    pub(crate) leader: Option<u64>,
    /// What the leader's timer is for: the head's `(ticks, seq)`, or a wheel
    /// bucket's wake-up mark (see `Timers::wake_target`).
    pub(crate) armed: Option<HeadId>,
    /// Consumers between "decided to wait" and "looked at the state again".
    pub(crate) parked: usize,
    /// A `notify_one` was issued and its receiver has not looked yet.
    pub(crate) waking: bool,
    next_waiter: u64,
}

/// What a mutation did to the entries, for [`State::head_may_change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// An entry with this `(ticks, seq)` was added.
    Added(HeadId),
    /// The entry with this `(ticks, seq)` left.
    Removed(HeadId),
    /// An entry moved from the first `(ticks, seq)` to the second.
    Moved(HeadId, HeadId),
    /// Any number of entries left.
    Many,
}

/// Whether a waiter must be notified once the lock is released.
#[must_use = "a wake-up decided under the lock must be delivered after it"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wake(bool);

impl<T> Shared<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Shared {
            state: Lock::new(State {
                timers: Timers::with_capacity(capacity),
                id: next_queue_id(),
                leader: None,
                armed: None,
                parked: 0,
                waking: false,
                next_waiter: 0,
            }),
            notify: Notify::new(),
        }
    }

    /// Locks the state. User code never runs under the lock.
    pub(crate) fn lock(&self) -> Guard<'_, State<T>> {
        self.state.lock()
    }

    /// Releases the lock, then delivers the wake-up decided under it.
    pub(crate) fn unlock_and_wake(&self, state: Guard<'_, State<T>>, wake: Wake) {
        state.check();
        drop(state);
        if wake.0 {
            self.notify.notify_one();
        }
    }
}

impl<T> State<T> {
    /// The one place that reacts to "the earliest deadline may have changed";
    /// insert, remove, reset, clear and `remove_if` all report their change
    /// here, under the lock, after mutating.
    ///
    /// Lost wake-up it prevents: the leader sleeps until 10:00; an insert due
    /// at 09:00 becomes the head. Without this, every consumer sleeps through
    /// 09:00 because the only timer is set for 10:00.
    ///
    /// It compares the change with what the leader is timing (`armed`), so it
    /// never has to look up the head itself: a change after the leader's
    /// target cannot make it late, and the leader re-arms when it wakes.
    pub(crate) fn head_may_change(&mut self, change: Change) -> Wake {
        if self.parked == 0 {
            return Wake(false);
        }
        let stale = match (self.leader, self.armed) {
            // Followers only: they wait untimed for someone to time a head.
            (None, _) | (_, None) => !self.timers.is_empty(),
            (Some(_), Some(armed)) => match change {
                Change::Added(id) => id < armed,
                Change::Removed(id) => id == armed,
                Change::Moved(old, new) => old == armed || new < armed,
                Change::Many => true,
            },
        };
        if !stale {
            return Wake(false);
        }
        // The leader's timer is for the old head: whoever is woken re-arms.
        self.leader = None;
        self.wake_one()
    }

    /// Called whenever a consumer stops waiting (with an entry, on timeout or
    /// when its future is dropped), after it gave up its leadership.
    ///
    /// Lost wake-up it prevents: the leader takes the head and leaves while a
    /// second entry is queued; the followers wait untimed, so without a
    /// successor nobody would ever time the second entry.
    pub(crate) fn after_leave(&mut self) -> Wake {
        if self.leader.is_none() && !self.timers.is_empty() {
            self.wake_one()
        } else {
            Wake(false)
        }
    }

    /// Wakes one parked consumer unless one is already on its way: that one
    /// will look at the state after this change anyway.
    fn wake_one(&mut self) -> Wake {
        if self.parked == 0 || self.waking {
            return Wake(false);
        }
        self.waking = true;
        Wake(true)
    }

    pub(crate) fn new_waiter_id(&mut self) -> u64 {
        self.next_waiter += 1;
        self.next_waiter
    }

    /// The module's invariant; debug builds check it on every unlock.
    #[inline]
    pub(crate) fn check(&self) {
        debug_assert!(
            self.parked == 0 || self.timers.is_empty() || self.leader.is_some() || self.waking,
            "consumers parked with entries queued, but no leader and no wake-up in flight"
        );
    }
}

impl Wake {
    /// Whether one parked consumer is to be notified.
    #[cfg(test)]
    pub(crate) fn wakes_one(self) -> bool {
        self.0
    }

    pub(crate) const NONE: Wake = Wake(false);
}
