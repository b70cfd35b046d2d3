//! What the admin tests share: the repository's server helpers (a
//! throwaway `redis-server`, this binary's PostgreSQL database), queues
//! seeded with entries in every state, and polling.

#![allow(dead_code)]

#[path = "../../../tests/common/pg.rs"]
pub mod pg;
#[path = "../../../tests/common/redis_server.rs"]
pub mod redis_server;

use std::fmt::Debug;
use std::time::Duration;

use punctual::MissedTicks;
use punctual::durable::{Durable, InsertOptions, KeyLimit, Outcome, QueueStats, Rate, Worker};
use punctual::postgres::PgQueue;
use punctual::redis::RedisQueue;
use serde_json::{Value, json};

/// Leases of the seeded queues: long enough that the held entry stays
/// leased through any test.
pub const LEASE: Duration = Duration::from_secs(3600);

/// Pending entries a seeded queue holds besides its retries and ticks.
pub const ORDERS: usize = 120;

pub async fn redis_queue(url: &str, name: &str) -> RedisQueue<Value> {
    RedisQueue::builder(name)
        .url(url)
        .lease(LEASE)
        .build()
        .await
        .expect("the test's Redis answers")
}

pub async fn pg_queue(url: &str, name: &str) -> PgQueue<Value> {
    pg_queue_in(url, "punctual", name).await
}

/// Queue `name` in `schema`: tests that share this binary's database keep
/// apart in schemas of their own.
pub async fn pg_queue_in(url: &str, schema: &str, name: &str) -> PgQueue<Value> {
    PgQueue::builder(name)
        .url(url)
        .schema(schema)
        .lease(LEASE)
        .build()
        .await
        .expect("the test's PostgreSQL answers")
}

/// What a seeded queue holds: 3 dead letters (`dead-1`..`dead-3`, each
/// with its reason), 2 retries waiting (`retry-1`, `retry-2`, attempt 1),
/// 1 entry leased (`leased-1`, held by the test through `Held`), 2 due
/// (`due-1`, `due-2`), [`ORDERS`] pending orders (`order-001`... due every
/// 30 s from 4.5 minutes from now), and 2 schedules (`nightly-report` every hour,
/// `cleanup` every 5 minutes by cron).
pub const SEEDED: QueueStats = QueueStats {
    pending: ORDERS as u64 + 2 + 2,
    due: 2,
    leased: 1,
    dead: 3,
};

/// A leased entry, held so that it stays leased.
pub enum Held {
    Redis(punctual::redis::Delivery<Value>),
    Postgres(punctual::postgres::Delivery<Value>),
}

pub async fn seed_redis(queue: &RedisQueue<Value>) -> Held {
    failures(queue).await;
    queue
        .insert_with_id(
            "leased-1",
            &json!({"order": 7, "step": "charge"}),
            Duration::ZERO,
        )
        .await
        .unwrap();
    let held = queue.try_take().await.unwrap().expect("leased-1 is due");
    assert_eq!(held.id(), "leased-1");
    rest(queue).await;
    Held::Redis(held)
}

pub async fn seed_pg(queue: &PgQueue<Value>) -> Held {
    failures(queue).await;
    queue
        .insert_with_id(
            "leased-1",
            &json!({"order": 7, "step": "charge"}),
            Duration::ZERO,
        )
        .await
        .unwrap();
    let held = queue.try_take().await.unwrap().expect("leased-1 is due");
    assert_eq!(held.id(), "leased-1");
    rest(queue).await;
    Held::Postgres(held)
}

