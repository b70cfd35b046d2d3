//! The JSON documents that the command line's `--json` and the JSON API
//! answer alike (API.md, "JSON shapes"): times in RFC 3339, UTC; states in
//! lower case; absent times and names `null`.

use std::time::SystemTime;

use std::time::Duration;

use punctual::durable::{
    AttemptError, EntryInfo, Finished, JobResult, KeyLimit, Minute, Page, Rate, ScheduleInfo,
    WorkerInfo,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::health::{Health, Verdict, is_late};
use crate::ops::{BulkOutcome, Limits, Listed, Shown};

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
/// "schedule", "key", "priority", "last_error", "started_at", "worker",
/// "errors", "value"}` (`key`: a string or `null`; `priority`: a number, 0
/// unless the entry was given one; `started_at` and `worker`: a leased
/// entry's delivery, when it began and the id of the worker holding it;
/// `errors`: its last failed attempts, oldest first).
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
    pub(crate) started_at: Option<String>,
    pub(crate) worker: Option<String>,
    pub(crate) errors: Vec<AttemptErrorJson>,
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
            started_at: entry.started_at.map(rfc3339),
            worker: entry.worker.clone(),
            errors: entry.errors.iter().map(AttemptErrorJson::of).collect(),
            value: entry.value.clone().unwrap_or(Value::Null),
        }
    }
}

/// A failed attempt: `{"attempt", "at", "reason"}`.
#[derive(Debug, Serialize)]
pub(crate) struct AttemptErrorJson {
    pub(crate) attempt: u32,
    pub(crate) at: String,
    pub(crate) reason: String,
}

impl AttemptErrorJson {
    fn of(e: &AttemptError) -> AttemptErrorJson {
        AttemptErrorJson {
            attempt: e.attempt,
            at: rfc3339(e.at),
            reason: e.reason.clone(),
        }
    }
}

/// How a finished entry ended, in lower case (`done`, `dead`,
/// `cancelled`).
pub(crate) fn finished_str(f: Finished) -> &'static str {
    match f {
        Finished::Done => "done",
        Finished::Dead => "dead",
        Finished::Cancelled => "cancelled",
        _ => "finished",
    }
}

/// A kept result: `{"state", "finished_at", "attempts", "output",
/// "reason"}` (`state`: `done`, `dead` or `cancelled`).
#[derive(Debug, Serialize)]
pub(crate) struct ResultJson {
    pub(crate) state: &'static str,
    pub(crate) finished_at: String,
    pub(crate) attempts: u32,
    pub(crate) output: Option<Value>,
    pub(crate) reason: Option<String>,
}

impl ResultJson {
    pub(crate) fn of(r: &JobResult) -> ResultJson {
        ResultJson {
            state: finished_str(r.state),
            finished_at: rfc3339(r.finished_at),
            attempts: r.attempts,
            output: r.output.clone(),
            reason: r.reason.clone(),
        }
    }
}

/// `show`'s document: the entry with `"result"` (the kept result or
/// `null`); an entry that finished and is gone, its result kept, is
/// `{"id", "state": "finished", "result"}`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ShowJson {
    Entry {
        #[serde(flatten)]
        entry: Box<EntryJson>,
        result: Option<ResultJson>,
    },
    Finished {
        id: String,
        state: &'static str,
        result: ResultJson,
    },
}

impl ShowJson {
    pub(crate) fn of(id: &str, shown: &Shown) -> ShowJson {
        let result = shown.result.as_ref().ok().and_then(Option::as_ref);
        match (&shown.entry, result) {
            (Some(entry), result) => ShowJson::Entry {
                entry: Box::new(EntryJson::of(entry)),
                result: result.map(ResultJson::of),
            },
            (None, Some(result)) => ShowJson::Finished {
                id: id.to_owned(),
                state: "finished",
                result: ResultJson::of(result),
            },
            (None, None) => unreachable!("Ops::show answers not found"),
        }
    }
}

