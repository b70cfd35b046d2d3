//! The d-ary min-heap behind [`DelayQueue`](crate::DelayQueue): no locking, no
//! async, no clock.
//!
//! Ground rules:
//!
//! - `entries` is a d-ary min-heap of 16-byte `(deadline, seq, slot)` records
//!   ordered by `(deadline, seq)`, so a node's four children share one cache
//!   line. `seq` grows with every insert and reset, so equal deadlines come
//!   out first-in first-out; when the 32-bit `seq` runs out, the live entries
//!   are renumbered in their current order (once per 2^32 inserts).
//! - Deadlines are stored as nanosecond ticks from the heap's `origin`, offset
//!   by 2^63 so that instants before the origin order correctly too. That is
//!   exact for any instant within 292 years of the origin; instants further
//!   away are clamped to that horizon.
//! - `slots[i]` records where slot `i`'s entry sits in `entries`, and its
//!   value lives in `values[i]`. Every move inside the heap rewrites the moved
//!   entry's `pos`, which is what makes removal by key O(log n).
//! - A slot's generation is odd while the slot is occupied and even while it
//!   is free; it goes up by one on every insert and every removal. A
//!   [`SlotKey`] holds the odd generation it was issued with, so a key whose
//!   entry left the heap never matches again, even after the slot is reused.
//!   A slot whose generation would wrap around is retired, never reused.
//! - The position table is kept apart from the values so the sift loops touch
//!   8 bytes per move, not a whole value.

use std::cmp::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// Children per node. Measured against 2 in `benches/queue.rs` (see the
/// README): 4 halves the depth and keeps each node's children within two cache
/// lines, which wins on the pop-heavy expiry path.
const ARITY: usize = 4;

/// Marks the end of the free list.
const NIL: u32 = u32::MAX;

/// Identifies one insertion: a slot index and the generation it had then.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct SlotKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// The ordering key of the entry at the top of the heap, used to tell whether
/// a mutation changed which entry comes out next.
pub(crate) type HeadId = (u64, u32);

/// Ticks of the origin itself: the middle of the `u64` range.
const ORIGIN_TICKS: u64 = 1 << 63;

#[derive(Clone, Copy, Debug)]
struct Entry {
    ticks: u64,
    seq: u32,
    slot: u32,
}

impl Entry {
    #[inline]
    fn less(&self, other: &Entry) -> bool {
        match self.ticks.cmp(&other.ticks) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => self.seq < other.seq,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u32,
    /// Heap position while occupied, next free slot (or `NIL`) while free.
    link: u32,
}

impl Slot {
    #[inline]
    fn occupied(&self) -> bool {
        self.generation & 1 == 1
    }
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Heap<T> {
    entries: Vec<Entry>,
    slots: Vec<Slot>,
    values: Vec<Option<T>>,
    free_head: u32,
    next_seq: u32,
    origin: Instant,
}

impl<T> Heap<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Heap {
            entries: Vec::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            values: Vec::with_capacity(capacity),
            free_head: NIL,
            next_seq: 0,
            origin: Instant::now(),
        }
    }

