//! What keeping results costs the durable `Worker`'s drain: the same drain
//! with `keep_results` unset and with `keep_results(1 h)`, side by side in
//! one process, the two modes in turns (the first swapped each round).
//!
//! Each run: `KEEP_N` (20,000) entries due at once on a fresh queue, put in
//! before the clock starts; a `Worker` with `concurrency(8)` and a handler
//! that returns at once runs until every entry is acked. Redis: a fresh
//! local redis-server (persistence off). PostgreSQL: a fresh schema of the
//! local server (`PUNCTUAL_PG_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`). Prints one line per run:
//! `<store> <unset|1h> <jobs/s>`, then the medians and their ratio.
//!
//! `cargo bench --features redis,postgres --bench keep_results`;
//! `KEEP_RUNS` (default 3), `KEEP_ONLY` (`redis` or `postgres`).

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;

mod support;

use std::time::Duration;

use punctual::durable::{Durable, Worker};
use punctual::postgres::PgQueue;
use punctual::redis::RedisQueue;
use redis_server::RedisServer;
use support::{acked, env_u64};
use tokio::time::Instant;

const HOUR: Duration = Duration::from_secs(3600);

fn entries(n: u64) -> Vec<(u64, Duration)> {
    (0..n).map(|i| (i, Duration::ZERO)).collect()
}

async fn redis_drain(url: &str, name: &str, keep: Duration, n: u64) -> f64 {
    let q: RedisQueue<u64> = RedisQueue::builder(name)
        .url(url)
        .keep_results(keep)
        .build()
        .await
        .expect("connect");
    q.purge().await.expect("purge");
    let rate = fill_and_drain(&q, n).await;
    q.purge().await.expect("purge");
    rate
}

/// Puts `n` due entries in `q`, then drains them with a worker of 8
/// places and a handler that returns at once: jobs/s.
async fn fill_and_drain<Q: Durable<Item = u64>>(q: &Q, n: u64) -> f64
where
    Q::Error: std::fmt::Debug,
{
    for chunk in entries(n).chunks(1000) {
        q.insert_many(chunk).await.expect("insert_many");
    }
    let start = Instant::now();
    let worker = Worker::builder(q.clone())
        .concurrency(8)
        .spawn(|_job| async { Ok::<(), String>(()) });
    let took = acked(&worker, n, start).await;
    worker.shutdown(Duration::from_secs(1)).await;
    n as f64 / took.as_secs_f64()
}

async fn pg_drain(url: &str, schema: &str, keep: Duration, n: u64) -> f64 {
    let q: PgQueue<u64> = PgQueue::builder("drain")
        .url(url)
        .schema(schema)
        .keep_results(keep)
        .build()
        .await
        .expect("connect");
    let rate = fill_and_drain(&q, n).await;
    let pool = punctual::postgres::sqlx::PgPool::connect(url)
        .await
        .expect("connect");
    punctual::postgres::sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pool)
        .await
        .expect("drop schema");
    rate
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let only = std::env::var("KEEP_ONLY").unwrap_or_default();
    let server = RedisServer::start_in_memory();
    let pg = std::env::var("PUNCTUAL_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let n = env_u64("KEEP_N", 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for store in ["redis", "postgres"] {
            if !only.is_empty() && only != store {
                continue;
            }
            let (mut unset, mut kept) = (Vec::new(), Vec::new());
            for run in 0..env_u64("KEEP_RUNS", 3) {
                let modes = if run % 2 == 0 {
                    [Duration::ZERO, HOUR]
                } else {
                    [HOUR, Duration::ZERO]
                };
                for keep in modes {
                    let name = format!("keep_{}_{run}_{}", std::process::id(), keep.as_secs());
                    let rate = if store == "redis" {
                        redis_drain(&server.url(), &name, keep, n).await
                    } else {
                        pg_drain(&pg, &name, keep, n).await
                    };
                    let mode = if keep.is_zero() { "unset" } else { "1h" };
                    println!("{store} {mode} {rate:.0}");
                    if keep.is_zero() {
                        unset.push(rate);
                    } else {
                        kept.push(rate);
                    }
                }
            }
            let (u, k) = (support::median(&mut unset), support::median(&mut kept));
            println!(
                "{store} median unset {u:.0}, 1h {k:.0}, 1h / unset {:.2}",
                k / u
            );
        }
    });
}
