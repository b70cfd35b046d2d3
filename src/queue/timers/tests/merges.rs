//! The paths a shorter model run seldom reaches: large late batches merged
//! into the run and then removed or reset by key (found by `locate_run`),
//! opened entries whose run position went stale, renumbering with a live
//! run, the leader's wake target, and an adversary for bucket compaction.

use super::super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// How often the model test reached: a merged entry removed or reset by key,
/// an opened one whose run position went stale, a renumbering with a run.
static REACHED: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

fn note_lookup(timers: &Timers<u32>, key: SlotKey) {
    let Some(index) = timers.occupied_index(key) else {
        return;
    };
    let slot = &timers.slots[index as usize];
    let in_late = timers
        .late
        .get(slot.pos as usize)
        .is_some_and(|r| r.slot == index);
    let at_pos = timers
        .run
        .get(slot.pos as usize)
        .is_some_and(|r| r.slot == index);
    match slot.home() {
        LATE if !in_late => REACHED[0].fetch_add(1, Relaxed),
        RUN if !at_pos => REACHED[1].fetch_add(1, Relaxed),
        _ => 0,
    };
}

#[derive(Debug, Clone)]
enum Op {
    Insert(i64),
    /// `n` entries due between `back` ms in the past and now: a late batch
    /// that is merged into the run when large enough.
    Batch(usize, i64),
    Remove(usize),
    Reset(usize, i64),
    PopDue(bool),
    Advance(i64),
    Head,
    Wake,
    RemoveIfDivisible(u32),
    /// The next insert or reset renumbers.
    ExhaustSeq,
}

fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..4,
        2 => 0i64..300,
        1 => 0i64..300_000,
        1 => 0i64..20_000_000_000,
        2 => -50i64..0,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => offset().prop_map(Op::Insert),
        2 => (60usize..140, 0i64..20).prop_map(|(n, b)| Op::Batch(n, b)),
        5 => any::<usize>().prop_map(Op::Remove),
        4 => (any::<usize>(), offset()).prop_map(|(k, d)| Op::Reset(k, d)),
        4 => any::<bool>().prop_map(Op::PopDue),
        2 => (0i64..40).prop_map(Op::Advance),
        2 => Just(Op::Head),
        1 => Just(Op::Wake),
        1 => (3u32..9).prop_map(Op::RemoveIfDivisible),
        1 => Just(Op::ExhaustSeq),
    ]
}

#[derive(Default)]
struct Model {
    model: BTreeMap<(Instant, u64), u32>,
    keys: Vec<(SlotKey, Option<(Instant, u64)>)>,
    where_is: HashMap<u32, usize>,
    seq: u64,
    next_value: u32,
}

impl Model {
    fn insert(&mut self, timers: &mut Timers<u32>, d: Instant) {
        let key = timers.insert(self.next_value, d).0;
        self.model.insert((d, self.seq), self.next_value);
        self.where_is.insert(self.next_value, self.keys.len());
        self.keys.push((key, Some((d, self.seq))));
        self.seq += 1;
        self.next_value += 1;
    }
}