    /// `deadline` as ticks from the origin, clamped to the `u64` range.
    #[inline]
    fn ticks(&self, deadline: Instant) -> u64 {
        fn nanos(d: Duration) -> u64 {
            d.as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(d.subsec_nanos()))
        }
        match deadline.checked_duration_since(self.origin) {
            Some(after) => ORIGIN_TICKS.saturating_add(nanos(after)),
            None => ORIGIN_TICKS.saturating_sub(nanos(self.origin - deadline)),
        }
    }

    #[inline]
    fn instant(&self, ticks: u64) -> Instant {
        if ticks >= ORIGIN_TICKS {
            self.origin + Duration::from_nanos(ticks - ORIGIN_TICKS)
        } else {
            // Clamped ticks may name an instant before the platform's
            // earliest one; stay at the earliest representable then.
            let back = Duration::from_nanos(ORIGIN_TICKS - ticks);
            self.origin.checked_sub(back).unwrap_or(self.origin)
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `(deadline, seq)` of the entry that comes out next.
    pub(crate) fn head(&self) -> Option<HeadId> {
        self.entries.first().map(|e| (e.ticks, e.seq))
    }

    pub(crate) fn peek_deadline(&self) -> Option<Instant> {
        self.entries.first().map(|e| self.instant(e.ticks))
    }

    /// Adds `value` due at `deadline`.
    ///
    /// # Panics
    ///
    /// Panics if `u32::MAX - 1` slots are in use at once (like a `Vec`
    /// overflowing its capacity, this needs far more memory than exists).
    pub(crate) fn insert(&mut self, value: T, deadline: Instant) -> SlotKey {
        let index = self.alloc_slot();
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let key = SlotKey {
            index,
            generation: slot.generation,
        };
        self.values[index as usize] = Some(value);
        let pos = self.entries.len();
        let ticks = self.ticks(deadline);
        let seq = self.bump_seq();
        self.entries.push(Entry {
            ticks,
            seq,
            slot: index,
        });
        self.sift_up(pos);
        self.check();
        key
    }

    /// Removes and returns the head if its deadline is `<= now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        match self.entries.first() {
            Some(head) if head.ticks <= self.ticks(now) => Some(self.remove_at(0)),
            _ => None,
        }
    }

    pub(crate) fn remove(&mut self, key: SlotKey) -> Option<T> {
        let pos = self.position(key)?;
        Some(self.remove_at(pos))
    }

    /// Moves the entry to `deadline`, ordering it behind entries that already
    /// have that deadline. Returns `false` for a stale key.
    pub(crate) fn reset(&mut self, key: SlotKey, deadline: Instant) -> bool {
        let Some(pos) = self.position(key) else {
            return false;
        };
        let ticks = self.ticks(deadline);
        let seq = self.bump_seq();
        // `bump_seq` may have renumbered, but positions do not move.
        let entry = &mut self.entries[pos];
        entry.ticks = ticks;
        entry.seq = seq;
        // The new seq is the largest in the heap, so the entry can only move
        // up if its deadline went down, and only down otherwise.
        let pos = self.sift_up(pos);
        self.sift_down(pos);
        self.check();
        true
    }

    pub(crate) fn deadline(&self, key: SlotKey) -> Option<Instant> {
        self.position(key)
            .map(|pos| self.instant(self.entries[pos].ticks))
    }

    pub(crate) fn contains(&self, key: SlotKey) -> bool {
        self.position(key).is_some()
    }

    fn position(&self, key: SlotKey) -> Option<usize> {
        let slot = self.slots.get(key.index as usize)?;
        (slot.generation == key.generation && slot.occupied()).then_some(slot.link as usize)
    }

    fn bump_seq(&mut self) -> u32 {
        if self.next_seq == u32::MAX {
            self.renumber();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Gives the live entries the sequence numbers `0..len` in their current
    /// `(deadline, seq)` order. Relative order is unchanged, so the heap stays
    /// valid and FIFO among equal deadlines is kept. O(n log n), once per
    /// 2^32 inserts and resets.
    #[cold]
    fn renumber(&mut self) {
        let mut order: Vec<u32> = (0..self.entries.len() as u32).collect();
        order.sort_unstable_by_key(|&pos| {
            let e = self.entries[pos as usize];
            (e.ticks, e.seq)
        });
        for (rank, pos) in order.into_iter().enumerate() {
            self.entries[pos as usize].seq = rank as u32;
        }
        self.next_seq = self.entries.len() as u32;
    }

    fn alloc_slot(&mut self) -> u32 {
        if self.free_head != NIL {
            let index = self.free_head;
            self.free_head = self.slots[index as usize].link;
            return index;
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("DelayQueue holds more than u32::MAX - 1 entries");
        self.slots.push(Slot {
            generation: 0,
            link: NIL,
        });
        self.values.push(None);
        index
    }

    /// Removes every entry for which `pred(value, deadline)` holds, in no
    /// particular order; the others keep their keys. O(n), then an O(n)
    /// rebuild of the heap order if anything was removed.
    pub(crate) fn remove_if(&mut self, mut pred: impl FnMut(&T, Instant) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        let mut kept = 0;
        for pos in 0..self.entries.len() {
            let entry = self.entries[pos];
            let deadline = self.instant(entry.ticks);
            let hit = match &self.values[entry.slot as usize] {
                Some(value) => pred(value, deadline),
                None => false,
            };
            if hit {
                removed.push(self.free_slot(entry.slot));
            } else {
                self.entries[kept] = entry;
                kept += 1;
            }
        }
        if !removed.is_empty() {
            self.entries.truncate(kept);
            for pos in 0..kept {
                let entry = self.entries[pos];
                self.place(pos, entry);
            }
            // Floyd's heap construction: sift down every parent, last first.
            for pos in (0..kept.div_ceil(ARITY)).rev() {
                self.sift_down(pos);
            }
        }
        self.check();
        removed
    }

    fn remove_at(&mut self, pos: usize) -> T {
        let removed = self.entries.swap_remove(pos);
        if pos == 0 && !self.entries.is_empty() {
            // Popping the head: the former last entry almost always belongs
            // near the bottom, so walk the hole down first, then place it.
            self.sift_hole_down_then_up();
        } else if pos < self.entries.len() {
            // The former last entry now fills the hole; it may belong above
            // or below it.
            let pos = self.sift_up(pos);
            self.sift_down(pos);
        }
        let value = self.free_slot(removed.slot);
        self.check();
        value
    }

    /// Frees the slot of an entry already taken out of `entries`.
    fn free_slot(&mut self, index: u32) -> T {
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        // A generation about to wrap would let an old key match again: retire
        // the slot instead of recycling it.
        if slot.generation != 0 {
            slot.link = self.free_head;
            self.free_head = index;
        }
        // An occupied slot always holds a value.
        self.values[index as usize]
            .take()
            .expect("heap slot occupied without a value")
    }

    /// Moves the entry at `pos` up to its place; returns where it ended.
    fn sift_up(&mut self, mut pos: usize) -> usize {
        let entry = self.entries[pos];
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            let above = self.entries[parent];
            if !entry.less(&above) {
                break;
            }
            self.place(pos, above);
            pos = parent;
        }
        self.place(pos, entry);
        pos
    }

    /// The position of the smallest child of `pos`, if it has children.
    #[inline]
    fn min_child(&self, pos: usize) -> Option<usize> {
        let len = self.entries.len();
        let first = pos * ARITY + 1;
        if first >= len {
            return None;
        }
        let mut min = first;
        for child in first + 1..(first + ARITY).min(len) {
            if self.entries[child].less(&self.entries[min]) {
                min = child;
            }
        }
        Some(min)
    }

    /// Moves the entry at `pos` down to its place.
    fn sift_down(&mut self, mut pos: usize) {
        let entry = self.entries[pos];
        while let Some(min) = self.min_child(pos) {
            let below = self.entries[min];
            if !below.less(&entry) {
                break;
            }
            self.place(pos, below);
            pos = min;
        }
        self.place(pos, entry);
    }

    /// Floyd's pop: the entry at the root (the former last one) is held
    /// aside while the smaller child climbs into the hole at every level down
    /// to a leaf; then the entry is placed there and sifted up. Saves the
    /// comparison with the held entry on the way down.
    fn sift_hole_down_then_up(&mut self) {
        let held = self.entries[0];
        let mut hole = 0;
        while let Some(min) = self.min_child(hole) {
            let below = self.entries[min];
            self.place(hole, below);
            hole = min;
        }
        self.entries[hole] = held;
        self.sift_up(hole);
    }

    #[inline]
    fn place(&mut self, pos: usize, entry: Entry) {
        self.entries[pos] = entry;
        self.slots[entry.slot as usize].link = pos as u32;
    }

    #[inline]
    fn check(&self) {
        #[cfg(debug_assertions)]
        self.assert_invariants();
    }

    /// Checks heap order, the slot table's back-pointers, and the free list.
    /// Costs O(n): debug builds run it after every mutation.
    #[cfg(any(test, debug_assertions))]
    fn assert_invariants(&self) {
        // Beyond this size the O(n) walk after every mutation would make
        // debug-build tests quadratic; small heaps exercise the same code.
        if self.entries.len() > 4096 {
            return;
        }
        for (pos, entry) in self.entries.iter().enumerate() {
            if pos > 0 {
                let parent = &self.entries[(pos - 1) / ARITY];
                assert!(!entry.less(parent), "heap order broken at {pos}");
            }
            let slot = self.slots[entry.slot as usize];
            assert!(slot.occupied(), "heap entry {pos} points at a free slot");
            assert_eq!(slot.link as usize, pos, "slot does not point back");
            assert!(self.values[entry.slot as usize].is_some());
            assert!(entry.seq < self.next_seq, "seq from the future");
        }
        let occupied = self.slots.iter().filter(|s| s.occupied()).count();
        assert_eq!(occupied, self.entries.len(), "occupied slots != entries");
        let mut free = 0;
        let mut at = self.free_head;
        while at != NIL {
            let slot = self.slots[at as usize];
            assert!(!slot.occupied(), "free list holds an occupied slot");
            assert!(self.values[at as usize].is_none());
            free += 1;
            assert!(free <= self.slots.len(), "free list has a cycle");
            at = slot.link;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn pops_in_deadline_then_insertion_order() {
        let base = Instant::now();
        let mut heap = Heap::with_capacity(0);
        for (i, ms) in [5, 1, 3, 1, 5, 0].into_iter().enumerate() {
            heap.insert(i, at(base, ms));
        }
        let far = at(base, 10);
        let order: Vec<_> = std::iter::from_fn(|| heap.pop_due(far)).collect();
        assert_eq!(order, vec![5, 1, 3, 2, 0, 4]);
    }

    #[test]
    fn pop_due_leaves_future_entries() {
        let base = Instant::now();
        let mut heap = Heap::with_capacity(0);
        heap.insert("late", at(base, 10));
        assert_eq!(heap.pop_due(at(base, 9)), None);
        assert_eq!(heap.pop_due(at(base, 10)), Some("late"));
    }

    #[test]
    fn stale_key_misses_recycled_slot() {
        let base = Instant::now();
        let mut heap = Heap::with_capacity(0);
        let old = heap.insert(1, base);
        assert_eq!(heap.remove(old), Some(1));
        let new = heap.insert(2, base);
        assert_eq!(new.index, old.index, "slot is recycled");
        assert_eq!(heap.remove(old), None);
        assert!(!heap.reset(old, at(base, 1)));
        assert_eq!(heap.deadline(new), Some(base));
    }

    #[test]
    fn slot_is_retired_before_its_generation_wraps() {
        let base = Instant::now();
        let mut heap = Heap::with_capacity(0);
        let key = heap.insert(0, base);
        heap.slots[key.index as usize].generation = u32::MAX;
        let last = SlotKey {
            index: key.index,
            generation: u32::MAX,
        };
        assert_eq!(heap.remove(last), Some(0));
        let next = heap.insert(1, base);
        assert_ne!(next.index, key.index, "a wrapping slot is not reused");
    }

    #[test]
    fn running_out_of_sequence_numbers_keeps_fifo() {
        let base = Instant::now();
        let mut heap = Heap::with_capacity(0);
        heap.insert('a', at(base, 1));
        heap.insert('z', at(base, 0));
        heap.next_seq = u32::MAX - 1;
        heap.insert('b', at(base, 1));
        heap.insert('c', at(base, 1)); // renumbers first
        assert!(heap.next_seq < 10, "renumbered");
        heap.insert('d', at(base, 1));
        heap.assert_invariants();
        let far = at(base, 2);
        let order: String = std::iter::from_fn(|| heap.pop_due(far)).collect();
        assert_eq!(order, "zabcd");
    }

    #[test]
    fn deadlines_round_trip_exactly_and_clamp_beyond_292_years() {
        let mut heap = Heap::with_capacity(0);
        let origin = heap.origin;
        let year = Duration::from_secs(365 * 86_400);
        let near = origin + year * 200 + Duration::from_nanos(7);
        let key = heap.insert(0, near);
        assert_eq!(heap.deadline(key), Some(near));
        let past = origin
            .checked_sub(Duration::from_nanos(3))
            .unwrap_or(origin);
        let key = heap.insert(1, past);
        assert_eq!(heap.deadline(key), Some(past));
        let beyond = origin + year * 1000;
        let key = heap.insert(2, beyond);
        let clamped = heap.deadline(key).unwrap();
        assert!(clamped > origin + year * 292 && clamped < beyond);
        assert_eq!(heap.pop_due(origin), Some(1));
    }

    #[test]
    fn reset_moves_behind_equal_deadlines() {
        let base = Instant::now();
        let mut heap = Heap::with_capacity(0);
        let a = heap.insert('a', at(base, 1));
        heap.insert('b', at(base, 1));
        assert!(heap.reset(a, at(base, 1)));
        let far = at(base, 2);
        assert_eq!(heap.pop_due(far), Some('b'));
        assert_eq!(heap.pop_due(far), Some('a'));
    }

    mod model {
        //! The heap against a `BTreeMap<(Instant, seq), value>` model.

        use super::*;
        use proptest::prelude::*;
        use std::collections::{BTreeMap, HashMap};

        #[derive(Debug, Clone)]
        enum Op {
            Insert(u16),
            Remove(usize),
            Reset(usize, u16),
            PopDue(u16),
            RemoveIfDivisible(u32),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u16..64).prop_map(Op::Insert),
                2 => any::<usize>().prop_map(Op::Remove),
                2 => (any::<usize>(), 0u16..64).prop_map(|(k, d)| Op::Reset(k, d)),
                2 => (0u16..64).prop_map(Op::PopDue),
                1 => (2u32..6).prop_map(Op::RemoveIfDivisible),
            ]
        }

        proptest! {
            #[test]
            fn behaves_like_an_ordered_map(ops in proptest::collection::vec(op(), 1..300)) {
                let base = Instant::now();
                let t = |ms: u16| base + Duration::from_millis(u64::from(ms));
                let mut heap = Heap::with_capacity(0);
                let mut model: BTreeMap<(Instant, u64), u32> = BTreeMap::new();
                // Every key ever issued, live or stale, with its model entry.
                let mut keys: Vec<(SlotKey, Option<(Instant, u64)>)> = Vec::new();
                let mut where_is: HashMap<u32, usize> = HashMap::new();
                let mut seq = 0u64;
                let mut next_value = 0u32;
                for op in ops {
                    match op {
                        Op::Insert(ms) => {
                            let key = heap.insert(next_value, t(ms));
                            model.insert((t(ms), seq), next_value);
                            where_is.insert(next_value, keys.len());
                            keys.push((key, Some((t(ms), seq))));
                            seq += 1;
                            next_value += 1;
                        }
                        Op::Remove(i) if !keys.is_empty() => {
                            let i = i % keys.len();
                            let (key, entry) = keys[i];
                            let expected = entry.and_then(|e| model.remove(&e));
                            prop_assert_eq!(heap.remove(key), expected);
                            keys[i].1 = None;
                        }
                        Op::Reset(i, ms) if !keys.is_empty() => {
                            let i = i % keys.len();
                            let (key, entry) = keys[i];
                            prop_assert_eq!(heap.reset(key, t(ms)), entry.is_some());
                            if let Some(value) = entry.and_then(|e| model.remove(&e)) {
                                model.insert((t(ms), seq), value);
                                keys[i].1 = Some((t(ms), seq));
                            }
                            seq += 1;
                        }
                        Op::PopDue(ms) => {
                            let expected = model
                                .first_key_value()
                                .filter(|((d, _), _)| *d <= t(ms))
                                .map(|(k, _)| *k);
                            let expected = expected.and_then(|k| model.remove(&k));
                            let got = heap.pop_due(t(ms));
                            prop_assert_eq!(got, expected);
                            if let Some(v) = got {
                                keys[where_is[&v]].1 = None;
                            }
                        }
                        Op::RemoveIfDivisible(by) => {
                            let mut got = heap.remove_if(|v, _| v % by == 0);
                            got.sort_unstable();
                            let mut expected: Vec<u32> =
                                model.values().copied().filter(|v| v % by == 0).collect();
                            expected.sort_unstable();
                            prop_assert_eq!(&got, &expected);
                            model.retain(|_, v| *v % by != 0);
                            for v in got {
                                keys[where_is[&v]].1 = None;
                            }
                        }
                        _ => {}
                    }
                    heap.assert_invariants();
                    prop_assert_eq!(heap.len(), model.len());
                    prop_assert_eq!(heap.peek_deadline(), model.keys().next().map(|k| k.0));
                    for (key, entry) in &keys {
                        prop_assert_eq!(heap.deadline(*key), entry.map(|e| e.0));
                    }
                }
            }
        }
    }
}