/// Dead letters and retries, made the way an application makes them: a
/// worker whose handler gives up on some jobs and retries others.
async fn failures<Q>(queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: Debug,
{
    let reasons = [
        "card declined (issuer code 51)",
        "address not found: 221B Baker Street",
        "payload schema v3 not supported",
    ];
    for (i, reason) in reasons.iter().enumerate() {
        queue
            .insert_with_id(
                &format!("dead-{}", i + 1),
                &json!({"order": 100 + i, "fail": reason}),
                Duration::ZERO,
            )
            .await
            .unwrap();
    }
    for (i, minutes) in [7_u64, 23].iter().enumerate() {
        queue
            .insert_with_id(
                &format!("retry-{}", i + 1),
                &json!({"email": format!("user{}@example.com", i + 1), "retry_in_min": minutes}),
                Duration::ZERO,
            )
            .await
            .unwrap();
    }
    let worker = Worker::builder(queue.clone()).spawn(|job| async move {
        let value = job.value();
        if let Some(reason) = value["fail"].as_str() {
            Outcome::discard(reason)
        } else {
            let minutes = value["retry_in_min"].as_u64().unwrap_or(10);
            Outcome::retry_after(
                "smtp 421: mailbox busy, try later",
                Duration::from_secs(minutes * 60),
            )
        }
    });
    eventually("the worker fails its jobs", || async {
        let s = queue.stats().await.unwrap();
        s.dead == 3 && s.pending == 2 && s.due == 0 && s.leased == 0
    })
    .await;
    worker.shutdown(Duration::from_secs(5)).await;
}

async fn rest<Q>(queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: Debug,
{
    for i in 1..=2 {
        queue
            .insert_with_id(
                &format!("due-{i}"),
                &json!({"order": 200 + i, "step": "ship"}),
                Duration::ZERO,
            )
            .await
            .unwrap();
    }
    let orders: Vec<(Value, Duration)> = (1..=ORDERS)
        .map(|i| {
            (
                json!({"order": i, "total_cents": 1000 + 37 * i, "currency": "EUR"}),
                Duration::from_secs(240 + 30 * i as u64),
            )
        })
        .collect();
    // Ids of our own so the tests can name them: order-001, ...
    for (i, (value, delay)) in orders.iter().enumerate() {
        queue
            .insert_with_id(&format!("order-{:03}", i + 1), value, *delay)
            .await
            .unwrap();
    }
    queue
        .schedule_every(
            "nightly-report",
            Duration::from_secs(3600),
            MissedTicks::Skip,
            &json!({"report": "nightly"}),
        )
        .await
        .unwrap();
    queue
        .schedule_cron("cleanup", cleanup_spec(), &json!({"task": "cleanup"}))
        .await
        .unwrap();
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats, SEEDED, "seeded");
}

/// The cron spec of a seeded queue's `cleanup` schedule: daily, at the
/// hour twelve hours from when the test binary first asks (UTC), so that
/// its tick never comes due while a test runs (a `*/5` spec did when a
/// run crossed a five-minute boundary: a third due entry, one pending
/// fewer). The same for every test of a binary.
pub fn cleanup_spec() -> &'static str {
    static SPEC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        #[allow(clippy::disallowed_methods)]
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let hour = (now / 3600 + 12) % 24;
        format!("0 {hour} * * *")
    })
}

/// The limit of `tenant-a` in a queue seeded by [`seed_keyed`].
pub const TENANT_A: KeyLimit = KeyLimit {
    concurrency: Some(2),
    rate: None,
};

/// The default limit (`*`) of a queue seeded by [`seed_keyed`].
pub const DEFAULT_LIMIT: KeyLimit = KeyLimit {
    concurrency: None,
    rate: Some(Rate {
        max: 100,
        per: Duration::from_secs(60),
    }),
};

/// How many entries of a queue seeded by [`seed_keyed`] are due: the
/// test takes them all (`a-1`, `a-2` of key `tenant-a`, `b-1` of key
/// `tenant-b`) and holds them, so that two of `tenant-a` and one of
/// `tenant-b` run.
pub const KEYED_DUE: usize = 3;

