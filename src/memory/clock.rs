//! The memory store's clock: the wall time when the queue was built (or
//! the time given to `start_at`) plus Tokio's time elapsed since, so paused
//! time moves every deadline, lease and schedule exactly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::durable::ops::MAX_MS;

#[derive(Debug)]
pub(crate) struct Clock {
    start: Instant,
    /// The clock's reading at `start`, since the Unix epoch (to the
    /// nanosecond: dropping the fraction would leave this clock up to a
    /// millisecond behind the system's, which it must match when the queue
    /// is built without `start_at`).
    start_at: Duration,
}

impl Clock {
    /// A clock that reads `at` now; `at` is read after this (`start` is
    /// taken first, so the clock is never behind the system's).
    pub(crate) fn new(start: Instant, at: SystemTime) -> Clock {
        Clock {
            start,
            start_at: at.duration_since(UNIX_EPOCH).unwrap_or_default(),
        }
    }

    /// The clock now, in ms since the Unix epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        let now = self.start_at.saturating_add(elapsed);
        u64::try_from(now.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_MS)
    }

    /// When, on Tokio's clock, this clock reads `ms` (now, if it has).
    pub(crate) fn instant_at(&self, ms: u64) -> Instant {
        let ahead = Duration::from_millis(ms).saturating_sub(self.start_at);
        crate::queue::deadline_after(self.start, ahead)
    }
}

/// `at` in ms since the Unix epoch (a time before it counts as the epoch).
pub(crate) fn ms_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, crate::durable::ops::millis)
}

pub(crate) fn system_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}
