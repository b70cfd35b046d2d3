use super::*;
use std::time::Duration;

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn pops_in_deadline_then_insertion_order() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    for (i, ms) in [5, 1, 3, 1, 5, 0].into_iter().enumerate() {
        timers.insert(i, at(base, ms));
    }
    let far = at(base, 10);
    let order: Vec<_> = std::iter::from_fn(|| timers.pop_due(far)).collect();
    assert_eq!(order, vec![5, 1, 3, 2, 0, 4]);
}

#[test]
fn pop_due_leaves_future_entries() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    timers.insert("late", at(base, 10));
    assert_eq!(timers.pop_due(at(base, 9)), None);
    assert_eq!(timers.pop_due(at(base, 10)), Some("late"));
}

#[test]
fn pop_due_by_reads_the_clock_only_when_the_head_is_not_known_due() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    for ms in 0..3 {
        timers.insert(ms, at(base, ms));
    }
    assert_eq!(timers.pop_due_by(|| at(base, 1)), Some(0));
    // Due by the last reading: the clock is not read.
    let unread = || -> Instant { panic!("the head was due by the last reading") };
    assert_eq!(timers.pop_due_by(unread), Some(1));
    // Not due by the last reading: read, and still not due.
    assert_eq!(timers.pop_due_by(|| at(base, 1)), None);
    assert_eq!(timers.pop_due_by(|| at(base, 2)), Some(2));
}

#[test]
fn entries_within_one_wheel_tick_keep_nanosecond_order() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    for (i, ns) in [900_000u64, 10, 500_000, 10].into_iter().enumerate() {
        timers.insert(i, base + Duration::from_nanos(ns));
    }
    assert_eq!(timers.pop_due(base + Duration::from_nanos(9)), None);
    let far = at(base, 2);
    let order: Vec<_> = std::iter::from_fn(|| timers.pop_due(far)).collect();
    assert_eq!(order, vec![1, 3, 2, 0]);
}

#[test]
fn a_pop_does_not_open_buckets_ahead_of_the_clock() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    timers.insert('a', at(base, 3_600_000));
    assert_eq!(timers.pop_due(at(base, 1)), None);
    // Had the pop opened the far bucket, this entry would go near.
    timers.insert('b', at(base, 5));
    assert_eq!(
        timers.run_live + timers.heap.len(),
        0,
        "both entries stay in the wheel"
    );
    assert_eq!(timers.head().map(|h| h.0), Some(timers.ticks(at(base, 5))));
}

#[test]
fn far_entries_cascade_down_to_the_near_side_in_order() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    let year = 365 * 86_400_000;
    let deadlines = [year * 20, 70, 5_000, year, 4_096 * 64 + 3, 1, 86_400_000];
    for (i, ms) in deadlines.into_iter().enumerate() {
        timers.insert(i, at(base, ms));
    }
    let mut sorted: Vec<_> = deadlines.into_iter().enumerate().collect();
    sorted.sort_by_key(|&(_, ms)| ms);
    for (i, ms) in sorted {
        assert_eq!(timers.peek_deadline(), Some(at(base, ms)));
        assert_eq!(timers.pop_due(at(base, ms - 1)), None);
        assert_eq!(timers.pop_due(at(base, ms)), Some(i));
        timers.assert_invariants();
    }
    assert!(timers.is_empty());
}

#[test]
fn stale_key_misses_recycled_slot() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    let old = timers.insert(1, base).0;
    assert_eq!(timers.remove(old).map(|(v, _)| v), Some(1));
    let new = timers.insert(2, base).0;
    assert_eq!(new.index, old.index, "slot is recycled");
    assert_eq!(timers.remove(old).map(|(v, _)| v), None);
    assert!(timers.reset(old, at(base, 1)).is_none());
    assert_eq!(timers.deadline(new), Some(base));
}

#[test]
fn slot_is_retired_before_its_generation_wraps() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    let key = timers.insert(0, base).0;
    timers.slots[key.index as usize].generation = u32::MAX;
    let last = SlotKey {
        index: key.index,
        generation: u32::MAX,
    };
    assert_eq!(timers.remove(last).map(|(v, _)| v), Some(0));
    let next = timers.insert(1, base).0;
    assert_ne!(next.index, key.index, "a wrapping slot is not reused");
}

