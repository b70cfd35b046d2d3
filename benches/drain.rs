//! The durable `Worker`'s drain on Redis and PostgreSQL, written to build
//! at older commits too (it uses only what the crate has had since the
//! worker came), so a change's cost is measured side by side: build this
//! file at the commit before and at the change, and run the two binaries
//! in turns.
//!
//! Each run: `DRAIN_REDIS_N` (100,000) entries due at once on a fresh queue
//! of a fresh local redis-server (persistence off), then `DRAIN_PG_N`
//! (20,000) on a fresh schema of the local PostgreSQL
//! (`PUNCTUAL_PG_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`),
//! put in before the clock starts; a `Worker` with `concurrency(8)` and a
//! handler that returns at once runs until every entry is acked. With the
//! feature `metrics`, a Prometheus recorder is installed first, so the
//! metrics cost what they cost in production. Prints one line per store
//! and run: `redis <jobs/s>`, `postgres <jobs/s>`.
//!
//! `cargo bench --features redis,postgres[,metrics] --bench drain`;
//! `DRAIN_RUNS` (default 3).

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use punctual::durable::Worker;
use punctual::postgres::PgQueue;
use punctual::redis::RedisQueue;
use redis_server::RedisServer;
use tokio::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until `worker` acked `n`; the time since `start`.
async fn acked(worker: &Worker, n: u64, start: Instant) -> Duration {
    loop {
        let stats = worker.stats();
        assert_eq!(stats.failed + stats.lost, 0, "{stats:?}");
        if stats.completed >= n {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn redis_drain(url: &str, run: u64, n: u64) -> f64 {
    let q: RedisQueue<u64> = RedisQueue::builder(&format!("drain-{run}"))
        .url(url)
        .build()
        .await
        .expect("connect");
    q.purge().await.expect("purge");
    let all: Vec<(u64, Duration)> = (0..n).map(|i| (i, Duration::ZERO)).collect();
    for chunk in all.chunks(1000) {
        q.insert_many(chunk).await.expect("insert_many");
    }
    let start = Instant::now();
    let worker = Worker::builder(q.clone())
        .concurrency(8)
        .spawn(|_job| async { Ok::<(), String>(()) });
    let took = acked(&worker, n, start).await;
    worker.shutdown(Duration::from_secs(1)).await;
    q.purge().await.expect("purge");
    n as f64 / took.as_secs_f64()
}

async fn pg_drain(url: &str, run: u64, n: u64) -> f64 {
    let schema = format!("drain_{}_{run}", std::process::id());
    let q: PgQueue<u64> = PgQueue::builder("drain")
        .url(url)
        .schema(&schema)
        .build()
        .await
        .expect("connect");
    let all: Vec<(u64, Duration)> = (0..n).map(|i| (i, Duration::ZERO)).collect();
    for chunk in all.chunks(1000) {
        q.insert_many(chunk).await.expect("insert_many");
    }
    let start = Instant::now();
    let worker = Worker::builder(q.clone())
        .concurrency(8)
        .spawn(|_job| async { Ok::<(), String>(()) });
    let took = acked(&worker, n, start).await;
    worker.shutdown(Duration::from_secs(1)).await;
    q.purge().await.expect("purge");
    let pool = punctual::postgres::sqlx::PgPool::connect(url)
        .await
        .expect("connect");
    punctual::postgres::sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pool)
        .await
        .expect("drop schema");
    n as f64 / took.as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    #[cfg(feature = "metrics")]
    {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("recorder");
        // Rendered once at the end: the recorder keeps what it records.
        std::mem::forget(handle);
    }
    let server = RedisServer::start_in_memory();
    let pg = std::env::var("PUNCTUAL_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for run in 0..env("DRAIN_RUNS", 3) {
            println!(
                "redis {:.0}",
                redis_drain(&server.url(), run, env("DRAIN_REDIS_N", 100_000)).await
            );
            println!(
                "postgres {:.0}",
                pg_drain(&pg, run, env("DRAIN_PG_N", 20_000)).await
            );
        }
    });
}
