//! A memory queue's claim index: the entries a claim may take, in the
//! order it takes them (priority, then due time, FIFO), one key at a time;
//! and the keys' limits, their leases counted now and their recent starts.
//!
//! Ground rules. An entry is *ready* (in the index) while it is live and
//! not held: pending, due, or leased with a lease that ran out (reaped by
//! the next claim). Each priority level keeps its keys' ready entries in
//! groups and the first of each group among its *heads*, beside every
//! keyless ready entry (a keyless entry is a key of its own): a claim walks
//! the heads of the highest level first, one entry per key per round, so a
//! key with 10,000 due entries costs a claim one step, not 10,000. Places
//! are `(score, seq)`, the entry's place in the queue's `order`. Nothing
//! here reads the clock: `now` is given.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound::{Excluded, Included, Unbounded};
use std::sync::Arc;

use crate::durable::KeyLimit;
use crate::durable::options::DEFAULT_KEY;

/// An entry's place in the queue's order: (score, seq).
pub(crate) type Place = (u64, u64);

#[derive(Debug, Default)]
pub(crate) struct Ready {
    levels: BTreeMap<Reverse<i16>, Level>,
}

#[derive(Debug, Default)]
struct Level {
    /// Every keyless ready entry, and the first ready entry of each key.
    heads: BTreeMap<Place, Option<Arc<str>>>,
    /// The ready entries of each key.
    groups: HashMap<Arc<str>, BTreeSet<Place>>,
}

impl Ready {
    /// Adds the entry at `place`.
    pub(crate) fn add(&mut self, priority: i16, key: Option<&Arc<str>>, place: Place) {
        let level = self.levels.entry(Reverse(priority)).or_default();
        let Some(key) = key else {
            level.heads.insert(place, None);
            return;
        };
        let group = level.groups.entry(Arc::clone(key)).or_default();
        let old = group.first().copied();
        group.insert(place);
        if old.is_none_or(|old| place < old) {
            if let Some(old) = old {
                level.heads.remove(&old);
            }
            level.heads.insert(place, Some(Arc::clone(key)));
        }
    }

    /// Takes the entry at `place` out.
    pub(crate) fn remove(&mut self, priority: i16, key: Option<&Arc<str>>, place: Place) {
        let Some(level) = self.levels.get_mut(&Reverse(priority)) else {
            return;
        };
        match key {
            None => {
                level.heads.remove(&place);
            }
            Some(key) => {
                if let Some(group) = level.groups.get_mut(key) {
                    group.remove(&place);
                    if level.heads.remove(&place).is_some() {
                        if let Some(&next) = group.first() {
                            level.heads.insert(next, Some(Arc::clone(key)));
                        }
                    }
                    if group.is_empty() {
                        level.groups.remove(key);
                    }
                }
            }
        }
        if level.heads.is_empty() {
            self.levels.remove(&Reverse(priority));
        }
    }

    /// Up to `max` places to take at `now`, in the order a claim takes
    /// them: the highest priority level first; within a level, rounds of
    /// one entry per key (the first round in the order of the keys' first
    /// due entries, each later round in the order of its entries), skipping
    /// the keys `admit` refuses (it is asked once per entry chosen, and
    /// counts what it admits).
    pub(crate) fn choose(
        &self,
        now: u64,
        max: usize,
        mut admit: impl FnMut(Option<&Arc<str>>) -> bool,
    ) -> Vec<Place> {
        let mut out = Vec::new();
        let due = (Unbounded, Included((now, u64::MAX)));
        for level in self.levels.values() {
            // The keys that gave an entry this round, with that entry.
            let mut gave: Vec<(Place, &Arc<str>)> = Vec::new();
            for (&place, key) in level.heads.range(due) {
                if out.len() >= max {
                    return out;
                }
                if admit(key.as_ref()) {
                    out.push(place);
                    if let Some(key) = key {
                        gave.push((place, key));
                    }
                }
            }
            while !gave.is_empty() && out.len() < max {
                let mut next: Vec<(Place, &Arc<str>)> = gave
                    .iter()
                    .filter_map(|&(last, key)| {
                        let group = level.groups.get(key)?;
                        let after = (Excluded(last), Included((now, u64::MAX)));
                        group.range(after).next().map(|&place| (place, key))
                    })
                    .collect();
                next.sort_unstable_by_key(|&(place, _)| place);
                gave.clear();
                for (place, key) in next {
                    if out.len() >= max {
                        return out;
                    }
                    if admit(Some(key)) {
                        out.push(place);
                        gave.push((place, key));
                    }
                }
            }
        }
        out
    }
}

/// The keys of a queue: their limits (the default under `*`), how many of
/// each are held (leased, lease not yet seen to run out), how many are
/// ready, and when their recent deliveries began (for keys with a rate).
#[derive(Debug, Default)]
pub(crate) struct Keys {
    pub(crate) limits: BTreeMap<String, KeyLimit>,
    held: HashMap<Arc<str>, u32>,
    ready: HashMap<Arc<str>, u32>,
    starts: HashMap<Arc<str>, VecDeque<u64>>,
}

impl Keys {
    /// The limit `key` runs under: its own, else the default.
    pub(crate) fn limit(&self, key: &str) -> KeyLimit {
        self.limits
            .get(key)
            .or_else(|| self.limits.get(DEFAULT_KEY))
            .copied()
            .unwrap_or_default()
    }

