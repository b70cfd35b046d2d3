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
//! - **Buckets**: a bucket is a `Vec` of slot indices, with one bit per
//!   bucket in `occupied` and a count of its live entries; each entry's slot
//!   records its deadline, its bucket and its index there. Linking is a
//!   push, O(1). A `Vec` rather than a linked list because opening or
//!   cascading a bucket then reads it front to back instead of chasing one
//!   cache miss per entry, and linking touches no other entry.
//! - **Lazy removal**: unlinking an entry touches only its slot (which the
//!   caller reads anyway, to check the key) and the bucket's live count, not
//!   the bucket: on a queue much larger than the cache that saves a cache
//!   miss per removal, and the lock is held that much less. The index left
//!   behind is dead: its slot no longer points back to it (it was freed, or
//!   moved and maybe reused), and whoever reads the bucket skips it. The
//!   bucket's last index, whose end of the bucket is still in cache when an
//!   entry is removed soon after it was inserted, is dropped at once, and a
//!   bucket whose entries all left is emptied at once. A bucket in which dead
//!   indices outnumber live ones is compacted a few indices per later
//!   removal ([`COMPACT_STEP`]), never all at once, so no single removal
//!   stalls the queue; the dead indices of a bucket are at most about twice
//!   its live ones.
//! - **No ticking**: nothing here runs on a timer. `elapsed` moves only when
//!   the queue opens the earliest bucket, so an idle wheel costs nothing and
//!   a far deadline costs a handful of cascades, not one step per tick.
//!
//! Order inside a bucket is not kept: the queue sorts a level 0 bucket when it
//! moves it to the near side (`timers.rs`), which is what keeps the queue's
//! order exact.

use super::slot::{Slot, UNPLACED};
use super::timers::HeadId;
use std::fmt;

/// Levels of buckets; 8 × 6 bits cover every wheel tick (< 2^44).
const LEVELS: usize = 8;
const BITS: u32 = 6;
const BUCKETS: usize = 1 << BITS;

/// How many buckets there are: a slot's `home` below this is a bucket.
pub(crate) const HOMES: u32 = (LEVELS * BUCKETS) as u32;

/// Nanosecond ticks per wheel tick: 2^20 ns, about 1.05 ms.
pub(crate) const WHEEL_SHIFT: u32 = 20;

/// A bucket starts compacting once it holds more dead indices than live
/// ones, and at least this many.
const COMPACT_MIN: usize = 16;

/// Indices a compacting bucket reads per removal from it. Compaction is
/// begun at about twice as many indices as live entries and each removal
/// adds one dead index, so at 8 per removal it ends well before the dead
/// ones could double again; a removal then reads at most 8 more slots,
/// independent ones whose cache misses overlap.
pub(crate) const COMPACT_STEP: usize = 8;

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

/// The slot indices of one bucket, live and dead.
#[derive(Debug, Clone, Default)]
struct Members {
    ids: Vec<u32>,
    /// Indices whose slot points back to them.
    live: u32,
    /// While compacting: `ids[..write]` is compacted, `ids[write..read]`
    /// is garbage, `ids[read..]` is still to be read.
    compacting: Option<(u32, u32)>,
}

#[derive(Clone)]
pub(crate) struct Wheel {
    elapsed: u64,
    buckets: Box<[Members]>,
    occupied: [u64; LEVELS],
}

impl fmt::Debug for Wheel {
    /// Only the buckets that hold indices: the model check keys its states
    /// by this text, and 512 empty buckets would dominate it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held: Vec<_> = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, members)| !members.ids.is_empty())
            .collect();
        f.debug_struct("Wheel")
            .field("elapsed", &self.elapsed)
            .field("buckets", &held)
            .finish()
    }
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

/// The wheel tick of a deadline in nanosecond ticks.
#[inline]
pub(crate) fn wheel_tick(ticks: u64) -> u64 {
    ticks >> WHEEL_SHIFT
}

impl Wheel {
    pub(crate) fn new(elapsed: u64) -> Self {
        Wheel {
            elapsed,
            buckets: (0..HOMES).map(|_| Members::default()).collect(),
            occupied: [0; LEVELS],
        }
    }

    /// Every entry in the wheel is due at this tick or later.
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Adds the entry of slot `index`, due at a wheel tick `>= elapsed`, to
    /// its bucket and records where in its slot. O(1).
    #[inline]
    pub(crate) fn link<T>(&mut self, slots: &mut [Slot<T>], index: u32) {
        let slot = &mut slots[index as usize];
        let tick = wheel_tick(slot.ticks);
        debug_assert!(tick >= self.elapsed, "linking an entry before elapsed");
        let level = level_for(self.elapsed, tick);
        let bucket = index_for(tick, level);
        let home = level * BUCKETS + bucket;
        let members = &mut self.buckets[home];
        slot.set_place(home as u32, members.ids.len() as u32);
        members.ids.push(index);
        members.live += 1;
        self.occupied[level] |= 1 << bucket;
    }

