//! The core behind [`DelayQueue`](crate::DelayQueue): a slot table, a timing
//! wheel for the far future and a small exact heap for what is about to come
//! due. No locking, no async; the clock is passed in.
//!
//! Ground rules:
//!
//! - Deadlines are stored as nanosecond ticks from `origin`, offset by 2^63
//!   so that instants before the origin order correctly too. That is exact for
//!   any instant within 292 years of the origin; instants further away are
//!   clamped to that horizon. An entry's *wheel tick* is its ticks >> 20.
//! - Every entry owns a [`Slot`]: its deadline, its sequence number, its
//!   generation and two links. `seq` grows with every insert and reset, so
//!   equal deadlines come out first-in first-out; when the 32-bit `seq` runs
//!   out, the live entries are renumbered in their current order (once per
//!   2^32 inserts).
//! - **The split that keeps order exact**: an entry whose wheel tick is below
//!   the wheel's `elapsed` is in the near heap ([`NearHeap`]), every other
//!   entry is in the wheel ([`Wheel`]). So every near entry is due before
//!   every wheel entry, and the near heap's head, when there is one, is the
//!   queue's head. When the near heap runs empty and the head is needed, the
//!   earliest bucket of the wheel is opened: a level 0 bucket (one tick) moves
//!   whole into the near heap, which orders it exactly, and `elapsed` moves
//!   just past it; a higher bucket cascades (see `wheel.rs`).
//! - Entries inserted already due, or due before `elapsed`, go straight to the
//!   near heap.
//! - The head is only forced out of the wheel when someone needs it: a pop
//!   opens only buckets that may hold due entries, and [`Timers::head`] (a
//!   leader arming its timer, `peek_deadline`) opens the earliest bucket
//!   whatever its time. Inserting into a queue nobody waits on never opens a
//!   bucket.
//! - A slot's generation is odd while the slot is occupied and even while it
//!   is free; it goes up by one on every insert and every removal. A
//!   [`SlotKey`] holds the odd generation it was issued with, so a key whose
//!   entry left the queue never matches again, even after the slot is reused.
//!   A slot whose generation would wrap around is retired, never reused.
//!
//! Costs, with `n` entries in all and `m` in the near heap: insert O(1) into
//! the wheel, O(log m) near; remove and reset by key O(1) in the wheel,
//! O(log m) near; pop O(log m) plus, amortized, one bucket opening per
//! entry and at most seven cascades per entry over its life.

use super::heap::{NearHeap, Rec};
use super::wheel::{Bucket, Wheel};
use std::time::Duration;
use tokio::time::Instant;

/// Marks the end of a list (free list, bucket list).
pub(crate) const NIL: u32 = u32::MAX;
/// `prev` of a slot whose entry is in the near heap (its `next` is then its
/// position there).
const NEAR: u32 = u32::MAX - 1;

/// Nanosecond ticks per wheel tick: 2^20 ns, about 1.05 ms.
const WHEEL_SHIFT: u32 = 20;

/// How many wheel ticks ahead of the clock a waiting leader opens buckets to
/// learn the exact head (about 2.1 ms): see [`Timers::wake_target`].
const OPEN_AHEAD: u64 = 2;

/// The most entries of a far bucket walked to find its earliest.
const SCAN_MAX: usize = 8;

/// Ticks of the origin itself: the middle of the `u64` range.
const ORIGIN_TICKS: u64 = 1 << 63;

/// Identifies one insertion: a slot index and the generation it had then.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct SlotKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// The ordering key of the entry that comes out next, used to tell whether
/// a mutation changed it.
pub(crate) type HeadId = (u64, u32);

/// One entry's bookkeeping: 24 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// The deadline, while occupied.
    pub(crate) ticks: u64,
    pub(crate) seq: u32,
    /// Odd while occupied, even while free.
    pub(crate) generation: u32,
    /// In the wheel: the next entry of its bucket (or `NIL`). Near: its
    /// position in the near heap. Free: the next free slot (or `NIL`).
    pub(crate) next: u32,
    /// In the wheel: the previous entry of its bucket (`NIL` at the head).
    /// `NEAR` while in the near heap.
    pub(crate) prev: u32,
}

