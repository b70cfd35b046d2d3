//! What a handler says of a job (`Outcome`: done, retry, snooze, discard),
//! entries that survive a rolling deploy (values a replica cannot decode),
//! and a service written once against `Durable`: one body per behaviour,
//! on every store.

mod common;

use common::wait::{HOUR, WAIT, eventually, ms, wall};
use punctual::MissedTicks;
use punctual::durable::{Backoff, Durable, Job, Outcome, Worker, WorkerStats};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Waits until the worker's stats satisfy `check`.
async fn stats_until(worker: &Worker, what: &str, check: impl Fn(&WorkerStats) -> bool) {
    eventually(what, || {
        let ok = check(&worker.stats());
        async move { ok }
    })
    .await;
}

/// What a handler saw of each delivery: attempt, deadline, and when it ran.
type Seen = Arc<Mutex<Vec<(u32, SystemTime, Instant)>>>;

/// A handler that notes each delivery and answers `say(attempt, run)`,
/// `run` counting the deliveries it saw from 1.
fn noting(
    seen: &Seen,
    say: impl Fn(u32, usize) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Job<u64>) -> std::future::Ready<Outcome> + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |job: Job<u64>| {
        let mut seen = seen.lock().unwrap();
        seen.push((job.attempt(), job.deadline(), Instant::now()));
        std::future::ready(say(job.attempt(), seen.len()))
    }
}

/// A value as an older release knows it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum TaskV1 {
    Email(String),
}

/// The same value in a newer release, with a new variant.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum TaskV2 {
    Email(String),
    Sms(String),
}

/// An order, as a service written against `Durable` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Order {
    id: u64,
    total_cents: u64,
}

/// A service written once against `Durable`: it places three orders (each
/// expiring in 30 minutes), sees one paid, postpones another, declares a
/// sweep schedule, and reports what the queue then shows. Nothing in it
/// names a store.
async fn shop<Q: Durable<Item = Order>>(queue: &Q) -> Result<Vec<String>, Q::Error> {
    let half_hour = Duration::from_secs(1800);
    let mut report = Vec::new();
    for id in 1..=3 {
        let order = Order {
            id,
            total_cents: 1000 * id,
        };
        let key = format!("order-{id}");
        report.push(format!(
            "{key} placed: {}",
            queue.insert_with_id(&key, &order, half_hour).await?
        ));
    }
    // A retried request does not place the order twice.
    let again = Order {
        id: 1,
        total_cents: 1,
    };
    report.push(format!(
        "order-1 again: {}",
        queue.insert_with_id("order-1", &again, half_hour).await?
    ));
    report.push(format!("order-2 paid: {}", queue.remove("order-2").await?));
    report.push(format!(
        "order-2 paid again: {}",
        queue.remove("order-2").await?
    ));
    report.push(format!(
        "order-3 postponed: {}",
        queue.reset("order-3", 2 * half_hour).await?
    ));
    let now = queue.now().await?;
    let d1 = queue.deadline("order-1").await?.expect("pending");
    let d3 = queue.deadline("order-3").await?.expect("pending");
    report.push(format!(
        "order-3 due after order-1 by about 30 minutes: {}",
        d3.duration_since(d1)
            .is_ok_and(|d| d.abs_diff(half_hour) < Duration::from_secs(5))
    ));
    report.push(format!(
        "order-1 due in about 30 minutes: {}",
        d1.duration_since(now)
            .is_ok_and(|d| d.abs_diff(half_hour) < Duration::from_secs(5))
    ));
    report.push(format!(
        "order-2 gone: {}",
        queue.deadline("order-2").await?.is_none()
    ));
    let sweep = Order {
        id: 0,
        total_cents: 0,
    };
    let every = Duration::from_secs(3600);
    report.push(format!(
        "sweep declared: {}",
        queue
            .schedule_every("sweep", every, MissedTicks::Skip, &sweep)
            .await?
    ));
    report.push(format!(
        "sweep declared again: {}",
        queue
            .schedule_every("sweep", every, MissedTicks::Skip, &sweep)
            .await?
    ));
    for s in queue.schedules().await? {
        report.push(format!("schedule {} {} {:?}", s.name, s.spec, s.value));
    }
    let ids = queue
        .insert_many(&[(sweep.clone(), HOUR), (sweep, HOUR)])
        .await?;
    report.push(format!("batch of {}", ids.len()));
    let stats = queue.stats().await?;
    report.push(format!("{stats:?}"));
    report.push(format!("queue {}", queue.name()));
    Ok(report)
}

