//! What the store-neutral tests (`on_every_store!`) need beyond the queue's
//! own API: real-time helpers, and a [`Backdoor`] into each store to see
//! what it holds and to corrupt a stored value.
//!
//! Included with `#[path = "common/store_extra.rs"] mod store_extra;` next
//! to `mod common;`. Times are real: the store's clock decides what is due,
//! so waits are bounded by a generous [`WAIT`] and time checks have
//! [`SLACK`] (both stores keep milliseconds, rounded down).

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, SystemTime};

/// Bound for anything that is expected to happen (never reached when green).
pub const WAIT: Duration = Duration::from_secs(10);
/// A delay no test reaches: the entry stays pending.
pub const HOUR: Duration = Duration::from_secs(3600);
/// Slack on time checks: the stores keep milliseconds, rounded down.
pub const SLACK: Duration = Duration::from_millis(5);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The wall clock of this machine, which is also the stores' clock.
#[allow(clippy::disallowed_methods)] // the stores decide with the real clock
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// `fut`, or a panic naming `what` if it takes longer than `WAIT`.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {WAIT:?}"))
}

/// Polls `check` until it holds; panics naming `what` after `WAIT`.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < give_up,
            "{what}: not true after {WAIT:?}"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// Asserts `lo - SLACK <= t <= hi + SLACK`.
pub fn assert_between(t: SystemTime, lo: SystemTime, hi: SystemTime, what: &str) {
    assert!(
        t + SLACK >= lo && t <= hi + SLACK,
        "{what}: {t:?} not within [{lo:?}, {hi:?}]"
    );
}

/// A look behind a store's API, for what a test body cannot see through
/// the queue: what is stored, and a value that no longer decodes.
pub trait Backdoor {
    /// What the store holds for queue `name`, sorted (Redis: its keys;
    /// PostgreSQL: its rows, whole).
    fn footprint(&self, name: &str) -> Vec<String>;
    /// What the store holds for every queue, sorted.
    fn footprint_all(&self) -> Vec<String>;
    /// How many items `footprint` shows for a queue with an entry in each
    /// state (pending, due, leased, dead) and no schedule.
    const FOUR_STATES: usize;
    /// Overwrites the stored JSON of entry `id` of queue `name` with `raw`.
    fn corrupt(&self, name: &str, id: &str, raw: &str);
}

/// Memory: what the queue's API shows of it (counts by state, schedules,
/// dead letters); no raw bytes to corrupt.
impl Backdoor for crate::common::stores::memory::Store {
    fn footprint(&self, name: &str) -> Vec<String> {
        let queue = self.queues.lock().unwrap().get(name).cloned();
        let Some(queue) = queue else {
            return Vec::new();
        };
        use futures::FutureExt;
        // Memory calls are ready at their first poll.
        let now =
            |call: std::pin::Pin<&mut dyn Future<Output = _>>| call.now_or_never().expect("ready");
        let stats = now(std::pin::pin!(queue.stats())).unwrap();
        let mut out: Vec<String> = [
            ("pending", stats.pending),
            ("due", stats.due),
            ("leased", stats.leased),
            ("dead", stats.dead),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(state, n)| format!("{name} {state} {n}"))
        .collect();
        let schedules = std::pin::pin!(queue.schedules())
            .now_or_never()
            .expect("ready");
        for schedule in schedules.unwrap() {
            out.push(format!(
                "{name} schedule {} {}",
                schedule.name, schedule.spec
            ));
        }
        out.sort();
        out
    }

    fn footprint_all(&self) -> Vec<String> {
        let names: Vec<String> = self.queues.lock().unwrap().keys().cloned().collect();
        let mut out: Vec<String> = names.iter().flat_map(|name| self.footprint(name)).collect();
        out.sort();
        out
    }

    // One line per state.
    const FOUR_STATES: usize = 4;

    fn corrupt(&self, _name: &str, _id: &str, _raw: &str) {
        unreachable!("the memory store keeps no raw bytes: a test that corrupts is durable-only");
    }
}

#[cfg(feature = "redis")]
impl Backdoor for crate::common::stores::redis::Store {
    fn footprint(&self, name: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .server
            .cli(&["KEYS", &format!("punctual:{{{name}}}:*")])
            .lines()
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    }

    fn footprint_all(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .server
            .cli(&["KEYS", "*"])
            .lines()
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    }

    // schedule, entries, leases, dead and seq (`schedules` only with a
    // schedule).
    const FOUR_STATES: usize = 5;

    fn corrupt(&self, name: &str, id: &str, raw: &str) {
        let key = format!("punctual:{{{name}}}:entries");
        let field = format!("v:{id}");
        let exists = self.server.cli(&["HEXISTS", &key, &field]);
        assert_eq!(exists, "1", "{key} has no {field}");
        self.server.cli(&["HSET", &key, &field, raw]);
    }
}

#[cfg(feature = "postgres")]
impl Backdoor for crate::common::stores::pg::Store {
    fn footprint(&self, name: &str) -> Vec<String> {
        let s = &self.schema;
        let name = name.replace('\'', "''");
        rows(&self.db.psql(&format!(
            "SELECT 'entry ' || e::text FROM {s}.entries e WHERE queue = '{name}' \
             UNION ALL SELECT 'schedule ' || x::text FROM {s}.schedules x WHERE queue = '{name}'"
        )))
    }

    fn footprint_all(&self) -> Vec<String> {
        let s = &self.schema;
        rows(&self.db.psql(&format!(
            "SELECT 'entry ' || e::text FROM {s}.entries e \
             UNION ALL SELECT 'schedule ' || x::text FROM {s}.schedules x"
        )))
    }

    // One row per entry.
    const FOUR_STATES: usize = 4;

    fn corrupt(&self, name: &str, id: &str, raw: &str) {
        let s = &self.schema;
        let q = |v: &str| v.replace('\'', "''");
        let updated = self.db.psql(&format!(
            "WITH u AS (UPDATE {s}.entries SET value = '{}' \
             WHERE queue = '{}' AND id = '{}' RETURNING 1) SELECT count(*) FROM u",
            q(raw),
            q(name),
            q(id)
        ));
        assert_eq!(updated, "1", "no entry {id:?} in queue {name:?}");
    }
}

#[cfg(feature = "postgres")]
fn rows(out: &str) -> Vec<String> {
    let mut rows: Vec<String> = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    rows.sort();
    rows
}
