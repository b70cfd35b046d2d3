//! A memory queue's health: per-minute counts, worker records, latency,
//! schedules paused one by one. Steps on the queue's `State`, as
//! `state.rs` has them for the rest.

use std::time::{Duration, UNIX_EPOCH};

use super::state::{Moved, State};
use crate::durable::health::{HISTORY_MS, Record, minute_of};
use crate::durable::{Minute, WorkerInfo};

/// The counts of one minute.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) inserted: u64,
    pub(crate) done: u64,
    pub(crate) failed: u64,
    pub(crate) dead: u64,
}

impl State {
    /// Counts an event of `now`'s minute (and forgets minutes older than a
    /// day).
    pub(crate) fn count(&mut self, now: u64, event: impl FnOnce(&mut Counted)) {
        event(self.minutes.entry(minute_of(now)).or_default());
        let oldest = minute_of(now.saturating_sub(HISTORY_MS));
        while let Some((&first, _)) = self.minutes.first_key_value() {
            if first >= oldest {
                break;
            }
            self.minutes.pop_first();
        }
    }

    /// The minutes with events since `since` (ms), oldest first, within the
    /// last day.
    pub(crate) fn history(&self, since: u64, now: u64) -> Vec<Minute> {
        let from = minute_of(since).max(minute_of(now.saturating_sub(HISTORY_MS)));
        self.minutes
            .range(from..)
            .filter(|(_, counted)| **counted != Counted::default())
            .map(|(&at, c)| Minute {
                at: UNIX_EPOCH + Duration::from_millis(at),
                inserted: c.inserted,
                done: c.done,
                failed: c.failed,
                dead: c.dead,
            })
            .collect()
    }

    /// How long the oldest due entry has waited, if one is due.
    pub(crate) fn latency(&self, now: u64) -> Option<u64> {
        let (&(score, _), _) = self.order.first_key_value()?;
        (score <= now).then(|| now - score)
    }

    /// Refreshes worker `record`'s record at `now` (and forgets records
    /// three refreshes old).
    pub(crate) fn beat(&mut self, record: &str, now: u64) {
        let Some(record) = Record::from_json(record) else {
            return;
        };
        self.workers
            .retain(|_, (r, _, last)| last.saturating_add(r.every_ms.saturating_mul(3)) >= now);
        let first = self
            .workers
            .get(&record.id)
            .map_or(now, |(_, first, _)| *first);
        self.workers.insert(record.id.clone(), (record, first, now));
    }

    /// Worker `id` left.
    pub(crate) fn leave(&mut self, id: &str) {
        self.workers.remove(id);
    }

    /// The live workers, by id.
    pub(crate) fn workers(&self, now: u64) -> Vec<WorkerInfo> {
        let mut out: Vec<WorkerInfo> = self
            .workers
            .values()
            .filter_map(|(record, first, last)| record.clone().info(*first, *last, now))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Pauses (`true`) or resumes schedule `name`: while paused its tick is
    /// not delivered; resumed, a tick that came due meanwhile runs once,
    /// late. `None` if there is no such schedule, else whether it changed.
    pub(crate) fn pause_schedule(
        &mut self,
        name: &str,
        pause: bool,
        moved: &mut Moved,
    ) -> Option<bool> {
        let schedule = self.schedules.get_mut(name)?;
        if schedule.paused == pause {
            return Some(false);
        }
        schedule.paused = pause;
        if self.entries.get(name).is_some_and(|e| e.tick.is_some()) {
            if pause {
                self.park_tick(name);
            } else {
                moved.merge(self.unpark_tick(name));
            }
        }
        Some(true)
    }
}

impl<T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static>
    super::MemoryQueue<T>
{
    /// The live workers.
    pub(crate) async fn read_workers(&self) -> Result<Vec<WorkerInfo>, super::Error> {
        Ok(self.inner().read(|state, now| state.workers(now)))
    }

    /// The minutes with events since `since` (ms).
    pub(crate) async fn read_history(&self, since: u64) -> Result<Vec<Minute>, super::Error> {
        Ok(self.inner().read(|state, now| state.history(since, now)))
    }

    /// How long the oldest due entry has waited.
    pub(crate) async fn read_latency(&self) -> Result<Option<Duration>, super::Error> {
        Ok(self
            .inner()
            .read(|state, now| state.latency(now))
            .map(Duration::from_millis))
    }

    /// Pauses or resumes schedule `name`; whether it changed.
    pub(crate) async fn put_schedule_paused(
        &self,
        name: &str,
        pause: bool,
    ) -> Result<bool, super::Error> {
        Ok(self
            .inner()
            .write(|state, _, moved| state.pause_schedule(name, pause, moved))
            .unwrap_or(false))
    }

    /// A page of `state`'s entries, newest first.
    pub(crate) async fn newest_page(
        &self,
        state: crate::durable::EntryState,
        cursor: Option<&crate::durable::Cursor>,
        limit: usize,
    ) -> Result<crate::durable::Page<T>, super::Error> {
        self.page_of(state, cursor, limit, true)
    }
}
