//! The audit log: every write made through punctual-admin (its pages, its
//! JSON API, its command line), who made it and what came of it.
//!
//! There is no audit API in the library, so the log is a durable queue of
//! each store written to, [`AUDIT_QUEUE`](crate::store::AUDIT_QUEUE)
//! (`punctual-admin.audit`), hidden from every list: a write to a queue of
//! a store adds one entry to that store's log, its value the JSON
//! [`Record`], inserted due in [`KEEP`] (30 days) so that it stays pending
//! and nothing consumes it. Pending entries are in due order, which is the
//! order they were written in: the log reads newest first with
//! `entries_newest(Pending, ..)`, a page at a time, and an entry's time is
//! its due time less 30 days (the store's clock, no extra field). Once a
//! record is 30 days old it comes due; the next write to that store that
//! looks (at most once a minute per store) removes a page of those. No
//! task sweeps in the background.

use std::time::{Duration, SystemTime};

use punctual::durable::EntryInfo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::rfc3339;

/// How long a record is kept.
pub(crate) const KEEP: Duration = Duration::from_secs(30 * 86_400);

/// The most records of a store removed by one write once they are due.
pub(crate) const SWEEP_PAGE: usize = 100;

/// How often a store is looked at for records past [`KEEP`].
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Which face a write came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Via {
    /// A button of the pages.
    Page,
    /// The JSON API.
    Api,
    /// The command line, straight to the store.
    Cli,
}

/// Who asked for a write.
#[derive(Clone, Debug)]
pub(crate) struct Who {
    pub(crate) via: Via,
    /// The peer's address (`ip:port`) where the server knows it; the
    /// command line's `user@host`.
    pub(crate) from: Option<String>,
    /// What `X-Forwarded-For` said, as said (a proxy's word, not checked).
    pub(crate) forwarded_for: Option<String>,
    /// Whether the request carried the dashboard's token (a bearer header
    /// or the login's cookie).
    pub(crate) token: bool,
}

impl Who {
    /// The command line of this process: `user@host`.
    pub(crate) fn cli() -> Who {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("USERNAME"))
            .unwrap_or_else(|_| "?".to_owned());
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "?".to_owned());
        Who {
            via: Via::Cli,
            from: Some(format!("{user}@{host}")),
            forwarded_for: None,
            token: false,
        }
    }
}

/// One write, as kept (the entry's value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// `pause`, `requeue`, `remove`, `cancel`, `bulk-requeue`, ...
    pub(crate) action: String,
    /// The queue's name.
    pub(crate) queue: String,
    /// The entries, schedules or keys it named.
    #[serde(default)]
    pub(crate) ids: Vec<String>,
    /// What else it said (`delay 10m`, `all dead letters`, a limit).
    #[serde(default)]
    pub(crate) detail: Option<String>,
    /// Whether it went through.
    pub(crate) ok: bool,
    /// How many things it changed.
    #[serde(default)]
    pub(crate) changed: u64,
    /// Why not, when it failed.
    #[serde(default)]
    pub(crate) error: Option<String>,
    pub(crate) via: Via,
    #[serde(default)]
    pub(crate) from: Option<String>,
    #[serde(default)]
    pub(crate) forwarded_for: Option<String>,
    #[serde(default)]
    pub(crate) token: bool,
}

/// A record as listed: the entry's id, when (the store's clock), the
/// store's identity, and the record.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Listed {
    pub(crate) id: String,
    pub(crate) at: SystemTime,
    pub(crate) record: Option<Record>,
}

impl Listed {
    pub(crate) fn of(entry: &EntryInfo<Value>) -> Listed {
        Listed::new(&entry.id, entry.due, entry.value.as_ref())
    }

    /// The record of entry `id`, due at `due`, of value `value`.
    fn new(id: &str, due: SystemTime, value: Option<&Value>) -> Listed {
        Listed {
            id: id.to_owned(),
            at: due.checked_sub(KEEP).unwrap_or(due),
            record: value.and_then(|v| serde_json::from_value(v.clone()).ok()),
        }
    }
}

/// A record as the JSON API and `audit --json` answer it: `{"id", "at",
/// "store", "action", "queue", "ids", "detail", "ok", "changed", "error",
/// "via", "from", "forwarded_for", "token"}`.
#[derive(Debug, Serialize)]
pub(crate) struct RecordJson {
    pub(crate) id: String,
    pub(crate) at: String,
    pub(crate) store: String,
    #[serde(flatten)]
    pub(crate) record: Option<Record>,
}

impl RecordJson {
    pub(crate) fn of(listed: &Listed, store: &str) -> RecordJson {
        RecordJson {
            id: listed.id.clone(),
            at: rfc3339(listed.at),
            store: store.to_owned(),
            record: listed.record.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_records_time_is_its_due_time_less_what_it_is_kept() {
        let written = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let record = Record {
            action: "requeue".into(),
            queue: "orders".into(),
            ids: vec!["dead-1".into()],
            detail: Some("delay 10m".into()),
            ok: true,
            changed: 1,
            error: None,
            via: Via::Api,
            from: Some("127.0.0.1:5000".into()),
            forwarded_for: None,
            token: true,
        };
        let value = serde_json::to_value(&record).unwrap();
        let listed = Listed::new("#7", written + KEEP, Some(&value));
        assert_eq!(listed.at, written);
        assert_eq!(listed.record.as_ref(), Some(&record));
        let doc = serde_json::to_value(RecordJson::of(&listed, "redis")).unwrap();
        assert_eq!(doc["via"], json!("api"));
        assert_eq!(doc["store"], json!("redis"));
        assert_eq!(doc["ids"], json!(["dead-1"]));
        assert_eq!(doc["at"], json!(rfc3339(written)));
    }
}