    /// Takes the entry of slot `index` out of its bucket `home`, leaving its
    /// index there dead: the slot is marked unplaced, and the caller places
    /// it again or frees it. Touches the bucket itself only to empty it when
    /// its last live entry leaves, or to compact it a little. O(1).
    #[inline]
    pub(crate) fn unlink<T>(&mut self, slots: &mut [Slot<T>], home: u32, index: u32) {
        let pos = slots[index as usize].pos;
        slots[index as usize].set_place(UNPLACED, 0);
        let members = &mut self.buckets[home as usize];
        members.live -= 1;
        if members.live == 0 {
            members.ids.clear();
            members.compacting = None;
            let (level, bucket) = (home as usize / BUCKETS, home as usize % BUCKETS);
            self.occupied[level] &= !(1 << bucket);
            return;
        }
        // The last index (an entry removed soon after it was inserted, the
        // common case of a timeout cancelled once its request is done) is
        // dropped at once, from the bucket's end, which is still in cache:
        // no dead index, no compaction work later.
        if pos as usize + 1 == members.ids.len()
            && members.compacting.is_none_or(|(_, read)| pos >= read)
        {
            members.ids.pop();
            if let Some((write, read)) = members.compacting {
                if read as usize >= members.ids.len() {
                    members.ids.truncate(write as usize);
                    members.compacting = None;
                }
            }
            return;
        }
        let dead = members.ids.len() - members.live as usize;
        if members.compacting.is_none() && dead >= COMPACT_MIN && dead > members.live as usize {
            members.compacting = Some((0, 0));
        }
        if members.compacting.is_some() {
            compact(members, slots, home, COMPACT_STEP);
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

    /// The smallest `(ticks, seq)` in `bucket`, if it holds at most `max`
    /// live entries; `None` for a larger bucket. Reads at most about
    /// `3 * max` indices: dead ones are bounded by twice the live ones.
    pub(crate) fn min_within<T>(
        &self,
        bucket: Bucket,
        slots: &[Slot<T>],
        max: usize,
    ) -> Option<HeadId> {
        let home = bucket.home();
        let members = &self.buckets[home];
        if members.live as usize > max {
            return None;
        }
        live_ids(&members.ids, slots, home as u32)
            .map(|(_, index)| slots[index as usize].order())
            .min()
    }

    /// Empties `bucket` and returns the indices of its live entries, in no
    /// particular order; their slots still name it, so the caller places
    /// every one of them again. O(indices in the bucket).
    pub(crate) fn take<T>(&mut self, bucket: Bucket, slots: &[Slot<T>]) -> Vec<u32> {
        self.occupied[bucket.level] &= !(1 << bucket.index);
        let home = bucket.home();
        let members = std::mem::take(&mut self.buckets[home]);
        let mut ids = members.ids;
        if ids.len() != members.live as usize {
            let mut live = 0;
            for pos in 0..ids.len() {
                let index = ids[pos];
                if slots[index as usize].is_at(home as u32, pos as u32) {
                    ids[live] = index;
                    live += 1;
                }
            }
            ids.truncate(live);
        }
        debug_assert_eq!(ids.len(), members.live as usize, "live count is off");
        ids
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

    /// Checks every bucket: occupancy bits, live counts, back-pointers, the
    /// bound on dead indices, and that each live entry sits where the
    /// placement rule puts it. Returns the number of live entries. O(n).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn assert_invariants<T>(&self, slots: &[Slot<T>]) -> usize {
        let mut count = 0;
        for level in 0..LEVELS {
            for index in 0..BUCKETS {
                let home = level * BUCKETS + index;
                let members = &self.buckets[home];
                let bit = self.occupied[level] & (1 << index) != 0;
                assert_eq!(
                    bit,
                    members.live > 0,
                    "occupancy bit wrong at {level}/{index}"
                );
                let mut live = 0;
                for (pos, id) in live_ids(&members.ids, slots, home as u32) {
                    live += 1;
                    let slot = &slots[id as usize];
                    assert!(slot.occupied(), "free slot live in a bucket");
                    if let Some((write, read)) = members.compacting {
                        assert!(
                            pos < write as usize || pos >= read as usize,
                            "live index in a compacting bucket's garbage"
                        );
                    }
                    let tick = wheel_tick(slot.ticks);
                    assert!(tick >= self.elapsed, "entry before elapsed in the wheel");
                    assert_eq!(
                        level_for(self.elapsed, tick),
                        level,
                        "entry on the wrong level"
                    );
                    assert_eq!(index_for(tick, level), index, "entry in the wrong bucket");
                }
                assert_eq!(live, members.live as usize, "live count is off");
                let dead = members.ids.len() - live;
                assert!(
                    dead <= 2 * live + COMPACT_MIN + 2 * COMPACT_STEP,
                    "a bucket holds {dead} dead indices for {live} live ones"
                );
                count += live;
            }
        }
        assert!(
            self.to_cascade().is_none(),
            "a bucket holding elapsed was not cascaded"
        );
        count
    }
}

/// The live `(pos, index)` pairs of a bucket's indices: those whose slot
/// points back to them.
fn live_ids<'a, T>(
    ids: &'a [u32],
    slots: &'a [Slot<T>],
    home: u32,
) -> impl Iterator<Item = (usize, u32)> + 'a {
    ids.iter()
        .enumerate()
        .filter(move |&(pos, &index)| slots[index as usize].is_at(home, pos as u32))
        .map(|(pos, &index)| (pos, index))
}

