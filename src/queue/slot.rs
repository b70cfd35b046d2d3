//! One entry of the slot table behind [`Timers`](super::timers::Timers):
//! where an entry is, and its value.
//!
//! The value lives in the slot, next to the entry's place, so taking an
//! entry out touches one cache line of the table, not two; and the entry's
//! home shares the value's `Option` ([`Home`] is never zero, which gives
//! `Option` its niche), so a slot is 8 bytes plus `(u32, T)`: 32 bytes with
//! a 16-byte payload.

use super::timers::NIL;
use std::num::NonZeroU32;

#[derive(Clone, Debug)]
pub(crate) struct Slot<T> {
    /// Odd while occupied, even while free.
    pub(crate) generation: u32,
    /// The index in its home while occupied; the next free slot (or `NIL`)
    /// while free.
    pub(crate) pos: u32,
    /// The home and the value while occupied.
    entry: Option<(Home, T)>,
}

/// A home (a wheel bucket, or the run, heap or late list), stored plus one.
#[derive(Clone, Copy, Debug)]
struct Home(NonZeroU32);

impl Home {
    #[inline]
    fn new(home: u32) -> Home {
        Home(NonZeroU32::MIN.saturating_add(home))
    }

    #[inline]
    fn get(self) -> u32 {
        self.0.get() - 1
    }
}

impl<T> Slot<T> {
    pub(crate) const FREE: Slot<T> = Slot {
        generation: 0,
        pos: NIL,
        entry: None,
    };

    #[inline]
    pub(crate) fn occupied(&self) -> bool {
        self.generation & 1 == 1
    }

    /// The home of an occupied slot; `NIL` for a free one.
    #[inline]
    pub(crate) fn home(&self) -> u32 {
        self.entry.as_ref().map_or(NIL, |(home, _)| home.get())
    }

    /// Records where the slot's entry now is.
    #[inline]
    pub(crate) fn set_place(&mut self, home: u32, pos: u32) {
        debug_assert!(self.entry.is_some(), "placing a free slot");
        if let Some((at, _)) = &mut self.entry {
            *at = Home::new(home);
        }
        self.pos = pos;
    }

    /// Stores the value of an entry; `set_place` gives it its home next.
    #[inline]
    pub(crate) fn fill(&mut self, value: T) {
        self.entry = Some((Home(NonZeroU32::MAX), value));
    }

    /// Takes the value out; the slot is free from here on.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<T> {
        self.entry.take().map(|(_, value)| value)
    }

    #[inline]
    pub(crate) fn value(&self) -> Option<&T> {
        self.entry.as_ref().map(|(_, value)| value)
    }
}