/// Entries with keys and priorities, and key limits, as tenant-fair
/// workloads make them: `a-1`, `a-2` (key `tenant-a`) and `b-1` (key
/// `tenant-b`), priority 5, due now; `urgent` (no key, priority 9) and
/// `later` (key `tenant-c`, priority -2), due in an hour. `tenant-a` has
/// its own limit ([`TENANT_A`]); the default is [`DEFAULT_LIMIT`].
pub async fn seed_keyed<Q>(queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: Debug,
{
    let due = |id: &str, key: &str| InsertOptions::new().id(id).key(key).priority(5);
    let hour = Duration::from_secs(3600);
    let entries = vec![
        (json!({"job": "a-1"}), due("a-1", "tenant-a")),
        (json!({"job": "a-2"}), due("a-2", "tenant-a")),
        (json!({"job": "b-1"}), due("b-1", "tenant-b")),
        (
            json!({"job": "urgent"}),
            InsertOptions::new().id("urgent").priority(9).delay(hour),
        ),
        (
            json!({"job": "later"}),
            InsertOptions::new()
                .id("later")
                .key("tenant-c")
                .priority(-2)
                .delay(hour),
        ),
    ];
    let ids = queue.insert_many_with(&entries).await.unwrap();
    assert!(ids.iter().all(Option::is_some), "{ids:?}");
    assert!(queue.set_key_limit("tenant-a", TENANT_A).await.unwrap());
    assert!(queue.set_default_key_limit(DEFAULT_LIMIT).await.unwrap());
}

/// Which of the health and results calls `queue`'s store does not answer
/// yet (the Redis and PostgreSQL stores answered `Unsupported` while
/// their scripts were being written), if any: a test that needs them
/// says it skipped on that store and returns. Once the store answers
/// them all, the test runs whole.
pub async fn unsupported<Q>(queue: &Q) -> Option<String>
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Display,
{
    let said = |name: &str, e: Option<Q::Error>| {
        e.filter(|e| e.to_string().starts_with("unsupported"))
            .map(|e| format!("{name}: {e}"))
    };
    let since = std::time::UNIX_EPOCH;
    said("workers", queue.workers().await.err())
        .or(said("latency", queue.latency().await.err()))
        .or(said("history", queue.history(since).await.err()))
        .or(said("result", queue.result("probe").await.err()))
        .or(said("cancel", queue.cancel("probe").await.err()))
        .or(said(
            "pause_schedule",
            queue.pause_schedule("probe").await.err(),
        ))
        .or(said(
            "entries_newest",
            queue
                .entries_newest(punctual::durable::EntryState::Dead, None, 1)
                .await
                .err(),
        ))
}

/// Fails the test, naming the call, when the store of `$queue` does not
/// answer the health and results calls (every store does).
#[macro_export]
macro_rules! assert_supported {
    ($queue:expr, $what:expr) => {
        if let Some(why) = common::unsupported($queue).await {
            panic!("{}: the store does not answer {why}", $what);
        }
    };
}

/// A queue with work done and under way, as a worker leaves it: its
/// worker (`renderer`, one place) did `quick-1`..`quick-3` (each
/// `Outcome::done_with({"pages": n})`) and now runs `slow-1` (until it is
/// cancelled), while `waiting` is due and waits for the place. The queue
/// should keep results.
pub async fn seed_runs<Q>(queue: &Q) -> Worker
where
    Q: Durable<Item = Value>,
    Q::Error: Debug,
{
    let worker = Worker::builder(queue.clone())
        .name("renderer")
        .concurrency(1)
        .spawn(|job| async move {
            if job.value()["hold"] == json!(true) {
                let cancelled = job.cancelled();
                tokio::select! {
                    () = cancelled => {}
                    () = tokio::time::sleep(Duration::from_secs(3600)) => {}
                }
                Outcome::Done
            } else {
                Outcome::done_with(&json!({"pages": job.value()["render"]}))
            }
        });
    for n in 1..=3 {
        queue
            .insert_with_id(&format!("quick-{n}"), &json!({"render": n}), Duration::ZERO)
            .await
            .unwrap();
    }
    eventually("the quick ones are done", || async {
        let s = queue.stats().await.unwrap();
        s.due + s.leased + s.pending == 0
    })
    .await;
    queue
        .insert_with_id("slow-1", &json!({"hold": true}), Duration::ZERO)
        .await
        .unwrap();
    eventually("slow-1 runs, its worker's record says so", || async {
        queue.stats().await.unwrap().leased == 1
            && queue
                .workers()
                .await
                .unwrap()
                .first()
                .is_some_and(|w| w.running.first().is_some_and(|r| r.id == "slow-1"))
    })
    .await;
    queue
        .insert_with_id("waiting", &json!({"render": 4}), Duration::ZERO)
        .await
        .unwrap();
    worker
}

/// Dead letters, each died after the one before: `dead-1`..`dead-{n}`,
/// discarded with a reason (`dead-2`'s a long one of several lines).
pub async fn seed_dead<Q>(queue: &Q, n: usize)
where
    Q: Durable<Item = Value>,
    Q::Error: Debug,
{
    let worker = Worker::builder(queue.clone()).spawn(|job| async move {
        let reason = job.value()["why"].as_str().unwrap_or("no").to_owned();
        Outcome::discard(reason)
    });
    for i in 1..=n {
        let why = if i == 2 {
            LONG_ERROR.to_owned()
        } else {
            format!("bad input {i}")
        };
        queue
            .insert_with_id(
                &format!("dead-{i}"),
                &json!({"n": i, "why": why}),
                Duration::ZERO,
            )
            .await
            .unwrap();
        eventually("it died", || async {
            queue.stats().await.unwrap().dead == i as u64
        })
        .await;
    }
    worker.shutdown(Duration::from_secs(5)).await;
}

/// `dead-2`'s reason: long, over several lines (a stack trace).
pub const LONG_ERROR: &str = "Traceback (most recent call last):\n  File \"render.py\", line 12, in <module>\n    render(page)\n  File \"render.py\", line 7, in render\n    raise ValueError(\"the template refers to a field that the payload does not have: customer.address.line2\")\nValueError: the template refers to a field that the payload does not have";

/// Polls `check` every 20 ms until it holds; panics after 15 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
