//! Leader-Follower waiting for `take` and `take_timeout`.
//!
//! A waiting consumer is either the *leader*, the one that sleeps until the
//! head's deadline, or a *follower*, parked on the queue's `Notify` with no
//! timer (a `take_timeout` follower also sleeps until its own limit). The
//! wait loop is: enable the `Notified`, look at the state, then await; the
//! look at the state is the "try again" after enabling, so a notification
//! sent between the look and the await is kept by the enabled `Notified`.
//!
//! Everything a waiter must undo when it stops waiting (its parked count, its
//! leadership, handing the duty on) lives in [`Waiter`]'s drop guard, so a
//! future dropped at its await point cleans up exactly like one that returns.

use super::state::{Shared, State, Wake};
use std::pin::pin;
use tokio::time::{Instant, sleep_until};

/// The drop guard of one waiting consumer.
struct Waiter<'a, T> {
    shared: &'a Shared<T>,
    id: u64,
    parked: bool,
}

impl<T> Waiter<'_, T> {
    /// Undoes this waiter's parking and leadership. Called under the lock,
    /// when the waiter looks at the state again or leaves.
    fn unpark(&mut self, state: &mut State<T>) {
        if self.parked {
            self.parked = false;
            state.parked -= 1;
            if state.leader == Some(self.id) {
                state.leader = None;
            }
        }
    }
}

impl<T> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if !self.parked {
            return;
        }
        // Dropped at its await point. If it was the leader, the head is now
        // untimed: hand the duty on. (A `notify_one` this waiter received but
        // never acted on is passed on by `Notified`'s own drop.)
        let mut state = self.shared.lock();
        self.unpark(&mut state);
        let wake = state.after_leave();
        self.shared.unlock_and_wake(state, wake);
    }
}

/// What a waiter decided after looking at the state.
enum Step<T> {
    /// Stop waiting: an entry was taken, or the limit passed.
    Done(Option<T>),
    /// Wait for a notification, or until the given instant if any.
    Park(Option<Instant>),
}

impl<T> Waiter<'_, T> {
    /// One look at the state under the lock: take the head if it is due,
    /// give up if the limit passed, else park as leader or follower.
    fn look(
        &mut self,
        now: Instant,
        limit: Option<Instant>,
        on_take: &mut impl FnMut(&T),
    ) -> Step<T> {
        let shared = self.shared;
        let mut state = shared.lock();
        // This consumer now looks at the state, so a wake-up in flight has
        // done its job: whatever it was for, this consumer handles below.
        state.waking = false;
        self.unpark(&mut state);

        let taken = state.heap.pop_due(now);
        if let Some(value) = &taken {
            on_take(value);
        }
        if taken.is_some() || limit.is_some_and(|limit| limit <= now) {
            let wake = state.after_leave();
            shared.unlock_and_wake(state, wake);
            return Step::Done(taken);
        }

        if self.id == 0 {
            self.id = state.new_waiter_id();
        }
        let mut until = limit;
        if let (Some(head), None) = (state.heap.peek_deadline(), state.leader) {
            state.leader = Some(self.id);
            until = Some(limit.map_or(head, |limit| limit.min(head)));
        }
        state.parked += 1;
        self.parked = true;
        shared.unlock_and_wake(state, Wake::NONE);
        Step::Park(until)
    }
}

/// Waits until an entry is due and takes it, or until `limit` passes.
///
/// With `limit == None` this only returns `Some`. `on_take` sees the entry
/// under the queue's lock, in the same step that removes it, so whatever it
/// records can never be observed apart from the removal; it must be quick
/// and must not use the queue.
pub(crate) async fn take_until<T>(
    shared: &Shared<T>,
    limit: Option<Instant>,
    mut on_take: impl FnMut(&T),
) -> Option<T> {
    // Fast path: with an entry already due, taking it needs neither a
    // `Notified` (whose registration takes `Notify`'s own lock) nor any
    // waiter bookkeeping.
    {
        let mut state = shared.lock();
        if let Some(value) = state.heap.pop_due(Instant::now()) {
            on_take(&value);
            let wake = state.after_leave();
            shared.unlock_and_wake(state, wake);
            return Some(value);
        }
    }
    let mut waiter = Waiter {
        shared,
        id: 0,
        parked: false,
    };
    loop {
        let mut notified = pin!(shared.notify.notified());
        // Enabled before the state is read: see the module docs.
        notified.as_mut().enable();
        let until = match waiter.look(Instant::now(), limit, &mut on_take) {
            Step::Done(taken) => return taken,
            Step::Park(until) => until,
        };
        match until {
            Some(until) => {
                let sleep = pin!(sleep_until(until));
                futures::future::select(notified, sleep).await;
            }
            None => notified.await,
        }
    }
}
