//! The hierarchical timing wheel that holds the far side of a
//! [`DelayQueue`](crate::DelayQueue): no locking, no async, no clock.
//!
//! # Design
//!
//! - **Tick**: 2^20 ns (about 1.05 ms). A deadline's *wheel tick* is its
//!   nanosecond ticks (see `timers.rs`) shifted right by 20, a number below
//!   2^44.
//! - **Levels**: 8 levels of 64 buckets. A bucket at level `L` spans 64^L
//!   ticks, so level 0 buckets hold one tick each and level 7 covers all 2^48.
//! - **Placement**: an entry due at wheel tick `t` sits at the level of the
//!   highest 6-bit group in which `t` differs from `elapsed` (level 0 if
//!   none), in the bucket numbered by `t`'s group at that level. Every entry
//!   has `t >= elapsed`, so within a level the occupied buckets all come after
//!   `elapsed`'s own, and every bucket of a lower level comes before every
//!   bucket of a higher one: the earliest bucket is the lowest set bit of the
//!   lowest non-empty level.
//! - **Cascade rule**: `elapsed` only moves forward, and only to a tick no
//!   later than any entry. Whenever it enters a bucket of level 1 or more,
//!   that bucket's entries are placed again (each lands on a lower level),
//!   highest level first; then every entry is where the placement rule puts
//!   it, which [`Wheel::assert_invariants`] checks. An entry cascades at most
//!   seven times in its life.
//! - **Buckets**: a bucket is a `Vec` of 16-byte records, with one bit per
//!   bucket in `occupied`; each entry's slot records its bucket and index, so
//!   linking is a push and unlinking a `swap_remove`, both O(1). A `Vec`
//!   rather than a linked list because opening or cascading a bucket then
//!   reads it front to back instead of chasing one cache miss per entry, and
//!   linking touches no other entry.
//! - **No ticking**: nothing here runs on a timer. `elapsed` moves only when
//!   the queue opens the earliest bucket, so an idle wheel costs nothing and
//!   a far deadline costs a handful of cascades, not one step per tick.
//!
//! Order inside a bucket is not kept: the queue sorts a level 0 bucket when it
//! moves it to the near side (`timers.rs`), which is what keeps the queue's
//! order exact.

use super::heap::Rec;
use super::slot::Slot;

/// Levels of buckets; 8 × 6 bits cover every wheel tick (< 2^44).
const LEVELS: usize = 8;
const BITS: u32 = 6;
const BUCKETS: usize = 1 << BITS;

/// How many buckets there are: a slot's `home` below this is a bucket.
pub(crate) const HOMES: u32 = (LEVELS * BUCKETS) as u32;

/// Nanosecond ticks per wheel tick: 2^20 ns, about 1.05 ms.
pub(crate) const WHEEL_SHIFT: u32 = 20;

/// A bucket with entries: where it is and the first tick it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) level: usize,
    index: usize,
    pub(crate) start: u64,
}

