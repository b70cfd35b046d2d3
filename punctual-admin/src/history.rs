//! The counts of a queue since the dashboard started, sampled and bounded:
//! what its charts draw.
//!
//! A history keeps at most [`MAX_POINTS`] points. When it is full, every
//! other point goes and the spacing between points doubles, so it always
//! covers the whole time since the dashboard started, at a resolution that
//! halves each time the covered time doubles (5 s apart for the first
//! 40 minutes or so, then 10 s, 20 s, ...).

use std::time::{Duration, SystemTime};

use punctual::durable::QueueStats;

/// The most points one queue's history keeps.
pub(crate) const MAX_POINTS: usize = 480;

/// The least time between two points at first.
pub(crate) const FIRST_SPACING: Duration = Duration::from_secs(5);

/// One sample: the counts (or another reading, such as the latency) at a
/// time (the store's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Point<T = QueueStats> {
    pub(crate) at: SystemTime,
    pub(crate) value: T,
}

/// A queue's sampled counts (or other readings), oldest first.
#[derive(Clone, Debug)]
pub(crate) struct History<T = QueueStats> {
    points: Vec<Point<T>>,
    spacing: Duration,
}

impl<T> Default for History<T> {
    fn default() -> Self {
        History {
            points: Vec::new(),
            spacing: FIRST_SPACING,
        }
    }
}

impl<T: Copy + PartialEq> History<T> {
    /// Records `value` read at `at`, unless the last point is closer than
    /// the current spacing (then it is replaced, so the newest reading
    /// shows).
    pub(crate) fn record(&mut self, at: SystemTime, value: T) {
        let point = Point { at, value };
        if self.points.last().is_some_and(|last| at < last.at) {
            return;
        }
        if let [.., before, last] = self.points.as_mut_slice() {
            // The last point stands for the newest read until it is a
            // spacing past the one before it.
            if at.duration_since(before.at).unwrap_or_default() < self.spacing {
                *last = point;
                return;
            }
        }
        self.points.push(point);
        if self.points.len() > MAX_POINTS {
            // Keeps the first point (the start) and every other one after
            // it, and the newest.
            let newest = *self.points.last().expect("full");
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            if self.points.last() != Some(&newest) {
                self.points.push(newest);
            }
            self.spacing *= 2;
        }
    }

    /// The points, oldest first.
    pub(crate) fn points(&self) -> &[Point<T>] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn stats(n: u64) -> QueueStats {
        QueueStats {
            pending: n,
            ..QueueStats::default()
        }
    }

    #[test]
    fn reads_closer_than_the_spacing_replace_the_newest_point() {
        let mut h: History = History::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        h.record(t0, stats(1));
        h.record(t0 + Duration::from_secs(1), stats(2));
        h.record(t0 + Duration::from_secs(2), stats(3));
        assert_eq!(h.points().len(), 2);
        assert_eq!(h.points()[1].value.pending, 3);
        h.record(t0 + Duration::from_secs(6), stats(4));
        assert_eq!(h.points().len(), 3);
        // An older read (a slow one that finished late) is dropped.
        h.record(t0, stats(9));
        assert_eq!(h.points().len(), 3);
    }

    #[test]
    fn a_full_history_thins_out_and_still_covers_everything() {
        let mut h: History = History::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        for i in 0..10_000_u64 {
            h.record(t0 + Duration::from_secs(i), stats(i));
        }
        let points = h.points();
        assert!(points.len() <= MAX_POINTS + 1, "{}", points.len());
        assert_eq!(points[0].at, t0, "the start stays");
        assert_eq!(
            points.last().unwrap().value.pending,
            9_999,
            "the newest stays"
        );
        assert!(points.windows(2).all(|w| w[0].at < w[1].at));
    }
}
