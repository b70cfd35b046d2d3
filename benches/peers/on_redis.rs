//! The Redis contenders written in Rust: punctual's `Worker` on a
//! `RedisQueue`, and the poller of `benches/redis.rs` (same script, 8 pops
//! in flight on one connection).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use punctual::durable::Worker;
use punctual::redis::RedisQueue;
use punctual::redis::client as rc;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{CONCURRENCY, Seen, unix_us};

/// The poller's consumers.
const CONSUMERS: usize = 8;
/// The poller's sleep when nothing is due.
const POLL: Duration = Duration::from_millis(10);
const CHUNK: usize = 1_000;

/// The poller's "pop one due entry", as `benches/redis.rs` (`BASELINE_POP`)
/// writes it.
const POP: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return false end
redis.call('ZREM', KEYS[1], due[1])
return due[1]
"#;

#[derive(Serialize, Deserialize, Debug)]
struct Job {
    n: u64,
    due_ms: u64,
}

/// Workload `redis` for punctual: jobs/s.
pub(crate) async fn punctual_drain(url: &str, tag: &str, n: u64, prefetch: usize) -> f64 {
    let queue: RedisQueue<Job> = RedisQueue::builder(&format!("peers-{tag}"))
        .url(url)
        .build()
        .await
        .expect("connect RedisQueue");
    queue.purge().await.expect("purge");
    let now = (unix_us() / 1000) as u64;
    let entries: Vec<(Job, Duration)> = (0..n)
        .map(|n| (Job { n, due_ms: now }, Duration::ZERO))
        .collect();
    for chunk in entries.chunks(CHUNK) {
        queue.insert_many(chunk).await.expect("insert_many");
    }
    let seen = Arc::new(Seen::new(n));
    let sink = Arc::clone(&seen);
    let start = Instant::now();
    let worker = Worker::builder(queue.clone())
        .concurrency(CONCURRENCY)
        .prefetch(prefetch)
        .spawn(move |job| {
            sink.run(job.value().n);
            async { Ok::<(), Infallible>(()) }
        });
    let end = tokio::time::timeout(crate::RUN_TIMEOUT, async {
        loop {
            let stats = worker.stats();
            assert_eq!(stats.failed + stats.lost, 0, "{stats:?}");
            if stats.completed >= n {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("worker stuck at {:?} of {n}", worker.stats()));
    let stats = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(
        (stats.completed, stats.failed, stats.lost),
        (n, 0, 0),
        "{stats:?}"
    );
    let left = queue.stats().await.expect("stats");
    assert_eq!(
        left.pending + left.due + left.leased + left.dead,
        0,
        "left {left:?}"
    );
    seen.assert_once("punctual");
    queue.purge().await.expect("purge");
    n as f64 / (end - start).as_secs_f64()
}

/// Workload `redis` for the poller: jobs/s.
pub(crate) async fn poller_drain(url: &str, tag: &str, n: u64) -> f64 {
    let client = rc::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect poller");
    let key = format!("poller:{{{tag}}}:due");
    let now = (unix_us() / 1000) as u64;
    for from in (0..n).step_by(CHUNK) {
        let mut pipe = rc::pipe();
        for job in from..(from + CHUNK as u64).min(n) {
            let member = serde_json::to_string(&Job {
                n: job,
                due_ms: now,
            })
            .expect("encode");
            pipe.cmd("ZADD").arg(&key).arg(now).arg(member).ignore();
        }
        let () = pipe.query_async(&mut conn).await.expect("ZADD");
    }
    let pop = Arc::new(rc::Script::new(POP));
    let seen = Arc::new(Seen::new(n));
    let start = Instant::now();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (mut conn, key, pop, seen) = (
                conn.clone(),
                key.clone(),
                Arc::clone(&pop),
                Arc::clone(&seen),
            );
            tokio::spawn(async move {
                loop {
                    let popped: Option<String> =
                        pop.key(&key).invoke_async(&mut conn).await.expect("pop");
                    match popped {
                        Some(member) => {
                            let job: Job = serde_json::from_str(&member).expect("decode");
                            seen.run(job.n);
                        }
                        None => tokio::time::sleep(POLL).await,
                    }
                }
            })
        })
        .collect();
    let end = seen.all_ran("poller").await;
    for consumer in consumers {
        consumer.abort();
    }
    let left: u64 = rc::cmd("ZCARD")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(left, 0, "poller left entries");
    seen.assert_once("poller");
    n as f64 / (end - start).as_secs_f64()
}
