//! Looking into and acting on a memory queue's state: entries by state a
//! page at a time, one entry, pause, run a schedule now, the dead letters
//! all at once. The rules, as `state.rs` has them for the rest.

use super::clock::system_time;
use super::state::{Entry, Moved, State};
use crate::durable::{AttemptError, EntryInfo, EntryState, PARKED, Row};

/// One entry as a listing sees it, and its place in its state's order.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) key: (u64, u64),
    pub(crate) row: Row,
    /// Leased: when this delivery began, and the worker holding it.
    started_at: Option<u64>,
    worker: Option<String>,
    errors: Vec<AttemptError>,
    /// A dead tick: its schedule's name.
    schedule_of: Option<String>,
}

impl Seen {
    /// The entry as an operator sees it.
    pub(crate) fn info<T: serde::de::DeserializeOwned>(self) -> EntryInfo<T> {
        let mut info = self.row.info();
        info.started_at = self.started_at.map(system_time);
        info.worker = self.worker;
        info.errors = self.errors;
        if self.schedule_of.is_some() {
            info.schedule = self.schedule_of;
        }
        info
    }
}

impl State {
    /// The state entry `e` is in at `now`.
    fn state_of(e: &Entry, now: u64) -> EntryState {
        if e.dead {
            EntryState::Dead
        } else if e.key.0 <= now {
            EntryState::Due
        } else if e.token.is_some() {
            EntryState::Leased
        } else {
            EntryState::Pending
        }
    }

    fn seen(&self, id: &str, e: &Entry, now: u64) -> Seen {
        let value = match &e.value {
            Some(value) => value.to_string(),
            None => self
                .schedules
                .get(id)
                .map_or_else(|| "null".to_owned(), |s| s.value.to_string()),
        };
        let leased = State::state_of(e, now) == EntryState::Leased;
        Seen {
            key: e.key,
            started_at: e.since.filter(|_| leased),
            worker: e.worker.as_deref().filter(|_| leased).map(str::to_owned),
            errors: e
                .errors
                .iter()
                .map(|(attempt, at, reason)| AttemptError {
                    attempt: *attempt,
                    at: system_time(*at),
                    reason: reason.clone(),
                })
                .collect(),
            schedule_of: e.schedule_of.clone(),
            row: Row {
                id: id.to_owned(),
                state: State::state_of(e, now),
                score: e.key.0,
                deadline: if e.key.0 >= PARKED {
                    e.tick
                } else {
                    e.deadline
                },
                attempt: e.attempt,
                tick: e.tick.is_some(),
                reason: e.reason.clone(),
                value: Some(value),
                key: e.group.as_deref().map(str::to_owned),
                priority: e.priority,
            },
        }
    }

    /// Entry `id`, in any state.
    pub(crate) fn entry(&self, id: &str, now: u64) -> Option<Seen> {
        let e = self.entries.get(id)?;
        Some(self.seen(id, e, now))
    }

    /// Up to `limit` entries of `state` after `after` (a place in that
    /// state's order), in order (backwards, newest first, if `newest`);
    /// and whether more follow. A page costs O(limit + log n), but for the
    /// leased entries a pending page steps over (as many as consumers
    /// hold).
    pub(crate) fn page(
        &self,
        state: EntryState,
        after: Option<(u64, u64)>,
        newest: bool,
        limit: usize,
        now: u64,
    ) -> (Vec<Seen>, bool) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        type Place = (u64, u64);
        type Bounds = (std::ops::Bound<Place>, std::ops::Bound<Place>);
        let last_due = (now, u64::MAX);
        // The state's range of places, then narrowed by the cursor: from
        // after it, or (newest first) up to before it.
        let whole: Bounds = match state {
            EntryState::Due => (Unbounded, Included(last_due)),
            EntryState::Pending | EntryState::Leased => (Excluded(last_due), Unbounded),
            EntryState::Dead => (Unbounded, Unbounded),
        };
        let within = |at: &Place| match whole {
            (Unbounded, Included(hi)) => *at <= hi,
            (Excluded(lo), Unbounded) => *at > lo,
            _ => true,
        };
        let range: Bounds = match after {
            None => whole,
            Some(at) if !within(&at) => {
                // A cursor left of the state's range (newest first: right
                // of it) starts a walk at its end.
                let left = match whole {
                    (Excluded(lo), _) => at <= lo,
                    _ => false,
                };
                if left != newest {
                    whole
                } else {
                    (Excluded(at), Excluded(at))
                }
            }
            Some(at) if newest => (whole.0, Excluded(at)),
            Some(at) => (Excluded(at), whole.1),
        };
        let places: Box<dyn DoubleEndedIterator<Item = (&Place, &String)> + '_> = match state {
            EntryState::Due | EntryState::Pending => Box::new(self.order.range(range)),
            EntryState::Leased => {
                Box::new(self.leases.range(range).map(|key| (key, &self.order[key])))
            }
            EntryState::Dead => Box::new(self.dead.range(range)),
        };
        let places: Box<dyn Iterator<Item = (&Place, &String)> + '_> = if newest {
            Box::new(places.rev())
        } else {
            places
        };
        let mut seen: Vec<Seen> = places
            .filter(|(_, id)| state != EntryState::Pending || self.entries[*id].token.is_none())
            .take(limit.saturating_add(1))
            .map(|(_, id)| self.seen(id, &self.entries[id], now))
            .collect();
        let more = seen.len() > limit;
        seen.truncate(limit);
        (seen, more)
    }

    /// Pauses the queue: claims take nothing until `resume`. Whether it
    /// changed the state.
    pub(crate) fn pause(&mut self) -> bool {
        !std::mem::replace(&mut self.paused, true)
    }

    /// Resumes the queue, waking waiting consumers. Whether it changed the
    /// state.
    pub(crate) fn resume(&mut self, moved: &mut Moved) -> bool {
        let changed = std::mem::replace(&mut self.paused, false);
        moved.announce |= changed;
        changed
    }

    /// Makes schedule `name`'s pending tick due now (its instant becomes
    /// now); `None` if there is no such tick or it is leased.
    pub(crate) fn run_now(&mut self, name: &str, now: u64) -> Option<Moved> {
        let paused = self.schedules.get(name)?.paused;
        let e = self.entries.get_mut(name)?;
        e.tick?;
        if e.token.is_some() {
            return None;
        }
        // A paused schedule runs this one tick.
        e.forced = paused;
        self.reset(name, now)
    }

    /// Every dead letter back as pending at `at`, attempts reset; how many.
    pub(crate) fn requeue_all_dead(&mut self, at: u64, moved: &mut Moved) -> u64 {
        let ids: Vec<String> = self.dead.values().cloned().collect();
        for id in &ids {
            if let Some(m) = self.requeue_dead(id, at) {
                moved.announce |= m.announce;
            }
        }
        ids.len() as u64
    }

    /// Deletes every dead letter; how many.
    pub(crate) fn clear_dead(&mut self, now: u64) -> u64 {
        let ids: Vec<String> = self.dead.values().cloned().collect();
        for id in &ids {
            self.forget_dead(id, now);
        }
        ids.len() as u64
    }
}
