#![cfg(feature = "redis")]
//! The durable worker and the Redis queue under the faults a review found:
//! claim replies lost while handlers run, a stopping worker whose store is
//! gone, batches larger than a script can unpack, a worker handed its own
//! entry again, connection attempts piling up, and odd cron input.
//!
//! Each test failed before the fix it pins. Real time throughout, through
//! the fault proxy of `tests/common/proxy.rs` where a link must fail.

mod common;

use common::proxy::{Direction, Proxy};
use common::redis_queue::{eventually, ms};
use common::redis_server::RedisServer;
use punctual::durable::{Job, Worker};
use punctual::redis::RedisQueue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

async fn via(proxy: &Proxy, name: &str, lease: Duration) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(&proxy.url())
        .lease(lease)
        .poll_interval(ms(50))
        .response_timeout(ms(500))
        .build()
        .await
        .expect("connect")
}

/// A claim whose reply is lost is sent again and recovers what it leased,
/// and nothing else: not the entries of the worker's earlier claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_reply_never_restarts_a_running_handler() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "dup", Duration::from_secs(20)).await;
    let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let running = Arc::new(AtomicUsize::new(0));
    let max_running = Arc::new(AtomicUsize::new(0));
    let worker = Worker::builder(q.clone()).concurrency(4).spawn({
        let runs = Arc::clone(&runs);
        let running = Arc::clone(&running);
        let max_running = Arc::clone(&max_running);
        move |job: Job<u64>| {
            let runs = Arc::clone(&runs);
            let running = Arc::clone(&running);
            let max_running = Arc::clone(&max_running);
            async move {
                *runs.lock().unwrap().entry(job.id().to_owned()).or_default() += 1;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max_running.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        }
    });
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(runs.lock().unwrap().get("a").copied(), Some(1));
    // The worker polls every 50 ms: its next claim loses its reply.
    proxy.cut_after_next_request(Some(common::redis_queue::claim_sha().as_bytes()));
    tokio::time::sleep(ms(1500)).await;
    assert!(!proxy.armed(), "the cut did not fire");
    let runs_now = runs.lock().unwrap().clone();
    let stats = worker.shutdown(ms(5000)).await;
    assert_eq!(
        runs_now.get("a").copied(),
        Some(1),
        "entry `a` started twice while running"
    );
    assert_eq!(max_running.load(Ordering::SeqCst), 1);
    assert_eq!((stats.completed, stats.lost), (1, 0), "{stats:?}");
}

/// A lost reply of a claim that carried an ack: the ack applied, and the
/// worker counts the run completed, not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_whose_claim_reply_was_lost_counts_completed() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "acklost", Duration::from_secs(20)).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let worker = Worker::builder(q.clone()).concurrency(4).spawn({
        let gate = Arc::clone(&gate);
        move |_job: Job<u64>| {
            let gate = Arc::clone(&gate);
            async move {
                gate.notified().await;
                Ok::<(), String>(())
            }
        }
    });
    q.insert_with_id("unique-job-xyz", &1, Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(worker.stats().running, 1);
    proxy.cut_after_next_request(Some(b"unique-job-xyz"));
    gate.notify_one();
    tokio::time::sleep(ms(1500)).await;
    assert!(!proxy.armed(), "the cut did not fire");
    let stats = worker.shutdown(ms(1000)).await;
    assert_eq!(
        server
            .command(&["HEXISTS", "punctual:{acklost}:entries", "m:unique-job-xyz"])
            .render(),
        "0"
    );
    assert_eq!((stats.completed, stats.lost), (1, 0), "{stats:?}");
}

