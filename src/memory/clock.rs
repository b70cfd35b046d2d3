//! The memory store's clock: the wall time when the queue was built (or
//! the time given to `start_at`) plus Tokio's time elapsed since, so paused
//! time moves every deadline, lease and schedule exactly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::durable::ops::MAX_MS;

#[derive(Debug)]
pub(crate) struct Clock {
    start: Instant,
    /// The clock's reading at `start`, in ms since the Unix epoch.
    start_ms: u64,
}

impl Clock {
    pub(crate) fn new(at: SystemTime) -> Clock {
        Clock {
            start: Instant::now(),
            start_ms: ms_of(at),
        }
    }

    /// The clock now, in ms since the Unix epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        let elapsed = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.start_ms.saturating_add(elapsed).min(MAX_MS)
    }

    /// When, on Tokio's clock, this clock reads `ms` (now, if it has).
    pub(crate) fn instant_at(&self, ms: u64) -> Instant {
        let ahead = ms.saturating_sub(self.start_ms);
        crate::queue::deadline_after(self.start, Duration::from_millis(ahead))
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