#[test]
fn running_out_of_sequence_numbers_keeps_fifo() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    timers.insert('a', at(base, 1));
    timers.insert('z', at(base, 0));
    timers.insert('y', at(base, 500));
    timers.head(); // moves 'z' and 'a' to the near side
    timers.next_seq = u32::MAX - 1;
    timers.insert('b', at(base, 1));
    timers.insert('c', at(base, 1)); // renumbers first
    assert!(timers.next_seq < 10, "renumbered");
    timers.insert('d', at(base, 1));
    timers.assert_invariants();
    let far = at(base, 600);
    let order: String = std::iter::from_fn(|| timers.pop_due(far)).collect();
    assert_eq!(order, "zabcdy");
}

#[test]
fn deadlines_round_trip_exactly_and_clamp_beyond_292_years() {
    let mut timers = Timers::with_capacity(0);
    let origin = timers.origin;
    let year = Duration::from_secs(365 * 86_400);
    let near = origin + year * 200 + Duration::from_nanos(7);
    let key = timers.insert(0, near).0;
    assert_eq!(timers.deadline(key), Some(near));
    let past = origin
        .checked_sub(Duration::from_nanos(3))
        .unwrap_or(origin);
    let key = timers.insert(1, past).0;
    assert_eq!(timers.deadline(key), Some(past));
    let beyond = origin + year * 1000;
    let key = timers.insert(2, beyond).0;
    let clamped = timers.deadline(key).unwrap();
    assert!(clamped > origin + year * 292 && clamped < beyond);
    assert_eq!(timers.pop_due(origin), Some(1));
    timers.assert_invariants();
}

#[test]
fn ticks_after_is_the_ticks_of_the_summed_deadline() {
    let timers = Timers::<()>::with_capacity(0);
    let origin = timers.origin;
    let year = Duration::from_secs(365 * 86_400);
    let before = [
        Duration::ZERO,
        Duration::from_nanos(3),
        year * 100,
        year * 400,
    ]
    .map(|back| origin.checked_sub(back).unwrap_or(origin));
    let nows = [before.as_slice(), &[origin, origin + year * 250]].concat();
    let delays = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_millis(1500),
        year * 150,
        year * 600,
        Duration::from_secs(u64::MAX / 2),
        Duration::MAX,
    ];
    for now in nows {
        for delay in delays {
            assert_eq!(
                timers.ticks_after(now, delay),
                timers.ticks(deadline_after(now, delay)),
                "now {now:?}, delay {delay:?}"
            );
        }
    }
}

#[test]
fn ticks_after_near_the_last_instant_stays_representable() {
    // The latest instant, to the second.
    let base = Instant::now();
    let (mut fits, mut overflows) = (0u64, u64::MAX);
    while overflows - fits > 1 {
        let mid = fits + (overflows - fits) / 2;
        match base.checked_add(Duration::from_secs(mid)) {
            Some(_) => fits = mid,
            None => overflows = mid,
        }
    }
    let year = Duration::from_secs(365 * 86_400);
    let origin = base + Duration::from_secs(fits) - year * 100;
    let mut timers = Timers::with_origin(0, origin);
    assert!(!timers.sums_fit);
    for delay in [Duration::ZERO, year * 50, year * 200, Duration::MAX] {
        assert_eq!(
            timers.ticks_after(origin, delay),
            timers.ticks(deadline_after(origin, delay)),
            "delay {delay:?}"
        );
        let key = timers.insert_after((), origin, delay).0;
        // The deadline an insert reports is an instant, not a panic.
        assert!(timers.deadline(key).is_some_and(|at| at >= origin));
    }
}

#[test]
fn touch_reads_any_index_without_panicking() {
    let mut timers = Timers::with_capacity(0);
    let key = timers.insert(1, Instant::now()).0;
    assert_eq!(timers.touch(key.index), key.generation);
    assert_eq!(timers.touch(key.index + 1), 0);
    assert_eq!(timers.touch(u32::MAX), 0);
}