impl Slot {
    pub(crate) const FREE: Slot = Slot {
        ticks: 0,
        seq: 0,
        generation: 0,
        next: NIL,
        prev: NIL,
    };

    #[inline]
    fn occupied(&self) -> bool {
        self.generation & 1 == 1
    }

    #[inline]
    fn wheel_tick(&self) -> u64 {
        self.ticks >> WHEEL_SHIFT
    }
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Timers<T> {
    slots: Vec<Slot>,
    values: Vec<Option<T>>,
    free_head: u32,
    next_seq: u32,
    origin: Instant,
    near: NearHeap,
    wheel: Wheel,
    len: usize,
}

impl<T> Timers<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Timers {
            slots: Vec::with_capacity(capacity),
            values: Vec::with_capacity(capacity),
            free_head: NIL,
            next_seq: 0,
            origin: Instant::now(),
            near: NearHeap::default(),
            wheel: Wheel::new(ORIGIN_TICKS >> WHEEL_SHIFT),
            len: 0,
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

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `(deadline, seq)` of the entry that comes out next. Opens wheel
    /// buckets until the near heap holds the head.
    pub(crate) fn head(&mut self) -> Option<HeadId> {
        while self.near.is_empty() {
            let bucket = self.wheel.earliest()?;
            self.open(bucket);
        }
        self.near.peek().map(|rec| (rec.ticks, rec.seq))
    }

    pub(crate) fn peek_deadline(&mut self) -> Option<Instant> {
        self.head().map(|(ticks, _)| self.instant(ticks))
    }

    /// Adds `value` due at `deadline`.
    ///
    /// # Panics
    ///
    /// Panics if `u32::MAX - 2` slots are in use at once (like a `Vec`
    /// overflowing its capacity, this needs far more memory than exists).
    pub(crate) fn insert(&mut self, value: T, deadline: Instant) -> SlotKey {
        let index = self.alloc_slot();
        let ticks = self.ticks(deadline);
        let seq = self.bump_seq();
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.ticks = ticks;
        slot.seq = seq;
        let key = SlotKey {
            index,
            generation: slot.generation,
        };
        self.values[index as usize] = Some(value);
        self.place(index);
        self.len += 1;
        self.check();
        key
    }

    /// Removes and returns the head if its deadline is `<= now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        let now = self.ticks(now);
        // Only buckets that may hold due entries are opened: the wheel does
        // not run ahead of the clock for a pop.
        while self.near.is_empty() {
            let bucket = self.wheel.earliest()?;
            if bucket.start > now >> WHEEL_SHIFT {
                return None;
            }
            self.open(bucket);
        }
        let head = *self.near.peek()?;
        if head.ticks > now {
            return None;
        }
        self.near.remove_at(&mut self.slots, 0);
        let value = self.free_slot(head.slot);
        self.check();
        Some(value)
    }

    pub(crate) fn remove(&mut self, key: SlotKey) -> Option<T> {
        let index = self.occupied_index(key)?;
        self.unplace(index);
        let value = self.free_slot(index);
        self.check();
        Some(value)
    }

    /// Moves the entry to `deadline`, ordering it behind entries that already
    /// have that deadline. Returns `false` for a stale key.
    pub(crate) fn reset(&mut self, key: SlotKey, deadline: Instant) -> bool {
        let Some(index) = self.occupied_index(key) else {
            return false;
        };
        self.unplace(index);
        let ticks = self.ticks(deadline);
        let seq = self.bump_seq();
        let slot = &mut self.slots[index as usize];
        slot.ticks = ticks;
        slot.seq = seq;
        self.place(index);
        self.check();
        true
    }

    /// The `(ticks, seq)` ordering key of a live entry.
    pub(crate) fn id_of(&self, key: SlotKey) -> Option<HeadId> {
        let index = self.occupied_index(key)?;
        let slot = &self.slots[index as usize];
        Some((slot.ticks, slot.seq))
    }