/// `shutdown(grace)` returns soon after its grace while the store cannot
/// be reached (the leases it holds then run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_after_its_grace_while_the_store_is_down() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "down", Duration::from_secs(20)).await;
    let worker = Worker::builder(q.clone())
        .concurrency(4)
        .spawn(|_job: Job<u64>| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<(), String>(())
        });
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(worker.stats().running, 1);
    proxy.refuse(true);
    proxy.kill_all();
    let started = tokio::time::Instant::now();
    let done = tokio::time::timeout(Duration::from_secs(8), worker.shutdown(ms(100))).await;
    assert!(
        done.is_ok(),
        "shutdown(100 ms) did not return within 8 s while redis is down"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// A worker with more free places than one script can claim (a Lua call
/// unpacks at most about 8000 values) claims in batches of at most 1024.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_beyond_a_batch_claims_in_batches() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("big")
        .url(&server.url())
        .lease(Duration::from_secs(30))
        .poll_interval(ms(50))
        .build()
        .await
        .unwrap();
    let values: Vec<(u64, Duration)> = (0..5000).map(|i| (i, Duration::ZERO)).collect();
    q.insert_many(&values).await.unwrap();
    let worker = Worker::builder(q.clone())
        .concurrency(5000)
        .spawn(|_job: Job<u64>| async move { Ok::<(), String>(()) });
    eventually("all acked", || {
        let done = worker.stats().completed == 5000;
        async move { done }
    })
    .await;
    let stats = worker.shutdown(ms(100)).await;
    assert_eq!((stats.completed, stats.failed), (5000, 0));
}

/// Counts a run out when its future is dropped or ends.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The lease of a running handler runs out and the same worker claims the
/// entry again: each claim has its own token, so the old run's lease is
/// found lost and the old run dropped; the two never run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_entry_was_delivered_again_to_the_same_worker_is_dropped() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("fence")
        .url(&server.url())
        .lease(ms(900))
        .poll_interval(ms(50))
        .build()
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let max_running = Arc::new(AtomicUsize::new(0));
    let worker = Worker::builder(q.clone()).concurrency(4).spawn({
        let (runs, running, max_running) = (
            Arc::clone(&runs),
            Arc::clone(&running),
            Arc::clone(&max_running),
        );
        move |_job: Job<u64>| {
            let (runs, running, max_running) = (
                Arc::clone(&runs),
                Arc::clone(&running),
                Arc::clone(&max_running),
            );
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max_running.fetch_max(now, Ordering::SeqCst);
                // Counts the run out however it ends: dropped too.
                let _running = Running(running);
                for _ in 0..30 {
                    tokio::time::sleep(ms(100)).await;
                }
                Ok::<(), String>(())
            }
        }
    });
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ms(200)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The lease runs out (as after a stall longer than the lease).
    let record = server
        .command(&["HGET", "punctual:{fence}:entries", "m:a"])
        .render();
    let member = record.splitn(6, ',').nth(5).unwrap().to_owned();
    server.command(&["ZADD", "punctual:{fence}:schedule", "1", &member]);
    server.command(&["ZADD", "punctual:{fence}:leases", "1", "a"]);
    tokio::time::sleep(ms(1000)).await;
    let stats = worker.stats();
    assert_eq!(runs.load(Ordering::SeqCst), 2, "delivered again: {stats:?}");
    assert_eq!(stats.lost, 1, "the old run was dropped: {stats:?}");
    assert!(
        max_running.load(Ordering::SeqCst) <= 1,
        "two runs of `a` side by side, the first never dropped: {stats:?}"
    );
    worker.shutdown(ms(100)).await;
}

#[cfg(feature = "cron")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_expression_with_a_control_character_is_invalid() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("nl")
        .url(&server.url())
        .build()
        .await
        .unwrap();
    for expr in ["0 3 * * *\n", "0\n3 * * *", "0 3 * *\t*"] {
        let r = q.schedule_cron("a", expr, &1).await;
        assert!(
            matches!(r, Err(punctual::redis::Error::InvalidSchedule(_))),
            "{expr:?}: {r:?}"
        );
    }
    assert!(q.schedules().await.unwrap().is_empty());
}

/// Concurrent calls while connecting hangs share one attempt: none waits
/// for a queue of attempts, one response timeout each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_a_failed_connection_attempt() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "pile", Duration::from_secs(20)).await;
    proxy.set_latency(Duration::from_secs(30));
    proxy.kill_all();
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let r = q.stats().await;
                (r.is_err(), started.elapsed())
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    for c in calls {
        let (err, took) = c.await.unwrap();
        assert!(err);
        worst = worst.max(took);
    }
    assert!(worst < Duration::from_secs(2), "a call took {worst:?}");
}

