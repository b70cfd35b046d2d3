//! The core behind [`DelayQueue`](crate::DelayQueue): a slot table, a timing
//! wheel for the far future and a small exact near side for what is about to
//! come due. No locking, no async; the clock is passed in.
//!
//! Ground rules:
//!
//! - Deadlines are stored as nanosecond ticks from `origin`, offset by 2^63
//!   so that instants before the origin order correctly too. That is exact for
//!   any instant within 292 years of the origin; instants further away are
//!   clamped to that horizon. An entry's *wheel tick* is its ticks >> 20.
//! - Every entry has a [`Slot`] that holds its `(ticks, seq)`, its value, and
//!   its home and the index there: a wheel bucket (which holds slot
//!   indices), or the near side's sorted `run`, `heap` or `late` (which hold
//!   16-byte [`Rec`]s, a copy of the ticks and seq beside the slot index, so
//!   that sorting and sifting read no slot). Every move rewrites the home and
//!   index, but one: a batch merged into the run (see below). Removing or
//!   resetting a far entry by key so reads its slot and
//!   nothing else: the wheel leaves the bucket's index behind, dead (see
//!   `wheel.rs`). `seq` grows with every insert and reset, so equal
//!   deadlines come out first-in first-out; when the 32-bit `seq` runs out,
//!   the live entries are renumbered in their current order (once per 2^32
//!   inserts).
//! - **The split that keeps order exact**: an entry whose wheel tick is below
//!   the wheel's `elapsed` is on the near side (`run` or `heap`), every other
//!   entry is in the wheel ([`Wheel`]). So every near entry is due before
//!   every wheel entry, and the smaller of the run's and the heap's heads,
//!   when there is one, is the queue's head. When the near side runs empty
//!   and an entry may be due, the earliest bucket of the wheel is opened: a
//!   level 0 bucket (one tick) is sorted and becomes the run, and `elapsed`
//!   moves just past it; a higher bucket cascades (see `wheel.rs`).
//! - The run is consumed from `cursor`; an entry removed from it by key
//!   leaves a tombstone (`slot == NIL`) that the cursor skips. The run visits
//!   the slot table in deadline order, that is at random, so the pops read
//!   the run's next 16 slots at once, 16 at a time (`warm_run`), and their
//!   cache misses overlap.
//! - Entries inserted or reset to before `elapsed` (already due, or due
//!   within the tick being served) wait unsorted in `late` until the head is
//!   next looked at; then a large batch is sorted and merged into the run,
//!   and a small one goes to the near heap. A merge does not point the
//!   batch's slots at the run (a cache miss per entry, for nothing when the
//!   entries are simply taken): an entry in the run whose slot does not say
//!   where is found by binary search on its `(ticks, seq)`
//!   (`locate_run`), which is why the run, tombstones included, stays
//!   sorted.
//! - The wheel never runs ahead of the clock by more than two ticks: a pop
//!   opens only buckets that may hold due entries, and a leader arming its
//!   timer ([`Timers::wake_target`]) opens only buckets within two ticks of
//!   now. Only `peek_deadline` ([`Timers::head`]) opens the earliest bucket
//!   whatever its time.
//! - A slot's generation is odd while the slot is occupied and even while it
//!   is free; it goes up by one on every insert and every removal. A
//!   [`SlotKey`] holds the odd generation it was issued with, so a key whose
//!   entry left the queue never matches again, even after the slot is reused.
//!   A slot whose generation would wrap around is retired, never reused.
//!
//! Costs, with `n` entries in all and `m` in the near heap: insert O(1) into
//! the wheel, O(log m) near; remove and reset by key O(1) in the wheel (one
//! slot read, plus at most `COMPACT_STEP` reads of a compacting bucket), in
//! the run O(1) where the slot's position still holds and else O(log r) for
//! a run of `r` (a binary search, see `locate_run`), O(log m) in the heap;
//! pop O(1) from the run, O(log m) from the heap;
//! and, amortized per entry, one sort of its tick's bucket and at most seven
//! cascades over its life.