    /// When a waiting leader must look again: the head's `(ticks, seq)` if
    /// it is known, never later than the head's deadline.
    ///
    /// Opens the buckets that start within [`OPEN_AHEAD`] ticks of `now`.
    /// A later head is found by walking its bucket if that holds at most
    /// [`SCAN_MAX`] entries (the common case of a few far timers); otherwise
    /// the mark is `OPEN_AHEAD` ticks before the bucket starts, with a `seq`
    /// no entry has, and the leader comes back then to open it. Opening a far
    /// bucket at once instead would let the wheel run ahead of the clock, and
    /// everything inserted before it would then go to the near heap.
    pub(crate) fn wake_target(&mut self, now: Instant) -> Option<HeadId> {
        let reach = (self.ticks(now) >> WHEEL_SHIFT).saturating_add(OPEN_AHEAD);
        while self.near.is_empty() {
            let bucket = self.wheel.earliest()?;
            if bucket.start > reach {
                return Some(self.scan(bucket));
            }
            self.open(bucket);
        }
        self.near.peek().map(|rec| (rec.ticks, rec.seq))
    }

    /// The earliest `(ticks, seq)` in a far bucket if it is small, else its
    /// wake-up mark (see [`wake_target`](Timers::wake_target)).
    fn scan(&self, bucket: Bucket) -> HeadId {
        let mut best = (u64::MAX, u32::MAX);
        let mut at = self.wheel.first(bucket);
        for _ in 0..SCAN_MAX {
            if at == NIL {
                return best;
            }
            let slot = &self.slots[at as usize];
            best = best.min((slot.ticks, slot.seq));
            at = slot.next;
        }
        if at == NIL {
            return best;
        }
        ((bucket.start - OPEN_AHEAD) << WHEEL_SHIFT, u32::MAX)
    }

    /// The instant of a [`HeadId`]'s ticks.
    pub(crate) fn instant_of(&self, id: HeadId) -> Instant {
        self.instant(id.0)
    }

    pub(crate) fn deadline(&self, key: SlotKey) -> Option<Instant> {
        let index = self.occupied_index(key)?;
        Some(self.instant(self.slots[index as usize].ticks))
    }

    pub(crate) fn contains(&self, key: SlotKey) -> bool {
        self.occupied_index(key).is_some()
    }

    /// Removes every entry for which `pred(value, deadline)` holds, in no
    /// particular order; the others keep their keys. O(n).
    pub(crate) fn remove_if(&mut self, mut pred: impl FnMut(&T, Instant) -> bool) -> Vec<T> {
        let mut hits = Vec::new();
        for index in 0..self.slots.len() {
            let slot = self.slots[index];
            if let (true, Some(value)) = (slot.occupied(), &self.values[index]) {
                if pred(value, self.instant(slot.ticks)) {
                    hits.push(index as u32);
                }
            }
        }
        let removed = hits
            .into_iter()
            .map(|index| {
                self.unplace(index);
                self.free_slot(index)
            })
            .collect();
        self.check();
        removed
    }

    fn occupied_index(&self, key: SlotKey) -> Option<u32> {
        let slot = self.slots.get(key.index as usize)?;
        (slot.generation == key.generation && slot.occupied()).then_some(key.index)
    }

    /// Puts an occupied slot's entry on the side its deadline belongs to.
    #[inline]
    fn place(&mut self, index: u32) {
        let slot = self.slots[index as usize];
        let tick = slot.wheel_tick();
        if tick < self.wheel.elapsed() {
            self.push_near(index);
        } else {
            self.wheel.link(&mut self.slots, index, tick);
        }
    }

    fn push_near(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.prev = NEAR;
        let rec = Rec {
            ticks: slot.ticks,
            seq: slot.seq,
            slot: index,
        };
        self.near.push(&mut self.slots, rec);
    }

    /// Takes an occupied slot's entry out of the wheel or the near heap.
    #[inline]
    fn unplace(&mut self, index: u32) {
        let slot = self.slots[index as usize];
        if slot.prev == NEAR {
            self.near.remove_at(&mut self.slots, slot.next as usize);
        } else {
            self.wheel.unlink(&mut self.slots, index, slot.wheel_tick());
        }
    }

