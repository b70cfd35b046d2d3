//! Model check of the Leader-Follower hand-off: every interleaving of a few
//! consumers (`take`, or `take_timeout`), a producer inserting an earlier
//! head or removing the head, dropped consumers and the passing of time,
//! explored exhaustively; none may strand a due entry.
//!
//! The decisions are the real ones: each step under the queue's lock calls
//! the same `State` functions as `take` (`take_due`, `look`, `leave`,
//! `head_may_change`), on a real `State`. What is modelled is what sits around
//! them, at the granularity at which other threads can interleave:
//!
//! - `tokio::sync::Notify`: `enable` registers a waiter or consumes the
//!   stored permit; `notify_one` notifies one registered waiter (any of
//!   them: the search tries each, so FIFO and LIFO are both covered) or
//!   stores the permit; a `Notified` dropped after being notified passes the
//!   notification on; completing consumes it.
//! - The leader's timer: a parked waiter with a deadline becomes runnable
//!   once the clock reaches it; the clock moves to any entry's deadline at
//!   any step.
//! - A wake-up decided under the lock is delivered in a later step, after
//!   the unlock, so other steps may run in between, as in the real code.
//! - A future is dropped only at an await point (never polled, or parked),
//!   and its drop runs in steps: the `Notified` first, then the drop guard.
//!
//! A *stranded* state is a quiescent one (only the clock could move) in
//! which an entry is due while a consumer still waits: that entry would be
//! late, or never delivered. The search fails on the first one and prints
//! the steps that lead there. `State::check` (leader, or a wake-up in
//! flight, whenever consumers are parked with entries queued) runs after
//! every step.

use super::state::{Change, Shared, State, Wake};
use super::timers::SlotKey;
use super::wait::{Seat, Step};
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

/// Where a consumer's `take` future is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pc {
    /// Not polled yet: next is the fast path.
    Start,
    /// Next: create and enable a `Notified`.
    Enable,
    /// Next: look at the state under the lock.
    Look,
    /// Awaiting the `Notified` (and its timer, if any).
    Parked(Option<u64>),
    /// A wake-up decided under the lock is still to be delivered.
    Deliver(Wake, Then),
    /// Returning from `take`: next, its `Notified` is dropped.
    Returning,
    /// Dropped at its await point, `Notified` gone; next: the drop guard.
    Leaving,
    Done,
    Dropped,
}

/// What follows a delivered wake-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Then {
    Return,
    Dropped,
}

/// The consumer's current `Notified`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Note {
    None,
    /// Enabled, in the waiter list.
    Waiting,
    /// Notified, not yet consumed.
    Notified,
}

#[derive(Clone, Debug)]
struct Consumer {
    pc: Pc,
    seat: Seat,
    note: Note,
    /// `take_timeout`'s limit, in ms since `base`; `None` for `take`.
    limit: Option<u64>,
}

/// What the producer does next, one step at a time.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u32, u64),
    /// Removes the entry inserted initially at this index.
    Remove(usize),
}

#[derive(Clone, Debug)]
struct World {
    state: State<u32>,
    base: Instant,
    /// Milliseconds since `base`.
    now: u64,
    consumers: Vec<Consumer>,
    /// Registered, not yet notified, in registration order.
    waiters: Vec<usize>,
    permit: bool,
    /// The producer's remaining operations, then its pending wake-up.
    ops: Vec<Op>,
    keys: Vec<SlotKey>,
    producer_wake: Option<Wake>,
    drops_left: usize,
    /// Deadlines the clock may move to.
    times: Vec<u64>,
    got: Vec<u32>,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Consumer(usize),
    /// A `notify_one` by consumer `from` (its pending wake-up, or the
    /// notification its returning `Notified` passes on) or by the producer
    /// (`None`), received by waiter `to` (or stored as the permit).
    Notify {
        from: Option<usize>,
        to: Option<usize>,
    },
    /// Consumer `i` is dropped at its await point; a notification its
    /// `Notified` held is passed on to `to`.
    Drop {
        i: usize,
        to: Option<usize>,
    },
    /// The producer's next operation.
    Produce,
    Clock(u64),
}

