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
//! a place in `dead` under (death time, seq) instead. A live entry that no
//! lease holds is also *ready* (in `ready`, the claim's index: priority,
//! then place, a key at a time); a leased one *holds* a place of its key
//! (in `leases`, counted in `keys`) until it finishes or a claim sees its
//! lease ran out, which makes it ready again at its lease end (its token
//! stays: its holder may still ack it until another claim takes it). Every
//! change of an entry's place goes through `set_place`, which keeps both
//! indexes. The methods return whether the head may have moved earlier, or
//! a place of a key with ready entries freed (`Moved::announce`), for the
//! caller to wake waiting consumers after it let go of the lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::kept::{Kept, Results};
use super::ready::{Keys, Ready};
use crate::durable::options::Plan;
use crate::durable::{Finished, PARKED};

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
    /// Among due entries, higher first.
    pub(crate) priority: i16,
    /// The key whose limits it runs under.
    pub(crate) group: Option<Arc<str>>,
    /// Its own deliveries before death (0: never), instead of the queue's.
    pub(crate) limit: Option<u32>,
    /// How long its id stays taken after it finishes, in ms.
    pub(crate) unique: Option<u64>,
    /// The inserting span's trace context.
    pub(crate) trace: Option<Arc<str>>,
    /// The worker whose claim holds its lease (while leased).
    pub(crate) worker: Option<Arc<str>>,
    /// Its last failed attempts (attempt, when, why), oldest first.
    pub(crate) errors: std::collections::VecDeque<(u32, u64, String)>,
    /// A dead tick: its schedule's name.
    pub(crate) schedule_of: Option<String>,
    /// A tick of a paused schedule that `run_now` made due: ready anyway.
    pub(crate) forced: bool,
    /// In the claim index (see `ready.rs`).
    pub(crate) ready: bool,
    /// Holds a place of its key (leased, its lease not yet seen to run
    /// out): counted in its key's `held` and in `leases`.
    pub(crate) held: bool,
}

impl Entry {
    /// A new live entry (not yet indexed).
    fn new(value: Option<Arc<str>>, place: (u64, u64)) -> Entry {
        Entry {
            value,
            attempt: 0,
            token: None,
            since: None,
            deadline: None,
            tick: None,
            key: place,
            dead: false,
            reason: None,
            priority: 0,
            group: None,
            limit: None,
            unique: None,
            trace: None,
            worker: None,
            errors: std::collections::VecDeque::new(),
            schedule_of: None,
            forced: false,
            ready: false,
            held: false,
        }
    }
}

/// A recurring schedule: its record and the value of its ticks.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub(crate) rec: Rec,
    pub(crate) value: Arc<str>,
    /// Paused: its tick is not delivered (unless `run_now` forced it).
    pub(crate) paused: bool,
    /// When its last finished tick's run began, and how it ended.
    pub(crate) last_run: Option<u64>,
    pub(crate) last_outcome: Option<Finished>,
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
    pub(crate) priority: i16,
    pub(crate) group: Option<Arc<str>>,
    pub(crate) trace: Option<Arc<str>>,
}

/// The answer of a claim's step.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) items: Vec<Leased>,
    /// More may be due than it took.
    pub(crate) more: bool,
    /// When to look again, if nothing changes meanwhile (ms): the next
    /// entry to come due or lease to run out, or the next rate window to
    /// open for a key whose due entries wait on it. `None`: nothing is
    /// pending, leased or waiting (or the queue is paused).
    pub(crate) wake: Option<u64>,
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
    pub(super) fn merge(&mut self, other: Moved) {
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
    /// The clock's reading for the step under way (set by `Inner::write`).
    pub(crate) now: u64,
    /// What a claim may take, in its order.
    ready: Ready,
    /// The keys' limits and counts.
    pub(crate) keys: Keys,
    /// Ids kept taken after their entry finished, until when (ms), and the
    /// same by time, to forget them when they expire.
    unique: HashMap<String, u64>,
    unique_until: BTreeSet<(u64, String)>,
    /// Results, cancel marks, and the ids that finished in this step.
    pub(crate) results: Results,
    /// Per-minute counts of the last 24 hours, by minute.
    pub(crate) minutes: BTreeMap<u64, super::health::Counted>,
    /// Worker records: the record, when first and last heard of (ms).
    pub(crate) workers: HashMap<String, (crate::durable::health::Record, u64, u64)>,
}