/// A worker: `{"id", "name", "host", "pid", "started_at", "last_seen",
/// "concurrency", "running": [{"id", "attempt", "started_at"}],
/// "stopping", "late"}` (`late`: its record is older than 10 s by the
/// store's clock).
#[derive(Debug, Serialize)]
pub(crate) struct WorkerJson {
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) started_at: String,
    pub(crate) last_seen: String,
    pub(crate) concurrency: usize,
    pub(crate) running: Vec<RunJson>,
    pub(crate) stopping: bool,
    pub(crate) late: bool,
}

/// A run in a worker: `{"id", "attempt", "started_at"}`.
#[derive(Debug, Serialize)]
pub(crate) struct RunJson {
    pub(crate) id: String,
    pub(crate) attempt: u32,
    pub(crate) started_at: String,
}

impl WorkerJson {
    pub(crate) fn of(w: &WorkerInfo, now: SystemTime) -> WorkerJson {
        WorkerJson {
            id: w.id.clone(),
            name: w.name.clone(),
            host: w.host.clone(),
            pid: w.pid,
            started_at: rfc3339(w.started_at),
            last_seen: rfc3339(w.last_seen),
            concurrency: w.concurrency,
            running: w
                .running
                .iter()
                .map(|r| RunJson {
                    id: r.id.clone(),
                    attempt: r.attempt,
                    started_at: rfc3339(r.started_at),
                })
                .collect(),
            stopping: w.stopping,
            late: is_late(w, now),
        }
    }
}

/// Who holds a run: `{"id", "name", "host", "pid"}` (the last three
/// `null` when the worker's record is not there).
#[derive(Debug, Serialize)]
pub(crate) struct HolderJson {
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
}

/// A run under way: `{"id", "attempt", "started_at", "running_for_ms",
/// "lease_until", "key", "worker": holder | null}`.
#[derive(Debug, Serialize)]
pub(crate) struct ActiveRunJson {
    pub(crate) id: String,
    pub(crate) attempt: u32,
    pub(crate) started_at: Option<String>,
    pub(crate) running_for_ms: Option<u64>,
    pub(crate) lease_until: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) worker: Option<HolderJson>,
}

impl ActiveRunJson {
    pub(crate) fn of(
        e: &EntryInfo<Value>,
        workers: &[WorkerInfo],
        now: SystemTime,
    ) -> ActiveRunJson {
        ActiveRunJson {
            id: e.id.clone(),
            attempt: e.attempt,
            started_at: e.started_at.map(rfc3339),
            running_for_ms: e
                .started_at
                .map(|at| millis(now.duration_since(at).unwrap_or_default())),
            lease_until: e.lease_until.map(rfc3339),
            key: e.key.clone(),
            worker: e.worker.as_ref().map(|id| {
                let w = workers.iter().find(|w| &w.id == id);
                HolderJson {
                    id: id.clone(),
                    name: w.and_then(|w| w.name.clone()),
                    host: w.map(|w| w.host.clone()),
                    pid: w.map(|w| w.pid),
                }
            }),
        }
    }
}

/// A page of runs: `{"running": [...], "next": cursor | null}`.
#[derive(Debug, Serialize)]
pub(crate) struct RunningPageJson {
    pub(crate) running: Vec<ActiveRunJson>,
    pub(crate) next: Option<String>,
}

/// A minute of history: `{"at", "inserted", "done", "failed", "dead"}`.
#[derive(Debug, Serialize)]
pub(crate) struct MinuteJson {
    pub(crate) at: String,
    pub(crate) inserted: u64,
    pub(crate) done: u64,
    pub(crate) failed: u64,
    pub(crate) dead: u64,
}

/// `history`: `{"since", "minutes": [...]}` (minutes without an event are
/// not listed).
#[derive(Debug, Serialize)]
pub(crate) struct HistoryJson {
    pub(crate) since: String,
    pub(crate) minutes: Vec<MinuteJson>,
}