/// Reads up to `budget` more indices of a compacting bucket, moving the
/// live ones down over the garbage; once every index was read, drops the
/// garbage.
fn compact<T>(members: &mut Members, slots: &mut [Slot<T>], home: u32, budget: usize) {
    let Some((mut write, mut read)) = members.compacting else {
        return;
    };
    let end = (read as usize + budget).min(members.ids.len()) as u32;
    while read < end {
        let index = members.ids[read as usize];
        let slot = &mut slots[index as usize];
        if slot.is_at(home, read) {
            members.ids[write as usize] = index;
            slot.pos = write;
            write += 1;
        }
        read += 1;
    }
    if read as usize == members.ids.len() {
        members.ids.truncate(write as usize);
        members.compacting = None;
    } else {
        members.compacting = Some((write, read));
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

    /// A slot table with one occupied slot per tick, unplaced.
    fn slots_at(ticks: &[u64]) -> Vec<Slot<()>> {
        ticks
            .iter()
            .enumerate()
            .map(|(i, &tick)| {
                let mut slot = Slot::FREE;
                slot.generation = 1;
                slot.put((), tick << WHEEL_SHIFT, i as u32);
                slot
            })
            .collect()
    }

    /// A wheel with entries 0 and 1 linked in one bucket (tick 5), a slot
    /// table of `n` such entries, and that bucket's home.
    fn two_linked(n: usize) -> (Wheel, Vec<Slot<()>>, u32) {
        let mut wheel = Wheel::new(0);
        let mut slots = slots_at(&vec![5; n]);
        wheel.link(&mut slots, 0);
        wheel.link(&mut slots, 1);
        let home = slots[0].home();
        (wheel, slots, home)
    }

    #[test]
    fn bucket_start_is_the_first_tick_it_spans() {
        let mut wheel = Wheel::new(70);
        let mut slots = slots_at(&[4096 * 3 + 5, 64 * 5 + 1, 71]);
        for i in 0..3 {
            wheel.link(&mut slots, i);
        }
        let first = wheel.earliest().unwrap();
        assert_eq!((first.level, first.start), (0, 71));
        assert_eq!(wheel.take(first, &slots), vec![2]);
        let next = wheel.earliest().unwrap();
        assert_eq!((next.level, next.start), (1, 64 * 5));
        wheel.take(next, &slots);
        let last = wheel.earliest().unwrap();
        assert_eq!((last.level, last.start), (2, 4096 * 3));
    }

    #[test]
    fn removals_leave_dead_indices_that_compaction_bounds() {
        let n = 1000;
        let mut wheel = Wheel::new(0);
        let mut slots = slots_at(&vec![5; n]);
        for i in 0..n as u32 {
            wheel.link(&mut slots, i);
        }
        let home = slots[0].home();
        // Removing all but the last ten, oldest first: the bucket compacts
        // itself along the way instead of keeping 990 dead indices.
        for i in 0..n as u32 - 10 {
            wheel.unlink(&mut slots, home, i);
            wheel.assert_invariants(&slots);
        }
        let members = &wheel.buckets[home as usize];
        assert_eq!(members.live, 10);
        assert!(members.ids.len() <= 10 + COMPACT_MIN + 2 * COMPACT_STEP);
        let bucket = wheel.earliest().unwrap();
        let mut left = wheel.take(bucket, &slots);
        left.sort_unstable();
        assert_eq!(left, (n as u32 - 10..n as u32).collect::<Vec<_>>());
        assert_eq!(wheel.earliest(), None);
    }

    #[test]
    fn a_reused_slot_is_not_mistaken_for_its_dead_index() {
        let (mut wheel, mut slots, home) = two_linked(2);
        // Slot 0 leaves and comes back to the same bucket: its old index is
        // dead, its new one live.
        wheel.unlink(&mut slots, home, 0);
        wheel.link(&mut slots, 0);
        wheel.assert_invariants(&slots);
        let bucket = wheel.earliest().unwrap();
        let mut live = wheel.take(bucket, &slots);
        live.sort_unstable();
        assert_eq!(live, vec![0, 1]);
    }

    #[test]
    fn removing_the_newest_entry_leaves_no_dead_index() {
        let (mut wheel, mut slots, home) = two_linked(3);
        // Inserted and removed again, many times: the bucket does not grow.
        for _ in 0..100 {
            wheel.link(&mut slots, 2);
            wheel.unlink(&mut slots, home, 2);
        }
        assert_eq!(wheel.buckets[home as usize].ids, vec![0, 1]);
        wheel.assert_invariants(&slots);
    }

    #[test]
    fn a_bucket_whose_last_entry_leaves_is_emptied() {
        let (mut wheel, mut slots, home) = two_linked(2);
        wheel.unlink(&mut slots, home, 0);
        wheel.unlink(&mut slots, home, 1);
        assert_eq!(wheel.earliest(), None);
        assert!(wheel.buckets[home as usize].ids.is_empty());
    }
}