fn run_model(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut timers = Timers::with_capacity(0);
    let base = timers.origin + Duration::from_secs(10);
    let t = |ms: i64| {
        if ms >= 0 {
            base + Duration::from_millis(ms as u64)
        } else {
            base - Duration::from_millis(ms.unsigned_abs())
        }
    };
    let mut now = 0i64;
    let mut m = Model::default();
    for op in ops {
        match op {
            Op::Insert(ms) => m.insert(&mut timers, t(now + ms)),
            Op::Batch(n, back) => {
                for i in 0..n {
                    let d = t(now - back) + Duration::from_micros((i as u64 * 7919) % 1000);
                    m.insert(&mut timers, d);
                }
            }
            Op::Remove(i) if !m.keys.is_empty() => {
                let i = i % m.keys.len();
                let (key, entry) = m.keys[i];
                note_lookup(&timers, key);
                let expected = entry.and_then(|e| m.model.remove(&e));
                prop_assert_eq!(timers.remove(key).map(|(v, _)| v), expected);
                m.keys[i].1 = None;
            }
            Op::Reset(i, ms) if !m.keys.is_empty() => {
                let i = i % m.keys.len();
                let (key, entry) = m.keys[i];
                note_lookup(&timers, key);
                let d = t(now + ms);
                prop_assert_eq!(timers.reset(key, d).is_some(), entry.is_some());
                if let Some(value) = entry.and_then(|e| m.model.remove(&e)) {
                    m.model.insert((d, m.seq), value);
                    m.keys[i].1 = Some((d, m.seq));
                }
                m.seq += 1;
            }
            Op::PopDue(lazy) => {
                let expected = m
                    .model
                    .first_key_value()
                    .filter(|((d, _), _)| *d <= t(now))
                    .map(|(k, _)| *k)
                    .and_then(|k| m.model.remove(&k));
                let got = if lazy {
                    timers.pop_due_by(|| t(now))
                } else {
                    timers.pop_due(t(now))
                };
                prop_assert_eq!(got, expected);
                if let Some(v) = got {
                    m.keys[m.where_is[&v]].1 = None;
                }
            }
            Op::Advance(ms) => now += ms,
            Op::Head => {
                prop_assert_eq!(timers.peek_deadline(), m.model.keys().next().map(|k| k.0));
            }
            Op::Wake => {
                let target = timers.wake_target(t(now));
                match m.model.keys().next() {
                    None => prop_assert_eq!(target, None),
                    Some(&(d, _)) => {
                        let target = target.expect("a target while entries wait");
                        prop_assert!(timers.instant_of(target) <= d, "wakes after the head");
                    }
                }
            }
            Op::RemoveIfDivisible(by) => {
                let mut got = timers.remove_if(|v, _| v % by == 0);
                got.sort_unstable();
                let mut expected: Vec<u32> =
                    m.model.values().copied().filter(|v| v % by == 0).collect();
                expected.sort_unstable();
                prop_assert_eq!(&got, &expected);
                m.model.retain(|_, v| *v % by != 0);
                for v in got {
                    m.keys[m.where_is[&v]].1 = None;
                }
            }
            Op::ExhaustSeq => {
                timers.next_seq = u32::MAX;
                if timers.run_live > 0 {
                    REACHED[2].fetch_add(1, Relaxed);
                }
            }
            _ => {}
        }
        timers.assert_invariants();
        prop_assert_eq!(timers.len(), m.model.len());
        for (key, entry) in &m.keys {
            prop_assert_eq!(timers.deadline(*key), entry.map(|e| e.0));
        }
    }
    let end = t(now + (1i64 << 45));
    let rest: Vec<u32> = std::iter::from_fn(|| timers.pop_due(end)).collect();
    let expected: Vec<u32> = m.model.values().copied().collect();
    prop_assert_eq!(rest, expected);
    Ok(())
}

/// The core against an ordered map, with large late batches merged into the
/// run, removals and resets of merged and opened entries, and renumbering.
#[test]
fn behaves_like_an_ordered_map_with_merges_and_renumbering() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    let result = runner.run(&proptest::collection::vec(op(), 1..200), run_model);
    let reached: Vec<usize> = REACHED.iter().map(|r| r.load(Relaxed)).collect();
    eprintln!("reached (merged lookups, stale run positions, renumber with run): {reached:?}");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        reached.iter().all(|&n| n > 0),
        "the model test missed a path"
    );
}

/// An adversary that keeps removing the live entry nearest the front of one
/// far bucket (the part a running compaction has already passed), with
/// bursts of inserts into the same bucket: the dead indices stay within the
/// bound `Wheel::assert_invariants` checks, and everything comes out.
#[test]
fn compaction_bound_holds_against_front_removals() {
    let mut timers = Timers::with_capacity(0);
    let far = timers.origin + Duration::from_secs(100);
    let mut live: Vec<SlotKey> = (0..600u32).map(|i| timers.insert(i, far).0).collect();
    let mut next = 600u32;
    for round in 0..2_000u32 {
        if round % 5 == 0 || live.is_empty() {
            live.push(timers.insert(next, far).0);
            next += 1;
            continue;
        }
        let (at, _) = live
            .iter()
            .enumerate()
            .min_by_key(|(_, k)| timers.slots[k.index as usize].pos)
            .unwrap();
        let key = live.swap_remove(at);
        assert!(timers.remove(key).is_some());
        timers.assert_invariants();
    }
    let end = far + Duration::from_secs(1);
    assert_eq!(
        std::iter::from_fn(|| timers.pop_due(end)).count(),
        live.len()
    );
    assert!(timers.is_empty());
}