impl World {
    fn new(
        consumers: usize,
        entries: &[(u32, u64)],
        insert: Option<(u32, u64)>,
        drops: usize,
    ) -> Self {
        let ops = insert
            .map(|(v, at)| Op::Insert(v, at))
            .into_iter()
            .collect();
        Self::with(vec![None; consumers], entries, ops, drops)
    }

    fn with(limits: Vec<Option<u64>>, entries: &[(u32, u64)], ops: Vec<Op>, drops: usize) -> Self {
        let mut state = Shared::<u32>::new(0).lock().clone();
        let base = Instant::now();
        let mut keys = Vec::new();
        for &(value, at) in entries {
            keys.push(
                state
                    .timers
                    .insert(value, base + Duration::from_millis(at))
                    .0,
            );
        }
        let inserted = ops.iter().filter_map(|op| match op {
            Op::Insert(_, at) => Some(*at),
            Op::Remove(_) => None,
        });
        let mut times: Vec<u64> = entries
            .iter()
            .map(|e| e.1)
            .chain(inserted)
            .chain(limits.iter().flatten().copied())
            .collect();
        times.sort_unstable();
        times.dedup();
        let consumers = limits
            .into_iter()
            .map(|limit| Consumer {
                pc: Pc::Start,
                seat: Seat::default(),
                note: Note::None,
                limit,
            })
            .collect();
        World {
            state,
            base,
            now: 0,
            consumers,
            waiters: Vec::new(),
            permit: false,
            ops,
            keys,
            producer_wake: None,
            drops_left: drops,
            times,
            got: Vec::new(),
        }
    }