    /// Opens the wheel's earliest bucket: a level 0 bucket moves to the near
    /// heap and `elapsed` moves past it; a higher one cascades.
    fn open(&mut self, bucket: Bucket) {
        if bucket.level == 0 {
            let mut at = self.wheel.take(bucket);
            while at != NIL {
                let next = self.slots[at as usize].next;
                self.push_near(at);
                at = next;
            }
            self.advance(bucket.start + 1);
        } else {
            self.advance(bucket.start);
        }
    }

    /// Moves the wheel to `to` and cascades every bucket that then holds it.
    fn advance(&mut self, to: u64) {
        self.wheel.advance(to);
        while let Some(bucket) = self.wheel.to_cascade() {
            let mut at = self.wheel.take(bucket);
            while at != NIL {
                let slot = self.slots[at as usize];
                self.wheel.link(&mut self.slots, at, slot.wheel_tick());
                at = slot.next;
            }
        }
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
    /// `(deadline, seq)` order. Relative order is unchanged, so the near heap
    /// stays valid and FIFO among equal deadlines is kept. O(n log n), once
    /// per 2^32 inserts and resets.
    #[cold]
    fn renumber(&mut self) {
        let mut order: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| self.slots[i as usize].occupied())
            .collect();
        order.sort_unstable_by_key(|&i| {
            let slot = self.slots[i as usize];
            (slot.ticks, slot.seq)
        });
        for (rank, &index) in order.iter().enumerate() {
            self.slots[index as usize].seq = rank as u32;
        }
        self.near.refresh_seqs(&self.slots);
        self.next_seq = order.len() as u32;
    }

    fn alloc_slot(&mut self) -> u32 {
        if self.free_head != NIL {
            let index = self.free_head;
            self.free_head = self.slots[index as usize].next;
            return index;
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i < NEAR)
            .expect("DelayQueue holds more than u32::MAX - 2 entries");
        self.slots.push(Slot::FREE);
        self.values.push(None);
        index
    }

    /// Frees the slot of an entry already taken out of the wheel or heap.
    fn free_slot(&mut self, index: u32) -> T {
        self.len -= 1;
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.prev = NIL;
        // A generation about to wrap would let an old key match again: retire
        // the slot instead of recycling it.
        if slot.generation != 0 {
            slot.next = self.free_head;
            self.free_head = index;
        }
        // An occupied slot always holds a value.
        self.values[index as usize]
            .take()
            .expect("queue slot occupied without a value")
    }

    #[inline]
    fn check(&self) {
        #[cfg(debug_assertions)]
        if self.slots.len() <= DEBUG_CHECK_MAX {
            self.assert_invariants();
        }
    }

    /// Checks the split (near entries before `elapsed`, wheel entries from
    /// it), both structures, the slot table and the free list. O(n).
    #[cfg(any(test, debug_assertions))]
    fn assert_invariants(&self) {
        self.near.assert_invariants(&self.slots);
        let in_wheel = self.wheel.assert_invariants(&self.slots, Slot::wheel_tick);
        let mut occupied = 0;
        for (index, slot) in self.slots.iter().enumerate() {
            if !slot.occupied() {
                continue;
            }
            occupied += 1;
            assert!(
                self.values[index].is_some(),
                "occupied slot without a value"
            );
            assert!(slot.seq < self.next_seq, "seq from the future");
            if slot.prev == NEAR {
                assert!(
                    slot.wheel_tick() < self.wheel.elapsed(),
                    "near entry at or after elapsed"
                );
            }
        }
        assert_eq!(occupied, self.len, "occupied slots != len");
        assert_eq!(
            in_wheel + self.near.len(),
            self.len,
            "entries lost or doubled"
        );
        let mut free = 0;
        let mut at = self.free_head;
        while at != NIL {
            let slot = self.slots[at as usize];
            assert!(!slot.occupied(), "free list holds an occupied slot");
            assert!(self.values[at as usize].is_none());
            free += 1;
            assert!(free <= self.slots.len(), "free list has a cycle");
            at = slot.next;
        }
    }
}

/// Beyond this many slots the O(n) check after every mutation would make
/// debug-build tests quadratic; small queues exercise the same code.
#[cfg(debug_assertions)]
const DEBUG_CHECK_MAX: usize = 1024;

#[cfg(test)]
mod tests;