/// What a handle's settings say about deaths: after `limit` deliveries
/// (0: never), and how long and how many dead letters are kept (checked
/// right after each death).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rules {
    pub(crate) limit: u32,
    pub(crate) dead_max_age: Option<u64>,
    pub(crate) dead_max_count: Option<u64>,
    /// How long a finished entry's result is kept, in ms (0: not kept).
    pub(crate) keep: u64,
}

/// When live entry `e` is due (its lease end while leased); a parked tick
/// (see `State::park_tick`): its instant, when it is due once resumed.
fn due_of(e: &Entry) -> u64 {
    if e.key.0 >= PARKED {
        e.tick.unwrap_or(e.key.0)
    } else {
        e.key.0
    }
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

    /// Whether waiting consumers must look again for an entry at `at`:
    /// it would be ahead of the head, or it is due now (the due entries
    /// ahead of it may all wait on their keys' limits, and consumers then
    /// sleep until a place frees).
    fn ahead(&self, at: u64) -> Moved {
        Moved {
            announce: at <= self.now || self.head().is_none_or(|head| at < head),
        }
    }

    /// Puts entry `id` in the claim index.
    fn make_ready(&mut self, id: &str) {
        let paused = self.schedules.get(id).is_some_and(|s| s.paused);
        let e = self.entries.get_mut(id).expect("a live entry");
        if e.ready || e.held || e.dead || (paused && e.tick.is_some() && !e.forced) {
            return;
        }
        e.ready = true;
        self.ready.add(e.priority, e.group.as_ref(), e.key);
        if let Some(group) = &e.group {
            self.keys.add_ready(group);
        }
    }

    /// Takes entry `id` out of the claim index.
    fn unready(&mut self, id: &str) {
        let e = self.entries.get_mut(id).expect("a live entry");
        if !e.ready {
            return;
        }
        e.ready = false;
        self.ready.remove(e.priority, e.group.as_ref(), e.key);
        if let Some(group) = &e.group {
            self.keys.remove_ready(group);
        }
    }

    /// A paused schedule's tick: a pending one is *parked* (out of the
    /// claim index, at `PARKED`, its instant kept in `tick`), so it counts
    /// and lists as pending; one that runs now (leased, or made due by
    /// `run_now`) runs, retries included.
    pub(super) fn park_tick(&mut self, name: &str) {
        let e = self.entries.get_mut(name).expect("a live entry");
        if e.dead || e.forced {
            return;
        }
        if e.token.is_some() {
            e.forced = true;
            return;
        }
        let seq = e.key.1;
        self.unready(name);
        self.set_place(name, (PARKED, seq));
    }

    /// A resumed schedule's parked tick goes back to its instant and may be
    /// claimed again (announced: it may be due).
    pub(super) fn unpark_tick(&mut self, name: &str) -> Moved {
        let now = self.now;
        let e = self.entries.get_mut(name).expect("a live entry");
        e.forced = false;
        if e.key.0 >= PARKED {
            let place = (e.tick.unwrap_or(now), e.key.1);
            self.set_place(name, place);
        }
        self.make_ready(name);
        Moved { announce: true }
    }

    /// Entry `id` holds a place of its key (it was just leased).
    fn hold(&mut self, id: &str) {
        let e = self.entries.get_mut(id).expect("a live entry");
        if e.held {
            return;
        }
        e.held = true;
        self.leases.insert(e.key);
        if let Some(group) = &e.group {
            self.keys.hold(group);
        }
    }

    /// Entry `id` gives its place back: whether entries of its key wait
    /// for one (waiting consumers must look again).
    fn unhold(&mut self, id: &str) -> Moved {
        let e = self.entries.get_mut(id).expect("a live entry");
        if !e.held {
            return Moved::default();
        }
        e.held = false;
        self.leases.remove(&e.key);
        Moved {
            announce: e.group.as_ref().is_some_and(|g| self.keys.unhold(g)),
        }
    }

    /// Moves live entry `id` to `place` in `order`, and in the index it is
    /// in (`ready` or `leases`).
    fn set_place(&mut self, id: &str, place: (u64, u64)) {
        let e = self.entries.get_mut(id).expect("a live entry");
        let old = e.key;
        e.key = place;
        let (ready, held) = (e.ready, e.held);
        let (priority, group) = (e.priority, e.group.clone());
        self.order.remove(&old);
        self.order.insert(place, id.to_owned());
        if ready {
            self.ready.remove(priority, group.as_ref(), old);
            self.ready.add(priority, group.as_ref(), place);
        }
        if held {
            self.leases.remove(&old);
            self.leases.insert(place);
        }
    }

    /// Inserts a plain new entry (`id` given, or made: `#<seq>`), due at
    /// `at`. `None` when the given id is taken, or kept taken by a unique
    /// window (nothing changes).
    pub(crate) fn insert(
        &mut self,
        id: Option<&str>,
        value: Arc<str>,
        at: u64,
        now: u64,
        moved: &mut Moved,
    ) -> Option<String> {
        let plan = Plan::plain(id, String::new(), crate::durable::options::When::At(at));
        self.insert_plan(&plan, value, now, moved)
    }

    /// Inserts the entry `plan` describes (its value: `value`), or replaces
    /// the pending entry of its id where it says so. `None` when refused:
    /// an entry has the id (leased, dead, a tick, or pending without
    /// `replace`), or the id's unique window is open.
    pub(crate) fn insert_plan(
        &mut self,
        plan: &Plan,
        value: Arc<str>,
        now: u64,
        moved: &mut Moved,
    ) -> Option<String> {
        let at = plan.due.at(now);
        let (id, seq) = match plan.id.as_deref() {
            Some(id) if self.entries.contains_key(id) => {
                let e = &self.entries[id];
                if !plan.replace || e.token.is_some() || e.dead || e.tick.is_some() {
                    return None;
                }
                // Replaced: a new entry under the old id, in its new place.
                self.unready(id);
                let e = self.entries.get_mut(id).expect("found");
                e.value = Some(value);
                e.attempt = 0;
                e.deadline = None;
                e.reason = None;
                Self::apply_plan(e, plan);
                moved.merge(self.place(id, at));
                self.count(now, |m| m.inserted += 1);
                return Some(id.to_owned());
            }
            Some(id) if self.unique_open(id, now) => return None,
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
        let mut e = Entry::new(Some(value), (at, seq));
        Self::apply_plan(&mut e, plan);
        self.entries.insert(id.clone(), e);
        self.order.insert((at, seq), id.clone());
        self.make_ready(&id);
        self.count(now, |m| m.inserted += 1);
        Some(id)
    }

    /// Sets the options `plan` gives an entry (not yet indexed).
    fn apply_plan(e: &mut Entry, plan: &Plan) {
        e.priority = plan.priority;
        e.group = plan.key.as_deref().map(Arc::from);
        e.limit = plan.max_attempts;
        e.unique = plan.unique_ms;
        e.trace = plan.trace.as_deref().map(Arc::from);
    }

    /// Whether id `id` is kept taken by a unique window at `now`.
    fn unique_open(&mut self, id: &str, now: u64) -> bool {
        // Forgets the windows that closed.
        while let Some(first) = self.unique_until.first() {
            if first.0 > now {
                break;
            }
            let (_, gone) = self.unique_until.pop_first().expect("looked at");
            self.unique.remove(&gone);
        }
        self.unique.get(id).is_some_and(|&until| until > now)
    }

    /// Keeps id `id` taken until `until`.
    fn keep_taken(&mut self, id: &str, until: u64) {
        if let Some(old) = self.unique.insert(id.to_owned(), until) {
            self.unique_until.remove(&(old, id.to_owned()));
        }
        self.unique_until.insert((until, id.to_owned()));
    }

    /// Schedules live entry `id` at `at` as if inserted now, its lease (if
    /// any) given up.
    fn place(&mut self, id: &str, at: u64) -> Moved {
        let mut moved = self.ahead(at);
        moved.merge(self.unhold(id));
        let seq = self.next_seq();
        let e = self.entries.get_mut(id).expect("a live entry");
        e.token = None;
        e.since = None;
        e.worker = None;
        self.set_place(id, (at, seq));
        self.make_ready(id);
        moved
    }

    /// Deletes entry `id`, pending, leased or dead; a schedule's tick takes
    /// its schedule with it. `tick_only`: only a tick (and the schedule,
    /// even if it has no tick now). Whether it was there.
    pub(crate) fn remove(
        &mut self,
        id: &str,
        tick_only: bool,
        now: u64,
        moved: &mut Moved,
    ) -> bool {
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
            if let Some((e, freed)) = self.forget(id) {
                moved.merge(freed);
                if let Some(window) = e.unique {
                    self.keep_taken(id, now.saturating_add(window));
                }
            }
        }
        if schedule && found != Some(false) {
            self.schedules.remove(id);
        }
        true
    }

    /// Takes entry `id` out of every index; whether a place of its key
    /// freed for entries waiting on it.
    fn forget(&mut self, id: &str) -> Option<(Entry, Moved)> {
        let e = self.entries.get(id)?;
        let freed = if e.dead {
            Moved::default()
        } else {
            self.unready(id);
            self.unhold(id)
        };
        let e = self.entries.remove(id).expect("found");
        if e.dead {
            self.dead.remove(&e.key);
        } else {
            self.order.remove(&e.key);
            self.results.finished.push(id.to_owned());
        }
        Some((e, freed))
    }

    /// Moves a pending entry (not leased, not dead) to `at`, as if inserted
    /// then (a tick moves its instant with it).
    pub(crate) fn reset(&mut self, id: &str, at: u64) -> Option<Moved> {
        let paused = self.schedules.get(id).is_some_and(|s| s.paused);
        let e = self.entries.get_mut(id)?;
        if e.token.is_some() || e.dead {
            return None;
        }
        if e.tick.is_some() {
            e.tick = Some(at);
            // A paused schedule's tick made due runs anyway.
            e.forced |= paused;
        }
        Some(self.place(id, at))
    }

    /// When entry `id` is due (its lease end while leased); `None` if it is
    /// absent or dead.
    pub(crate) fn deadline(&self, id: &str) -> Option<u64> {
        self.entries.get(id).filter(|e| !e.dead).map(due_of)
    }

    /// Leases that ran out by `now` give their places back; their entries
    /// are ready again, at their lease end (their tokens stay until another
    /// claim takes them).
    fn reap(&mut self, now: u64) {
        let ended: Vec<(u64, u64)> = self.leases.range(..=(now, u64::MAX)).copied().collect();
        for place in ended {
            let id = self.order[&place].clone();
            let _ = self.unhold(&id);
            self.make_ready(&id);
        }
    }

    /// Leases up to `max` due entries to `token` until `now + lease`, in
    /// claim order: the highest priority first, then due time (FIFO on
    /// ties), one entry of each key before a second of any, leaving out
    /// the keys at their limits. An entry past its limit of deliveries (its
    /// own, else the rules'; 0: none) goes to the dead letters instead.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn claim(
        &mut self,
        now: u64,
        max: usize,
        lease: u64,
        rules: Rules,
        token: &Arc<str>,
        worker: Option<&Arc<str>>,
        moved: &mut Moved,
    ) -> Claimed {
        self.reap(now);
        if self.paused {
            return Claimed {
                items: Vec::new(),
                more: false,
                wake: None,
            };
        }
        let mut taken_of: HashMap<Arc<str>, u32> = HashMap::new();
        let mut waiting: Vec<Arc<str>> = Vec::new();
        let keys = &self.keys;
        let chosen = self.ready.choose(now, max, |group| {
            let Some(group) = group else {
                return true;
            };
            let taken = taken_of.get(group).copied().unwrap_or(0);
            if keys.admits(group, now, taken) {
                *taken_of.entry(Arc::clone(group)).or_default() += 1;
                true
            } else {
                waiting.push(Arc::clone(group));
                false
            }
        });
        let more = max > 0 && chosen.len() >= max;
        let lease_until = now.saturating_add(lease);
        let mut items = Vec::with_capacity(chosen.len());
        for place in chosen {
            let id = self.order[&place].clone();
            self.unready(&id);
            let e = self.entries.get_mut(&id).expect("a live entry");
            e.attempt += 1;
            e.deadline = Some(e.tick.unwrap_or(place.0));
            let tick = e.tick;
            let limit = e.limit.unwrap_or(rules.limit);
            let rec = tick.and_then(|_| self.schedules.get(&id).map(|s| s.rec.clone()));
            if limit > 0 && e.attempt > limit {
                e.attempt = limit;
                let next = rec
                    .as_ref()
                    .zip(tick)
                    .and_then(|(rec, tick)| super::ticks::next_tick(rec, tick, None, now));
                self.bury(&id, past_limit(limit), now, rules, moved);
                if let Some(next) = next {
                    moved.merge(self.successor(&id, next));
                }
                continue;
            }
            e.token = Some(Arc::clone(token));
            e.since = Some(now);
            e.worker = worker.cloned();
            let (attempt, deadline) = (e.attempt, e.deadline.unwrap_or(place.0));
            let (priority, group, trace) = (e.priority, e.group.clone(), e.trace.clone());
            let value = match &e.value {
                Some(value) => Arc::clone(value),
                None => self.schedule_value(&id),
            };
            self.set_place(&id, (lease_until, place.1));
            self.hold(&id);
            if let Some(group) = &group {
                self.keys.started(group, now);
            }
            items.push(Leased {
                id,
                value,
                attempt,
                deadline,
                lease_until,
                tick: rec.zip(tick),
                priority,
                group,
                trace,
            });
        }
        let next = self.order.range((now.saturating_add(1), 0)..).next();
        let window = waiting
            .iter()
            .filter_map(|group| self.keys.window_opens(group, now))
            .min();
        // More may be due: look again at once.
        let wake = if more {
            Some(now)
        } else {
            next.map(|(&(at, _), _)| at).into_iter().chain(window).min()
        };
        Claimed { items, more, wake }
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
    /// `rules.limit` the queue's deliveries before death (0: none), unless
    /// the entry has its own. A tick that leaves its schedule (acked, dead)
    /// gets its successor.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish(
        &mut self,
        end: End,
        id: &str,
        token: &str,
        ms: u64,
        reason: &str,
        output: Option<&str>,
        now: u64,
        rules: Rules,
        moved: &mut Moved,
    ) -> Done {
        if !self.holds(id, token) {
            return Done::Lost;
        }
        let e = self.entries.get_mut(id).expect("held");
        let limit = e.limit.unwrap_or(rules.limit);
        // A failed attempt (a `Fail` or a `Discard`) is counted and kept.
        let failed = matches!(end, End::Fail | End::Discard);
        if failed {
            if e.errors.len() >= crate::durable::health::ERRORS_KEPT {
                e.errors.pop_front();
            }
            e.errors.push_back((e.attempt, now, reason.to_owned()));
        }
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
        if failed {
            self.count(now, |m| m.failed += 1);
        }
        let e = self.entries.get_mut(id).expect("held");
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
                e.worker = None;
                moved.merge(self.ahead(at));
                moved.merge(self.unhold(id));
                self.set_place(id, (at, seq));
                self.make_ready(id);
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
                    self.bury(id, reason.to_owned(), now, rules, moved);
                } else if let Some((e, freed)) = self.forget(id) {
                    moved.merge(freed);
                    self.count(now, |m| m.done += 1);
                    if let Some(schedule) = self.schedules.get_mut(id).filter(|_| e.tick.is_some())
                    {
                        schedule.last_run = e.since.or(schedule.last_run);
                        schedule.last_outcome = Some(Finished::Done);
                    }
                    if let Some(window) = e.unique {
                        self.keep_taken(id, now.saturating_add(window));
                    }
                    let kept = Kept {
                        state: Finished::Done,
                        at: now,
                        attempts: e.attempt,
                        output: output.map(Arc::from),
                        reason: None,
                    };
                    self.results.keep(id, kept, rules.keep, now);
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
                None,
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
    fn bury(&mut self, id: &str, reason: String, now: u64, rules: Rules, moved: &mut Moved) {
        let (mut e, freed) = self.forget(id).expect("a live entry");
        moved.merge(freed);
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
        let kept = Kept {
            state: Finished::Dead,
            at: now,
            attempts: e.attempt,
            output: None,
            reason: Some(reason.clone()),
        };
        self.results.keep(&dead_id, kept, rules.keep, now);
        if let Some(schedule) = self.schedules.get_mut(id).filter(|_| e.tick.is_some()) {
            schedule.last_run = e.since.or(schedule.last_run);
            schedule.last_outcome = Some(Finished::Dead);
            e.schedule_of = Some(id.to_owned());
        }
        self.count(now, |m| m.dead += 1);
        let seq = self.next_seq();
        e.token = None;
        e.since = None;
        e.worker = None;
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
            self.forget_dead(&id, now);
        }
    }

    /// Deletes dead letter `id`; a unique window starts now.
    pub(crate) fn forget_dead(&mut self, id: &str, now: u64) {
        if let Some((e, _)) = self.forget(id) {
            if let Some(window) = e.unique {
                self.keep_taken(id, now.saturating_add(window));
            }
        }
    }

    /// Inserts the tick of schedule `name` due at `at` (attempt 0).
    fn successor(&mut self, name: &str, at: u64) -> Moved {
        let moved = self.ahead(at);
        let now = self.now;
        self.count(now, |m| m.inserted += 1);
        let seq = self.next_seq();
        // A paused schedule's tick is parked (see `park_tick`).
        let paused = self.schedules.get(name).is_some_and(|s| s.paused);
        let place = (if paused { PARKED } else { at }, seq);
        let mut e = Entry::new(None, place);
        e.tick = Some(at);
        self.entries.insert(name.to_owned(), e);
        self.order.insert(place, name.to_owned());
        self.make_ready(name);
        moved
    }

    /// Pushes the lease of (`id`, `token`) to `until`, if still held (a
    /// lease that ran out and was seen to is held again).
    pub(crate) fn extend(&mut self, id: &str, token: &str, until: u64, moved: &mut Moved) -> bool {
        if !self.holds(id, token) {
            return false;
        }
        // A lease that ran out gave its key's place back: taken since by
        // another entry of a key at its concurrency, it is not taken back.
        let e = &self.entries[id];
        if !e.held && e.group.as_ref().is_some_and(|g| !self.keys.has_place(g)) {
            return false;
        }
        moved.merge(self.ahead(until));
        let seq = self.entries[id].key.1;
        self.unready(id);
        self.set_place(id, (until, seq));
        self.hold(id);
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
        // Its next finish is the one a `wait` waits for.
        self.results.forget(id);
        e.errors.clear();
        e.schedule_of = None;
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
        self.make_ready(id);
        Some(moved)
    }

    /// Deletes everything, schedules and key limits included.
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
        let (paused, last_run, last_outcome) = old.map_or((false, None, None), |s| {
            (s.paused, s.last_run, s.last_outcome)
        });
        self.schedules.insert(
            name.to_owned(),
            Schedule {
                rec,
                value,
                paused,
                last_run,
                last_outcome,
            },
        );
        if relocate {
            if let Some((_, freed)) = self.forget(name) {
                moved.merge(freed);
            }
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
            .map(due_of)
    }

    /// As `extend`, telling a lease lost to a cancel from one lost
    /// otherwise.
    pub(crate) fn extend_marked(
        &mut self,
        id: &str,
        token: &str,
        until: u64,
        now: u64,
        moved: &mut Moved,
    ) -> crate::durable::store::Extended {
        use crate::durable::store::Extended;
        if self.extend(id, token, until, moved) {
            Extended::Held
        } else if self.results.cancelled(id, token, now) {
            Extended::Cancelled
        } else {
            Extended::Lost
        }
    }

    /// Cancels entry `id`: deletes it at once (a dead letter as `remove`
    /// does), keeps its result `Cancelled` (a dead letter keeps its own),
    /// starts its unique window, and, if it was leased, marks its lease for
    /// the holder's next extension; a tick's schedule goes on with its
    /// next instant, as at an ack. `None` if no entry has the id, else
    /// whether a lease held it.
    pub(crate) fn cancel(
        &mut self,
        id: &str,
        lease: u64,
        now: u64,
        rules: Rules,
        moved: &mut Moved,
    ) -> Option<bool> {
        let e = self.entries.get(id)?;
        if e.dead {
            self.forget_dead(id, now);
            return Some(false);
        }
        let token = e.token.clone();
        let leased = token.is_some() && e.key.0 > now;
        let next = e.tick.and_then(|tick| {
            let rec = self.tick_rec(id)?;
            super::ticks::next_tick(&rec, tick, e.since, now)
        });
        let (e, freed) = self.forget(id).expect("found");
        moved.merge(freed);
        if let Some(window) = e.unique {
            self.keep_taken(id, now.saturating_add(window));
        }
        if let Some(schedule) = self.schedules.get_mut(id).filter(|_| e.tick.is_some()) {
            schedule.last_run = e.since.or(schedule.last_run);
            schedule.last_outcome = Some(Finished::Cancelled);
        }
        let kept = Kept {
            state: Finished::Cancelled,
            at: now,
            attempts: e.attempt,
            output: None,
            reason: None,
        };
        self.results.keep(id, kept, rules.keep, now);
        if let Some(token) = token {
            // Its holder learns of it until its lease would have run out
            // (and a lease on): by then its own fence stopped it anyway.
            let until = e.key.0.max(now).saturating_add(lease);
            self.results.mark(id, token, until, now);
        }
        if let Some(next) = next {
            moved.merge(self.successor(id, next));
        }
        Some(leased)
    }

    /// What is known of id `id` for `wait`: its kept result, whether a live
    /// entry has it.
    pub(crate) fn lookup(&self, id: &str, now: u64) -> (Option<Kept>, bool) {
        let live = self.entries.get(id).is_some_and(|e| !e.dead);
        (self.results.get(id, now).cloned(), live)
    }

    /// Sets (`Some`) or removes (`None`) the limit of `key` (`*`: the
    /// default); whether that changed it. A change may let waiting entries
    /// run: consumers look again.
    pub(crate) fn set_limit(
        &mut self,
        key: &str,
        limit: Option<crate::durable::KeyLimit>,
        moved: &mut Moved,
    ) -> bool {
        let changed = match limit {
            Some(limit) => self.keys.limits.insert(key.to_owned(), limit) != Some(limit),
            None => self.keys.limits.remove(key).is_some(),
        };
        moved.announce |= changed;
        changed
    }
}