/// A claim of a stopping worker loses its reply: only what that claim may
/// have leased is given back, never the entries its handlers still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_workers_lost_claim_gives_back_nothing_it_runs() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "gback", Duration::from_secs(20)).await;
    let worker = Worker::builder(q.clone())
        .concurrency(4)
        .spawn(|_job: Job<u64>| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok::<(), String>(())
        });
    q.insert_with_id("x", &1, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(worker.stats().running, 1);
    proxy.swallow_replies_after_next_request(Some(common::redis_queue::claim_sha().as_bytes()));
    while proxy.armed() {
        tokio::time::sleep(ms(5)).await;
    }
    let stopping = tokio::spawn(worker.shutdown(Duration::from_secs(5)));
    tokio::time::sleep(ms(800)).await;
    let other = q.clone();
    let stolen = other.try_take().await.unwrap();
    let stats = stopping.await.unwrap();
    assert!(
        stolen.is_none(),
        "`x` handed to another consumer while its handler runs"
    );
    assert_eq!(stats.completed, 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_durations_never_panic() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("huge")
        .url(&server.url())
        .lease(Duration::MAX)
        .poll_interval(Duration::MAX)
        .response_timeout(Duration::MAX)
        .build()
        .await
        .unwrap();
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    let d = q.take().await.unwrap();
    let mut d2 = d;
    assert!(d2.extend(Duration::MAX).await.unwrap());
    assert!(d2.ack().await.unwrap());
    let w = Worker::builder(q.clone())
        .timeout(Duration::MAX)
        .backoff(punctual::durable::Backoff::exponential(Duration::MAX).jitter(true))
        .spawn(|_j: Job<u64>| async move { Err::<(), _>("no") });
    q.insert_with_id("b", &1, Duration::ZERO).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    let stats = w.shutdown(ms(10)).await;
    assert_eq!(stats.failed, 1, "{stats:?}");
    assert!(
        q.deadline("b").await.unwrap().is_some(),
        "retried far ahead"
    );
}

/// A running handler whose lease may have run out while the store was
/// unreachable (its extensions failed) is dropped at its next await: it
/// never runs on while another consumer holds the entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_lapsed_while_the_store_was_unreachable_is_dropped() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "lapsed", ms(1000)).await;
    let direct: RedisQueue<u64> = RedisQueue::builder("lapsed")
        .url(&server.url())
        .lease(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    direct
        .insert_with_id("a", &1, Duration::ZERO)
        .await
        .unwrap();
    let went_on = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = Worker::builder(q.clone()).concurrency(1).spawn({
        let went_on = Arc::clone(&went_on);
        move |_job: Job<u64>| {
            let went_on = Arc::clone(&went_on);
            async move {
                for _ in 0..30 {
                    tokio::time::sleep(ms(100)).await;
                }
                went_on.store(true, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        }
    });
    eventually("running", || {
        let running = worker.stats().running == 1;
        async move { running }
    })
    .await;
    // The store becomes unreachable for the worker: no extension succeeds.
    proxy.refuse(true);
    proxy.kill_all();
    tokio::time::sleep(ms(1500)).await;
    // The lease ran out: another consumer takes the entry.
    let other = direct.try_take().await.unwrap().expect("the lease ran out");
    assert_eq!((other.id(), other.attempt()), ("a", 2));
    assert_eq!(worker.stats().lost, 1, "the run was dropped");
    tokio::time::sleep(ms(2000)).await;
    assert!(!went_on.load(Ordering::SeqCst), "the handler ran on");
    proxy.refuse(false);
    worker.shutdown(ms(100)).await;
}

/// A claim whose reply is lost after a shutdown began: the worker's exit
/// gives back what it leased (the store is reachable again), rather than
/// leave it leased until its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_lost_while_stopping_is_released_at_exit() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = via(&proxy, "gone", Duration::from_secs(20)).await;
    let direct: RedisQueue<u64> = RedisQueue::builder("gone")
        .url(&server.url())
        .build()
        .await
        .unwrap();
    let worker = Worker::builder(q.clone())
        .concurrency(4)
        .spawn(|_job: Job<u64>| async move { Ok::<(), String>(()) });
    tokio::time::sleep(ms(200)).await;
    // Replies are late: a claim's reply comes after the response timeout.
    proxy.set_latency_in(Direction::Replies, ms(1500));
    direct
        .insert_with_id("y", &1, Duration::ZERO)
        .await
        .unwrap();
    // Wait until a claim has leased `y` (its reply is on its way, late).
    let t0 = Instant::now();
    loop {
        let s = direct.stats().await.unwrap();
        if s.leased == 1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "never leased");
        tokio::time::sleep(ms(5)).await;
    }
    // The store is fine again for new connections; a shutdown starts while
    // the claim waits for its reply.
    proxy.set_latency_in(Direction::Replies, Duration::ZERO);
    let started = Instant::now();
    let stats = worker.shutdown(Duration::from_secs(2)).await;
    assert!(started.elapsed() < Duration::from_secs(5), "{stats:?}");
    tokio::time::sleep(ms(300)).await;
    let s = direct.stats().await.unwrap();
    assert_eq!(
        s.leased, 0,
        "`y` is still leased by the abandoned claim after shutdown returned: {s:?}"
    );
}

/// A prefetched entry claimed again by the same worker (its first lease ran
/// out): the new copy replaces the old one and runs; an extension that
/// finds the old lease lost does not take the new copy with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_entry_claimed_again_runs_under_its_new_lease() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("fg")
        .url(&server.url())
        .lease(ms(1000))
        .poll_interval(ms(50))
        .max_attempts(2)
        .build()
        .await
        .unwrap();
    for (id, delay) in [("a1", 0), ("a2", 1), ("b1", 2), ("b2", 3)] {
        q.insert_with_id(id, &1, ms(delay)).await.unwrap();
    }
    tokio::time::sleep(ms(20)).await;
    let starts: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let t0 = Instant::now();
    let worker = Worker::builder(q.clone()).concurrency(2).spawn({
        let starts = Arc::clone(&starts);
        move |job: Job<u64>| {
            starts
                .lock()
                .unwrap()
                .push((job.id().to_owned(), job.attempt()));
            let long = job.id() != "a1";
            async move {
                tokio::time::sleep(if long { ms(6000) } else { ms(500) }).await;
                Ok::<(), String>(())
            }
        }
    });
    tokio::time::sleep_until(t0 + ms(450)).await;
    assert_eq!(worker.stats().running, 2);
    // b2's lease runs out (as after a stall): the worker's next claim, when
    // a1 ends at 500 ms, takes it again.
    let record = server
        .command(&["HGET", "punctual:{fg}:entries", "m:b2"])
        .render();
    let member = record.splitn(6, ',').nth(5).unwrap().to_owned();
    server.command(&["ZADD", "punctual:{fg}:schedule", "1", &member]);
    server.command(&["ZADD", "punctual:{fg}:leases", "1", "b2"]);
    eventually("b2 runs", || {
        let ran = starts.lock().unwrap().iter().any(|(id, _)| id == "b2");
        async move { ran }
    })
    .await;
    let dead = q.dead_letters(10).await.unwrap();
    worker.shutdown(ms(100)).await;
    assert!(dead.is_empty(), "{dead:?}");
}