common::stores::on_every_store! {
    async fn queue<T>(store: &Store, name: &str, max_attempts: u32) -> Q<T>
    where
        T: Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        store
            .builder(name)
            .lease(Duration::from_secs(20))
            .max_attempts(max_attempts)
            .build()
            .await
            .expect("connect")
    }

    /// `retry_after` replaces the backoff (an hour here) for that retry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retry_after_replaces_the_backoff() {
        let store = Store::start();
        let q: Q<u64> = queue(&store, "retry-after", 10).await;
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let seen: Seen = Arc::default();
        let worker = Worker::builder(q.clone())
            .backoff(Backoff::fixed(HOUR))
            .spawn(noting(&seen, |attempt, _| match attempt {
                1 => Outcome::retry_after("rate limited", ms(300)),
                _ => Outcome::Done,
            }));
        stats_until(&worker, "the second attempt is acked", |s| s.completed == 1).await;
        let stats = worker.shutdown(ms(100)).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2], "{STORE}");
        let waited = seen[1].2 - seen[0].2;
        assert!(waited >= ms(280) && waited < ms(3000), "{STORE}: retried after {waited:?}");
        assert_eq!((stats.failed, stats.completed, stats.dead), (1, 1, 0), "{STORE}: {stats:?}");
    }

    /// A snooze is not an attempt: with one attempt allowed, an entry
    /// snoozed three times still runs (its fourth delivery reports attempt
    /// 1) and never goes to the dead letters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snooze_is_not_an_attempt_and_never_dead_letters() {
        let store = Store::start();
        let q: Q<u64> = queue(&store, "snooze", 1).await;
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let seen: Seen = Arc::default();
        let worker = Worker::builder(q.clone()).spawn(noting(&seen, |_, run| {
            if run <= 3 { Outcome::Snooze(ms(100)) } else { Outcome::Done }
        }));
        stats_until(&worker, "the entry is acked", |s| s.completed == 1).await;
        let stats = worker.shutdown(ms(100)).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 1, 1, 1], "{STORE}");
        for pair in seen.windows(2) {
            let waited = pair[1].2 - pair[0].2;
            assert!(waited >= ms(90), "{STORE}: snoozed only {waited:?}");
        }
        assert_eq!(stats, WorkerStats { completed: 1, ..WorkerStats::default() }, "{STORE}");
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    /// A discard sends the entry to the dead letters at once, attempts left
    /// or not, with its reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_discard_dead_letters_at_once_with_its_reason() {
        let store = Store::start();
        let q: Q<u64> = queue(&store, "discard", 10).await;
        q.insert_with_id("bounced", &1, Duration::ZERO).await.unwrap();
        let seen: Seen = Arc::default();
        let worker = Worker::builder(q.clone())
            .spawn(noting(&seen, |_, _| Outcome::discard("mailbox does not exist")));
        stats_until(&worker, "the entry is dead", |s| s.dead == 1).await;
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!(seen.lock().unwrap().len(), 1, "{STORE}: delivered once");
        assert_eq!((stats.failed, stats.dead, stats.completed), (1, 1, 0), "{STORE}: {stats:?}");
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (dead[0].id.as_str(), dead[0].value, dead[0].attempts, dead[0].reason.as_str()),
            ("bounced", Some(1), 1, "mailbox does not exist"),
            "{STORE}"
        );
    }

    /// A snoozed tick keeps its instant; a discarded tick goes to the dead
    /// letters under `<name>@<instant>` and its schedule goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snoozed_tick_keeps_its_instant_and_a_discarded_one_lets_its_schedule_go_on() {
        let store = Store::start();
        let q: Q<u64> = queue(&store, "ticks", 10).await;
        q.schedule_every("t", ms(400), MissedTicks::Skip, &7).await.unwrap();
        let seen: Seen = Arc::default();
        // The first tick is snoozed twice, then discarded; the next is done.
        let worker = Worker::builder(q.clone()).spawn(noting(&seen, |_, run| match run {
            1 | 2 => Outcome::Snooze(ms(50)),
            3 => Outcome::discard("not today"),
            _ => Outcome::Done,
        }));
        stats_until(&worker, "a later tick is acked", |s| s.completed >= 1).await;
        let stats = worker.shutdown(ms(100)).await;
        let seen = seen.lock().unwrap().clone();
        let first = seen[0].1;
        assert!(seen[..3].iter().all(|s| s.1 == first && s.0 == 1), "{STORE}: {seen:?}");
        assert!(seen[3].1 > first, "{STORE}: the schedule went on: {seen:?}");
        assert_eq!((stats.dead, stats.failed), (1, 1), "{STORE}: {stats:?}");
        let dead = q.dead_letters(10).await.unwrap();
        let instant = first.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
        assert_eq!(dead.len(), 1, "{STORE}");
        assert_eq!(dead[0].id, format!("t@{instant}"), "{STORE}");
        assert_eq!(dead[0].reason, "not today");
        assert!(q.deadline("t").await.unwrap().is_some(), "{STORE}: the next tick exists");
    }

    /// Rolling deploys: an older replica's worker cannot decode a newer
    /// variant; each of its claims is a failed attempt, due again after a
    /// growing delay, and never reaches its handler; a newer replica's
    /// worker then runs it (its attempt counts the older one's).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_value_an_old_replica_cannot_decode_waits_for_a_new_one() {
        let store = Store::start();
        let new: Q<TaskV2> = queue(&store, "deploy", 10).await;
        let old: Q<TaskV1> = queue(&store, "deploy", 10).await;
        new.insert_with_id("sms", &TaskV2::Sms("hi".into()), Duration::ZERO).await.unwrap();
        let ran_old = Arc::new(Mutex::new(0));
        let old_worker = Worker::builder(old.clone()).spawn({
            let ran_old = Arc::clone(&ran_old);
            move |_job: Job<TaskV1>| {
                *ran_old.lock().unwrap() += 1;
                async { Outcome::Done }
            }
        });
        // Its first attempt fails at once: due again a second on.
        // (Not while leased: then it is due at its lease's end, 20 s on.)
        let retried = |after: SystemTime| {
            let new = new.clone();
            async move {
                let due = new.deadline("sms").await.unwrap();
                due.is_some_and(|at| at > after && at < wall() + ms(5000))
            }
        };
        eventually("the old worker's first attempt fails", || retried(wall() + ms(500))).await;
        let first_retry = new.deadline("sms").await.unwrap().unwrap();
        // Its second: due again two seconds on.
        eventually("the old worker's second attempt fails", || retried(first_retry + ms(1500)))
            .await;
        let old_stats = old_worker.shutdown(ms(100)).await;
        assert_eq!(*ran_old.lock().unwrap(), 0, "{STORE}: an undecodable value reached a handler");
        assert_eq!(old_stats, WorkerStats::default(), "{STORE}");
        // A replica with the new code takes it (after its delay) and runs it.
        let got: Arc<Mutex<Vec<(TaskV2, u32)>>> = Arc::default();
        let new_worker = Worker::builder(new.clone()).spawn({
            let got = Arc::clone(&got);
            move |job: Job<TaskV2>| {
                let attempt = job.attempt();
                got.lock().unwrap().push((job.into_value(), attempt));
                async { Outcome::Done }
            }
        });
        stats_until(&new_worker, "the new worker runs it", |s| s.completed == 1).await;
        new_worker.shutdown(ms(100)).await;
        assert_eq!(*got.lock().unwrap(), vec![(TaskV2::Sms("hi".into()), 3)], "{STORE}");
        assert_eq!(new.stats().await.unwrap(), Stats::default());
    }

    /// With `max_attempts(2)`, an entry no replica can decode goes to the
    /// dead letters after its second attempt, with a reason that says so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_undecodable_value_dead_letters_at_max_attempts() {
        let store = Store::start();
        let new: Q<TaskV2> = queue(&store, "deploy-dead", 2).await;
        let old: Q<TaskV1> = queue(&store, "deploy-dead", 2).await;
        new.insert_with_id("sms", &TaskV2::Sms("hi".into()), Duration::ZERO).await.unwrap();
        let worker = Worker::builder(old.clone())
            .spawn(|_job: Job<TaskV1>| async { Outcome::Done });
        let started = Instant::now();
        eventually("the entry dies", || async { new.stats().await.unwrap().dead == 1 }).await;
        assert!(started.elapsed() >= ms(900), "{STORE}: its second attempt waited its delay");
        worker.shutdown(ms(100)).await;
        let dead = new.dead_letters(10).await.unwrap();
        assert_eq!((dead[0].id.as_str(), dead[0].attempts), ("sms", 2), "{STORE}");
        assert_eq!(dead[0].value, Some(TaskV2::Sms("hi".into())));
        assert!(
            dead[0].reason.starts_with("value does not decode: "),
            "{STORE}: {}",
            dead[0].reason
        );
        let old_view = old.dead_letters(10).await.unwrap();
        assert_eq!(old_view[0].value, None, "{STORE}: the old type cannot read it");
    }

    /// A service written against `Durable` sees the same on every store.
    #[tokio::test]
    async fn a_service_written_against_durable_sees_the_same_on_every_store() {
        let store = Store::start();
        let q: Q<Order> = queue(&store, "shop", 10).await;
        let report = tokio::time::timeout(WAIT, shop(&q)).await.unwrap().unwrap();
        let want = [
            "order-1 placed: true",
            "order-2 placed: true",
            "order-3 placed: true",
            "order-1 again: false",
            "order-2 paid: true",
            "order-2 paid again: false",
            "order-3 postponed: true",
            "order-3 due after order-1 by about 30 minutes: true",
            "order-1 due in about 30 minutes: true",
            "order-2 gone: true",
            "sweep declared: true",
            "sweep declared again: false",
            "schedule sweep every 1h skip Order { id: 0, total_cents: 0 }",
            "batch of 2",
            "QueueStats { pending: 5, due: 0, leased: 0, dead: 0 }",
            "queue shop",
        ];
        assert_eq!(report, want, "{STORE}");
    }
}
