//! The JSON documents that the command line's `--json` and the JSON API
//! answer alike (API.md, "JSON shapes"): times in RFC 3339, UTC; states in
//! lower case; absent times and names `null`.

use std::time::SystemTime;

use punctual::durable::{EntryInfo, Page, ScheduleInfo};
use serde::Serialize;
use serde_json::Value;

use crate::ops::Listed;

/// A queue: `{"store", "name", "paused", "pending", "due", "leased",
/// "dead", "now"}`, and `"source"` after `"store"` when its store is not
/// told apart by its kind alone (a label, or `redis@2`: what `QUEUE`
/// writes before `:`).
#[derive(Debug, Serialize)]
pub(crate) struct QueueJson {
    pub(crate) store: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) source: Option<String>,
    pub(crate) name: String,
    pub(crate) paused: bool,
    pub(crate) pending: u64,
    pub(crate) due: u64,
    pub(crate) leased: u64,
    pub(crate) dead: u64,
    /// The store's clock.
    pub(crate) now: String,
}

impl QueueJson {
    /// `None` when the queue's counts could not be read.
    pub(crate) fn of(listed: &Listed) -> Option<QueueJson> {
        let snapshot = listed.snapshot.as_ref().ok()?;
        Some(QueueJson {
            store: listed.kind.as_str(),
            source: listed.source.clone(),
            name: listed.id.name.clone(),
            paused: snapshot.paused,
            pending: snapshot.stats.pending,
            due: snapshot.stats.due,
            leased: snapshot.stats.leased,
            dead: snapshot.stats.dead,
            now: rfc3339(snapshot.now()),
        })
    }
}

/// An entry: `{"id", "state", "due", "lease_until", "died_at", "attempt",
/// "schedule", "last_error", "value"}`.
#[derive(Debug, Serialize)]
pub(crate) struct EntryJson {
    pub(crate) id: String,
    pub(crate) state: &'static str,
    pub(crate) due: String,
    pub(crate) lease_until: Option<String>,
    pub(crate) died_at: Option<String>,
    pub(crate) attempt: u32,
    pub(crate) schedule: Option<String>,
    pub(crate) last_error: Option<String>,
    pub(crate) value: Value,
}

impl EntryJson {
    pub(crate) fn of(entry: &EntryInfo<Value>) -> EntryJson {
        EntryJson {
            id: entry.id.clone(),
            state: entry.state.as_str(),
            due: rfc3339(entry.due),
            lease_until: entry.lease_until.map(rfc3339),
            died_at: entry.died_at.map(rfc3339),
            attempt: entry.attempt,
            schedule: entry.schedule.clone(),
            last_error: entry.last_error.clone(),
            value: entry.value.clone().unwrap_or(Value::Null),
        }
    }
}

/// A page of entries: `{"entries": [...], "next": cursor | null}`.
#[derive(Debug, Serialize)]
pub(crate) struct PageJson {
    pub(crate) entries: Vec<EntryJson>,
    pub(crate) next: Option<String>,
}

impl PageJson {
    pub(crate) fn of(page: &Page<Value>) -> PageJson {
        PageJson {
            entries: page.entries.iter().map(EntryJson::of).collect(),
            next: page.next.as_ref().map(ToString::to_string),
        }
    }
}

/// A schedule: `{"name", "spec", "next", "value"}`.
#[derive(Debug, Serialize)]
pub(crate) struct ScheduleJson {
    pub(crate) name: String,
    pub(crate) spec: String,
    pub(crate) next: Option<String>,
    pub(crate) value: Value,
}

impl ScheduleJson {
    pub(crate) fn of(schedule: &ScheduleInfo<Value>) -> ScheduleJson {
        ScheduleJson {
            name: schedule.name.clone(),
            spec: schedule.spec.clone(),
            next: schedule.next.map(rfc3339),
            value: schedule.value.clone(),
        }
    }
}

/// A write's answer: `{"ok": true, "changed": N}`.
#[derive(Debug, Serialize)]
pub(crate) struct WriteJson {
    pub(crate) ok: bool,
    pub(crate) changed: u64,
}

impl WriteJson {
    pub(crate) fn changed(changed: u64) -> WriteJson {
        WriteJson { ok: true, changed }
    }
}

/// An error: `{"error": "..."}`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorJson {
    pub(crate) error: String,
}

/// `at` in RFC 3339, UTC, to the millisecond: `2025-06-01T12:00:03.250Z`.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_are_rfc3339_utc_to_the_millisecond() {
        let at = UNIX_EPOCH + Duration::from_millis(1_748_779_203_250);
        assert_eq!(rfc3339(at), "2025-06-01T12:00:03.250Z");
    }
}
