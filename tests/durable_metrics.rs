//! The metrics a worker's runs report through the `metrics` facade, with a
//! debugging recorder installed for this test binary: names and labels as
//! API.md's table has them, outcomes counted as they happened, lateness on
//! the store's clock. One body on every store.

#![cfg(feature = "metrics")]

mod common;

use common::wait::{HOUR, eventually, ms};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use punctual::durable::{Backoff, Job, Outcome, Worker};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The recorder every test of this binary shares (each reads its own
/// queue's series).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder");
        snapshotter
    })
}

/// One series: its kind, name and labels (sorted, `key=value`).
type Series = (MetricKind, String, Vec<String>);

/// What a series recorded.
#[derive(Debug, Clone)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// Everything recorded so far, by series with every label. The recorder's
/// snapshots drain it (counters and gauges to zero, histograms empty), and
/// the tests of this binary run at once: each snapshot is merged here, and
/// each test reads its own series from what was merged.
fn recorded() -> BTreeMap<Series, Value> {
    static ALL: Mutex<BTreeMap<Series, Value>> = Mutex::new(BTreeMap::new());
    let mut all = ALL.lock().unwrap();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key: CompositeKey = key;
        let mut labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let series = (key.kind(), key.key().name().to_owned(), labels);
        let value = match value {
            DebugValue::Counter(n) => Value::Counter(n),
            DebugValue::Gauge(v) => Value::Gauge(v.0),
            DebugValue::Histogram(values) => Value::Histogram(values.iter().map(|v| v.0).collect()),
        };
        let merged = match (all.remove(&series), value) {
            (Some(Value::Counter(a)), Value::Counter(b)) => Value::Counter(a + b),
            // Drained to zero each time: the deltas add up (a gauge that is
            // set rather than moved reads as a sum here).
            (Some(Value::Gauge(a)), Value::Gauge(b)) => Value::Gauge(a + b),
            (Some(Value::Histogram(mut a)), Value::Histogram(b)) => {
                a.extend(b);
                Value::Histogram(a)
            }
            (_, value) => value,
        };
        all.insert(series, merged);
    }
    all.clone()
}

/// The series of queue `queue` so far, by kind, name and labels (the labels
/// every series carries left out but checked).
fn series_of(queue: &str, store: &str) -> BTreeMap<Series, Value> {
    let mut out = BTreeMap::new();
    for ((kind, name, labels), value) in recorded() {
        if !labels.contains(&format!("messaging.destination.name={queue}")) {
            continue;
        }
        assert!(
            labels.contains(&"messaging.system=punctual".to_owned()),
            "{labels:?}"
        );
        assert!(
            labels.contains(&format!("punctual.store={store}")),
            "{labels:?}"
        );
        let own: Vec<String> = labels
            .into_iter()
            .filter(|l| {
                !l.starts_with("messaging.system=")
                    && !l.starts_with("messaging.destination.name=")
                    && !l.starts_with("punctual.store=")
            })
            .collect();
        out.insert((kind, name, own), value);
    }
    out
}

fn count(series: &BTreeMap<Series, Value>, kind: MetricKind, name: &str, labels: &[&str]) -> f64 {
    let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
    match series.get(&(kind, name.to_owned(), labels)) {
        Some(Value::Counter(n)) => *n as f64,
        Some(Value::Gauge(v)) => *v,
        Some(Value::Histogram(values)) => values.len() as f64,
        None => 0.0,
    }
}

fn histogram(series: &BTreeMap<Series, Value>, name: &str, labels: &[&str]) -> Vec<f64> {
    let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
    match series.get(&(MetricKind::Histogram, name.to_owned(), labels)) {
        Some(Value::Histogram(values)) => values.clone(),
        _ => Vec::new(),
    }
}

