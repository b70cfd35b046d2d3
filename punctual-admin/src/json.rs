//! The JSON documents that the command line's `--json` and the JSON API
//! answer alike (API.md, "JSON shapes"): times in RFC 3339, UTC; states in
//! lower case; absent times and names `null`.

use std::time::SystemTime;

use punctual::durable::{EntryInfo, KeyLimit, Page, Rate, ScheduleInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ops::{Limits, Listed};

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
/// "schedule", "key", "priority", "last_error", "value"}` (`key`: a string
/// or `null`; `priority`: a number, 0 unless the entry was given one).
#[derive(Debug, Serialize)]
pub(crate) struct EntryJson {
    pub(crate) id: String,
    pub(crate) state: &'static str,
    pub(crate) due: String,
    pub(crate) lease_until: Option<String>,
    pub(crate) died_at: Option<String>,
    pub(crate) attempt: u32,
    pub(crate) schedule: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) priority: i16,
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
            key: entry.key.clone(),
            priority: entry.priority,
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

/// A rate: `{"max": n, "per_ms": n}`, at most `max` deliveries begun in
/// any `per_ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateJson {
    pub(crate) max: u32,
    pub(crate) per_ms: u64,
}

impl RateJson {
    pub(crate) fn of(rate: &Rate) -> RateJson {
        RateJson {
            max: rate.max,
            per_ms: u64::try_from(rate.per.as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn rate(self) -> Rate {
        Rate {
            max: self.max,
            per: std::time::Duration::from_millis(self.per_ms),
        }
    }
}

/// A key's limit: `{"key", "concurrency", "rate", "running"}` (`key` `*`
/// is the default, for every key without a limit of its own; `running`:
/// its entries leased now, for `*` those of the keys it covers).
#[derive(Debug, Serialize)]
pub(crate) struct LimitJson {
    pub(crate) key: String,
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<RateJson>,
    pub(crate) running: u64,
}

/// A key running now without a limit of its own: `{"key", "running"}`.
#[derive(Debug, Serialize)]
pub(crate) struct RunningJson {
    pub(crate) key: String,
    pub(crate) running: u64,
}

/// A queue's key limits: `{"limits": [...], "others": [...], "capped"}`
/// (`others`: the keys running now without a limit of their own;
/// `capped`: more entries were leased than were read to count them).
#[derive(Debug, Serialize)]
pub(crate) struct LimitsJson {
    pub(crate) limits: Vec<LimitJson>,
    pub(crate) others: Vec<RunningJson>,
    pub(crate) capped: bool,
}

impl LimitsJson {
    pub(crate) fn of(limits: &Limits) -> LimitsJson {
        LimitsJson {
            limits: limits
                .limits
                .iter()
                .map(|(key, limit, running)| LimitJson {
                    key: key.clone(),
                    concurrency: limit.concurrency,
                    rate: limit.rate.as_ref().map(RateJson::of),
                    running: *running,
                })
                .collect(),
            others: limits
                .others
                .iter()
                .map(|(key, running)| RunningJson {
                    key: key.clone(),
                    running: *running,
                })
                .collect(),
            capped: limits.capped,
        }
    }
}

/// What sets a limit: `{"key", "concurrency", "rate"}`, both bounds
/// optional (`null` or absent: none).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetLimitJson {
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) concurrency: Option<u32>,
    #[serde(default)]
    pub(crate) rate: Option<RateJson>,
}

impl SetLimitJson {
    pub(crate) fn limit(&self) -> KeyLimit {
        KeyLimit {
            concurrency: self.concurrency,
            rate: self.rate.map(RateJson::rate),
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