    /// Whether one more delivery of `key` may begin at `now`, `taken` more
    /// having been chosen in this claim already.
    pub(crate) fn admits(&self, key: &Arc<str>, now: u64, taken: u32) -> bool {
        let limit = self.limit(key);
        if let Some(most) = limit.concurrency {
            let held = self.held.get(key).copied().unwrap_or(0);
            if held.saturating_add(taken) >= most {
                return false;
            }
        }
        if let Some(rate) = limit.rate {
            let begun = self.begun_within(key, now, per_ms(rate.per));
            if begun.saturating_add(taken) >= rate.max {
                return false;
            }
        }
        true
    }

    /// Whether `key` has a place for one more lease under its concurrency.
    pub(crate) fn has_place(&self, key: &Arc<str>) -> bool {
        self.limit(key)
            .concurrency
            .is_none_or(|most| self.held.get(key).copied().unwrap_or(0) < most)
    }

    /// Deliveries of `key` begun in the last `per` ms (one begun exactly
    /// `per` ago no longer counts).
    fn begun_within(&self, key: &Arc<str>, now: u64, per: u64) -> u32 {
        self.starts.get(key).map_or(0, |starts| {
            starts
                .iter()
                .rev()
                .take_while(|&&at| at.saturating_add(per) > now)
                .count() as u32
        })
    }

    /// When `key`'s rate admits one more delivery, if its rate is what
    /// holds it now.
    pub(crate) fn window_opens(&self, key: &Arc<str>, now: u64) -> Option<u64> {
        let rate = self.limit(key).rate?;
        let per = per_ms(rate.per);
        let begun = self.begun_within(key, now, per);
        if rate.max == 0 || begun < rate.max {
            return None;
        }
        // The oldest of the last `max` starts leaves the window `per` after it.
        let starts = self.starts.get(key)?;
        let oldest = starts.get(starts.len() - rate.max as usize)?;
        Some(oldest.saturating_add(per))
    }

    /// A delivery of `key` begins at `now` (recorded while it has a rate).
    pub(crate) fn started(&mut self, key: &Arc<str>, now: u64) {
        let Some(rate) = self.limit(key).rate else {
            self.starts.remove(key);
            return;
        };
        let starts = self.starts.entry(Arc::clone(key)).or_default();
        starts.push_back(now);
        let per = per_ms(rate.per);
        while starts.len() > rate.max as usize
            || starts
                .front()
                .is_some_and(|&at| at.saturating_add(per) <= now)
        {
            starts.pop_front();
        }
    }

    pub(crate) fn hold(&mut self, key: &Arc<str>) {
        *self.held.entry(Arc::clone(key)).or_default() += 1;
    }

    /// A place of `key` freed: whether entries of it wait.
    pub(crate) fn unhold(&mut self, key: &Arc<str>) -> bool {
        if let Some(held) = self.held.get_mut(key) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(key);
            }
        }
        self.ready.contains_key(key)
    }

    pub(crate) fn add_ready(&mut self, key: &Arc<str>) {
        *self.ready.entry(Arc::clone(key)).or_default() += 1;
    }

    pub(crate) fn remove_ready(&mut self, key: &Arc<str>) {
        if let Some(ready) = self.ready.get_mut(key) {
            *ready -= 1;
            if *ready == 0 {
                self.ready.remove(key);
            }
        }
    }
}

/// A rate's period in ms, at least 1.
fn per_ms(per: std::time::Duration) -> u64 {
    u64::try_from(per.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Arc<str> {
        Arc::from(k)
    }

    #[test]
    fn one_entry_per_key_per_round_highest_priority_first() {
        let mut ready = Ready::default();
        let (a, b) = (key("a"), key("b"));
        // Key a: 5 due entries; key b: one, due last; a keyless one; a
        // priority-1 entry of key a due latest of all.
        for seq in 1..=5 {
            ready.add(0, Some(&a), (10, seq));
        }
        ready.add(0, Some(&b), (20, 6));
        ready.add(0, None, (15, 7));
        ready.add(1, Some(&a), (30, 8));
        let all = ready.choose(100, 10, |_| true);
        assert_eq!(
            all,
            [
                (30, 8),
                (10, 1),
                (15, 7),
                (20, 6),
                (10, 2),
                (10, 3),
                (10, 4),
                (10, 5)
            ]
        );
        // Not yet due: left out.
        assert_eq!(
            ready.choose(12, 10, |_| true),
            [(10, 1), (10, 2), (10, 3), (10, 4), (10, 5)]
        );
        // Key a refused: the rest go on.
        assert_eq!(ready.choose(100, 10, |k| k != Some(&a)), [(15, 7), (20, 6)]);
        ready.remove(0, Some(&a), (10, 1));
        ready.remove(1, Some(&a), (30, 8));
        assert_eq!(ready.choose(100, 2, |_| true), [(10, 2), (15, 7)]);
    }

    #[test]
    fn rates_count_starts_within_their_period() {
        let mut keys = Keys::default();
        let k = key("api");
        keys.limits.insert(
            "api".into(),
            KeyLimit {
                concurrency: None,
                rate: Some(crate::durable::Rate {
                    max: 2,
                    per: std::time::Duration::from_millis(100),
                }),
            },
        );
        assert!(keys.admits(&k, 0, 1));
        assert!(!keys.admits(&k, 0, 2));
        keys.started(&k, 0);
        keys.started(&k, 10);
        assert!(!keys.admits(&k, 99, 0));
        assert_eq!(keys.window_opens(&k, 99), Some(100));
        // Begun exactly `per` ago: no longer counted.
        assert!(keys.admits(&k, 100, 0));
        assert!(!keys.admits(&k, 100, 1));
        assert_eq!(keys.window_opens(&k, 100), None);
    }
}
