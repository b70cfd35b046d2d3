//! What comes due over the next hour, per minute: plain entries, retries
//! (an entry with a failed attempt behind it) and schedules' ticks.
//!
//! It is read from the first pages of the queue's pending entries, in due
//! order, and stops at the hour's end or after [`READ_AT_MOST`] entries,
//! whichever comes first: a bounded number of page reads, whatever the
//! queue holds. When it stops early the timeline says so (`2000+`) and
//! covers the hour only up to the last entry read. A paused schedule's
//! tick is pending but comes due only once resumed (the stores list it
//! after the others, at its instant): it is left out.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use punctual::durable::EntryInfo;
use serde_json::Value;

/// Minutes ahead the timeline covers.
pub(crate) const MINUTES: usize = 60;

/// The most pending entries one timeline reads (two pages).
pub(crate) const READ_AT_MOST: usize = 2000;

/// What comes due in one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// Entries on their first attempt.
    pub(crate) jobs: u64,
    /// Entries waiting for a retry (`attempt > 0`).
    pub(crate) retries: u64,
    /// Schedules' ticks.
    pub(crate) ticks: u64,
}

impl Bucket {
    pub(crate) fn total(&self) -> u64 {
        self.jobs + self.retries + self.ticks
    }
}

/// The next hour of a queue, per minute, on the store's clock.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    /// The store's clock when it was read: minute 0 starts here.
    pub(crate) now: SystemTime,
    /// Entries due already (and not leased), from the counts.
    pub(crate) due_now: u64,
    pub(crate) minutes: [Bucket; MINUTES],
    /// Pending entries read.
    pub(crate) read: usize,
    /// Whether it stopped at [`READ_AT_MOST`] before the hour's end.
    pub(crate) capped: bool,
    /// How far it is complete: the hour's end, or the due time of the last
    /// entry read when it was capped.
    pub(crate) complete_until: SystemTime,
}

impl Timeline {
    pub(crate) fn new(now: SystemTime, due_now: u64) -> Timeline {
        Timeline {
            now,
            due_now,
            minutes: [Bucket::default(); MINUTES],
            read: 0,
            capped: false,
            complete_until: now + Duration::from_secs(60 * MINUTES as u64),
        }
    }

    /// Counts a pending entry (they come in due order) unless it is the
    /// tick of a schedule in `paused`; `false` once the entries are past
    /// the hour or enough were read, when reading stops.
    pub(crate) fn add(&mut self, entry: &EntryInfo<Value>, paused: &HashSet<String>) -> bool {
        if entry
            .schedule
            .as_ref()
            .is_some_and(|name| paused.contains(name))
        {
            return true;
        }
        self.add_one(entry.due, entry.attempt, entry.schedule.is_some())
    }

    /// [`add`](Self::add) for an entry due at `due`, with `attempt`
    /// deliveries behind it, a schedule's tick or not.
    fn add_one(&mut self, due: SystemTime, attempt: u32, tick: bool) -> bool {
        let end = self.now + Duration::from_secs(60 * MINUTES as u64);
        if due >= end {
            return false;
        }
        let ahead = due.duration_since(self.now).unwrap_or_default();
        let minute = ((ahead.as_secs() / 60) as usize).min(MINUTES - 1);
        let bucket = &mut self.minutes[minute];
        if tick {
            bucket.ticks += 1;
        } else if attempt > 0 {
            bucket.retries += 1;
        } else {
            bucket.jobs += 1;
        }
        self.read += 1;
        if self.read >= READ_AT_MOST {
            self.capped = true;
            self.complete_until = due;
            return false;
        }
        true
    }

    /// Everything counted in the hour (not the entries due already).
    pub(crate) fn total(&self) -> u64 {
        self.minutes.iter().map(Bucket::total).sum()
    }

    /// The hour's total as people read it: `2000+` when capped.
    pub(crate) fn total_text(&self) -> String {
        if self.capped {
            format!("{}+", self.total())
        } else {
            self.total().to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn entries_land_in_their_minute_by_kind() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut t = Timeline::new(now, 3);
        assert!(t.add_one(now + Duration::from_secs(10), 0, false));
        assert!(t.add_one(now + Duration::from_secs(70), 2, false));
        assert!(t.add_one(now + Duration::from_secs(3599), 0, true));
        assert!(!t.add_one(now + Duration::from_secs(3600), 0, false));
        assert_eq!(t.minutes[0].jobs, 1);
        assert_eq!(t.minutes[1].retries, 1);
        assert_eq!(t.minutes[59].ticks, 1);
        assert_eq!(
            (t.total(), t.total_text(), t.capped),
            (3, "3".into(), false)
        );
    }

    #[test]
    fn a_paused_schedules_tick_is_left_out() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let tick = |name: &str| EntryInfo::<Value> {
            id: name.to_owned(),
            state: punctual::durable::EntryState::Pending,
            due: now + Duration::from_secs(90),
            lease_until: None,
            died_at: None,
            attempt: 0,
            schedule: Some(name.to_owned()),
            last_error: None,
            value: None,
            key: None,
            priority: 0,
            started_at: None,
            worker: None,
            errors: Vec::new(),
        };
        let paused: HashSet<String> = ["nightly".to_owned()].into();
        let mut t = Timeline::new(now, 0);
        assert!(t.add(&tick("nightly"), &paused));
        assert!(t.add(&tick("hourly"), &paused));
        assert_eq!((t.minutes[1].ticks, t.total(), t.read), (1, 1, 1));
    }

    #[test]
    fn it_stops_after_reading_enough() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut t = Timeline::new(now, 0);
        let mut added = 0;
        while t.add_one(now + Duration::from_secs(1), 0, false) {
            added += 1;
        }
        assert_eq!(added + 1, READ_AT_MOST);
        assert!(t.capped);
        assert_eq!(t.total_text(), "2000+");
        assert_eq!(t.complete_until, now + Duration::from_secs(1));
    }
}
