//! What every handle and delivery of one memory queue shares: its settings,
//! clock and state, and the steps the handles take on that state.
//!
//! Ground rules. `state` is locked for one step at a time, never across an
//! await and never while waking anyone: a step reports whether the head
//! may have moved earlier, and `write` wakes the waiting consumers (the
//! handle's `Waiter`) after letting go of the lock.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::clock::Clock;
use super::state::{Done, End, Leased, Moved, Rules, State};
use crate::durable::ops::{Held, Op, millis};
use crate::durable::store::Applied;
use crate::durable::wait::Waiter;

/// The longest a waiting consumer naps without looking again. Every change
/// that can make an entry due earlier wakes it at once (nothing is lost
/// between processes here), so this only bounds a nap.
pub(crate) const NAP: Duration = Duration::from_secs(3600);

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) name: String,
    /// What tells this queue from every other, in cursors: a token no
    /// other queue of any process has (two queues built with one name are
    /// two queues).
    pub(crate) identity: String,
    pub(crate) clock: Clock,
    state: Mutex<State>,
    pub(crate) waiter: Waiter,
    /// The ids of entries that left the live ones (for `wait`).
    pub(crate) finishes: broadcast::Sender<Arc<str>>,
    /// Counts the cancels of leased entries (for the workers holding them).
    pub(crate) cancels: watch::Sender<u64>,
}

/// The answer of a claim.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) done: Vec<Applied>,
    pub(crate) items: Vec<Leased>,
    pub(crate) more: bool,
    /// When the head is due, on Tokio's clock, as the claim left it.
    pub(crate) next_due: Instant,
    pub(crate) now: u64,
}

impl Inner {
    pub(crate) fn new(name: String, clock: Clock) -> Inner {
        let instance = crate::durable::store::new_token();
        Inner {
            identity: crate::durable::At::queue("memory", &name, &instance),
            name,
            clock,
            state: Mutex::new(State::default()),
            waiter: Waiter::default(),
            finishes: broadcast::Sender::new(1024),
            cancels: watch::Sender::new(0),
        }
    }

    /// Runs `step` on the state at the clock's reading now, then wakes the
    /// waiting consumers if it may have moved the head earlier.
    pub(crate) fn write<R>(&self, step: impl FnOnce(&mut State, u64, &mut Moved) -> R) -> R {
        let now = self.clock.now_ms();
        let mut moved = Moved::default();
        let (out, finished) = {
            let mut state = self.state.lock();
            state.now = now;
            let out = step(&mut state, now, &mut moved);
            (out, std::mem::take(&mut state.results.finished))
        };
        if moved.announce {
            self.waiter.kick();
        }
        if self.finishes.receiver_count() > 0 {
            for id in finished {
                let _ = self.finishes.send(Arc::from(id));
            }
        }
        out
    }

    /// Reads the state at the clock's reading now.
    pub(crate) fn read<R>(&self, look: impl FnOnce(&State, u64) -> R) -> R {
        let now = self.clock.now_ms();
        look(&self.state.lock(), now)
    }

    /// Applies `ops`, then leases up to `max` due entries to a new token
    /// for `lease`; `rules`: the claiming handle's (deliveries before
    /// death, dead-letter retention).
    pub(crate) fn claim(
        &self,
        max: usize,
        lease: Duration,
        rules: Rules,
        ops: &[Op],
        worker: Option<&Arc<str>>,
    ) -> (Claim, Arc<str>) {
        let token = crate::durable::store::new_token();
        let lease = millis(lease).max(1);
        let kicks = *self.waiter.kicks().borrow();
        let claim = self.write(|state, now, moved| {
            let done = ops
                .iter()
                .map(|op| apply(state, op, now, rules, moved))
                .collect();
            let claimed = state.claim(now, max, lease, rules, &token, worker, moved);
            // Not the head when it is due: due entries the claim left wait
            // on their keys' limits (a place that frees announces itself),
            // or on `resume` while paused (no wake then, as on the other
            // stores). A consumer naps until then, rather than claiming
            // again at once.
            let next_due = match claimed.wake {
                Some(at) => self.clock.instant_at(at),
                None => crate::queue::deadline_after(Instant::now(), NAP),
            };
            Claim {
                done,
                items: claimed.items,
                more: claimed.more,
                next_due,
                now,
            }
        });
        self.waiter.set_next_due(claim.next_due, kicks);
        (claim, token)
    }

    /// Applies `ops` without claiming; `rules` as for `claim`.
    pub(crate) fn finish(&self, ops: &[Op], rules: Rules) -> Vec<Applied> {
        self.write(|state, now, moved| {
            ops.iter()
                .map(|op| apply(state, op, now, rules, moved))
                .collect()
        })
    }

    /// As `extend`, telling a lease lost to a cancel from one lost
    /// otherwise.
    pub(crate) fn extend_marked(
        &self,
        held: &[Held],
        lease: Duration,
    ) -> Vec<crate::durable::store::Extended> {
        self.write(|state, now, moved| {
            let until = now.saturating_add(millis(lease));
            held.iter()
                .map(|h| state.extend_marked(&h.id, &h.token, until, now, moved))
                .collect()
        })
    }

    /// Cancels entry `id` (see `State::cancel`); `lease`: the cancelling
    /// handle's. Whether there was such an entry.
    pub(crate) fn cancel(&self, id: &str, lease: Duration, rules: Rules) -> bool {
        let leased =
            self.write(|state, now, moved| state.cancel(id, millis(lease), now, rules, moved));
        if leased == Some(true) {
            self.cancels.send_modify(|n| *n += 1);
        }
        leased.is_some()
    }

    /// Pushes the leases of `held` to now + `lease`: the new end of each, or
    /// `None` where it was lost.
    pub(crate) fn extend(&self, held: &[&Held], lease: Duration) -> Vec<Option<u64>> {
        self.write(|state, now, moved| {
            let until = now.saturating_add(millis(lease));
            held.iter()
                .map(|h| state.extend(&h.id, &h.token, until, moved).then_some(until))
                .collect()
        })
    }
}

/// Applies one finish op (see `durable::ops::Op` for the kinds).
fn apply(state: &mut State, op: &Op, now: u64, rules: Rules, moved: &mut Moved) -> Applied {
    let end = match op.kind {
        "a" => End::Ack,
        "r" => End::Retry,
        "f" => End::Fail,
        "b" => End::Bury,
        "s" => End::Snooze,
        "x" => End::Discard,
        "g" => End::GiveBack,
        "G" => {
            state.release(&op.token, now, moved);
            return Applied::Done;
        }
        _ => return Applied::Lost,
    };
    let output = op.output.as_deref();
    match state.finish(
        end, &op.id, &op.token, op.ms, &op.reason, output, now, rules, moved,
    ) {
        Done::Lost => Applied::Lost,
        Done::Applied => Applied::Done,
        Done::Dead => Applied::Dead,
    }
}