    fn instant(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    /// A pending `notify_one` may go to any registered waiter, or become
    /// the permit when none is registered.
    fn notify_choices(&self) -> Vec<Option<usize>> {
        if self.waiters.is_empty() {
            vec![None]
        } else {
            self.waiters.iter().copied().map(Some).collect()
        }
    }

    fn actions(&self) -> Vec<Action> {
        let mut out = Vec::new();
        for (i, c) in self.consumers.iter().enumerate() {
            let notifies = match &c.pc {
                Pc::Deliver(wake, _) => wake.wakes_one(),
                Pc::Returning => c.note == Note::Notified,
                _ => false,
            };
            match &c.pc {
                _ if notifies => {
                    for to in self.notify_choices() {
                        out.push(Action::Notify { from: Some(i), to });
                    }
                }
                Pc::Parked(until) => {
                    let timer = until.is_some_and(|t| t <= self.now);
                    if c.note == Note::Notified || timer {
                        out.push(Action::Consumer(i));
                    }
                }
                Pc::Done | Pc::Dropped => {}
                _ => out.push(Action::Consumer(i)),
            }
            if self.drops_left > 0 && matches!(c.pc, Pc::Start | Pc::Parked(_)) {
                if c.note == Note::Notified {
                    for to in self.notify_choices() {
                        out.push(Action::Drop { i, to });
                    }
                } else {
                    out.push(Action::Drop { i, to: None });
                }
            }
        }
        match self.producer_wake {
            Some(wake) if wake.wakes_one() => {
                for to in self.notify_choices() {
                    out.push(Action::Notify { from: None, to });
                }
            }
            // Nobody to notify: the producer goes on.
            Some(_) => out.push(Action::Notify {
                from: None,
                to: None,
            }),
            None => {}
        }
        if self.producer_wake.is_none() && !self.ops.is_empty() {
            out.push(Action::Produce);
        }
        if let Some(&next) = self.times.iter().find(|&&t| t > self.now) {
            out.push(Action::Clock(next));
        }
        out
    }

    /// `notify_one`, with the receiver chosen by the search.
    fn notify_one(&mut self, to: Option<usize>) {
        match to {
            Some(i) => {
                self.waiters.retain(|&w| w != i);
                self.consumers[i].note = Note::Notified;
            }
            None => self.permit = true,
        }
    }

    /// Drops consumer `i`'s `Notified`; whether it held a notification,
    /// which the caller must pass on.
    fn drop_note(&mut self, i: usize) -> bool {
        let note = std::mem::replace(&mut self.consumers[i].note, Note::None);
        if note == Note::Waiting {
            self.waiters.retain(|&w| w != i);
        }
        note == Note::Notified
    }

    fn step(&mut self, action: Action) {
        match action {
            Action::Clock(t) => self.now = t,
            Action::Produce => {
                // As `DelayQueue::insert` and `remove` report their change.
                let change = match self.ops.remove(0) {
                    Op::Insert(value, at) => {
                        let deadline = self.instant(at);
                        let (_, id) = self.state.timers.insert(value, deadline);
                        Some(Change::Added(id))
                    }
                    Op::Remove(index) => {
                        let removed = self.state.timers.remove(self.keys[index]);
                        removed.map(|(_, id)| Change::Removed(id))
                    }
                };
                let wake = change.map_or(Wake::NONE, |c| self.state.head_may_change(c));
                self.producer_wake = Some(wake);
            }
            Action::Notify { from: None, to } => {
                if self.producer_wake.take().is_some_and(Wake::wakes_one) {
                    self.notify_one(to);
                }
            }
            Action::Notify { from: Some(i), to } => {
                if self.consumers[i].pc == Pc::Returning {
                    self.drop_note(i);
                    self.consumers[i].pc = Pc::Done;
                } else {
                    self.after_delivery(i);
                }
                self.notify_one(to);
            }
            Action::Drop { i, to } => {
                self.drops_left -= 1;
                if self.drop_note(i) {
                    self.notify_one(to);
                }
                let c = &mut self.consumers[i];
                c.pc = if c.seat.parked {
                    Pc::Leaving
                } else {
                    Pc::Dropped
                };
            }
            Action::Consumer(i) => self.consumer_step(i),
        }
        self.state.check();
    }

    fn after_delivery(&mut self, i: usize) {
        let Pc::Deliver(_, then) = self.consumers[i].pc else {
            unreachable!("delivering without a pending wake-up");
        };
        self.consumers[i].pc = match then {
            Then::Return => Pc::Returning,
            Then::Dropped => Pc::Dropped,
        };
    }

    fn consumer_step(&mut self, i: usize) {
        let now = self.instant(self.now);
        let limit = self.consumers[i].limit.map(|ms| self.instant(ms));
        let mut seat = self.consumers[i].seat;
        let pc = self.consumers[i].pc.clone();
        let next = match pc {
            Pc::Start => match self.state.take_due(|| now, &mut |_| {}) {
                Some((value, wake)) => {
                    self.got.push(value);
                    Pc::Deliver(wake, Then::Return)
                }
                None => Pc::Enable,
            },
            Pc::Enable => {
                let c = &mut self.consumers[i];
                if self.permit {
                    self.permit = false;
                    c.note = Note::Notified;
                } else {
                    c.note = Note::Waiting;
                    self.waiters.push(i);
                }
                Pc::Look
            }
            Pc::Look => match self.state.look(&mut seat, now, limit, &mut |_| {}) {
                Step::Done(taken, wake) => {
                    assert!(
                        taken.is_some() || limit.is_some(),
                        "take without a limit returns a value"
                    );
                    self.got.extend(taken);
                    Pc::Deliver(wake, Then::Return)
                }
                Step::Park(until) => {
                    let until = until.map(|t| (t - self.base).as_millis() as u64);
                    Pc::Parked(until)
                }
            },
            Pc::Parked(_) => {
                // `select(notified, sleep)` polls the `Notified` first.
                if self.consumers[i].note == Note::Notified {
                    self.consumers[i].note = Note::None;
                } else {
                    self.drop_note(i);
                }
                Pc::Enable
            }
            Pc::Leaving => {
                let wake = self.state.leave(&mut seat);
                Pc::Deliver(wake, Then::Dropped)
            }
            Pc::Deliver(_, _) => {
                // A wake-up that notifies nobody.
                self.after_delivery(i);
                return;
            }
            Pc::Returning => {
                // Its `Notified` holds no notification to pass on.
                self.drop_note(i);
                Pc::Done
            }
            Pc::Done | Pc::Dropped => unreachable!("a finished consumer has no step"),
        };
        let c = &mut self.consumers[i];
        c.seat = seat;
        c.pc = next;
    }

    fn key(&self) -> String {
        format!(
            "{:?}|{}|{:?}|{:?}|{}|{:?}|{:?}|{}|{:?}",
            self.state,
            self.now,
            self.consumers,
            self.waiters,
            self.permit,
            self.ops,
            self.producer_wake,
            self.drops_left,
            self.got
        )
    }

    /// A consumer waits while an entry is due.
    fn stranded(&self) -> bool {
        let waiting = self
            .consumers
            .iter()
            .any(|c| !matches!(c.pc, Pc::Done | Pc::Dropped));
        let now = self.instant(self.now);
        // Finding the head may open wheel buckets: look at a copy, so that
        // checking does not change the state being explored.
        waiting
            && self
                .state
                .timers
                .clone()
                .peek_deadline()
                .is_some_and(|d| d <= now)
    }
}

/// Explores every interleaving from `world`; returns how many distinct
/// states were seen, or the path to a stranded state.
fn explore(world: World) -> Result<usize, Vec<Action>> {
    let mut seen = HashSet::new();
    let mut stack = vec![(world, Vec::new())];
    while let Some((world, path)) = stack.pop() {
        if !seen.insert(world.key()) {
            continue;
        }
        let actions = world.actions();
        // Quiescent: only the clock can move. An entry already due must not
        // wait for it while a consumer waits (late, or stranded for good).
        let quiescent = actions.iter().all(|a| matches!(a, Action::Clock(_)));
        if quiescent && world.stranded() {
            return Err(path);
        }
        for action in actions {
            let mut next = world.clone();
            next.step(action);
            let mut path = path.clone();
            path.push(action);
            stack.push((next, path));
        }
    }
    Ok(seen.len())
}

fn check(world: World) -> usize {
    match explore(world) {
        Ok(states) => states,
        Err(path) => panic!("a due entry is stranded after {path:#?}"),
    }
}

#[test]
fn three_consumers_an_earlier_insert_and_a_dropped_consumer() {
    let states = check(World::new(3, &[(1, 10)], Some((0, 5)), 1));
    assert!(states > 1000, "explored only {states} states");
}

#[test]
fn two_consumers_two_entries_and_a_dropped_consumer() {
    let states = check(World::new(2, &[(0, 5), (1, 10)], None, 1));
    assert!(states > 100, "explored only {states} states");
}

#[test]
fn three_consumers_three_entries_an_earlier_insert() {
    let states = check(World::new(3, &[(1, 10), (2, 10)], Some((0, 5)), 0));
    assert!(states > 1000, "explored only {states} states");
}

#[test]
fn two_consumers_an_earlier_insert_and_two_drops() {
    check(World::new(2, &[(1, 10)], Some((0, 5)), 2));
}

#[test]
fn a_timed_consumer_an_untimed_one_an_earlier_insert_and_a_drop() {
    // `take_timeout` gives up at 7, before the entry at 10 is due; the
    // earlier insert at 5 may go to either consumer.
    let limits = vec![Some(7), None];
    let states = check(World::with(limits, &[(1, 10)], vec![Op::Insert(0, 5)], 1));
    assert!(states > 1000, "explored only {states} states");
}

#[test]
fn removing_the_head_under_waiting_consumers() {
    let ops = vec![Op::Remove(0), Op::Insert(2, 15)];
    let states = check(World::with(vec![None; 2], &[(0, 5), (1, 10)], ops, 1));
    assert!(states > 1000, "explored only {states} states");
}
