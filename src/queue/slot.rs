//! One entry of the slot table behind [`Timers`](super::timers::Timers):
//! an entry's ordering key, where it is, and its value.
//!
//! The slot is the one place that knows an entry's `(ticks, seq)`: the wheel
//! keeps only slot indices, so removing an entry by key reads its slot and
//! nothing else (see `wheel.rs`). The value lives in the slot too, so taking
//! an entry out reads one slot, not a slot and a value elsewhere. The home
//! and the `seq` share the value's `Option` ([`Home`] is never zero, which
//! gives `Option` its niche), so a slot is 16 bytes plus the home, the `seq`
//! and the value: 40 bytes with a 16-byte payload.
//!
//! The layout is fixed (`repr(C)`): the home comes first and the ticks
//! last, so reading both touches every cache line a slot spans, which
//! [`Timers`](super::timers::Timers) relies on to read slots ahead.

use super::timers::{HeadId, NIL};
use std::num::NonZeroU32;

/// The home of an entry taken out of its home and not yet placed again (or
/// freed): no home has it, so the wheel sees the entry as gone.
pub(crate) const UNPLACED: u32 = NIL - 1;

#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Slot<T> {
    /// The home, `seq` and value while occupied.
    entry: Option<Full<T>>,
    /// Odd while occupied, even while free.
    pub(crate) generation: u32,
    /// The index in its home while occupied; the next free slot (or `NIL`)
    /// while free.
    pub(crate) pos: u32,
    /// The deadline in ticks while occupied.
    pub(crate) ticks: u64,
}

/// An occupied slot's home, `seq` and value, the home first.
#[derive(Clone, Debug)]
#[repr(C)]
struct Full<T> {
    home: Home,
    seq: u32,
    value: T,
}

/// A home (a wheel bucket, or the run, heap or late list), stored plus one.
#[derive(Clone, Copy, Debug)]
struct Home(NonZeroU32);

impl Home {
    #[inline]
    fn new(home: u32) -> Home {
        debug_assert!(home < NIL, "NIL is not a home");
        Home(NonZeroU32::MIN.saturating_add(home))
    }

    #[inline]
    fn get(self) -> u32 {
        self.0.get() - 1
    }
}

impl<T> Slot<T> {
    pub(crate) const FREE: Slot<T> = Slot {
        entry: None,
        generation: 0,
        pos: NIL,
        ticks: 0,
    };

    #[inline]
    pub(crate) fn occupied(&self) -> bool {
        self.generation & 1 == 1
    }

    /// The home of an occupied slot; `NIL` for a free one.
    #[inline]
    pub(crate) fn home(&self) -> u32 {
        self.entry.as_ref().map_or(NIL, |full| full.home.get())
    }

    /// Whether the slot's entry is at `pos` in `home`: how the wheel tells
    /// a live index in a bucket from one left behind by a removal.
    #[inline]
    pub(crate) fn is_at(&self, home: u32, pos: u32) -> bool {
        self.pos == pos && self.home() == home
    }

    /// The ordering key `(ticks, seq)` of an occupied slot's entry.
    #[inline]
    pub(crate) fn order(&self) -> HeadId {
        (self.ticks, self.entry.as_ref().map_or(0, |full| full.seq))
    }

    /// Records where the slot's entry now is.
    #[inline]
    pub(crate) fn set_place(&mut self, home: u32, pos: u32) {
        debug_assert!(self.entry.is_some(), "placing a free slot");
        if let Some(full) = &mut self.entry {
            full.home = Home::new(home);
        }
        self.pos = pos;
    }

    /// Gives the entry a new ordering key; it must be placed again.
    #[inline]
    pub(crate) fn set_order(&mut self, ticks: u64, seq: u32) {
        debug_assert!(self.entry.is_some(), "ordering a free slot");
        if let Some(full) = &mut self.entry {
            full.seq = seq;
        }
        self.ticks = ticks;
    }

    /// Stores the value of a new entry due at `ticks`. It is `UNPLACED`
    /// until [`set_place`](Slot::set_place), which must follow.
    #[inline]
    pub(crate) fn put(&mut self, value: T, ticks: u64, seq: u32) {
        self.entry = Some(Full {
            home: Home::new(UNPLACED),
            seq,
            value,
        });
        self.ticks = ticks;
    }

    /// Takes the value out; the slot is free from here on.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<T> {
        self.entry.take().map(|full| full.value)
    }

    #[inline]
    pub(crate) fn value(&self) -> Option<&T> {
        self.entry.as_ref().map(|full| &full.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_the_order_the_home_the_value_and_two_u32s() {
        assert_eq!(std::mem::size_of::<Slot<[u64; 2]>>(), 40);
        assert_eq!(std::mem::size_of::<Slot<u64>>(), 32);
        assert_eq!(std::mem::size_of::<Slot<()>>(), 24);
    }
}