/// Past the grace, a handler that does not reach an await (a blocking or
/// CPU-bound section) cannot be dropped: shutdown returns after a bounded
/// wait and leaves its entry leased (its lease runs out), never handing it
/// to another consumer while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_never_gives_back_an_entry_whose_handler_still_runs() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("blk")
        .url(&server.url())
        .lease(ms(5000))
        .poll_interval(ms(50))
        .build()
        .await
        .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = Worker::builder(q.clone()).concurrency(1).spawn({
        let done = Arc::clone(&done);
        move |_job: Job<u64>| {
            let done = Arc::clone(&done);
            async move {
                tokio::time::sleep(ms(10)).await;
                std::thread::sleep(ms(1500));
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<(), String>(())
            }
        }
    });
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    while worker.stats().running == 0 {
        std::thread::sleep(ms(5));
    }
    std::thread::sleep(ms(100));
    let started = Instant::now();
    let stats = worker.shutdown(ms(100)).await;
    let took = started.elapsed();
    let still_running = !done.load(std::sync::atomic::Ordering::SeqCst);
    let other = q
        .try_take()
        .await
        .unwrap()
        .map(|d| (d.id().to_owned(), d.attempt()));
    assert!(took < Duration::from_secs(3), "{took:?} {stats:?}");
    assert!(
        !(still_running && other.is_some()),
        "two runs of `a` side by side"
    );
}
