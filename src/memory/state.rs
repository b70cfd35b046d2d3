//! The rules of a durable queue, in plain Rust: what every store does, here
//! for the memory store. Redis's scripts and PostgreSQL's functions are the
//! same steps in their languages; when a rule is unclear, this file is the
//! answer, and the shared test bodies hold the three to it.
//!
//! Ground rules. One `State` per queue, behind one lock (see `queue.rs`);
//! nothing here waits or calls back into user code. Times are ms since the
//! Unix epoch on the queue's clock, passed in as `now`. A live entry
//! (pending, due or leased) has a place in `order` under (score, seq): its
//! due time while pending, its lease end while leased (so a lease that runs
//! out makes it due with nothing to move), and the sequence number of its
//! last insert, reset or retry (FIFO among equal scores). A dead letter has
//! a place in `dead` under (death time, seq) instead. The methods return
//! whether the head may have moved earlier (`Moved::announce`), for the
//! caller to wake waiting consumers after it let go of the lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// How the rules refer to a schedule: `e,<period ms>,<policy>` or
/// `c,<cron expression>`, as every store keeps it.
pub(crate) type Rec = String;

/// One entry, live or dead.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The value (JSON); `None` for a schedule's tick, whose value is its
    /// schedule's.
    pub(crate) value: Option<Arc<str>>,
    /// Deliveries so far.
    pub(crate) attempt: u32,
    /// The claim that holds its lease, and when that claim ran.
    pub(crate) token: Option<Arc<str>>,
    pub(crate) since: Option<u64>,
    /// When its current delivery was due.
    pub(crate) deadline: Option<u64>,
    /// A schedule's tick: its instant.
    pub(crate) tick: Option<u64>,
    /// Its place in `order` while live, in `dead` while dead.
    pub(crate) key: (u64, u64),
    pub(crate) dead: bool,
    /// Why it died, or why its last attempt failed.
    pub(crate) reason: Option<String>,
}

/// A recurring schedule: its record and the value of its ticks.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub(crate) rec: Rec,
    pub(crate) value: Arc<str>,
}

/// One entry leased by a claim.
#[derive(Debug)]
pub(crate) struct Leased {
    pub(crate) id: String,
    pub(crate) value: Arc<str>,
    pub(crate) attempt: u32,
    pub(crate) deadline: u64,
    pub(crate) lease_until: u64,
    /// A tick: its schedule's record and instant.
    pub(crate) tick: Option<(Rec, u64)>,
}

/// How a delivery ends (the kinds of `durable::ops::Op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Ack,
    /// Due again `ms` on, attempts kept.
    Retry,
    /// A retry, or dead once attempts reached the limit.
    Fail,
    /// Dead, this delivery not counted.
    Bury,
    /// A retry, this delivery not counted.
    Snooze,
    /// Dead, this delivery counted.
    Discard,
    /// Due at once in its old place (`ms` 1: counted).
    GiveBack,
}

/// What a finish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    /// Not applied: the lease was lost.
    Lost,
    Applied,
    /// Applied, and the entry went to the dead letters.
    Dead,
}

/// Whether a step may have put an entry ahead of the old head: waiting
/// consumers must look again.
#[derive(Debug, Default, Clone, Copy)]
#[must_use]
pub(crate) struct Moved {
    pub(crate) announce: bool,
}

impl Moved {
    fn merge(&mut self, other: Moved) {
        self.announce |= other.announce;
    }
}

/// Counts by state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) pending: u64,
    pub(crate) due: u64,
    pub(crate) leased: u64,
    pub(crate) dead: u64,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) entries: HashMap<String, Entry>,
    /// Live entries by (score, seq).
    pub(super) order: BTreeMap<(u64, u64), String>,
    /// Leased entries by (lease end, seq): a subset of `order`.
    pub(super) leases: BTreeSet<(u64, u64)>,
    /// Dead letters by (death, seq).
    pub(super) dead: BTreeMap<(u64, u64), String>,
    pub(crate) schedules: BTreeMap<String, Schedule>,
    seq: u64,
    /// Paused: claims take nothing.
    pub(super) paused: bool,
}

