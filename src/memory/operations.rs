//! Looking into and acting on a memory queue's state: entries by state a
//! page at a time, one entry, pause, run a schedule now, the dead letters
//! all at once. The rules, as `state.rs` has them for the rest.

use super::state::{Entry, Moved, State};
use crate::durable::{EntryState, Row};

/// One entry as a listing sees it, and its place in its state's order.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) key: (u64, u64),
    pub(crate) row: Row,
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
        Seen {
            key: e.key,
            row: Row {
                id: id.to_owned(),
                state: State::state_of(e, now),
                score: e.key.0,
                deadline: e.deadline,
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
    /// state's order), in order; and whether more follow. A page costs
    /// O(limit + log n), but for the leased entries a pending page steps
    /// over (as many as consumers hold).
    pub(crate) fn page(
        &self,
        state: EntryState,
        after: Option<(u64, u64)>,
        limit: usize,
        now: u64,
    ) -> (Vec<Seen>, bool) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        let ids: Box<dyn Iterator<Item = &String> + '_> = match state {
            EntryState::Due => Box::new(
                self.order
                    .range((from, Included((now, u64::MAX))))
                    .map(|(_, id)| id),
            ),
            EntryState::Pending => {
                let from = match after {
                    Some(at) if at >= (now, u64::MAX) => Excluded(at),
                    _ => Excluded((now, u64::MAX)),
                };
                Box::new(
                    self.order
                        .range((from, Unbounded))
                        .filter(|(_, id)| self.entries[*id].token.is_none())
                        .map(|(_, id)| id),
                )
            }
            EntryState::Leased => {
                let from = match after {
                    Some(at) if at >= (now, u64::MAX) => Excluded(at),
                    _ => Excluded((now, u64::MAX)),
                };
                Box::new(
                    self.leases
                        .range((from, Unbounded))
                        .map(|key| &self.order[key]),
                )
            }
            EntryState::Dead => Box::new(self.dead.range((from, Unbounded)).map(|(_, id)| id)),
        };
        let mut seen: Vec<Seen> = ids
            .take(limit.saturating_add(1))
            .map(|id| self.seen(id, &self.entries[id], now))
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
        self.schedules.get(name)?;
        self.entries.get(name)?.tick?;
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
