//! The near side of a [`DelayQueue`](crate::DelayQueue): a d-ary min-heap of
//! the entries about to come due. No locking, no async, no clock.
//!
//! Ground rules:
//!
//! - `entries` is a 4-ary min-heap of 16-byte `(ticks, seq, slot)` records
//!   ordered by `(ticks, seq)`, so a node's four children share one cache
//!   line.
//! - Every move inside the heap writes the moved record's position into its
//!   slot's `pos` field (the slot table lives in `timers.rs`), which is what
//!   makes removal by key O(log m).
//! - The heap only holds entries inserted (or reset) to a deadline before
//!   the wheel's `elapsed`, a few at a time; what the wheel hands over goes
//!   to the sorted run in `timers.rs`, so `m` stays small and a pop touches
//!   memory that is in cache.

use super::slot::Slot;
#[cfg(any(test, debug_assertions))]
use super::timers::HEAP;

/// Children per node. Measured against 2, 8 and 16 in `benches/queue.rs`: 4
/// halves the depth and keeps each node's children within one cache line.
const ARITY: usize = 4;

/// One near entry: its ordering key and its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rec {
    pub(crate) ticks: u64,
    pub(crate) seq: u32,
    pub(crate) slot: u32,
}

impl Rec {
    /// The ordering key: deadline, then insertion.
    #[inline]
    pub(crate) fn order(&self) -> (u64, u32) {
        (self.ticks, self.seq)
    }

    #[inline]
    fn less(&self, other: &Rec) -> bool {
        self.order() < other.order()
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct NearHeap {
    entries: Vec<Rec>,
}

impl NearHeap {
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub(crate) fn peek(&self) -> Option<&Rec> {
        self.entries.first()
    }

    pub(crate) fn push<T>(&mut self, slots: &mut [Slot<T>], rec: Rec) {
        let pos = self.entries.len();
        self.entries.push(rec);
        self.sift_up(slots, pos);
    }

    /// Removes the record at `pos` (as recorded in its slot).
    pub(crate) fn remove_at<T>(&mut self, slots: &mut [Slot<T>], pos: usize) -> Rec {
        let removed = self.entries.swap_remove(pos);
        if pos == 0 && !self.entries.is_empty() {
            // Popping the head: the former last record almost always belongs
            // near the bottom, so walk the hole down first, then place it.
            self.sift_hole_down_then_up(slots);
        } else if pos < self.entries.len() {
            // The former last record now fills the hole; it may belong above
            // or below it.
            let pos = self.sift_up(slots, pos);
            self.sift_down(slots, pos);
        }
        removed
    }

    /// The record at `pos`.
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn get(&self, pos: u32) -> &Rec {
        &self.entries[pos as usize]
    }

    /// Calls `f` on every record. Only for a renumbering that keeps the
    /// relative order, so the heap stays valid.
    pub(crate) fn for_each_mut(&mut self, f: impl FnMut(&mut Rec)) {
        self.entries.iter_mut().for_each(f);
    }

    /// Moves the record at `pos` up to its place; returns where it ended.
    fn sift_up<T>(&mut self, slots: &mut [Slot<T>], mut pos: usize) -> usize {
        let rec = self.entries[pos];
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            let above = self.entries[parent];
            if !rec.less(&above) {
                break;
            }
            self.place(slots, pos, above);
            pos = parent;
        }
        self.place(slots, pos, rec);
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

    /// Moves the record at `pos` down to its place.
    fn sift_down<T>(&mut self, slots: &mut [Slot<T>], mut pos: usize) {
        let rec = self.entries[pos];
        while let Some(min) = self.min_child(pos) {
            let below = self.entries[min];
            if !below.less(&rec) {
                break;
            }
            self.place(slots, pos, below);
            pos = min;
        }
        self.place(slots, pos, rec);
    }

    /// Floyd's pop: the record at the root (the former last one) is held
    /// aside while the smaller child climbs into the hole at every level down
    /// to a leaf; then the record is placed there and sifted up. Saves the
    /// comparison with the held record on the way down.
    fn sift_hole_down_then_up<T>(&mut self, slots: &mut [Slot<T>]) {
        let held = self.entries[0];
        let mut hole = 0;
        while let Some(min) = self.min_child(hole) {
            let below = self.entries[min];
            self.place(slots, hole, below);
            hole = min;
        }
        self.entries[hole] = held;
        self.sift_up(slots, hole);
    }

    #[inline]
    fn place<T>(&mut self, slots: &mut [Slot<T>], pos: usize, rec: Rec) {
        self.entries[pos] = rec;
        slots[rec.slot as usize].pos = pos as u32;
    }

    /// Checks heap order and that every record's slot points back to it and
    /// agrees on its key. O(m).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn assert_invariants<T>(&self, slots: &[Slot<T>]) {
        for (pos, rec) in self.entries.iter().enumerate() {
            if pos > 0 {
                let parent = &self.entries[(pos - 1) / ARITY];
                assert!(!rec.less(parent), "heap order broken at {pos}");
            }
            let slot = &slots[rec.slot as usize];
            assert!(slot.occupied(), "near record {pos} points at a free slot");
            assert_eq!(
                (slot.home(), slot.pos as usize),
                (HEAP, pos),
                "slot does not point back"
            );
        }
    }
}