use super::heap::{NearHeap, Rec};
use super::slot::Slot;
use super::wheel::{Bucket, HOMES, WHEEL_SHIFT, Wheel, wheel_tick};
use crate::queue::deadline_after;
use std::time::Duration;
use tokio::time::Instant;

/// Marks the end of the free list, and a tombstone in the run.
pub(crate) const NIL: u32 = u32::MAX;
/// `home` of an entry in the sorted run.
const RUN: u32 = HOMES;
/// `home` of an entry in the near heap.
pub(crate) const HEAP: u32 = HOMES + 1;
/// `home` of an entry inserted before `elapsed` and not yet filed.
const LATE: u32 = HOMES + 2;

/// The smallest batch of late entries that is sorted into the run rather
/// than pushed onto the heap one by one.
const LATE_SORT_MIN: usize = 64;

/// How many wheel ticks ahead of the clock a waiting leader opens buckets to
/// learn the exact head (about 2.1 ms): see [`Timers::wake_target`].
const OPEN_AHEAD: u64 = 2;

/// The most entries of a far bucket read to find its earliest.
const SCAN_MAX: usize = 64;

/// How many of the run's entries [`Timers::warm_run`] reads ahead at once.
const WARM: usize = 16;

/// Ticks of the origin itself: the middle of the `u64` range.
const ORIGIN_TICKS: u64 = 1 << 63;

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// Identifies one insertion: a slot index and the generation it had then.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct SlotKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// The ordering key `(ticks, seq)` of an entry, used to tell whether a
/// mutation concerns what the leader is timing.
pub(crate) type HeadId = (u64, u32);

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Timers<T> {
    slots: Vec<Slot<T>>,
    free_head: u32,
    next_seq: u32,
    origin: Instant,
    /// Every tick count from the origin on names an instant the platform
    /// can represent (false only for an origin within 292 years of the
    /// latest `Instant`): then `ticks_after` may add in ticks.
    sums_fit: bool,
    /// The latest clock reading [`Timers::pop_due_by`] took, in ticks.
    seen: u64,
    wheel: Wheel,
    /// Opened buckets, sorted; `run[cursor..]` is still to come.
    run: Vec<Rec>,
    cursor: usize,
    /// Entries of `run[cursor..]` that are not tombstones.
    run_live: usize,
    /// `run[..warmed]` was read ahead by [`Timers::warm_run`].
    warmed: usize,
    heap: NearHeap,
    /// Entries inserted before `elapsed`, unsorted, until the next look at
    /// the head files them (`settle_late`).
    late: Vec<Rec>,
    len: usize,
}