impl Bucket {
    fn home(self) -> usize {
        self.level * BUCKETS + self.index
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Wheel {
    elapsed: u64,
    buckets: Vec<Vec<Rec>>,
    occupied: [u64; LEVELS],
}

/// The level at which an entry due at `tick` sits while the wheel is at
/// `elapsed`.
#[inline]
fn level_for(elapsed: u64, tick: u64) -> usize {
    let masked = (elapsed ^ tick) | (BUCKETS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    (significant / BITS) as usize
}

#[inline]
fn index_for(tick: u64, level: usize) -> usize {
    ((tick >> (BITS as usize * level)) & (BUCKETS as u64 - 1)) as usize
}

#[inline]
pub(crate) fn wheel_tick(rec: &Rec) -> u64 {
    rec.ticks >> WHEEL_SHIFT
}

impl Wheel {
    pub(crate) fn new(elapsed: u64) -> Self {
        Wheel {
            elapsed,
            buckets: (0..HOMES).map(|_| Vec::new()).collect(),
            occupied: [0; LEVELS],
        }
    }

    /// Every entry in the wheel is due at this tick or later.
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Adds `rec`, due at a wheel tick `>= elapsed`, to its bucket and
    /// records where in its slot. O(1).
    #[inline]
    pub(crate) fn link<T>(&mut self, slots: &mut [Slot<T>], rec: Rec) {
        let tick = wheel_tick(&rec);
        debug_assert!(tick >= self.elapsed, "linking an entry before elapsed");
        let level = level_for(self.elapsed, tick);
        let index = index_for(tick, level);
        let home = level * BUCKETS + index;
        let bucket = &mut self.buckets[home];
        slots[rec.slot as usize].set_place(home as u32, bucket.len() as u32);
        bucket.push(rec);
        self.occupied[level] |= 1 << index;
    }

    /// The record at `home`/`pos`.
    #[inline]
    pub(crate) fn get(&self, home: u32, pos: u32) -> &Rec {
        &self.buckets[home as usize][pos as usize]
    }

    /// Removes the record at `home`/`pos`; the bucket's last record takes
    /// its place. O(1).
    pub(crate) fn unlink<T>(&mut self, slots: &mut [Slot<T>], home: u32, pos: u32) -> Rec {
        let bucket = &mut self.buckets[home as usize];
        let rec = bucket.swap_remove(pos as usize);
        if let Some(moved) = bucket.get(pos as usize) {
            slots[moved.slot as usize].pos = pos;
        }
        if bucket.is_empty() {
            let (level, index) = (home as usize / BUCKETS, home as usize % BUCKETS);
            self.occupied[level] &= !(1 << index);
        }
        rec
    }

    /// The earliest bucket with entries. O(levels).
    pub(crate) fn earliest(&self) -> Option<Bucket> {
        let level = self.occupied.iter().position(|&bits| bits != 0)?;
        let index = self.occupied[level].trailing_zeros() as usize;
        Some(self.bucket(level, index))
    }

    fn bucket(&self, level: usize, index: usize) -> Bucket {
        let shift = BITS as usize * level;
        let span = shift + BITS as usize;
        let above = if span >= 64 {
            0
        } else {
            self.elapsed & !((1u64 << span) - 1)
        };
        Bucket {
            level,
            index,
            start: above | ((index as u64) << shift),
        }
    }

    /// The records of `bucket`, in no particular order.
    pub(crate) fn records(&self, bucket: Bucket) -> &[Rec] {
        &self.buckets[bucket.home()]
    }

    /// Empties `bucket` and returns its records; their slots still name it,
    /// so the caller places every one of them again. O(1).
    pub(crate) fn take(&mut self, bucket: Bucket) -> Vec<Rec> {
        self.occupied[bucket.level] &= !(1 << bucket.index);
        std::mem::take(&mut self.buckets[bucket.home()])
    }

    /// Moves `elapsed` forward to `to`, which must not pass any entry's
    /// tick. The buckets that then hold `elapsed` must cascade next (see
    /// [`to_cascade`](Wheel::to_cascade)).
    pub(crate) fn advance(&mut self, to: u64) {
        debug_assert!(to >= self.elapsed, "the wheel only moves forward");
        self.elapsed = to;
    }

    /// A bucket of level 1 or more that holds `elapsed`, highest first: its
    /// entries must cascade (be taken and linked again) before anything else
    /// touches the wheel.
    pub(crate) fn to_cascade(&self) -> Option<Bucket> {
        (1..LEVELS).rev().find_map(|level| {
            let index = index_for(self.elapsed, level);
            (self.occupied[level] & (1 << index) != 0).then(|| self.bucket(level, index))
        })
    }

    /// Calls `f` on every record, in no particular order.
    pub(crate) fn for_each_mut(&mut self, f: impl FnMut(&mut Rec)) {
        self.buckets.iter_mut().flatten().for_each(f);
    }

    /// Checks every bucket: occupancy bits, back-pointers, and that each
    /// entry sits where the placement rule puts it. Returns the number of
    /// entries. O(n).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn assert_invariants<T>(&self, slots: &[Slot<T>]) -> usize {
        let mut count = 0;
        for level in 0..LEVELS {
            for index in 0..BUCKETS {
                let home = level * BUCKETS + index;
                let bucket = &self.buckets[home];
                let bit = self.occupied[level] & (1 << index) != 0;
                assert_eq!(
                    bit,
                    !bucket.is_empty(),
                    "occupancy bit wrong at {level}/{index}"
                );
                for (pos, rec) in bucket.iter().enumerate() {
                    let slot = &slots[rec.slot as usize];
                    assert!(slot.occupied(), "free slot in a bucket");
                    assert_eq!(
                        (slot.home(), slot.pos),
                        (home as u32, pos as u32),
                        "slot does not point back"
                    );
                    let tick = wheel_tick(rec);
                    assert!(tick >= self.elapsed, "entry before elapsed in the wheel");
                    assert_eq!(
                        level_for(self.elapsed, tick),
                        level,
                        "entry on the wrong level"
                    );
                    assert_eq!(index_for(tick, level), index, "entry in the wrong bucket");
                }
                count += bucket.len();
            }
        }
        assert!(
            self.to_cascade().is_none(),
            "a bucket holding elapsed was not cascaded"
        );
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_highest_differing_group() {
        assert_eq!(level_for(0, 0), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, 64), 1);
        assert_eq!(level_for(64, 127), 0);
        assert_eq!(level_for(0, 4095), 1);
        assert_eq!(level_for(0, 4096), 2);
        assert_eq!(level_for(0, (1 << 44) - 1), 7);
    }

    #[test]
    fn bucket_start_is_the_first_tick_it_spans() {
        let mut wheel = Wheel::new(70);
        let mut slots = vec![Slot::<()>::FREE; 3];
        for (i, tick) in [(0, 4096 * 3 + 5), (1, 64 * 5 + 1), (2, 71)] {
            slots[i].generation = 1;
            slots[i].put(());
            let rec = Rec {
                ticks: tick << WHEEL_SHIFT,
                seq: i as u32,
                slot: i as u32,
            };
            wheel.link(&mut slots, rec);
        }
        let first = wheel.earliest().unwrap();
        assert_eq!((first.level, first.start), (0, 71));
        assert_eq!(wheel.take(first)[0].slot, 2);
        let next = wheel.earliest().unwrap();
        assert_eq!((next.level, next.start), (1, 64 * 5));
        wheel.take(next);
        let last = wheel.earliest().unwrap();
        assert_eq!((last.level, last.start), (2, 4096 * 3));
    }
}