/// What a handle's settings say about deaths: after `limit` deliveries
/// (0: never), and how long and how many dead letters are kept (checked
/// right after each death).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rules {
    pub(crate) limit: u32,
    pub(crate) dead_max_age: Option<u64>,
    pub(crate) dead_max_count: Option<u64>,
}

/// The reason of an entry past its deliveries.
fn past_limit(limit: u32) -> String {
    format!("not acked after {limit} deliveries")
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The head's score.
    pub(crate) fn head(&self) -> Option<u64> {
        self.order.keys().next().map(|&(score, _)| score)
    }

    /// Whether an entry at `at` would be ahead of the head.
    fn ahead(&self, at: u64) -> Moved {
        Moved {
            announce: self.head().is_none_or(|head| at < head),
        }
    }

    /// Puts live entry `id` at `key` in `order` (and `leases` if leased).
    fn set_key(&mut self, id: &str, key: (u64, u64)) {
        let e = self.entries.get_mut(id).expect("a live entry");
        self.order.remove(&e.key);
        self.leases.remove(&e.key);
        e.key = key;
        if e.token.is_some() {
            self.leases.insert(key);
        }
        self.order.insert(key, id.to_owned());
    }

    /// Inserts a new entry (`id` given, or made: `#<seq>`), due at `at`.
    /// `None` when the given id is taken (nothing changes).
    pub(crate) fn insert(
        &mut self,
        id: Option<&str>,
        value: Arc<str>,
        at: u64,
        moved: &mut Moved,
    ) -> Option<String> {
        let (id, seq) = match id {
            Some(id) if self.entries.contains_key(id) => return None,
            Some(id) => (id.to_owned(), self.next_seq()),
            None => loop {
                let seq = self.next_seq();
                let id = format!("#{seq}");
                // A made id a caller took with its own: make another.
                if !self.entries.contains_key(&id) {
                    break (id, seq);
                }
            },
        };
        moved.merge(self.ahead(at));
        self.entries.insert(
            id.clone(),
            Entry {
                value: Some(value),
                attempt: 0,
                token: None,
                since: None,
                deadline: None,
                tick: None,
                key: (at, seq),
                dead: false,
                reason: None,
            },
        );
        self.order.insert((at, seq), id.clone());
        Some(id)
    }

    /// Schedules live entry `id` at `at` as if inserted now, its lease (if
    /// any) given up.
    fn place(&mut self, id: &str, at: u64) -> Moved {
        let moved = self.ahead(at);
        let seq = self.next_seq();
        let e = self.entries.get_mut(id).expect("a live entry");
        e.token = None;
        e.since = None;
        self.set_key(id, (at, seq));
        moved
    }

    /// Deletes entry `id`, pending, leased or dead; a schedule's tick takes
    /// its schedule with it. `tick_only`: only a tick (and the schedule,
    /// even if it has no tick now). Whether it was there.
    pub(crate) fn remove(&mut self, id: &str, tick_only: bool) -> bool {
        let schedule = self.schedules.contains_key(id);
        let mut found = self.entries.get(id).map(|e| e.tick.is_some());
        if tick_only {
            if !schedule {
                return false;
            }
            if found == Some(false) {
                found = None;
            }
        } else if found.is_none() {
            return false;
        }
        if found.is_some() {
            self.forget(id);
        }
        if schedule && found != Some(false) {
            self.schedules.remove(id);
        }
        true
    }

    /// Takes entry `id` out of every index.
    fn forget(&mut self, id: &str) -> Option<Entry> {
        let e = self.entries.remove(id)?;
        if e.dead {
            self.dead.remove(&e.key);
        } else {
            self.order.remove(&e.key);
            self.leases.remove(&e.key);
        }
        Some(e)
    }

    /// Moves a pending entry (not leased, not dead) to `at`, as if inserted
    /// then (a tick moves its instant with it).
    pub(crate) fn reset(&mut self, id: &str, at: u64) -> Option<Moved> {
        let e = self.entries.get_mut(id)?;
        if e.token.is_some() || e.dead {
            return None;
        }
        if e.tick.is_some() {
            e.tick = Some(at);
        }
        Some(self.place(id, at))
    }

    /// When entry `id` is due (its lease end while leased); `None` if it is
    /// absent or dead.
    pub(crate) fn deadline(&self, id: &str) -> Option<u64> {
        self.entries.get(id).filter(|e| !e.dead).map(|e| e.key.0)
    }

    /// Leases up to `max` due entries, in order, to `token` until `now +
    /// lease`; an entry past `limit` deliveries (0: none) goes to the dead
    /// letters instead. Also whether more were due than it took.
    pub(crate) fn claim(
        &mut self,
        now: u64,
        max: usize,
        lease: u64,
        rules: Rules,
        token: &Arc<str>,
        moved: &mut Moved,
    ) -> (Vec<Leased>, bool) {
        if self.paused {
            return (Vec::new(), false);
        }
        let limit = rules.limit;
        let due: Vec<(u64, u64)> = self
            .order
            .range(..=(now, u64::MAX))
            .take(max.saturating_add(1))
            .map(|(key, _)| *key)
            .collect();
        let more = due.len() > max;
        let lease_until = now.saturating_add(lease);
        let mut taken = Vec::with_capacity(due.len().min(max));
        for key in due.into_iter().take(max) {
            let (score, seq) = key;
            // Out of the order while it is changed; back under its lease end.
            let id = self.order.remove(&key).expect("a live entry");
            self.leases.remove(&key);
            let e = self.entries.get_mut(&id).expect("a live entry");
            e.attempt += 1;
            e.deadline = Some(e.tick.unwrap_or(score));
            let tick = e.tick;
            let rec = tick.and_then(|_| self.schedules.get(&id).map(|s| s.rec.clone()));
            if limit > 0 && e.attempt > limit {
                e.attempt = limit;
                self.order.insert(key, id.clone());
                let next = rec
                    .as_ref()
                    .zip(tick)
                    .and_then(|(rec, tick)| super::ticks::next_tick(rec, tick, None, now));
                self.bury(&id, past_limit(limit), now, rules);
                if let Some(next) = next {
                    moved.merge(self.successor(&id, next));
                }
                continue;
            }
            e.token = Some(Arc::clone(token));
            e.since = Some(now);
            e.key = (lease_until, seq);
            let (attempt, deadline) = (e.attempt, e.deadline.unwrap_or(score));
            let value = match &e.value {
                Some(value) => Arc::clone(value),
                None => self.schedule_value(&id),
            };
            self.leases.insert((lease_until, seq));
            taken.push(Leased {
                id: id.clone(),
                value,
                attempt,
                deadline,
                lease_until,
                tick: rec.zip(tick),
            });
            self.order.insert((lease_until, seq), id);
        }
        (taken, more)
    }

    /// The record of the schedule whose tick `id` is, if it is one.
    fn tick_rec(&self, id: &str) -> Option<Rec> {
        self.entries.get(id)?.tick?;
        self.schedules.get(id).map(|s| s.rec.clone())
    }

    /// The value of schedule `name`'s ticks (`null` once the schedule is
    /// gone: a tick whose schedule was deleted while it ran).
    fn schedule_value(&self, name: &str) -> Arc<str> {
        self.schedules
            .get(name)
            .map_or_else(|| Arc::from("null"), |s| Arc::clone(&s.value))
    }

    /// Whether claim `token` holds entry `id`'s lease.
    fn holds(&self, id: &str, token: &str) -> bool {
        self.entries
            .get(id)
            .is_some_and(|e| !e.dead && e.token.as_deref() == Some(token))
    }

    /// Finishes the delivery (`id`, `token`) by `end`, `ms` the delay of a
    /// retry or snooze (a give-back: 1 if counted), `reason` a failure's;
    /// `limit` the queue's deliveries before death (0: none). A tick that
    /// leaves its schedule (acked, dead) gets its successor.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish(
        &mut self,
        end: End,
        id: &str,
        token: &str,
        ms: u64,
        reason: &str,
        now: u64,
        rules: Rules,
        moved: &mut Moved,
    ) -> Done {
        let limit = rules.limit;
        if !self.holds(id, token) {
            return Done::Lost;
        }
        let e = self.entries.get_mut(id).expect("held");
        let (end, done) = match end {
            End::Fail if limit > 0 && e.attempt >= limit => (End::Discard, Done::Dead),
            End::Fail => (End::Retry, Done::Applied),
            End::Bury => {
                e.attempt = e.attempt.saturating_sub(1);
                (End::Discard, Done::Applied)
            }
            End::Snooze => {
                e.attempt = e.attempt.saturating_sub(1);
                (End::Retry, Done::Applied)
            }
            End::Discard => (End::Discard, Done::Dead),
            other => (other, Done::Applied),
        };
        match end {
            End::Retry => {
                if !reason.is_empty() {
                    e.reason = Some(reason.to_owned());
                }
                moved.merge(self.place(id, now.saturating_add(ms)));
            }
            End::GiveBack => {
                if ms == 0 {
                    e.attempt = e.attempt.saturating_sub(1);
                }
                // Back in its old place, due at once.
                let at = e.deadline.unwrap_or(now).min(now);
                let seq = e.key.1;
                e.token = None;
                e.since = None;
                moved.merge(self.ahead(at));
                self.set_key(id, (at, seq));
            }
            _ => {
                // Ack or dead: the entry leaves the schedule.
                let tick = e.tick;
                let next = tick.and_then(|tick| {
                    let rec = self.tick_rec(id)?;
                    let since = self.entries[id].since;
                    super::ticks::next_tick(&rec, tick, since, now)
                });
                if end == End::Discard {
                    self.bury(id, reason.to_owned(), now, rules);
                } else {
                    self.forget(id);
                }
                if let Some(next) = next {
                    moved.merge(self.successor(id, next));
                }
            }
        }
        done
    }

    /// Gives back, uncounted, every lease of claim `token`.
    pub(crate) fn release(&mut self, token: &str, now: u64, moved: &mut Moved) {
        let held: Vec<String> = self
            .leases
            .iter()
            .filter_map(|key| self.order.get(key))
            .filter(|id| self.holds(id, token))
            .cloned()
            .collect();
        for id in held {
            let _ = self.finish(
                End::GiveBack,
                &id,
                token,
                0,
                "",
                now,
                Rules::default(),
                moved,
            );
        }
    }

    /// Moves entry `id` to the dead letters with `reason`. A tick is kept
    /// under `<name>@<instant>` (its name stays free for its successor), a
    /// name over 480 bytes cut to 480 at a character boundary, so the dead
    /// letter's id keeps to 512 bytes.
    fn bury(&mut self, id: &str, reason: String, now: u64, rules: Rules) {
        let mut e = self.forget(id).expect("a live entry");
        let mut dead_id = id.to_owned();
        if let Some(tick) = e.tick {
            let mut cut = id.len().min(480);
            while !id.is_char_boundary(cut) {
                cut -= 1;
            }
            let base = format!("{}@{tick}", &id[..cut]);
            dead_id.clone_from(&base);
            let mut n = 1;
            while self.entries.contains_key(&dead_id) {
                n += 1;
                dead_id = format!("{base}.{n}");
            }
            e.value = Some(self.schedule_value(id));
        }
        let seq = self.next_seq();
        e.token = None;
        e.since = None;
        e.tick = None;
        e.dead = true;
        e.reason = Some(reason);
        e.key = (now, seq);
        self.dead.insert(e.key, dead_id.clone());
        self.entries.insert(dead_id, e);
        self.trim_dead(now, rules);
    }

    /// Keeps no dead letter older than the rules' age and at most their
    /// count (the oldest go first).
    fn trim_dead(&mut self, now: u64, rules: Rules) {
        let mut gone = Vec::new();
        if let Some(age) = rules.dead_max_age {
            let oldest_kept = now.saturating_sub(age);
            gone.extend(
                self.dead
                    .range(..(oldest_kept, 0))
                    .map(|(_, id)| id.clone()),
            );
        }
        if let Some(count) = rules.dead_max_count {
            let over = (self.dead.len() as u64).saturating_sub(count) as usize;
            gone.extend(self.dead.values().take(over).cloned());
        }
        for id in gone {
            self.forget(&id);
        }
    }

    /// Inserts the tick of schedule `name` due at `at` (attempt 0).
    fn successor(&mut self, name: &str, at: u64) -> Moved {
        let moved = self.ahead(at);
        let seq = self.next_seq();
        self.entries.insert(
            name.to_owned(),
            Entry {
                value: None,
                attempt: 0,
                token: None,
                since: None,
                deadline: None,
                tick: Some(at),
                key: (at, seq),
                dead: false,
                reason: None,
            },
        );
        self.order.insert((at, seq), name.to_owned());
        moved
    }

    /// Pushes the lease of (`id`, `token`) to `until`, if still held.
    pub(crate) fn extend(&mut self, id: &str, token: &str, until: u64, moved: &mut Moved) -> bool {
        if !self.holds(id, token) {
            return false;
        }
        moved.merge(self.ahead(until));
        let seq = self.entries[id].key.1;
        self.set_key(id, (until, seq));
        true
    }

    /// Counts by state at `now`; an expired lease counts as due.
    pub(crate) fn counts(&self, now: u64) -> Counts {
        let due = self.order.range(..=(now, u64::MAX)).count() as u64;
        let leased = self.leases.range((now.saturating_add(1), 0)..).count() as u64;
        Counts {
            pending: self.order.len() as u64 - due - leased,
            due,
            leased,
            dead: self.dead.len() as u64,
        }
    }

    /// Up to `max` dead letters, oldest first.
    pub(crate) fn dead_letters(&self, max: usize) -> Vec<(&str, &Entry)> {
        self.dead
            .values()
            .take(max)
            .map(|id| (id.as_str(), &self.entries[id]))
            .collect()
    }

    /// Puts dead letter `id` back as pending at `at`, attempts reset (a
    /// dead tick comes back as a one-off entry).
    pub(crate) fn requeue_dead(&mut self, id: &str, at: u64) -> Option<Moved> {
        let e = self.entries.get_mut(id).filter(|e| e.dead)?;
        e.attempt = 0;
        e.tick = None;
        e.deadline = None;
        e.reason = None;
        e.dead = false;
        let key = e.key;
        self.dead.remove(&key);
        let moved = self.ahead(at);
        let seq = self.next_seq();
        let e = self.entries.get_mut(id).expect("found");
        e.key = (at, seq);
        self.order.insert((at, seq), id.to_owned());
        Some(moved)
    }

    /// Deletes everything, schedules included.
    pub(crate) fn purge(&mut self) {
        let seq = self.seq;
        *self = State::default();
        // Made ids of later inserts stay new.
        self.seq = seq;
    }

    /// Creates or changes schedule `name` (an upsert): `Ok(true)` if
    /// created or changed, `Ok(false)` if the same call was made before,
    /// `Err(())` if the name is taken by an entry that is not a tick. A
    /// changed spec moves a pending tick to its first instant after now
    /// (`first`); a leased tick runs on and its ack follows the new spec.
    pub(crate) fn schedule(
        &mut self,
        name: &str,
        rec: Rec,
        value: Arc<str>,
        first: impl FnOnce() -> Option<u64>,
        moved: &mut Moved,
    ) -> Result<bool, ()> {
        let e = self.entries.get(name);
        if e.is_some_and(|e| e.tick.is_none()) {
            return Err(());
        }
        let old = self.schedules.get(name);
        if e.is_some() && old.is_some_and(|s| s.rec == rec && s.value == value) {
            return Ok(false);
        }
        let changed = old.is_none_or(|s| s.rec != rec);
        let relocate = e.is_none_or(|e| changed && e.token.is_none());
        self.schedules
            .insert(name.to_owned(), Schedule { rec, value });
        if relocate {
            self.forget(name);
            if let Some(first) = first() {
                moved.merge(self.successor(name, first));
            }
        }
        Ok(true)
    }

    /// When schedule `name`'s tick is due, unless it is leased (or absent).
    pub(crate) fn next_of(&self, name: &str) -> Option<u64> {
        self.entries
            .get(name)
            .filter(|e| e.tick.is_some() && e.token.is_none() && !e.dead)
            .map(|e| e.key.0)
    }
}
