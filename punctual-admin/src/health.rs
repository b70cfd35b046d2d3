//! A queue's health at a glance: green, amber or red, and why.
//!
//! - **red**: due entries wait and no worker of the queue is alive;
//! - **amber**: the oldest due entry has waited longer than the threshold
//!   (`latency`, 60 s unless the dashboard was told otherwise), or a
//!   worker is late: its record was last refreshed more than
//!   [`LATE_AFTER`] ago by the store's clock;
//! - **green** otherwise.
//!
//! A worker refreshes its record every `min(lease / 3, 5 s)` and is gone
//! from `workers()` after three periods without one. `WorkerInfo` does not
//! say the period, so a worker is late after two of the longest period
//! (5 s): 10 s. (Three periods, 15 s, is when the store forgets it: a mark
//! at 15 s would never show.)

use std::time::{Duration, SystemTime};

use punctual::durable::WorkerInfo;

use crate::fmt;

/// How long a worker's record may go unrefreshed before it is late: two
/// of the longest refresh period (`min(lease / 3, 5 s)`).
pub(crate) const LATE_AFTER: Duration = Duration::from_secs(10);

/// The latency over which a queue is amber unless told otherwise.
pub(crate) const DEFAULT_THRESHOLD: Duration = Duration::from_secs(60);

/// What the store said of a queue's consumers, read together.
#[derive(Clone, Debug)]
pub(crate) struct Health {
    /// How long the oldest due entry (not leased) has waited.
    pub(crate) latency: Option<Duration>,
    /// The live workers.
    pub(crate) workers: Vec<WorkerInfo>,
}

/// The colour of a queue's mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    Green,
    Amber,
    Red,
    /// The store could not say (an error, or a store that cannot yet).
    Unknown,
}

impl Mark {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mark::Green => "green",
            Mark::Amber => "amber",
            Mark::Red => "red",
            Mark::Unknown => "unknown",
        }
    }
}

/// A queue's mark and the reasons for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) mark: Mark,
    /// Why it is not green (empty when it is).
    pub(crate) reasons: Vec<String>,
    /// Workers whose record is older than [`LATE_AFTER`].
    pub(crate) late: usize,
}

/// Whether `worker` is late at `now` (the store's clock).
pub(crate) fn is_late(worker: &WorkerInfo, now: SystemTime) -> bool {
    now.duration_since(worker.last_seen)
        .is_ok_and(|age| age > LATE_AFTER)
}

/// The mark of a queue with `due` entries due, its `health` read at `now`
/// (the store's clock), for a latency `threshold`.
pub(crate) fn judge(due: u64, health: &Health, now: SystemTime, threshold: Duration) -> Verdict {
    let late = health.workers.iter().filter(|w| is_late(w, now)).count();
    let mut reasons = Vec::new();
    let mut mark = Mark::Green;
    if due > 0 && health.workers.is_empty() {
        mark = Mark::Red;
        reasons.push(format!(
            "{} due and no worker alive",
            if due == 1 {
                "1 entry is".to_owned()
            } else {
                format!("{} entries are", fmt::count(due))
            }
        ));
    }
    if let Some(latency) = health.latency.filter(|l| *l > threshold) {
        if mark == Mark::Green {
            mark = Mark::Amber;
        }
        reasons.push(format!(
            "the oldest due entry has waited {} (over {})",
            fmt::span(latency),
            fmt::span(threshold)
        ));
    }
    if late > 0 {
        if mark == Mark::Green {
            mark = Mark::Amber;
        }
        reasons.push(format!(
            "{late} {} not heard from for over {}",
            if late == 1 { "worker" } else { "workers" },
            fmt::span(LATE_AFTER)
        ));
    }
    Verdict {
        mark,
        reasons,
        late,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn worker(last_seen: SystemTime) -> WorkerInfo {
        WorkerInfo {
            id: "w".into(),
            name: None,
            host: "h".into(),
            pid: 1,
            started_at: last_seen,
            last_seen,
            concurrency: 1,
            running: Vec::new(),
            stopping: false,
        }
    }

    #[test]
    fn marks_follow_the_rules() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        let t = DEFAULT_THRESHOLD;
        let none = Health {
            latency: Some(s(5)),
            workers: vec![],
        };
        let v = judge(3, &none, now, t);
        assert_eq!(v.mark, Mark::Red);
        assert_eq!(v.reasons, ["3 entries are due and no worker alive"]);
        assert_eq!(judge(0, &none, now, t).mark, Mark::Green, "nothing waits");
        let fresh = Health {
            latency: Some(s(2)),
            workers: vec![worker(now - s(3))],
        };
        assert_eq!(judge(5, &fresh, now, t).mark, Mark::Green);
        let slow = Health {
            latency: Some(s(61)),
            ..fresh.clone()
        };
        let v = judge(5, &slow, now, t);
        assert_eq!(v.mark, Mark::Amber);
        assert!(v.reasons[0].contains("1m 1s"), "{:?}", v.reasons);
        assert_eq!(judge(5, &slow, now, s(120)).mark, Mark::Green);
        let late = Health {
            latency: None,
            workers: vec![worker(now - s(11)), worker(now)],
        };
        let v = judge(0, &late, now, t);
        assert_eq!((v.mark, v.late), (Mark::Amber, 1));
        // Red wins over amber, with every reason said.
        let both = Health {
            latency: Some(s(600)),
            workers: vec![],
        };
        let v = judge(1, &both, now, t);
        assert_eq!((v.mark, v.reasons.len()), (Mark::Red, 2));
    }
}
