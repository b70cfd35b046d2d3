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
//!
//! The decisions themselves ([`State::look`], [`State::leave`]) are plain
//! functions of the locked state, shared with the model check in
//! `model_check.rs`, which explores every interleaving of them.

use super::state::{Shared, State, Wake};
use std::pin::pin;
use tokio::time::{Instant, sleep_until};

/// One waiting consumer's part of the shared state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Seat {
    /// Assigned on the first look that parks; 0 until then.
    pub(crate) id: u64,
    /// Counted in `State::parked` (and maybe the leader).
    pub(crate) parked: bool,
}

/// What a waiter decided after looking at the state.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// Stop waiting: an entry was taken, or the limit passed. The wake-up is
    /// delivered after the lock is released.
    Done(Option<T>, Wake),
    /// Wait for a notification, or until the given instant if any.
    Park(Option<Instant>),
}

impl<T> State<T> {
    /// Undoes a seat's parking and leadership.
    fn unpark(&mut self, seat: &mut Seat) {
        if seat.parked {
            seat.parked = false;
            self.parked -= 1;
            if self.leader == Some(seat.id) {
                self.leader = None;
            }
        }
    }

    /// One look at the state: take the head if it is due, give up if the
    /// limit passed, else park as leader or follower.
    pub(crate) fn look(
        &mut self,
        seat: &mut Seat,
        now: Instant,
        limit: Option<Instant>,
        on_take: &mut impl FnMut(&T),
    ) -> Step<T> {
        // This consumer now looks at the state, so a wake-up in flight has
        // done its job: whatever it was for, this consumer handles below.
        self.waking = false;
        self.unpark(seat);

        let taken = self.timers.pop_due(now);
        if let Some(value) = &taken {
            on_take(value);
        }
        if taken.is_some() || limit.is_some_and(|limit| limit <= now) {
            return Step::Done(taken, self.after_leave());
        }

        if seat.id == 0 {
            seat.id = self.new_waiter_id();
        }
        let mut until = limit;
        if let (Some(target), None) = (self.timers.wake_target(now), self.leader) {
            self.leader = Some(seat.id);
            self.armed = Some(target);
            let at = self.timers.instant_of(target);
            until = Some(limit.map_or(at, |limit| limit.min(at)));
        }
        self.parked += 1;
        seat.parked = true;
        Step::Park(until)
    }

    /// A seat leaves while parked (its future was dropped): if it was the
    /// leader, the head is now untimed, so the duty is handed on.
    pub(crate) fn leave(&mut self, seat: &mut Seat) -> Wake {
        if !seat.parked {
            return Wake::NONE;
        }
        self.unpark(seat);
        self.after_leave()
    }

    /// The fast path: takes the head if it is already due. `clock` is read
    /// only if the head is not due by its last reading.
    pub(crate) fn take_due(
        &mut self,
        clock: impl FnOnce() -> Instant,
        on_take: &mut impl FnMut(&T),
    ) -> Option<(T, Wake)> {
        let value = self.timers.pop_due_by(clock)?;
        on_take(&value);
        Some((value, self.after_leave()))
    }
}

/// The drop guard of one waiting consumer.
struct Waiter<'a, T> {
    shared: &'a Shared<T>,
    seat: Seat,
}

impl<T> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if !self.seat.parked {
            return;
        }
        // Dropped at its await point. (A `notify_one` this waiter received
        // but never acted on is passed on by `Notified`'s own drop.)
        let mut state = self.shared.lock();
        let wake = state.leave(&mut self.seat);
        self.shared.unlock_and_wake(state, wake);
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
        if let Some((value, wake)) = state.take_due(Instant::now, &mut on_take) {
            shared.unlock_and_wake(state, wake);
            return Some(value);
        }
    }
    let mut waiter = Waiter {
        shared,
        seat: Seat::default(),
    };
    loop {
        let mut notified = pin!(shared.notify.notified());
        // Enabled before the state is read: see the module docs.
        notified.as_mut().enable();
        let until = {
            let mut state = shared.lock();
            match state.look(&mut waiter.seat, Instant::now(), limit, &mut on_take) {
                Step::Done(taken, wake) => {
                    shared.unlock_and_wake(state, wake);
                    return taken;
                }
                Step::Park(until) => {
                    shared.unlock_and_wake(state, Wake::NONE);
                    until
                }
            }
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
