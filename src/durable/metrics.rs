//! What the durable queues and workers report through the `metrics` facade
//! (cargo feature `metrics`; without it, these functions do nothing).
//! Names follow OpenTelemetry's messaging conventions where they exist; every
//! series carries `messaging.system="punctual"`,
//! `messaging.destination.name=<queue>` and `punctual.store`.
//!
//! | name | kind | when |
//! |---|---|---|
//! | `messaging.client.sent.messages` | counter | per entry inserted (`messaging.operation.name` = `insert`, `schedule`) |
//! | `messaging.client.consumed.messages` | counter | per entry delivered |
//! | `messaging.process.duration` | histogram, s | per handler run (`punctual.outcome`; `error.type` on failure) |
//! | `punctual.delivery.lateness` | histogram, s | per delivery: claim time minus due time, store clock (`punctual.delivery.kind`) |
//! | `punctual.queue.entries` | gauge | by `punctual.entry.state`, from each running `Worker` every 15 s |
//! | `punctual.worker.running` | gauge | handlers running now |

use std::time::{Duration, SystemTime};

use super::QueueStats;

/// How often a running worker reads its queue's counts for
/// `punctual.queue.entries`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const STATS_EVERY: Duration = Duration::from_secs(15);

/// What a delivery was, for `punctual.delivery.kind`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn delivery_kind(attempt: u32, tick: bool) -> &'static str {
    if tick {
        "tick"
    } else if attempt > 1 {
        "retry"
    } else {
        "first"
    }
}

#[cfg(feature = "metrics")]
mod on {
    use metrics::Label;

    pub(super) fn labels(store: &'static str, queue: &str) -> Vec<Label> {
        vec![
            Label::from_static_parts("messaging.system", "punctual"),
            Label::new("messaging.destination.name", queue.to_owned()),
            Label::from_static_parts("punctual.store", store),
        ]
    }

    pub(super) fn with(
        mut labels: Vec<Label>,
        key: &'static str,
        value: &'static str,
    ) -> Vec<Label> {
        labels.push(Label::from_static_parts(key, value));
        labels
    }
}

/// `n` entries inserted by `operation` (`insert`, `schedule`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn inserted(store: &'static str, queue: &str, operation: &'static str, n: u64) {
    #[cfg(feature = "metrics")]
    if n > 0 {
        let labels = on::with(
            on::labels(store, queue),
            "messaging.operation.name",
            operation,
        );
        metrics::counter!("messaging.client.sent.messages", labels).increment(n);
    }
}

/// Entries delivered by a claim at `now` (the store's clock): each one's
/// attempt, due time and whether it is a tick.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn delivered(
    store: &'static str,
    queue: &str,
    now: SystemTime,
    deliveries: impl Iterator<Item = (u32, SystemTime, bool)>,
) {
    #[cfg(feature = "metrics")]
    {
        let base = on::labels(store, queue);
        let mut n = 0;
        for (attempt, due, tick) in deliveries {
            n += 1;
            let late = now.duration_since(due).unwrap_or_default();
            let kind = delivery_kind(attempt, tick);
            let labels = on::with(base.clone(), "punctual.delivery.kind", kind);
            metrics::histogram!("punctual.delivery.lateness", labels).record(late.as_secs_f64());
        }
        if n > 0 {
            metrics::counter!("messaging.client.consumed.messages", base).increment(n);
        }
    }
}

/// A handler run that took `took` and ended in `outcome` (`done`, `retry`,
/// `snooze`, `discard`, `dead`, `timeout`, `panic`, `lost`); `error` names
/// a failure's type.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn processed(
    store: &'static str,
    queue: &str,
    took: Duration,
    outcome: &'static str,
    error: Option<&'static str>,
) {
    #[cfg(feature = "metrics")]
    {
        let mut labels = on::with(on::labels(store, queue), "punctual.outcome", outcome);
        if let Some(error) = error {
            labels = on::with(labels, "error.type", error);
        }
        metrics::histogram!("messaging.process.duration", labels).record(took.as_secs_f64());
    }
}

/// A handler of a worker of `queue` started (`1`) or ended (`-1`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn running(store: &'static str, queue: &str, change: i8) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("punctual.worker.running", on::labels(store, queue))
        .increment(f64::from(change));
}

/// The queue's counts by state.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables, dead_code))]
pub(crate) fn entries(store: &'static str, queue: &str, stats: &QueueStats) {
    #[cfg(feature = "metrics")]
    for (state, n) in [
        ("pending", stats.pending),
        ("due", stats.due),
        ("leased", stats.leased),
        ("dead", stats.dead),
    ] {
        let labels = on::with(on::labels(store, queue), "punctual.entry.state", state);
        metrics::gauge!("punctual.queue.entries", labels).set(n as f64);
    }
}