impl HistoryJson {
    pub(crate) fn of(since: SystemTime, minutes: &[Minute]) -> HistoryJson {
        HistoryJson {
            since: rfc3339(since),
            minutes: minutes
                .iter()
                .map(|m| MinuteJson {
                    at: rfc3339(m.at),
                    inserted: m.inserted,
                    done: m.done,
                    failed: m.failed,
                    dead: m.dead,
                })
                .collect(),
        }
    }
}

/// A queue's health: `{"mark": "green"|"amber"|"red", "reasons",
/// "latency_ms", "workers", "late_workers", "due", "threshold_ms"}`.
#[derive(Debug, Serialize)]
pub(crate) struct HealthJson {
    pub(crate) mark: &'static str,
    pub(crate) reasons: Vec<String>,
    pub(crate) latency_ms: Option<u64>,
    pub(crate) workers: usize,
    pub(crate) late_workers: usize,
    pub(crate) due: u64,
    pub(crate) threshold_ms: u64,
}

impl HealthJson {
    pub(crate) fn of(v: &Verdict, h: &Health, due: u64, threshold: Duration) -> HealthJson {
        HealthJson {
            mark: v.mark.as_str(),
            reasons: v.reasons.clone(),
            latency_ms: h.latency.map(millis),
            workers: h.workers.len(),
            late_workers: v.late,
            due,
            threshold_ms: millis(threshold),
        }
    }
}

/// A bulk action's answer: `{"ok": true, "changed": N, "results": [{"id",
/// "changed": bool, "error": null | "..."}]}`.
#[derive(Debug, Serialize)]
pub(crate) struct BulkJson {
    pub(crate) ok: bool,
    pub(crate) changed: u64,
    pub(crate) results: Vec<BulkItemJson>,
}

#[derive(Debug, Serialize)]
pub(crate) struct BulkItemJson {
    pub(crate) id: String,
    pub(crate) changed: bool,
    pub(crate) error: Option<String>,
}

impl BulkJson {
    pub(crate) fn of(outcomes: &[BulkOutcome]) -> BulkJson {
        BulkJson {
            ok: true,
            changed: outcomes.iter().filter(|o| o.changed).count() as u64,
            results: outcomes
                .iter()
                .map(|o| BulkItemJson {
                    id: o.id.clone(),
                    changed: o.changed,
                    error: o.error.clone(),
                })
                .collect(),
        }
    }
}

/// A duration in whole milliseconds.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

/// A schedule: `{"name", "spec", "next", "paused", "last_run",
/// "last_outcome", "value"}` (`last_outcome`: `done`, `dead`,
/// `cancelled` or `null`).
#[derive(Debug, Serialize)]
pub(crate) struct ScheduleJson {
    pub(crate) name: String,
    pub(crate) spec: String,
    pub(crate) next: Option<String>,
    pub(crate) paused: bool,
    pub(crate) last_run: Option<String>,
    pub(crate) last_outcome: Option<&'static str>,
    pub(crate) value: Value,
}

impl ScheduleJson {
    pub(crate) fn of(schedule: &ScheduleInfo<Value>) -> ScheduleJson {
        ScheduleJson {
            name: schedule.name.clone(),
            spec: schedule.spec.clone(),
            next: schedule.next.map(rfc3339),
            paused: schedule.paused,
            last_run: schedule.last_run.map(rfc3339),
            last_outcome: schedule.last_outcome.map(finished_str),
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
    crate::fmt::utc(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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

    #[test]
    fn times_beyond_the_year_9999_are_kept_to_it() {
        let far = UNIX_EPOCH + Duration::from_millis(9_000_000_000_000_000);
        assert_eq!(rfc3339(far), "9999-12-31T23:59:59.999Z");
        let early = UNIX_EPOCH - Duration::from_secs(70_000_000_000);
        assert_eq!(rfc3339(early), "0000-01-01T00:00:00.000Z");
        assert_eq!(crate::fmt::absolute(far), "9999-12-31 23:59:59 UTC");
    }
}
