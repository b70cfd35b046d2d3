//! One entry of the slot table behind [`Timers`](super::timers::Timers):
//! where an entry is, and its value.
//!
//! The value lives in the slot, next to the entry's place, so taking an
//! entry out reads one slot, not a slot and a value elsewhere; and the
//! entry's home shares the value's `Option` ([`Home`] is never zero, which
//! gives `Option` its niche), so a slot is 8 bytes plus the home and the
//! value: 32 bytes with a 16-byte payload.
//!
//! The layout is fixed (`repr(C)`): the home comes first and the generation
//! last, so reading both touches every cache line a slot spans, which
//! [`Timers`](super::timers::Timers) relies on to read slots ahead.

use super::timers::NIL;
use std::num::NonZeroU32;

#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Slot<T> {
    /// The home and the value while occupied.
    entry: Option<Full<T>>,
    /// Odd while occupied, even while free.
    pub(crate) generation: u32,
    /// The index in its home while occupied; the next free slot (or `NIL`)
    /// while free.
    pub(crate) pos: u32,
}

/// An occupied slot's home and value, the home first.
#[derive(Clone, Debug)]
#[repr(C)]
struct Full<T> {
    home: Home,
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

    /// Records where the slot's entry now is.
    #[inline]
    pub(crate) fn set_place(&mut self, home: u32, pos: u32) {
        debug_assert!(self.entry.is_some(), "placing a free slot");
        if let Some(full) = &mut self.entry {
            full.home = Home::new(home);
        }
        self.pos = pos;
    }

    /// Stores the value of a new entry. Its home is a placeholder that no
    /// home has until [`set_place`](Slot::set_place), which must follow.
    #[inline]
    pub(crate) fn put(&mut self, value: T) {
        self.entry = Some(Full {
            home: Home(NonZeroU32::MAX),
            value,
        });
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
    fn a_slot_is_the_home_the_value_and_two_u32s() {
        assert_eq!(std::mem::size_of::<Slot<[u64; 2]>>(), 32);
        assert_eq!(std::mem::size_of::<Slot<u64>>(), 24);
        assert_eq!(std::mem::size_of::<Slot<()>>(), 12);
    }
}
