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
//! - **Lists**: a bucket is a doubly-linked list threaded through the queue's
//!   slot table (`next`/`prev` of [`Slot`]), headed from `heads`, with one bit
//!   per bucket in `occupied`. Linking and unlinking are O(1), and the bucket
//!   of an entry is recomputed from its deadline and `elapsed`, so an entry
//!   spends no memory on where it is.
//! - **No ticking**: nothing here runs on a timer. `elapsed` moves only when
//!   the queue opens the earliest bucket, so an idle wheel costs nothing and
//!   a far deadline costs a handful of cascades, not one step per tick.
//!
//! Order inside a bucket is not kept: the queue sorts a level 0 bucket when it
//! moves it to the near side (`timers.rs`), which is what keeps the queue's
//! order exact.

use super::timers::{NIL, Slot};

/// Levels of buckets; 8 × 6 bits cover every wheel tick (< 2^44).
const LEVELS: usize = 8;
const BITS: u32 = 6;
const BUCKETS: usize = 1 << BITS;

/// A bucket with entries: where it is and the first tick it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) level: usize,
    index: usize,
    pub(crate) start: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Wheel {
    elapsed: u64,
    heads: [[u32; BUCKETS]; LEVELS],
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

impl Wheel {
    pub(crate) fn new(elapsed: u64) -> Self {
        Wheel {
            elapsed,
            heads: [[NIL; BUCKETS]; LEVELS],
            occupied: [0; LEVELS],
        }
    }

    /// Every entry in the wheel is due at this tick or later.
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Links slot `index`, due at wheel tick `tick >= elapsed`, into its
    /// bucket. O(1).
    #[inline]
    pub(crate) fn link(&mut self, slots: &mut [Slot], index: u32, tick: u64) {
        debug_assert!(tick >= self.elapsed, "linking an entry before elapsed");
        let level = level_for(self.elapsed, tick);
        let bucket = index_for(tick, level);
        let head = self.heads[level][bucket];
        let slot = &mut slots[index as usize];
        slot.prev = NIL;
        slot.next = head;
        if head != NIL {
            slots[head as usize].prev = index;
        }
        self.heads[level][bucket] = index;
        self.occupied[level] |= 1 << bucket;
    }

    /// Unlinks slot `index`, due at wheel tick `tick`, from its bucket. O(1).
    #[inline]
    pub(crate) fn unlink(&mut self, slots: &mut [Slot], index: u32, tick: u64) {
        let Slot { next, prev, .. } = slots[index as usize];
        if prev == NIL {
            let level = level_for(self.elapsed, tick);
            let bucket = index_for(tick, level);
            debug_assert_eq!(self.heads[level][bucket], index, "not its bucket");
            self.heads[level][bucket] = next;
            if next == NIL {
                self.occupied[level] &= !(1 << bucket);
            }
        } else {
            slots[prev as usize].next = next;
        }
        if next != NIL {
            slots[next as usize].prev = prev;
        }
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

    /// The first entry of `bucket`'s list; the rest follow through `next`.
    pub(crate) fn first(&self, bucket: Bucket) -> u32 {
        self.heads[bucket.level][bucket.index]
    }

    /// Unlinks every entry of `bucket` at once and returns the first of them;
    /// the rest follow through `next` (their `prev` links are stale). O(1).
    pub(crate) fn take(&mut self, bucket: Bucket) -> u32 {
        let first = std::mem::replace(&mut self.heads[bucket.level][bucket.index], NIL);
        self.occupied[bucket.level] &= !(1 << bucket.index);
        first
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

    /// Checks every bucket list: links, occupancy bits, and that each entry
    /// sits where the placement rule puts it. Returns the number of entries.
    /// O(n).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn assert_invariants(
        &self,
        slots: &[Slot],
        tick_of: impl Fn(&Slot) -> u64,
    ) -> usize {
        let mut count = 0;
        for level in 0..LEVELS {
            for index in 0..BUCKETS {
                let head = self.heads[level][index];
                let bit = self.occupied[level] & (1 << index) != 0;
                assert_eq!(bit, head != NIL, "occupancy bit wrong at {level}/{index}");
                let mut prev = NIL;
                let mut at = head;
                while at != NIL {
                    let slot = &slots[at as usize];
                    assert!(slot.generation & 1 == 1, "free slot in a bucket");
                    assert_eq!(slot.prev, prev, "broken prev link");
                    let tick = tick_of(slot);
                    assert!(tick >= self.elapsed, "entry before elapsed in the wheel");
                    assert_eq!(
                        level_for(self.elapsed, tick),
                        level,
                        "entry on the wrong level"
                    );
                    assert_eq!(index_for(tick, level), index, "entry in the wrong bucket");
                    count += 1;
                    assert!(count <= slots.len(), "bucket list has a cycle");
                    prev = at;
                    at = slot.next;
                }
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
        let mut slots = vec![Slot::FREE; 3];
        for (i, tick) in [(0, 4096 * 3 + 5), (1, 64 * 5 + 1), (2, 71)] {
            slots[i].generation = 1;
            wheel.link(&mut slots, i as u32, tick);
        }
        let first = wheel.earliest().unwrap();
        assert_eq!((first.level, first.start), (0, 71));
        assert_eq!(wheel.take(first), 2);
        let next = wheel.earliest().unwrap();
        assert_eq!((next.level, next.start), (1, 64 * 5));
        wheel.take(next);
        let last = wheel.earliest().unwrap();
        assert_eq!((last.level, last.start), (2, 4096 * 3));
    }
}
