//! The crate's one lock type: a `parking_lot::Mutex` that keeps the unwind
//! safety of `std::sync::Mutex`.
//!
//! `parking_lot` because it spins adaptively before it parks a thread, where
//! `std`'s lock soon sleeps in the futex: with two producers contending for
//! one `DelayQueue` it halved the time per operation (`benches/churn.rs`).
//! It does not poison, which changes nothing here: no user code runs under
//! any of the crate's locks, so a panic cannot leave a guarded value half
//! updated (the crate ignored `std`'s poisoning before for that reason).
//!
//! `std::sync::Mutex<T>` is `UnwindSafe` and `RefUnwindSafe` whatever `T`,
//! and so were the crate's public types built on it (`DelayQueue`,
//! `Scheduler`); [`Lock`] says the same, so they still cross `catch_unwind`
//! (pinned in `tests/async_send_sync.rs`).

use std::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};

pub(crate) use parking_lot::MutexGuard as Guard;

pub(crate) struct Lock<T>(parking_lot::Mutex<T>);

impl<T> Lock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Lock(parking_lot::Mutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        self.0.lock()
    }
}

impl<T> UnwindSafe for Lock<T> {}
impl<T> RefUnwindSafe for Lock<T> {}

impl<T: fmt::Debug> fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
