//! Health at a glance: who consumes a queue and what runs now
//! ([`WorkerInfo`], [`RunInfo`]), what happened minute by minute
//! ([`Minute`]), and an entry's failed attempts ([`AttemptError`]); and the
//! record a worker keeps in its store, refreshed with its heartbeats.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// A live worker of a queue, from `workers()` (on every store): what it
/// said of itself at its last refresh, which comes with its heartbeats
/// (at least every `min(lease / 3, 5 s)`); a worker not heard from for
/// three of those periods, or shut down, is not listed.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerInfo {
    /// Its id, unique among every worker of every process (the one
    /// `EntryInfo::worker` names).
    pub id: String,
    /// The label given with [`WorkerBuilder::name`](super::WorkerBuilder::name).
    pub name: Option<String>,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it first registered, by the store's clock.
    pub started_at: SystemTime,
    /// When it last refreshed its record, by the store's clock.
    pub last_seen: SystemTime,
    /// Its places (handlers at once).
    pub concurrency: usize,
    /// The runs under way at its last refresh.
    pub running: Vec<RunInfo>,
    /// Whether it was shutting down.
    pub stopping: bool,
}

/// A run under way, in a [`WorkerInfo`].
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfo {
    /// The entry's id.
    pub id: String,
    /// Which delivery of it.
    pub attempt: u32,
    /// When this delivery began (its claim), by the store's clock.
    pub started_at: SystemTime,
}

/// What happened in one minute of a queue's last 24 hours, from
/// `history(since)` (on every store): counted in the same atomic steps as
/// the inserts and finishes themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Minute {
    /// The minute's start, by the store's clock.
    pub at: SystemTime,
    /// Entries inserted (by callers, and a schedule's ticks).
    pub inserted: u64,
    /// Entries acked.
    pub done: u64,
    /// Failed attempts (`Err`, a panic, a timeout, a discard), those that
    /// dead-lettered included.
    pub failed: u64,
    /// Entries sent to the dead letters.
    pub dead: u64,
}

/// One failed attempt of an entry, in `EntryInfo::errors`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptError {
    /// Which delivery failed.
    pub attempt: u32,
    /// When, by the store's clock.
    pub at: SystemTime,
    /// Why.
    pub reason: String,
}

/// The most failed attempts an entry keeps.
pub(crate) const ERRORS_KEPT: usize = 10;

/// How long the per-minute counts are kept, in ms.
pub(crate) const HISTORY_MS: u64 = 24 * 3600 * 1000;

/// The minute of `ms` (its start, ms since the epoch).
pub(crate) fn minute_of(ms: u64) -> u64 {
    ms - ms % 60_000
}

/// What a worker says of itself, kept by its store (as JSON) and refreshed
/// with its heartbeats; the store adds when it first and last heard of it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) concurrency: usize,
    /// Its refresh period, in ms: three missed, it is gone.
    pub(crate) every_ms: u64,
    pub(crate) running: Vec<RunRecord>,
    pub(crate) stopping: bool,
}

/// A run in a worker's record: entry id, attempt, when it began (ms).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RunRecord {
    pub(crate) id: String,
    pub(crate) attempt: u32,
    pub(crate) at: u64,
}

impl Record {
    /// The record as every store keeps it: JSON with the fields `id`,
    /// `name`, `host`, `pid`, `concurrency`, `every_ms`, `stopping` and
    /// `running` (a list of `{id, attempt, at}`).
    pub(crate) fn to_json(&self) -> String {
        json!({
            "id": self.id,
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "concurrency": self.concurrency,
            "every_ms": self.every_ms,
            "stopping": self.stopping,
            "running": self.running.iter().map(|run| json!({
                "id": run.id, "attempt": run.attempt, "at": run.at,
            })).collect::<Vec<_>>(),
        })
        .to_string()
    }

    /// A record `to_json` wrote; `None` for anything else.
    pub(crate) fn from_json(text: &str) -> Option<Record> {
        let v: Value = serde_json::from_str(text).ok()?;
        let running = v
            .get("running")?
            .as_array()?
            .iter()
            .map(|run| {
                Some(RunRecord {
                    id: run.get("id")?.as_str()?.to_owned(),
                    attempt: u32::try_from(run.get("attempt")?.as_u64()?).ok()?,
                    at: run.get("at")?.as_u64()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Record {
            id: v.get("id")?.as_str()?.to_owned(),
            name: v.get("name").and_then(Value::as_str).map(str::to_owned),
            host: v.get("host")?.as_str()?.to_owned(),
            pid: u32::try_from(v.get("pid")?.as_u64()?).ok()?,
            concurrency: usize::try_from(v.get("concurrency")?.as_u64()?).ok()?,
            every_ms: v.get("every_ms")?.as_u64()?,
            running,
            stopping: v.get("stopping").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// The worker as `workers()` shows it, given when the store first and
    /// last heard of it (ms); `None` once three refreshes were missed by
    /// `now`.
    pub(crate) fn info(self, first: u64, last: u64, now: u64) -> Option<WorkerInfo> {
        if last.saturating_add(self.every_ms.saturating_mul(3)) < now {
            return None;
        }
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        Some(WorkerInfo {
            id: self.id,
            name: self.name,
            host: self.host,
            pid: self.pid,
            started_at: at(first),
            last_seen: at(last),
            concurrency: self.concurrency,
            running: self
                .running
                .into_iter()
                .map(|run| RunInfo {
                    id: run.id,
                    attempt: run.attempt,
                    started_at: at(run.at),
                })
                .collect(),
            stopping: self.stopping,
        })
    }
}

/// The name of the host this process runs on (`unknown` if it cannot be
/// read).
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
