//! `MemoryQueue` on Tokio's paused clock: a `Worker` runs cron schedules
//! across real daylight saving changes (Europe/Berlin and America/New_York,
//! both directions) in milliseconds, each local instant once, and retries
//! an hour apart without waiting an hour.
//!
//! The expected instants are written out in UTC from the zones' rules
//! (API.md, "Cron time zones"): a fixed hour inside a repeated hour runs at
//! its first occurrence only; one inside a skipped hour at the first valid
//! instant after the gap; an hour field of `*` follows the real clock.

#![cfg(feature = "cron")]

use chrono::{DateTime, TimeDelta, Utc};
use punctual::durable::{Backoff, Job, Worker};
use punctual::memory::MemoryQueue;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Which schedule ran for which instant (`Job::deadline`), in order.
type Runs = Arc<Mutex<BTreeMap<String, Vec<DateTime<Utc>>>>>;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Runs `schedules` (name, expression) on a memory queue whose clock starts
/// at `from`, with a worker, until the queue's clock reads `to` (paused
/// time: instantly); what ran, by schedule.
async fn run_cron(
    from: &str,
    to: &str,
    schedules: &[(&str, &str)],
) -> BTreeMap<String, Vec<DateTime<Utc>>> {
    let from = utc(from);
    let to = utc(to);
    let queue: MemoryQueue<String> = MemoryQueue::builder("cron")
        .start_at(SystemTime::from(from))
        .build();
    for (name, expr) in schedules {
        assert!(
            queue
                .schedule_cron(name, expr, &(*name).to_owned())
                .await
                .unwrap()
        );
    }
    let runs: Runs = Arc::default();
    let worker = Worker::builder(queue.clone()).spawn({
        let runs = Arc::clone(&runs);
        move |job: Job<String>| {
            let at = DateTime::<Utc>::from(job.deadline());
            let mut runs = runs.lock().unwrap();
            runs.entry(job.schedule().unwrap_or("?").to_owned())
                .or_default()
                .push(at);
            async { Ok::<(), String>(()) }
        }
    });
    let span = (to - from).to_std().unwrap();
    tokio::time::sleep(span + Duration::from_secs(1)).await;
    let now = DateTime::<Utc>::from(queue.now().await.unwrap());
    assert!(now >= to, "the queue's clock reads {now}");
    let stats = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!((stats.failed, stats.lost), (0, 0), "{stats:?}");
    runs.lock().unwrap().clone()
}

fn instants(list: &[&str]) -> Vec<DateTime<Utc>> {
    list.iter().map(|s| utc(s)).collect()
}

/// Every whole hour after `from` up to `to`.
fn hours(from: &str, to: &str) -> Vec<DateTime<Utc>> {
    let (from, to) = (utc(from), utc(to));
    let mut at = from + TimeDelta::hours(1);
    let mut out = Vec::new();
    while at <= to {
        out.push(at);
        at += TimeDelta::hours(1);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn berlin_falling_back_runs_each_local_instant_once() {
    let (from, to) = ("2026-10-23T22:00:00Z", "2026-10-26T12:00:00Z");
    let runs = run_cron(
        from,
        to,
        &[
            ("report", "CRON_TZ=Europe/Berlin 0 3 * * *"),
            ("twice-local", "CRON_TZ=Europe/Berlin 30 2 * * *"),
            ("hourly", "CRON_TZ=Europe/Berlin 0 * * * *"),
        ],
    )
    .await;
    // 03:00 CEST, then 03:00 CET on the night the clocks go back.
    assert_eq!(
        runs["report"],
        instants(&[
            "2026-10-24T01:00:00Z",
            "2026-10-25T02:00:00Z",
            "2026-10-26T02:00:00Z"
        ])
    );
    // 02:30 happens twice on the 25th: it runs at the first only.
    assert_eq!(
        runs["twice-local"],
        instants(&[
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ])
    );
    // `*` hours follow the real clock: both 02:00s of the 25th run.
    assert_eq!(runs["hourly"], hours(from, to));
}

#[tokio::test(start_paused = true)]
async fn berlin_springing_forward_runs_a_skipped_time_after_the_gap() {
    let (from, to) = ("2026-03-27T22:00:00Z", "2026-03-30T12:00:00Z");
    let runs = run_cron(
        from,
        to,
        &[
            ("skipped-local", "CRON_TZ=Europe/Berlin 30 2 * * *"),
            ("hourly", "CRON_TZ=Europe/Berlin 0 * * * *"),
        ],
    )
    .await;
    // 02:30 does not exist on the 29th: it runs at 03:00 CEST.
    assert_eq!(
        runs["skipped-local"],
        instants(&[
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ])
    );
    assert_eq!(runs["hourly"], hours(from, to));
}

#[tokio::test(start_paused = true)]
async fn new_york_runs_each_local_instant_once_both_ways() {
    let runs = run_cron(
        "2026-10-30T12:00:00Z",
        "2026-11-02T18:00:00Z",
        &[("twice-local", "CRON_TZ=America/New_York 30 1 * * *")],
    )
    .await;
    assert_eq!(
        runs["twice-local"],
        instants(&[
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z"
        ])
    );
    let runs = run_cron(
        "2026-03-06T12:00:00Z",
        "2026-03-09T18:00:00Z",
        &[("skipped-local", "CRON_TZ=America/New_York 30 2 * * *")],
    )
    .await;
    assert_eq!(
        runs["skipped-local"],
        instants(&[
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z"
        ])
    );
}

/// A job failing with an hour's backoff runs again an hour of (paused)
/// time later, by the queue's clock.
#[tokio::test(start_paused = true)]
async fn retries_an_hour_apart_run_an_hour_apart_on_the_queues_clock() {
    let queue: MemoryQueue<u64> = MemoryQueue::new("retries");
    let seen: Arc<Mutex<Vec<(u32, SystemTime)>>> = Arc::default();
    let worker = Worker::builder(queue.clone())
        .backoff(Backoff::fixed(Duration::from_secs(3600)))
        .spawn({
            let seen = Arc::clone(&seen);
            let queue = queue.clone();
            move |job: Job<u64>| {
                let seen = Arc::clone(&seen);
                let queue = queue.clone();
                async move {
                    let now = queue.now().await.unwrap();
                    seen.lock().unwrap().push((job.attempt(), now));
                    if job.attempt() < 3 {
                        Err("not yet")
                    } else {
                        Ok(())
                    }
                }
            }
        });
    queue.insert(&1, Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2 * 3600 + 60)).await;
    let stats = worker.shutdown(Duration::ZERO).await;
    assert_eq!((stats.failed, stats.completed), (2, 1), "{stats:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2, 3]);
    for pair in seen.windows(2) {
        let apart = pair[1].1.duration_since(pair[0].1).unwrap();
        assert_eq!(apart.as_secs(), 3600, "{apart:?}");
    }
}
