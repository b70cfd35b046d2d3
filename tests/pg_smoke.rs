//! First checks of `PgQueue` against the local PostgreSQL.

#![cfg(feature = "postgres")]

mod common;

use common::pg::PgDb;
use punctual::durable::Worker;
use punctual::postgres::PgQueue;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn insert_take_ack_retry_dead() {
    let db = PgDb::new();
    let q: PgQueue<u64> = PgQueue::builder("smoke")
        .url(&db.url())
        .lease(ms(300))
        .max_attempts(2)
        .poll_interval(ms(50))
        .build()
        .await
        .unwrap();
    let a = q.insert(&1, Duration::ZERO).await.unwrap();
    assert!(q.insert_with_id("x", &2, ms(100)).await.unwrap());
    assert!(!q.insert_with_id("x", &3, ms(100)).await.unwrap());
    let d = q.take().await.unwrap();
    assert_eq!(d.id(), a);
    assert_eq!(d.attempt(), 1);
    assert!(d.ack().await.unwrap());
    let d = q.take().await.unwrap();
    assert_eq!(d.id(), "x");
    assert_eq!(*d.value(), 2);
    assert!(d.retry(Duration::ZERO).await.unwrap());
    let d = q.take().await.unwrap();
    assert_eq!(d.attempt(), 2);
    drop(d);
    // Lease runs out: attempt 3 > 2 → dead.
    tokio::time::sleep(ms(400)).await;
    assert!(q.try_take().await.unwrap().is_none());
    let dead = q.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].id, "x");
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.dead, 1);
    assert!(q.requeue_dead("x", Duration::ZERO).await.unwrap());
    let d = q.take().await.unwrap();
    assert_eq!(d.attempt(), 1);
    assert!(d.ack().await.unwrap());
    let ids = q
        .insert_many(&[(5, Duration::ZERO), (6, Duration::ZERO)])
        .await
        .unwrap();
    let got = q.take_many(10).await.unwrap();
    assert_eq!(
        got.iter().map(|d| d.id().to_owned()).collect::<Vec<_>>(),
        ids
    );
    q.purge().await.unwrap();
    assert_eq!(q.stats().await.unwrap(), Default::default());
}

#[tokio::test]
async fn worker_runs_and_schedule_ticks() {
    let db = PgDb::new();
    let q: PgQueue<u64> = PgQueue::builder("smoke-worker")
        .url(&db.url())
        .lease(ms(300))
        .poll_interval(ms(50))
        .build()
        .await
        .unwrap();
    for i in 0..50 {
        q.insert(&i, ms(i * 2)).await.unwrap();
    }
    assert!(
        q.schedule_every("tick", ms(100), punctual::MissedTicks::Skip, &1000)
            .await
            .unwrap()
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(q.clone()).concurrency(4).spawn(move |job| {
        let tx = tx.clone();
        async move {
            tx.send((job.id().to_owned(), job.schedule().map(str::to_owned)))
                .unwrap();
            Ok::<(), String>(())
        }
    });
    let mut plain = 0;
    let mut ticks = 0;
    while plain < 50 || ticks < 3 {
        let (_, schedule) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        if schedule.is_some() {
            ticks += 1;
        } else {
            plain += 1;
        }
    }
    let stats = worker.shutdown(Duration::from_secs(1)).await;
    assert!(stats.completed >= 53, "{stats:?}");
    let schedules = q.schedules().await.unwrap();
    assert_eq!(schedules.len(), 1);
    assert_eq!(schedules[0].spec, "every 100ms skip");
}

#[tokio::test]
async fn insert_in_a_transaction_exists_only_after_commit() {
    let db = PgDb::new();
    let pool = punctual::postgres::sqlx::PgPool::connect(&db.url())
        .await
        .unwrap();
    let q: PgQueue<u64> = PgQueue::builder("smoke-tx")
        .pool(pool.clone())
        .poll_interval(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.take().await.unwrap().into_value() })
    };
    tokio::time::sleep(ms(200)).await;
    let mut tx = pool.begin().await.unwrap();
    q.insert_in(&mut tx, &7, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert!(!waiter.is_finished());
    assert_eq!(q.stats().await.unwrap().due, 0);
    tx.commit().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken at commit, well before the 30 s poll")
        .unwrap();
    assert_eq!(got, 7);
    let mut tx = pool.begin().await.unwrap();
    q.insert_in(&mut tx, &8, Duration::ZERO).await.unwrap();
    tx.rollback().await.unwrap();
    // Only the first entry, still leased by the consumer that took it.
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.due, stats.leased), (0, 0, 1));
}

/// `queue_names` finds every queue of a schema (an entry, only a schedule,
/// only a pause), and none in a schema without the tables.
#[tokio::test]
async fn queue_names_lists_every_queue_of_a_schema() {
    let db = PgDb::new();
    let url = db.url();
    assert_eq!(
        punctual::postgres::queue_names(&url, "nothing_here")
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    let open = |name: &'static str| {
        PgQueue::<u64>::builder(name)
            .url(&url)
            .schema("listed")
            .build()
    };
    let a = open("a").await.unwrap();
    for n in 0..50 {
        a.insert(&n, Duration::from_secs(3600)).await.unwrap();
    }
    let b = open("b").await.unwrap();
    b.schedule_every(
        "s",
        Duration::from_secs(3600),
        punctual::MissedTicks::Skip,
        &1,
    )
    .await
    .unwrap();
    let c = open("c").await.unwrap();
    assert!(c.pause().await.unwrap());
    let d = open("d").await.unwrap();
    d.insert(&1, Duration::from_secs(3600)).await.unwrap();
    let _empty = open("empty").await.unwrap();
    assert_eq!(
        punctual::postgres::queue_names(&url, "listed")
            .await
            .unwrap(),
        ["a", "b", "c", "d"]
    );
    assert!(matches!(
        punctual::postgres::queue_names(&url, "bad name").await,
        Err(punctual::postgres::Error::InvalidName(_))
    ));
}
