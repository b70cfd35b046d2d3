//! What the Redis store does for results, cancels and health beyond the
//! shared test bodies of `tests/durable_results.rs` and
//! `tests/durable_health.rs`: results and history survive a SIGKILL and
//! restart of the server (append-only file, `appendfsync always`), a lost
//! pub/sub connection costs a `wait` at most the poll interval, a cancel
//! reaches a running handler by push (not at its next extension), and the
//! new keys keep to the queue's hash tag and expire by themselves.
//!
//! Every test starts its own `redis-server`.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{HOUR, builder, eventually, ms, within};
use common::redis_server::RedisServer;
use punctual::durable::{Finished, Job, Outcome, Worker};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::task::block_in_place;
use tokio::time::Instant;

/// A kept result, and the history of the minute, are written with the
/// finish they record: after a SIGKILL and restart they read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_and_history_survive_a_kill_9_and_restart() {
    let mut server = RedisServer::start();
    let q = builder::<u32>(&server, "kept")
        .keep_results(HOUR)
        .build()
        .await
        .unwrap();
    let since = q.now().await.unwrap() - Duration::from_secs(1);
    let id = q.insert(&7, Duration::ZERO).await.unwrap();
    let worker = Worker::builder(q.clone())
        .spawn(|job: Job<u32>| async move { Outcome::done_with(&(*job.value() * 6)) });
    let before = within("the result", q.wait(&id, Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("kept");
    worker.shutdown(ms(100)).await;
    let history = q.history(since).await.unwrap();
    block_in_place(|| server.restart());
    let after = within("the result after a restart", async {
        loop {
            if let Ok(result) = q.result(&id).await {
                return result;
            }
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await
    .expect("still kept");
    assert_eq!(after, before);
    assert_eq!(after.output_as::<u32>().unwrap(), Some(42));
    assert_eq!(q.history(since).await.unwrap(), history);
}

/// A push lost with the pub/sub connection (killed by the server) costs a
/// waiter at most the poll interval: it looks again on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_subscription_costs_a_wait_at_most_the_poll_interval() {
    const POLL: Duration = Duration::from_millis(400);
    let server = RedisServer::start();
    let q = builder::<u32>(&server, "lost-push")
        .keep_results(HOUR)
        .poll_interval(POLL)
        .lease(HOUR)
        .build()
        .await
        .unwrap();
    for round in 0..3 {
        let id = q.insert(&round, Duration::ZERO).await.unwrap();
        let delivery = q.take().await.unwrap();
        let waiting = tokio::spawn({
            let (q, id) = (q.clone(), id.clone());
            async move {
                let result = q.wait(&id, Duration::from_secs(20)).await.unwrap();
                (result, Instant::now())
            }
        });
        tokio::time::sleep(ms(100)).await;
        // The listener's connection goes; the ack's push is then most
        // likely sent to nobody.
        block_in_place(|| server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]));
        let acked = Instant::now();
        assert!(delivery.ack().await.unwrap());
        let (result, at) = within("the waiter", waiting).await.unwrap();
        assert_eq!(result.expect("a result").state, Finished::Done);
        assert!(
            at - acked < POLL + ms(300),
            "round {round}: the wait returned {:?} after the ack",
            at - acked
        );
    }
}

/// A cancel reaches the worker holding the entry by push: with a lease of
/// a minute (an extension every 20 s) the handler learns of it within a
/// fraction of a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_pushed_to_the_worker_holding_the_entry() {
    let server = RedisServer::start();
    let q = builder::<u32>(&server, "pushed-cancel")
        .lease(Duration::from_secs(60))
        .poll_interval(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let running = Arc::new(AtomicBool::new(false));
    let told = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let worker = Worker::builder(q.clone()).spawn({
        let (running, told) = (running.clone(), told.clone());
        move |job: Job<u32>| {
            let cancelled = job.cancelled();
            let told = told.clone();
            tokio::spawn(async move {
                cancelled.await;
                *told.lock().unwrap() = Some(Instant::now());
            });
            let running = running.clone();
            async move {
                running.store(true, Ordering::SeqCst);
                tokio::time::sleep(HOUR).await;
                Outcome::Done
            }
        }
    });
    let id = q.insert(&1, Duration::ZERO).await.unwrap();
    eventually("the handler runs", || async {
        running.load(Ordering::SeqCst)
    })
    .await;
    // Its first extension is 20 s away.
    tokio::time::sleep(ms(200)).await;
    let cancelled = Instant::now();
    assert!(q.cancel(&id).await.unwrap());
    eventually("Job::cancelled resolves", || async {
        told.lock().unwrap().is_some()
    })
    .await;
    let after = told.lock().unwrap().unwrap() - cancelled;
    assert!(after < ms(500), "told {after:?} after the cancel");
    let stats = worker.shutdown(ms(100)).await;
    assert_eq!((stats.lost, stats.completed), (1, 0), "{stats:?}");
}

/// Every key the queue writes for results, cancels, workers and history
/// shares its hash tag; a kept result expires by itself (the next script
/// that keeps one deletes those past their time), and `requeue_dead`
/// deletes the result of what it requeues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_keys_share_the_hash_tag_and_results_expire() {
    let server = RedisServer::start();
    let q = builder::<u32>(&server, "tagged")
        .keep_results(ms(300))
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    let worker = Worker::builder(q.clone()).spawn(|job: Job<u32>| async move {
        if *job.value() == 0 {
            Outcome::discard("zero")
        } else {
            Outcome::Done
        }
    });
    let first = q.insert(&1, Duration::ZERO).await.unwrap();
    let dead = q.insert(&0, Duration::ZERO).await.unwrap();
    within("kept", q.wait(&first, Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("a result");
    let result = within("dead", q.wait(&dead, Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("a result");
    assert_eq!(result.state, Finished::Dead);
    assert!(q.requeue_dead(&dead, HOUR).await.unwrap());
    assert_eq!(
        q.result(&dead).await.unwrap(),
        None,
        "requeued: its result goes"
    );
    tokio::time::sleep(ms(400)).await;
    assert_eq!(q.result(&first).await.unwrap(), None, "past its time");
    let later = q.insert(&2, Duration::ZERO).await.unwrap();
    within("kept", q.wait(&later, Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("a result");
    worker.shutdown(ms(100)).await;
    let keys = server.cli(&["KEYS", "*"]);
    for key in keys.lines().filter(|k| !k.is_empty()) {
        assert!(key.starts_with("punctual:{tagged}:"), "{key}");
    }
    let kept = server.cli(&["ZRANGE", "punctual:{tagged}:kept", "0", "-1"]);
    assert_eq!(kept.trim(), later, "the expired result was deleted");
    let fields = server.cli(&["HKEYS", "punctual:{tagged}:entries"]);
    assert!(
        !fields.lines().any(|f| f == format!("k:{first}")),
        "{fields}"
    );
}

/// The history is kept beside the entries (`h:<kind><minute>` fields) for
/// a day: the first count of a minute deletes what is older.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_older_than_a_day_is_deleted_by_the_first_count_of_a_minute() {
    let server = RedisServer::start();
    let q = builder::<u32>(&server, "old-history")
        .build()
        .await
        .unwrap();
    let now = q.now().await.unwrap();
    let minute = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 60;
    let key = "punctual:{old-history}:entries";
    let old = format!("h:i{}", minute - 2000);
    let recent = format!("h:d{}", minute - 100);
    server.cli(&[
        "HSET",
        key,
        &old,
        "5",
        &recent,
        "3",
        "h:last",
        &(minute - 1500).to_string(),
    ]);
    let since = now - Duration::from_secs(3 * 3600);
    let before = q.history(since).await.unwrap();
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!((before[0].done, before[0].inserted), (3, 0));
    q.insert(&1, HOUR).await.unwrap();
    assert_eq!(
        server.cli(&["HEXISTS", key, &old]),
        "0",
        "a count older than a day stays"
    );
    assert_eq!(server.cli(&["HEXISTS", key, &recent]), "1");
    let after = q.history(since).await.unwrap();
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(after[1].inserted, 1);
}