common::stores::on_every_store! {
    /// A worker runs four jobs: one done, one retried then done, one
    /// discarded, one failing into the dead letters; each run, delivery and
    /// insert is reported under the documented names and labels.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_workers_runs_report_their_names_labels_and_outcomes() {
        snapshotter();
        let store = Store::start();
        let name = format!("metrics-{STORE}");
        let q: Q<u64> = store.builder(&name).lease(HOUR).max_attempts(2).build().await.unwrap();
        q.insert_with_id("done", &1, ms(0)).await.unwrap();
        q.insert_with_id("retried", &2, ms(0)).await.unwrap();
        q.insert_with_id("discarded", &3, ms(0)).await.unwrap();
        q.insert_with_id("dead", &4, ms(0)).await.unwrap();
        assert!(!q.insert_with_id("done", &1, ms(0)).await.unwrap(), "a taken id inserts nothing");
        let worker = Worker::builder(q.clone())
            .backoff(Backoff::fixed(ms(100)))
            .spawn(|job: Job<u64>| async move {
                match (job.id(), job.attempt()) {
                    ("retried", 1) => Outcome::retry("once"),
                    ("discarded", _) => Outcome::discard("no"),
                    ("dead", _) => Outcome::retry("always"),
                    _ => Outcome::Done,
                }
            });
        eventually("every entry is done or dead", || async {
            let s = q.stats().await.unwrap();
            s.pending + s.due + s.leased == 0 && s.dead == 2
        })
        .await;
        tokio::time::sleep(ms(100)).await;
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.failed, stats.dead), (2, 4, 2), "{STORE}: {stats:?}");

        let series = series_of(&name, STORE);
        let sent = count(&series, MetricKind::Counter, "messaging.client.sent.messages",
            &["messaging.operation.name=insert"]);
        assert_eq!(sent, 4.0, "{STORE}: four entries inserted: {series:#?}");
        let consumed = count(&series, MetricKind::Counter, "messaging.client.consumed.messages", &[]);
        assert_eq!(consumed, 6.0, "{STORE}: six deliveries");
        let process = "messaging.process.duration";
        assert_eq!(count(&series, MetricKind::Histogram, process, &["punctual.outcome=done"]), 2.0);
        assert_eq!(
            count(&series, MetricKind::Histogram, process, &["error.type=handler", "punctual.outcome=retry"]),
            2.0,
            "{STORE}: {series:#?}"
        );
        assert_eq!(
            count(&series, MetricKind::Histogram, process, &["error.type=handler", "punctual.outcome=discard"]),
            1.0
        );
        assert_eq!(
            count(&series, MetricKind::Histogram, process, &["error.type=handler", "punctual.outcome=dead"]),
            1.0,
            "{STORE}: a failure that dead-letters is reported dead"
        );
        let lateness = "punctual.delivery.lateness";
        let first = histogram(&series, lateness, &["punctual.delivery.kind=first"]);
        let retry = histogram(&series, lateness, &["punctual.delivery.kind=retry"]);
        assert_eq!((first.len(), retry.len()), (4, 2), "{STORE}: {series:#?}");
        // On the store's clock: never negative, and not counting the time
        // the entries waited in this test before the worker started.
        assert!(first.iter().chain(&retry).all(|s| (0.0..5.0).contains(s)), "{STORE}: {first:?} {retry:?}");
        assert_eq!(count(&series, MetricKind::Gauge, "punctual.worker.running", &[]), 0.0);
        assert!(
            series.contains_key(&(MetricKind::Gauge, "punctual.queue.entries".to_owned(),
                vec!["punctual.entry.state=pending".to_owned()])),
            "{STORE}: the worker reports the queue's counts"
        );
    }

    /// A tick's delivery is a `tick`, and a schedule created counts as
    /// sent by `schedule`.
    #[tokio::test]
    async fn ticks_and_schedules_have_their_own_labels() {
        snapshotter();
        let store = Store::start();
        let name = format!("metrics-ticks-{STORE}");
        let q: Q<u64> = store.builder(&name).lease(HOUR).build().await.unwrap();
        assert!(q.schedule_every("t", ms(100), punctual::MissedTicks::Skip, &1).await.unwrap());
        assert!(!q.schedule_every("t", ms(100), punctual::MissedTicks::Skip, &1).await.unwrap());
        let d = q.take_timeout(Duration::from_secs(5)).await.unwrap().expect("a tick");
        assert!(d.ack().await.unwrap());
        let series = series_of(&name, STORE);
        assert_eq!(
            count(&series, MetricKind::Counter, "messaging.client.sent.messages",
                &["messaging.operation.name=schedule"]),
            1.0,
            "{STORE}: {series:#?}"
        );
        let ticks = histogram(&series, "punctual.delivery.lateness", &["punctual.delivery.kind=tick"]);
        assert_eq!(ticks.len(), 1, "{STORE}: {series:#?}");
    }
}
