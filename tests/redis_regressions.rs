//! Regressions found by review of the Redis queue: lease tokens that came
//! back, followers stranded without a leader, errors that stopped or spun
//! consumers, and scripts that could write half of themselves.
//!
//! Every test starts its own `redis-server`; waits are real time (Redis's
//! clock decides leases) and bounded.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{WAIT, ms};
use common::redis_server::RedisServer;
use futures::StreamExt;
use punctual::redis::RedisQueue;
use punctual::redis::client as redis;
use std::time::Duration;
use tokio::task::block_in_place;
use tokio::time::{Instant, sleep, timeout};

async fn queue(
    server: &RedisServer,
    name: &str,
    lease: Duration,
    max_attempts: u32,
    poll: Duration,
) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(&server.url())
        .lease(lease)
        .max_attempts(max_attempts)
        .poll_interval(poll)
        .build()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_before_requeue_dead_stays_lost() {
    let server = RedisServer::start();
    let q = queue(&server, "requeued", ms(200), 1, ms(50)).await;
    let id = q.insert(&1, Duration::ZERO).await.unwrap();
    let a = q.take().await.unwrap();
    assert_eq!(a.attempt(), 1);
    sleep(ms(300)).await; // A's lease runs out
    assert!(q.try_take().await.unwrap().is_none(), "attempt 2 > 1: dead");
    assert!(q.requeue_dead(&id, Duration::ZERO).await.unwrap());
    let b = q.take().await.unwrap();
    assert_eq!(b.attempt(), 1, "requeue resets attempts");
    assert!(!a.ack().await.unwrap(), "A's lease was lost long ago");
    assert!(b.ack().await.unwrap(), "B holds the entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_of_a_removed_entry_cannot_touch_its_reinserted_namesake() {
    let server = RedisServer::start();
    let q = queue(&server, "reinserted", Duration::from_secs(30), 10, ms(50)).await;
    q.insert_with_id("order-17", &1, Duration::ZERO)
        .await
        .unwrap();
    let a = q.take().await.unwrap();
    assert!(q.remove("order-17").await.unwrap());
    assert!(
        q.insert_with_id("order-17", &2, Duration::ZERO)
            .await
            .unwrap()
    );
    let b = q.take().await.unwrap();
    assert_eq!((*b.value(), b.attempt()), (2, 1));
    assert!(!a.retry(Duration::from_secs(3600)).await.unwrap());
    assert!(b.ack().await.unwrap(), "the new entry was untouched");
    assert_eq!(q.deadline("order-17").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_dropped_during_its_claim_leaves_no_one_stranded() {
    let server = RedisServer::start();
    let q = queue(&server, "dropped", Duration::from_secs(30), 10, ms(50)).await;
    let spawn_take = |q: &RedisQueue<u64>| {
        let q = q.clone();
        tokio::spawn(async move { q.take().await })
    };
    let a = spawn_take(&q);
    sleep(ms(30)).await;
    let b = spawn_take(&q);
    sleep(ms(30)).await;
    let c = spawn_take(&q);
    sleep(ms(100)).await;
    // Freeze the server so that claims are in flight when we cancel.
    let url = server.url();
    let freezer = std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("1")
            .query(&mut con)
            .unwrap();
    });
    sleep(ms(300)).await;
    a.abort(); // the leader, claiming: hands over to B
    let _ = a.await;
    sleep(ms(100)).await;
    b.abort(); // B, woken and claiming
    let _ = b.await;
    block_in_place(|| freezer.join().unwrap());
    q.insert(&1, Duration::ZERO).await.unwrap();
    let got = timeout(Duration::from_secs(3), c).await;
    assert!(got.is_ok(), "C stayed parked with an entry due");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_shot_consumers_with_close_deadlines_all_get_an_entry() {
    let server = RedisServer::start();
    for round in 0..20 {
        // A poll interval longer than the test: only hand-offs can serve.
        let q = queue(
            &server,
            &format!("close{round}"),
            Duration::from_secs(30),
            10,
            WAIT,
        )
        .await;
        let mut consumers = Vec::new();
        for _ in 0..4 {
            let q = q.clone();
            consumers.push(tokio::spawn(async move {
                q.take().await.map(|d| d.into_value())
            }));
            sleep(ms(5)).await;
        }
        sleep(ms(50)).await;
        for i in 0..4u64 {
            q.insert(&i, ms(100 + i)).await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut got = Vec::new();
        for consumer in consumers {
            let left = deadline.saturating_duration_since(Instant::now());
            match timeout(left, consumer).await {
                Ok(value) => got.push(value.unwrap().unwrap()),
                Err(_) => panic!(
                    "round {round}: a consumer stayed parked; stats {:?}",
                    q.stats().await.unwrap()
                ),
            }
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3], "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_batches_are_capped_not_refused() {
    let server = RedisServer::start();
    let q = queue(&server, "huge", Duration::from_secs(30), 10, ms(50)).await;
    q.insert(&1, Duration::ZERO).await.unwrap();
    let taken = timeout(WAIT, q.take_many(usize::MAX))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.len(), 1);
    q.insert(&2, Duration::ZERO).await.unwrap();
    assert_eq!(q.take_many(1 << 60).await.unwrap().len(), 1);
    assert!(q.dead_letters(usize::MAX).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_busy_with_another_script_is_waited_out() {
    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "busy-reply-threshold", "100"]);
    let q = queue(&server, "busy", Duration::from_secs(30), 10, ms(50)).await;
    let url = server.url();
    let busy = std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        // Someone else's script that holds the server for 1.5 s.
        let _: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg(
                "local t = redis.call('TIME') local end_us = t[1] * 1e6 + t[2] + 1.5e6 \
                 repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= end_us",
            )
            .arg(0)
            .query(&mut con);
    });
    sleep(ms(300)).await;
    // BUSY for about a second: take rides through it and gets the entry.
    let producer = q.clone();
    let insert = tokio::spawn(async move {
        loop {
            if producer.insert(&7, Duration::ZERO).await.is_ok() {
                break;
            }
            sleep(ms(50)).await;
        }
    });
    let taken = timeout(WAIT, q.take_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    block_in_place(|| busy.join().unwrap());
    insert.await.unwrap();
    let delivery = taken.expect("BUSY is not a reason to fail a take");
    assert_eq!(delivery.map(|d| d.into_value()), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_pauses_between_repeated_errors() {
    let server = RedisServer::start();
    let q = queue(&server, "spin", Duration::from_secs(30), 10, ms(50)).await;
    server.cli(&["SET", "punctual:{spin}:leases", "x"]);
    q.insert(&1, Duration::ZERO).await.unwrap(); // a claim would write leases
    let mut stream = std::pin::pin!(q.stream());
    let start = Instant::now();
    let mut errors = 0;
    while start.elapsed() < Duration::from_secs(1) {
        match timeout(WAIT, stream.next()).await.unwrap() {
            Some(Err(e)) => {
                assert!(e.to_string().contains("WRONGTYPE"), "{e}");
                errors += 1;
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
    // 20 ms, 40 ms, ... between errors: about 6 in a second, not thousands.
    assert!((2..=12).contains(&errors), "{errors} errors in 1 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_fails_on_a_bad_sequence_writes_nothing() {
    let server = RedisServer::start();
    let q = queue(&server, "half", Duration::from_secs(30), 10, ms(50)).await;
    let id = q.insert(&1, Duration::ZERO).await.unwrap();
    let d = q.take().await.unwrap();
    server.cli(&["SET", "punctual:{half}:seq", "9223372036854775807"]);
    let lease_until = q.deadline(&id).await.unwrap();
    assert!(d.retry(Duration::ZERO).await.is_err(), "INCR overflows");
    assert_eq!(q.deadline(&id).await.unwrap(), lease_until, "still leased");
    server.cli(&["SET", "punctual:{half}:seq", "100"]);
    assert_eq!(q.stats().await.unwrap().leased, 1);
    let again = q.take_timeout(ms(100)).await.unwrap();
    assert!(again.is_none(), "the entry is leased, not due");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_utf8_goes_to_the_dead_letters() {
    let server = RedisServer::start();
    // One attempt allowed: the failed attempt of a value that does not
    // decode buries it.
    let q = queue(&server, "bytes", ms(300), 1, ms(50)).await;
    let bad = q.insert(&1, Duration::ZERO).await.unwrap();
    let good = q.insert(&2, Duration::ZERO).await.unwrap();
    // Another service wrote bytes that are not even UTF-8.
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg("punctual:{bytes}:entries")
        .arg(format!("v:{bad}"))
        .arg(&[0xffu8, 0x00][..])
        .query_async(&mut con)
        .await
        .unwrap();
    let taken = timeout(WAIT, q.take_many(10)).await.unwrap().unwrap();
    let ids: Vec<_> = taken
        .iter()
        .map(|d| (d.id().to_owned(), d.attempt()))
        .collect();
    assert_eq!(ids, [(good, 1)]);
    let dead = q.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].id.as_str(), dead[0].value, dead[0].attempts),
        (bad.as_str(), None, 1)
    );
    assert!(
        dead[0].reason.starts_with("value does not decode"),
        "{}",
        dead[0].reason
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_insert_ends_a_wait_that_trusted_the_last_claim() {
    let server = RedisServer::start();
    // A poll interval longer than the test: only announcements can serve.
    let q = queue(&server, "hint", Duration::from_secs(30), 10, WAIT).await;
    q.insert(&1, Duration::from_secs(3600)).await.unwrap();
    // This claim records "nothing due for an hour" for the whole process.
    assert!(q.try_take().await.unwrap().is_none());
    q.insert(&2, Duration::ZERO).await.unwrap();
    let taken = timeout(Duration::from_secs(3), q.take()).await;
    let delivery = taken.expect("the wait trusted a stale head").unwrap();
    assert_eq!(*delivery.value(), 2);

    // The same with the listener running and a consumer already leading.
    let leader = tokio::spawn({
        let q = q.clone();
        async move { q.take().await.map(|d| d.into_value()) }
    });
    sleep(ms(200)).await;
    let follower = tokio::spawn({
        let q = q.clone();
        async move { q.take().await.map(|d| d.into_value()) }
    });
    sleep(ms(100)).await;
    q.insert(&3, Duration::ZERO).await.unwrap();
    q.insert(&4, ms(50)).await.unwrap();
    let mut got = vec![
        timeout(Duration::from_secs(3), leader)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        timeout(Duration::from_secs(3), follower)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
    ];
    got.sort_unstable();
    assert_eq!(got, [3, 4]);
}

/// One insert too large for the server (`proto-max-bulk-len`) among 40 made
/// at once, which go to the server together: it fails alone, and every
/// other caller gets its own answer (inserted), as on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_oversize_insert_fails_only_its_own_caller() {
    let server = RedisServer::start_with_args(&["--proto-max-bulk-len", "1mb"]);
    let q: RedisQueue<String> = RedisQueue::builder("oversize")
        .url(&server.url())
        .build()
        .await
        .unwrap();
    let big = "x".repeat(1_200_000);
    let calls = (0..40).map(|n| {
        let q = q.clone();
        let value = if n == 7 {
            big.clone()
        } else {
            format!("small {n}")
        };
        async move { q.insert(&value, Duration::from_secs(60)).await }
    });
    let answers = futures::future::join_all(calls).await;
    for (n, answer) in answers.iter().enumerate() {
        if n == 7 {
            assert!(answer.is_err(), "the oversize insert was accepted");
        } else {
            assert!(
                answer.is_ok(),
                "insert {n} failed with the oversize one: {answer:?}"
            );
        }
    }
    assert_eq!(q.stats().await.unwrap().pending, 39);
}