impl<T> Timers<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self::with_origin(capacity, Instant::now())
    }

    fn with_origin(capacity: usize, origin: Instant) -> Self {
        Timers {
            slots: Vec::with_capacity(capacity),
            free_head: NIL,
            next_seq: 0,
            origin,
            sums_fit: origin
                .checked_add(Duration::from_nanos(u64::MAX - ORIGIN_TICKS))
                .is_some(),
            seen: 0,
            wheel: Wheel::new(ORIGIN_TICKS >> WHEEL_SHIFT),
            run: Vec::new(),
            cursor: 0,
            run_live: 0,
            warmed: 0,
            heap: NearHeap::default(),
            late: Vec::new(),
            len: 0,
        }
    }

    /// `deadline` as ticks from the origin, clamped to the `u64` range.
    #[inline]
    fn ticks(&self, deadline: Instant) -> u64 {
        match deadline.checked_duration_since(self.origin) {
            Some(after) => ORIGIN_TICKS.saturating_add(nanos(after)),
            None => ORIGIN_TICKS.saturating_sub(nanos(self.origin - deadline)),
        }
    }

    /// `now + delay` as ticks: exactly `self.ticks(deadline_after(now,
    /// delay))`, without building the instant unless a sum saturates.
    #[inline]
    fn ticks_after(&self, now: Instant, delay: Duration) -> u64 {
        let base = self.ticks(now);
        // Neither clamped, and `now + delay` representable (`sums_fit`):
        // the sum is the distance from the origin in nanoseconds, as
        // `ticks` of the summed instant would be.
        match base.checked_add(nanos(delay)) {
            Some(ticks) if base != 0 && self.sums_fit => ticks,
            _ => self.ticks(deadline_after(now, delay)),
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

    /// The near side's head: the smaller of the run's and the heap's.
    #[inline]
    fn near_head(&mut self) -> Option<Rec> {
        if !self.late.is_empty() {
            self.settle_late();
        }
        while let Some(rec) = self.run.get(self.cursor) {
            if rec.slot != NIL {
                break;
            }
            self.cursor += 1;
        }
        let run = self.run.get(self.cursor).copied();
        let heap = self.heap.peek().copied();
        match (run, heap) {
            (Some(r), Some(h)) => Some(if h.order() < r.order() { h } else { r }),
            (r, h) => r.or(h),
        }
    }

    /// The queue's head, once the near side holds it. Opens wheel buckets
    /// that start at wheel tick `reach` or before; when the near side is
    /// empty and the earliest bucket starts later, returns that bucket
    /// (`Err(None)`: the queue is empty).
    fn fill(&mut self, reach: u64) -> Result<Rec, Option<Bucket>> {
        loop {
            if let Some(rec) = self.near_head() {
                return Ok(rec);
            }
            let bucket = self.wheel.earliest().ok_or(None)?;
            if bucket.start > reach {
                return Err(Some(bucket));
            }
            self.open(bucket);
        }
    }

    /// Files the entries inserted before `elapsed` since the last look: a
    /// batch that is large next to the run is sorted and merged into it, in
    /// O(run + batch) (a million entries inserted already due come out of
    /// one sort, not a million heap pushes); a small one goes to the heap.
    #[cold]
    fn settle_late(&mut self) {
        let mut late = std::mem::take(&mut self.late);
        if late.len() < LATE_SORT_MIN || late.len() * 8 < self.run_live {
            for rec in late.drain(..) {
                self.slots[rec.slot as usize].set_place(HEAP, NIL);
                self.heap.push(&mut self.slots, rec);
            }
            self.late = late;
            return;
        }
        sort_by_key(&mut late);
        if self.run_live > 0 {
            let rest = self.run[self.cursor..].iter().filter(|r| r.slot != NIL);
            late = merge(rest.copied(), late);
        }
        // The slots are not pointed at the new run: that would be a cache
        // miss per entry of a batch that may hold millions. They keep their
        // old home (`LATE`, or `RUN` at a position now stale), and
        // `locate_run` finds them by their `(ticks, seq)`.
        self.set_run(late);
    }

    /// Makes `sorted` the run. Its slots are pointed at it only by the
    /// caller, if at all (see `locate_run`).
    fn set_run(&mut self, sorted: Vec<Rec>) {
        self.run_live = sorted.len();
        self.run = sorted;
        self.cursor = 0;
        self.warmed = 0;
    }

    /// The `(ticks, seq)` of the entry that comes out next. Opens wheel
    /// buckets until the near side holds the head, however far ahead.
    pub(crate) fn head(&mut self) -> Option<HeadId> {
        self.fill(u64::MAX).ok().map(|rec| rec.order())
    }

    pub(crate) fn peek_deadline(&mut self) -> Option<Instant> {
        self.head().map(|(ticks, _)| self.instant(ticks))
    }

    /// When a waiting leader must look again: the head's `(ticks, seq)` if
    /// it is known, never later than the head's deadline.
    ///
    /// Opens the buckets that start within [`OPEN_AHEAD`] ticks of `now`.
    /// A later head is found by reading its bucket if that holds at most
    /// [`SCAN_MAX`] entries (the common case of a few far timers); otherwise
    /// the mark is `OPEN_AHEAD` ticks before the bucket starts, with a `seq`
    /// no entry has, and the leader comes back then to open it. Opening a far
    /// bucket at once instead would let the wheel run ahead of the clock, and
    /// everything inserted before it would then go to the near side.
    pub(crate) fn wake_target(&mut self, now: Instant) -> Option<HeadId> {
        let reach = (self.ticks(now) >> WHEEL_SHIFT).saturating_add(OPEN_AHEAD);
        let bucket = match self.fill(reach) {
            Ok(rec) => return Some(rec.order()),
            Err(bucket) => bucket?,
        };
        if let Some(head) = self.wheel.min_within(bucket, &self.slots, SCAN_MAX) {
            return Some(head);
        }
        Some(((bucket.start - OPEN_AHEAD) << WHEEL_SHIFT, u32::MAX))
    }

    /// The instant of a [`HeadId`]'s ticks.
    pub(crate) fn instant_of(&self, id: HeadId) -> Instant {
        self.instant(id.0)
    }

    /// Adds `value` due at `deadline`.
    ///
    /// # Panics
    ///
    /// Panics if `u32::MAX - 1` slots are in use at once (like a `Vec`
    /// overflowing its capacity, this needs far more memory than exists).
    /// Returns the new entry's key and its `(ticks, seq)`.
    pub(crate) fn insert(&mut self, value: T, deadline: Instant) -> (SlotKey, HeadId) {
        let ticks = self.ticks(deadline);
        self.insert_ticks(value, ticks)
    }

    /// [`insert`](Self::insert) of `value` due `delay` after `now` (a huge
    /// delay saturates, as [`deadline_after`] does).
    pub(crate) fn insert_after(
        &mut self,
        value: T,
        now: Instant,
        delay: Duration,
    ) -> (SlotKey, HeadId) {
        let ticks = self.ticks_after(now, delay);
        self.insert_ticks(value, ticks)
    }

    #[inline]
    fn insert_ticks(&mut self, value: T, ticks: u64) -> (SlotKey, HeadId) {
        let index = self.alloc_slot();
        let seq = self.bump_seq();
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let key = SlotKey {
            index,
            generation: slot.generation,
        };
        slot.put(value, ticks, seq);
        self.place(index);
        self.len += 1;
        self.check();
        (key, (ticks, seq))
    }

    /// Removes and returns the head if its deadline is `<= now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        let now = self.ticks(now);
        let head = self.due_head(now)?;
        Some(self.take_head(head))
    }

    /// Like [`pop_due`](Self::pop_due), with `clock` a reading of the
    /// monotonic clock taken now: it is called only if the head is not due
    /// by the latest reading seen before. Draining a backlog of due entries
    /// then reads the clock once, not once per entry.
    ///
    /// Every reading must come from the one clock the queue is used with:
    /// a reading from a paused Tokio clock that was advanced would make
    /// entries look due to a caller on the real clock, and the other way
    /// round.
    pub(crate) fn pop_due_by(&mut self, clock: impl FnOnce() -> Instant) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let head = match self.due_head(self.seen) {
            Some(head) => head,
            None => {
                self.seen = self.seen.max(self.ticks(clock()));
                self.due_head(self.seen)?
            }
        };
        Some(self.take_head(head))
    }

    /// The head if it is due at `now` (in ticks). Only buckets that may hold
    /// due entries are opened: the wheel does not run ahead of the clock for
    /// a pop.
    #[inline]
    fn due_head(&mut self, now: u64) -> Option<Rec> {
        self.fill(now >> WHEEL_SHIFT)
            .ok()
            .filter(|head| head.ticks <= now)
    }

    /// Removes `head`, the near side's head, and returns its value.
    #[inline]
    fn take_head(&mut self, head: Rec) -> T {
        // `near_head` skipped the tombstones: a head from the run is
        // `run[cursor]` (whatever its slot says, see `locate_run`).
        if self
            .run
            .get(self.cursor)
            .is_some_and(|r| r.slot == head.slot)
        {
            self.warm_run();
            self.cursor += 1;
            self.run_live -= 1;
        } else {
            self.unplace(head.slot);
        }
        let value = self.free_slot(head.slot);
        self.check();
        value
    }

    /// Once the cursor passes what was read ahead, reads the slots of the
    /// next [`WARM`] entries of the run at once. The run is in deadline
    /// order, which visits the slot table at random: without this every pop
    /// of a large queue waits for its own cache misses one after another;
    /// with it, the misses of a batch are in flight together. A slot may
    /// straddle two cache lines, so both of its ends are read: its home
    /// comes first and its ticks last (see `slot.rs`).
    #[inline]
    fn warm_run(&mut self) {
        if self.cursor < self.warmed {
            return;
        }
        self.warmed = self.cursor + WARM;
        let mut touched = 0u32;
        for rec in self.run[self.cursor..].iter().take(WARM) {
            if let Some(slot) = self.slots.get(rec.slot as usize) {
                touched = touched.wrapping_add(slot.home() ^ slot.ticks as u32);
            }
        }
        std::hint::black_box(touched);
    }

    /// Removes the entry; returns its value and its `(ticks, seq)`.
    pub(crate) fn remove(&mut self, key: SlotKey) -> Option<(T, HeadId)> {
        let index = self.occupied_index(key)?;
        let order = self.unplace(index);
        let value = self.free_slot(index);
        self.check();
        Some((value, order))
    }

    /// Moves the entry to `deadline`, ordering it behind entries that already
    /// have that deadline. Returns its `(ticks, seq)` before and after, or
    /// `None` for a stale key.
    pub(crate) fn reset(&mut self, key: SlotKey, deadline: Instant) -> Option<(HeadId, HeadId)> {
        let index = self.occupied_index(key)?;
        let old = self.unplace(index);
        let ticks = self.ticks(deadline);
        let seq = self.bump_seq();
        self.slots[index as usize].set_order(ticks, seq);
        self.place(index);
        self.check();
        Some((old, (ticks, seq)))
    }

    pub(crate) fn deadline(&self, key: SlotKey) -> Option<Instant> {
        let index = self.occupied_index(key)?;
        Some(self.instant(self.slots[index as usize].ticks))
    }

    /// Reads the slot at `index`, if there is one: see `DelayQueue::warm`.
    #[inline]
    pub(crate) fn touch(&self, index: u32) -> u32 {
        self.slots
            .get(index as usize)
            .map_or(0, |slot| slot.generation)
    }

    pub(crate) fn contains(&self, key: SlotKey) -> bool {
        self.occupied_index(key).is_some()
    }

    /// Removes every entry for which `pred(value, deadline)` holds, in no
    /// particular order; the others keep their keys. O(n).
    pub(crate) fn remove_if(&mut self, mut pred: impl FnMut(&T, Instant) -> bool) -> Vec<T> {
        let mut hits = Vec::new();
        for index in 0..self.slots.len() as u32 {
            let slot = &self.slots[index as usize];
            if let Some(value) = slot.value() {
                if pred(value, self.instant(slot.ticks)) {
                    hits.push(index);
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

    /// Puts the entry of slot `index`, its `(ticks, seq)` set, on the side
    /// its deadline belongs to.
    #[inline]
    fn place(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        if wheel_tick(slot.ticks) < self.wheel.elapsed() {
            let (ticks, seq) = slot.order();
            slot.set_place(LATE, self.late.len() as u32);
            self.late.push(Rec {
                ticks,
                seq,
                slot: index,
            });
        } else {
            self.wheel.link(&mut self.slots, index);
        }
    }

    /// Takes an occupied slot's entry out of its home; returns its
    /// `(ticks, seq)`. The caller frees the slot or places it again.
    #[inline]
    fn unplace(&mut self, index: u32) -> HeadId {
        let slot = &self.slots[index as usize];
        let (home, pos, order) = (slot.home(), slot.pos, slot.order());
        match home {
            HEAP => {
                self.heap.remove_at(&mut self.slots, pos as usize);
            }
            LATE if self.late.get(pos as usize).is_some_and(|r| r.slot == index) => {
                self.late.swap_remove(pos as usize);
                if let Some(moved) = self.late.get(pos as usize) {
                    self.slots[moved.slot as usize].pos = pos;
                }
            }
            RUN | LATE => {
                let at = self.locate_run(index);
                self.run[at].slot = NIL;
                self.run_live -= 1;
            }
            bucket => self.wheel.unlink(&mut self.slots, bucket, index),
        }
        order
    }

    /// Where the live entry of slot `index`, whose home is `RUN` or `LATE`
    /// but not the `late` list, is in the run: at the position its slot
    /// records if that still holds it, else found by its `(ticks, seq)`
    /// (the run is sorted by them, tombstones included). O(log m).
    fn locate_run(&self, index: u32) -> usize {
        let slot = &self.slots[index as usize];
        let pos = slot.pos as usize;
        if pos >= self.cursor && self.run.get(pos).is_some_and(|r| r.slot == index) {
            return pos;
        }
        let order = slot.order();
        let at = self.cursor + self.run[self.cursor..].partition_point(|r| r.order() < order);
        debug_assert_eq!(
            self.run.get(at).map(|r| r.slot),
            Some(index),
            "entry neither in `late` nor in the run"
        );
        at
    }

    /// Opens the wheel's earliest bucket: a level 0 bucket, sorted, becomes
    /// the run and `elapsed` moves past it; a higher one cascades.
    fn open(&mut self, bucket: Bucket) {
        if bucket.level > 0 {
            self.advance(bucket.start);
            return;
        }
        // Only opened when the near side is empty, so the run is used up:
        // the bucket becomes the run, and the old run's allocation is dropped.
        debug_assert!(self.run_live == 0 && self.late.is_empty());
        let ids = self.wheel.take(bucket, &self.slots);
        let mut opened: Vec<Rec> = ids
            .iter()
            .map(|&index| {
                let (ticks, seq) = self.slots[index as usize].order();
                Rec {
                    ticks,
                    seq,
                    slot: index,
                }
            })
            .collect();
        sort_by_key(&mut opened);
        // Each slot was just read for its order: pointing it at the run
        // costs no further cache miss, and saves `locate_run` a search.
        for (pos, rec) in opened.iter().enumerate() {
            self.slots[rec.slot as usize].set_place(RUN, pos as u32);
        }
        self.set_run(opened);
        self.advance(bucket.start + 1);
    }

    /// Moves the wheel to `to` and cascades every bucket that then holds it.
    fn advance(&mut self, to: u64) {
        self.wheel.advance(to);
        while let Some(bucket) = self.wheel.to_cascade() {
            for index in self.wheel.take(bucket, &self.slots) {
                self.wheel.link(&mut self.slots, index);
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

    /// Gives the live entries the sequence numbers `0..len` in the order of
    /// their old ones. Relative order is unchanged, so the run and the heap
    /// stay sorted and FIFO among equal deadlines is kept. O(n log n) on one
    /// `u64` per entry, under the lock: 16-41 ms at 1M entries in a release
    /// build here, where sorting by deadline and seq took 92-115. Once per
    /// 2^32 inserts and resets.
    #[cold]
    fn renumber(&mut self) {
        // The old seq above the slot index: sorting these sorts by seq.
        let mut order: Vec<u64> = (0..self.slots.len() as u32)
            .filter(|&i| self.slots[i as usize].occupied())
            .map(|i| (u64::from(self.slots[i as usize].order().1) << 32) | u64::from(i))
            .collect();
        order.sort_unstable();
        // Tombstones have no slot to renumber them from: drop them, so that
        // the run stays sorted for `locate_run`.
        self.run.drain(..self.cursor);
        self.run.retain(|rec| rec.slot != NIL);
        self.cursor = 0;
        self.warmed = 0;
        for (rank, &key) in order.iter().enumerate() {
            let slot = &mut self.slots[key as u32 as usize];
            slot.set_order(slot.ticks, rank as u32);
        }
        let slots = &self.slots;
        let mut fix = |rec: &mut Rec| {
            if rec.slot != NIL {
                rec.seq = slots[rec.slot as usize].order().1;
            }
        };
        self.heap.for_each_mut(&mut fix);
        self.late.iter_mut().for_each(&mut fix);
        self.run.iter_mut().for_each(&mut fix);
        self.next_seq = order.len() as u32;
    }

    fn alloc_slot(&mut self) -> u32 {
        if self.free_head != NIL {
            let index = self.free_head;
            self.free_head = self.slots[index as usize].pos;
            return index;
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("DelayQueue holds more than u32::MAX - 1 entries");
        self.slots.push(Slot::FREE);
        index
    }

    /// Frees the slot of an entry already taken out of its home.
    fn free_slot(&mut self, index: u32) -> T {
        self.len -= 1;
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let value = slot.take();
        // A generation about to wrap would let an old key match again: retire
        // the slot instead of recycling it.
        if slot.generation != 0 {
            slot.pos = self.free_head;
            self.free_head = index;
        }
        // An occupied slot always holds a value.
        value.expect("queue slot occupied without a value")
    }

    #[inline]
    fn check(&self) {
        #[cfg(debug_assertions)]
        if self.slots.len() <= DEBUG_CHECK_MAX {
            self.assert_invariants();
        }
    }

    /// Checks the split (near entries before `elapsed`, wheel entries from
    /// it), the three homes, the slot table and the free list. O(n).
    #[cfg(any(test, debug_assertions))]
    fn assert_invariants(&self) {
        let elapsed = self.wheel.elapsed();
        self.heap.assert_invariants(&self.slots);
        let in_wheel = self.wheel.assert_invariants(&self.slots);
        let mut live = 0;
        let mut last = None;
        for (pos, rec) in self.run.iter().enumerate().skip(self.cursor) {
            // Tombstones included: `locate_run` searches all of it.
            assert!(last < Some(rec.order()), "run out of order");
            last = Some(rec.order());
            if rec.slot == NIL {
                continue;
            }
            live += 1;
            let slot = &self.slots[rec.slot as usize];
            assert!(slot.occupied(), "run entry in a free slot");
            assert!(
                matches!(slot.home(), RUN | LATE),
                "run entry whose slot names another home"
            );
            assert_eq!(self.locate_run(rec.slot), pos, "run entry not found");
            assert_eq!(
                slot.order(),
                rec.order(),
                "run record disagrees with its slot"
            );
            assert!(
                wheel_tick(rec.ticks) < elapsed,
                "run entry at or after elapsed"
            );
        }
        assert_eq!(live, self.run_live, "run_live is off");
        for (pos, rec) in self.late.iter().enumerate() {
            let slot = &self.slots[rec.slot as usize];
            assert_eq!(
                (slot.home(), slot.pos as usize),
                (LATE, pos),
                "slot does not point back"
            );
            assert_eq!(
                slot.order(),
                rec.order(),
                "late record disagrees with its slot"
            );
            assert!(
                wheel_tick(rec.ticks) < elapsed,
                "late entry at or after elapsed"
            );
        }
        let mut occupied = 0;
        for (index, slot) in self.slots.iter().enumerate() {
            if !slot.occupied() {
                continue;
            }
            occupied += 1;
            assert!(slot.value().is_some(), "occupied slot without a value");
            let (ticks, seq) = slot.order();
            assert!(seq < self.next_seq, "seq from the future");
            match slot.home() {
                HEAP => {
                    let rec = self.heap.get(slot.pos);
                    assert_eq!(rec.slot as usize, index, "record of another slot");
                    assert_eq!(
                        rec.order(),
                        (ticks, seq),
                        "heap record disagrees with its slot"
                    );
                    assert!(
                        wheel_tick(ticks) < elapsed,
                        "heap entry at or after elapsed"
                    );
                }
                // In `late`, or in the run (where `locate_run` asserts it is).
                LATE if self
                    .late
                    .get(slot.pos as usize)
                    .is_some_and(|r| r.slot as usize == index) => {}
                RUN | LATE => {
                    self.locate_run(index as u32);
                }
                home => assert!(home < HOMES, "occupied slot without a home"),
            }
        }
        assert_eq!(occupied, self.len, "occupied slots != len");
        assert_eq!(
            in_wheel + live + self.heap.len() + self.late.len(),
            self.len,
            "entries lost or doubled"
        );
        let mut free = 0;
        let mut at = self.free_head;
        while at != NIL {
            let slot = &self.slots[at as usize];
            assert!(!slot.occupied(), "free list holds an occupied slot");
            assert!(slot.value().is_none(), "free slot with a value");
            free += 1;
            assert!(free <= self.slots.len(), "free list has a cycle");
            at = slot.pos;
        }
    }
}

/// Sorts records by `(ticks, seq)`. A large batch already in `seq` order
/// (the common case: entries filed in the order they were inserted) is
/// radix-sorted on its ticks, which is stable and so keeps that order among
/// equal ticks; any other batch is compared as one `u128` per record.
fn sort_by_key(recs: &mut Vec<Rec>) {
    if recs.len() >= RADIX_MIN && recs.is_sorted_by_key(|r| r.seq) {
        radix_sort_ticks(recs);
    } else {
        recs.sort_unstable_by_key(|r| (u128::from(r.ticks) << 32) | u128::from(r.seq));
    }
}

/// Smaller batches are sorted by comparison: the radix sort's fixed cost
/// (2048 counters per pass) would dominate them. Chosen, not tuned.
const RADIX_MIN: usize = 256;
/// Bits of the key sorted per radix pass: one pass's 2048 counters fit in
/// L1. Measured against 8 bits (four passes for 200 ms of deadlines instead
/// of three): past-due expiry 82-86 ms against 76-78 ms per 1M entries.
const RADIX_BITS: u32 = 11;

/// A stable least-significant-digit radix sort of `recs` by ticks. Only the
/// bits in which the batch's ticks differ are sorted on: a tick's bucket (a
/// 2^20 ns span) takes two passes, 200 ms of deadlines three.
fn radix_sort_ticks(recs: &mut Vec<Rec>) {
    let Some((min, max)) = recs.iter().fold(None, |span, r| match span {
        None => Some((r.ticks, r.ticks)),
        Some((lo, hi)) => Some((r.ticks.min(lo), r.ticks.max(hi))),
    }) else {
        return;
    };
    let bits = u64::BITS - (max - min).leading_zeros();
    let passes = bits.div_ceil(RADIX_BITS) as usize;
    let mask = (1u64 << RADIX_BITS) - 1;
    let digit = |rec: &Rec, pass: usize| {
        (((rec.ticks - min) >> (pass as u32 * RADIX_BITS)) & mask) as usize
    };
    // Every pass's counts from one read of the batch. `u32` counts (a batch
    // holds fewer than 2^32 entries: slot indices are `u32`) keep three
    // passes' tables within L1: with `usize` ones the counting pass alone
    // was half of the sort.
    let mut counts = vec![[0u32; 1 << RADIX_BITS]; passes];
    for rec in recs.iter() {
        for (pass, count) in counts.iter_mut().enumerate() {
            count[digit(rec, pass)] += 1;
        }
    }
    let mut scratch = recs.clone();
    for (pass, count) in counts.iter_mut().enumerate() {
        let mut at = 0;
        for c in count.iter_mut() {
            (*c, at) = (at, at + *c);
        }
        for rec in recs.iter() {
            let d = digit(rec, pass);
            scratch[count[d] as usize] = *rec;
            count[d] += 1;
        }
        std::mem::swap(recs, &mut scratch);
    }
}

/// Merges two runs sorted by `(ticks, seq)` into one.
fn merge(a: impl Iterator<Item = Rec>, b: Vec<Rec>) -> Vec<Rec> {
    let mut out = Vec::with_capacity(b.len() + a.size_hint().0);
    let mut a = a.peekable();
    let mut b = b.into_iter().peekable();
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.order() < y.order(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
}

/// Beyond this many slots the O(n) check after every mutation would make
/// debug-build tests quadratic; small queues exercise the same code.
#[cfg(debug_assertions)]
const DEBUG_CHECK_MAX: usize = 1024;

#[cfg(test)]
mod tests;