#[test]
fn reset_moves_behind_equal_deadlines() {
    let base = Instant::now();
    let mut timers = Timers::with_capacity(0);
    let a = timers.insert('a', at(base, 1)).0;
    timers.insert('b', at(base, 1));
    assert!(timers.reset(a, at(base, 1)).is_some());
    let far = at(base, 2);
    assert_eq!(timers.pop_due(far), Some('b'));
    assert_eq!(timers.pop_due(far), Some('a'));
}

mod model {
    //! The core against a `BTreeMap<(Instant, seq), value>` model.

    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::TestRunner;
    use std::collections::{BTreeMap, HashMap};

    #[derive(Debug, Clone)]
    enum Op {
        Insert(i64),
        /// `n` entries due between `back` ms in the past and now: a late
        /// batch, merged into the run when it is large enough.
        Batch(usize, i64),
        Remove(usize),
        Reset(usize, i64),
        /// Pops by `pop_due` (false) or by `pop_due_by` (true).
        PopDue(bool),
        Advance(i64),
        Head,
        /// Where a waiting leader would time its wake-up.
        Wake,
        RemoveIfDivisible(u32),
        /// The next insert or reset renumbers.
        ExhaustSeq,
    }

    /// Milliseconds from the start: dense near 0 (many equal deadlines),
    /// spread over every wheel level, some before the origin, up to years.
    fn offset() -> impl Strategy<Value = i64> {
        prop_oneof![
            4 => 0i64..8,
            3 => 0i64..300,
            2 => 0i64..300_000,
            1 => 0i64..20_000_000_000,
            1 => -5_000i64..0,
            1 => (0u32..12).prop_map(|level| 1i64 << (6 * level).min(40)),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => offset().prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Remove),
            2 => (any::<usize>(), offset()).prop_map(|(k, d)| Op::Reset(k, d)),
            3 => any::<bool>().prop_map(Op::PopDue),
            2 => offset().prop_map(|d| Op::Advance(d.max(0) / 2)),
            1 => Just(Op::Head),
            1 => Just(Op::Wake),
            1 => (2u32..6).prop_map(Op::RemoveIfDivisible),
        ]
    }

    /// Many entries in a few far buckets, most of them removed or reset
    /// again: what makes wheel buckets compact themselves.
    fn churn_op() -> impl Strategy<Value = Op> {
        let far = prop_oneof![100_000i64..100_040, 3_000_000i64..3_000_010];
        prop_oneof![
            6 => far.clone().prop_map(Op::Insert),
            5 => any::<usize>().prop_map(Op::Remove),
            2 => (any::<usize>(), far).prop_map(|(k, d)| Op::Reset(k, d)),
            1 => any::<bool>().prop_map(Op::PopDue),
            1 => (0i64..200_000).prop_map(Op::Advance),
            1 => Just(Op::Head),
        ]
    }

    /// Large late batches merged into the run, then removed or reset by
    /// key, and renumbering with a live run: the paths `locate_run` serves.
    fn merge_op() -> impl Strategy<Value = Op> {
        let offset = prop_oneof![
            4 => 0i64..4,
            2 => 0i64..300,
            1 => 0i64..300_000,
            1 => 0i64..20_000_000_000,
            2 => -50i64..0,
        ];
        prop_oneof![
            5 => offset.clone().prop_map(Op::Insert),
            2 => (60usize..140, 0i64..20).prop_map(|(n, b)| Op::Batch(n, b)),
            5 => any::<usize>().prop_map(Op::Remove),
            4 => (any::<usize>(), offset).prop_map(|(k, d)| Op::Reset(k, d)),
            4 => any::<bool>().prop_map(Op::PopDue),
            2 => (0i64..40).prop_map(Op::Advance),
            2 => Just(Op::Head),
            1 => Just(Op::Wake),
            1 => (3u32..9).prop_map(Op::RemoveIfDivisible),
            1 => Just(Op::ExhaustSeq),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn behaves_like_an_ordered_map(ops in proptest::collection::vec(op(), 1..400)) {
            check_against_model(ops)?;
        }

        #[test]
        fn behaves_like_an_ordered_map_under_churn(
            ops in proptest::collection::vec(churn_op(), 1..600),
        ) {
            check_against_model(ops)?;
        }
    }

    #[test]
    fn behaves_like_an_ordered_map_with_merges_and_renumbering() {
        let reached = std::cell::Cell::new(Reached::default());
        let mut runner = TestRunner::new(ProptestConfig::with_cases(128));
        let ops = proptest::collection::vec(merge_op(), 1..200);
        let result = runner.run(&ops, |ops| {
            let run = check_against_model(ops)?;
            reached.set(reached.get().add(run));
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        let reached = reached.get();
        assert!(
            reached.merged > 0 && reached.stale > 0 && reached.renumbered > 0,
            "a path was never reached: {reached:?}"
        );
    }

    /// How often a run reached the paths `merge_op` is for.
    #[derive(Debug, Clone, Copy, Default)]
    struct Reached {
        /// A merged entry (its slot still says `LATE`) removed or reset.
        merged: usize,
        /// An entry whose slot's run position went stale, removed or reset.
        stale: usize,
        /// Sequence numbers ran out while the run held entries.
        renumbered: usize,
    }

    impl Reached {
        fn add(self, other: Reached) -> Reached {
            Reached {
                merged: self.merged + other.merged,
                stale: self.stale + other.stale,
                renumbered: self.renumbered + other.renumbered,
            }
        }

        /// Notes where the entry of `key` is found, before it is looked up.
        fn note(&mut self, timers: &Timers<u32>, key: SlotKey) {
            let Some(index) = timers.occupied_index(key) else {
                return;
            };
            let slot = &timers.slots[index as usize];
            let pos = slot.pos as usize;
            let is_here = |recs: &[Rec]| recs.get(pos).is_some_and(|r| r.slot == index);
            match slot.home() {
                LATE if !is_here(&timers.late) => self.merged += 1,
                RUN if !is_here(&timers.run) => self.stale += 1,
                _ => {}
            }
        }
    }

    /// The model: entries by `(deadline, seq)`, and every key ever issued
    /// (live or stale) with its entry.
    #[derive(Default)]
    struct Model {
        entries: BTreeMap<(Instant, u64), u32>,
        keys: Vec<(SlotKey, Option<(Instant, u64)>)>,
        where_is: HashMap<u32, usize>,
        seq: u64,
        next_value: u32,
    }

    impl Model {
        fn insert(&mut self, timers: &mut Timers<u32>, d: Instant) {
            let key = timers.insert(self.next_value, d).0;
            self.entries.insert((d, self.seq), self.next_value);
            self.where_is.insert(self.next_value, self.keys.len());
            self.keys.push((key, Some((d, self.seq))));
            self.seq += 1;
            self.next_value += 1;
        }

        fn gone(&mut self, value: u32) {
            self.keys[self.where_is[&value]].1 = None;
        }
    }

    fn check_against_model(ops: Vec<Op>) -> Result<Reached, TestCaseError> {
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
        let mut reached = Reached::default();
        for op in ops {
            match op {
                // Deadlines are relative to the moving clock.
                Op::Insert(ms) => m.insert(&mut timers, t(now + ms)),
                Op::Batch(n, back) => {
                    for i in 0..n {
                        let jitter = Duration::from_micros((i as u64 * 7919) % 1000);
                        m.insert(&mut timers, t(now - back) + jitter);
                    }
                }
                Op::Remove(i) if !m.keys.is_empty() => {
                    let i = i % m.keys.len();
                    let (key, entry) = m.keys[i];
                    reached.note(&timers, key);
                    let expected = entry.and_then(|e| m.entries.remove(&e));
                    prop_assert_eq!(timers.remove(key).map(|(v, _)| v), expected);
                    m.keys[i].1 = None;
                }
                Op::Reset(i, ms) if !m.keys.is_empty() => {
                    let i = i % m.keys.len();
                    let (key, entry) = m.keys[i];
                    reached.note(&timers, key);
                    let d = t(now + ms);
                    prop_assert_eq!(timers.reset(key, d).is_some(), entry.is_some());
                    if let Some(value) = entry.and_then(|e| m.entries.remove(&e)) {
                        m.entries.insert((d, m.seq), value);
                        m.keys[i].1 = Some((d, m.seq));
                    }
                    m.seq += 1;
                }
                Op::PopDue(lazy) => {
                    let expected = m
                        .entries
                        .first_key_value()
                        .filter(|((d, _), _)| *d <= t(now))
                        .map(|(k, _)| *k);
                    let expected = expected.and_then(|k| m.entries.remove(&k));
                    let got = if lazy {
                        timers.pop_due_by(|| t(now))
                    } else {
                        timers.pop_due(t(now))
                    };
                    prop_assert_eq!(got, expected);
                    if let Some(v) = got {
                        m.gone(v);
                    }
                }
                Op::Advance(ms) => now += ms,
                Op::Head => {
                    let head = m.entries.keys().next().map(|k| k.0);
                    prop_assert_eq!(timers.peek_deadline(), head);
                }
                Op::Wake => {
                    let target = timers.wake_target(t(now));
                    match m.entries.keys().next() {
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
                    let mut expected: Vec<u32> = m
                        .entries
                        .values()
                        .copied()
                        .filter(|v| v % by == 0)
                        .collect();
                    expected.sort_unstable();
                    prop_assert_eq!(&got, &expected);
                    m.entries.retain(|_, v| *v % by != 0);
                    for v in got {
                        m.gone(v);
                    }
                }
                Op::ExhaustSeq => {
                    timers.next_seq = u32::MAX;
                    if timers.run_live > 0 {
                        reached.renumbered += 1;
                    }
                }
                _ => {}
            }
            timers.assert_invariants();
            prop_assert_eq!(timers.len(), m.entries.len());
            for (key, entry) in &m.keys {
                prop_assert_eq!(timers.deadline(*key), entry.map(|e| e.0));
            }
        }
        // Everything left comes out in the model's order.
        let end = t(now + (1i64 << 45));
        let rest: Vec<u32> = std::iter::from_fn(|| timers.pop_due(end)).collect();
        let expected: Vec<u32> = m.entries.values().copied().collect();
        prop_assert_eq!(rest, expected);
        Ok(reached)
    }
}

#[test]
fn a_large_batch_inserted_already_due_is_merged_into_the_run_in_order() {
    let base = Instant::now() + Duration::from_secs(60);
    let mut timers = Timers::with_capacity(0);
    let mut expected = Vec::new();
    for i in 0..100u32 {
        let d = base + Duration::from_micros(u64::from(i % 7) * 100);
        timers.insert(i, d);
        expected.push((d, i));
    }
    let later = base + Duration::from_millis(5);
    // Opens the tick: the run holds what is left of it.
    let first = timers.pop_due(later).unwrap();
    assert!(timers.run_live > 0);
    // Then a batch due before the wheel's elapsed tick, out of order, many
    // with equal deadlines.
    for i in 100..400u32 {
        let d = base - Duration::from_micros(u64::from(i * 37 % 1_000));
        timers.insert(i, d);
        expected.push((d, i));
    }
    assert_eq!(timers.late.len(), 300);
    expected.sort(); // by deadline, then insertion (values grow with it)
    let mut got = vec![first];
    got.extend(std::iter::from_fn(|| timers.pop_due(later)));
    timers.assert_invariants();
    // The first pop came before the batch was inserted.
    let expected: Vec<u32> = std::iter::once(first)
        .chain(expected.into_iter().map(|(_, i)| i).filter(|&i| i != first))
        .collect();
    assert_eq!(got, expected);
    assert!(
        timers.heap.len() == 0,
        "the batch went to the run, not the heap"
    );
}

proptest::proptest! {
    /// The radix sort (taken for large batches in `seq` order) and the
    /// comparison sort agree, for spans of ticks from one value to the whole
    /// `u64` range and with many equal ticks.
    #[test]
    fn sort_by_key_orders_by_ticks_then_seq(
        ticks in proptest::collection::vec(0u64..64, 0..1200),
        scale in 0u32..58,
        base in proptest::prelude::any::<u64>(),
        shuffle in proptest::prelude::any::<bool>(),
    ) {
        let mut recs: Vec<Rec> = ticks
            .iter()
            .enumerate()
            .map(|(i, &t)| Rec {
                ticks: base.saturating_add(t << scale),
                seq: i as u32 * 3,
                slot: i as u32,
            })
            .collect();
        if shuffle {
            recs.reverse();
        }
        let mut expected = recs.clone();
        expected.sort_by_key(Rec::order);
        sort_by_key(&mut recs);
        proptest::prop_assert_eq!(recs, expected);
    }
}

#[test]
fn entries_merged_into_the_run_are_removed_and_reset_by_key() {
    let base = Instant::now() + Duration::from_secs(60);
    let mut timers = Timers::with_capacity(0);
    let mut keys = Vec::new();
    // An opened tick: its entries point at the run.
    for i in 0..100u32 {
        let d = base + Duration::from_micros(u64::from(i % 9) * 100);
        keys.push((timers.insert(i, d).0, d));
    }
    let later = base + Duration::from_millis(5);
    let first = timers.pop_due(later).unwrap();
    // A batch inserted already due, merged into that run: its slots say
    // `LATE`, and the opened entries' positions go stale.
    for i in 100..400u32 {
        let d = base - Duration::from_micros(u64::from(i * 37 % 1_000));
        keys.push((timers.insert(i, d).0, d));
    }
    let earliest = keys.iter().map(|&(_, d)| d).min().unwrap();
    assert_eq!(timers.peek_deadline(), Some(earliest));
    assert!(
        timers.late.is_empty() && timers.heap.len() == 0,
        "merged into the run"
    );
    timers.assert_invariants();
    let mut expected: Vec<(Instant, u32)> = keys
        .iter()
        .enumerate()
        .map(|(i, &(_, d))| (d, i as u32))
        .filter(|&(_, i)| i != first)
        .collect();
    // Remove every third entry, opened or merged, and move every fifth to
    // the far future: both are found in the run by key.
    let far = base + Duration::from_secs(3600);
    for (i, &(key, _)) in keys.iter().enumerate() {
        let i = i as u32;
        if i == first {
            continue;
        }
        if i % 3 == 0 {
            assert_eq!(timers.remove(key).map(|(v, _)| v), Some(i));
            expected.retain(|&(_, v)| v != i);
        } else if i % 5 == 0 {
            assert!(timers.reset(key, far).is_some());
            expected.retain(|&(_, v)| v != i);
            expected.push((far, i));
        }
        timers.assert_invariants();
    }
    expected.sort(); // by deadline, then insertion (values grow with it, resets last)
    let mut resets: Vec<u32> = expected
        .iter()
        .filter(|e| e.0 == far)
        .map(|e| e.1)
        .collect();
    resets.sort_unstable();
    let got: Vec<u32> = std::iter::from_fn(|| timers.pop_due(far)).collect();
    let near: Vec<u32> = expected
        .iter()
        .filter(|e| e.0 != far)
        .map(|e| e.1)
        .collect();
    assert_eq!(&got[..near.len()], &near[..]);
    assert_eq!(&got[near.len()..], &resets[..], "reset in key order");
    assert!(timers.is_empty());
}

#[test]
fn renumbering_drops_the_runs_tombstones_and_keeps_it_searchable() {
    let base = Instant::now() + Duration::from_secs(60);
    let mut timers = Timers::with_capacity(0);
    let keys: Vec<SlotKey> = (0..50u32)
        .map(|i| {
            timers
                .insert(i, base + Duration::from_micros(u64::from(i) * 10))
                .0
        })
        .collect();
    let later = base + Duration::from_millis(5);
    assert_eq!(timers.pop_due(later), Some(0));
    for key in keys.iter().step_by(2).skip(1) {
        timers.remove(*key);
    }
    timers.next_seq = u32::MAX;
    timers.insert(99, later); // renumbers first
    timers.assert_invariants();
    assert!(
        timers.run.iter().all(|r| r.slot != NIL),
        "no tombstones left"
    );
    assert_eq!(timers.remove(keys[3]).map(|(v, _)| v), Some(3));
    let got: Vec<u32> = std::iter::from_fn(|| timers.pop_due(later)).collect();
    let expected: Vec<u32> = (1..50)
        .filter(|i| i % 2 == 1 && *i != 3)
        .chain([99])
        .collect();
    assert_eq!(got, expected);
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
