//! The durable `Worker`'s drain on PostgreSQL with keys and key limits,
//! beside the plain drain in the same run (each mode in turn, every run),
//! so the cost of fairness and limits reads as a ratio on one machine under
//! one load.
//!
//! Each run, each mode: `LIMITS_N` (20,000) entries due at once on a fresh
//! schema of the local PostgreSQL (`PUNCTUAL_PG_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`), put in before the clock
//! starts (1,000 per `insert_many_with`); a `Worker` with `concurrency(8)`
//! and a handler that returns at once runs until every entry is acked.
//! Modes (`LIMITS_MODES`, a comma-separated subset; default
//! `plain,keyed,limited`):
//!
//! - `plain`: no key, priority 0 (the drain of `benches/drain.rs`);
//! - `keyed`: `LIMITS_KEYS` (100) keys in turn (entry i has key i mod
//!   100), no limit: the fair claim's cost alone;
//! - `limited`: the same, each key limited to concurrency
//!   `LIMITS_CONCURRENCY` (2) by a `set_key_limit` of its own;
//! - `blocks`: as `limited`, the entries of each key put in together (key
//!   0's, then key 1's, ...): a claim's window holds one key's backlog, and
//!   the claim looks beyond it (a loose scan of the keys).
//!
//! Prints one line per mode and run: `<mode> <jobs/s>`.
//!
//! `cargo bench --features postgres --bench pg_limits`; `LIMITS_RUNS`
//! (default 5).

mod support;

use std::time::Duration;

use punctual::durable::{InsertOptions, KeyLimit, Worker};
use punctual::postgres::PgQueue;
use support::{acked, env_u64};
use tokio::time::Instant;

async fn drain(url: &str, mode: &str, run: u64) -> f64 {
    let n = env_u64("LIMITS_N", 20_000);
    let keys = env_u64("LIMITS_KEYS", 100).max(1);
    let most = u32::try_from(env_u64("LIMITS_CONCURRENCY", 2)).unwrap_or(u32::MAX);
    let schema = format!("limits_{}_{mode}_{run}", std::process::id());
    let q: PgQueue<u64> = PgQueue::builder("drain")
        .url(url)
        .schema(&schema)
        .build()
        .await
        .expect("connect");
    let key_of = |i: u64| match mode {
        "plain" => None,
        // Each key's entries together, in key order.
        "blocks" => Some(format!("k{}", i * keys / n)),
        _ => Some(format!("k{}", i % keys)),
    };
    if matches!(mode, "limited" | "blocks") {
        let limit = KeyLimit {
            concurrency: Some(most),
            rate: None,
        };
        for k in 0..keys {
            q.set_key_limit(&format!("k{k}"), limit)
                .await
                .expect("limit");
        }
    }
    let all: Vec<(u64, InsertOptions)> = (0..n)
        .map(|i| {
            let options = match key_of(i) {
                Some(key) => InsertOptions::new().key(&key),
                None => InsertOptions::new(),
            };
            (i, options)
        })
        .collect();
    for chunk in all.chunks(1000) {
        q.insert_many_with(chunk).await.expect("insert_many_with");
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
    let pg = std::env::var("PUNCTUAL_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let modes = std::env::var("LIMITS_MODES").unwrap_or_else(|_| "plain,keyed,limited".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for run in 0..env_u64("LIMITS_RUNS", 5) {
            for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                println!("{mode} {:.0}", drain(&pg, mode, run).await);
            }
        }
    });
}
