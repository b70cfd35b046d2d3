//! What a page of `entries` costs with 10,000 and with 1,000,000 entries in
//! the queue, on Redis and PostgreSQL: the first page of 100 pending
//! entries, a page of 100 from the middle (by a cursor), and the first page
//! of 100 due ones. A page reads a range of one sorted set (Redis) or one
//! index range scan (PostgreSQL), so the 1M page should cost about what the
//! 10k page costs (the bar: within 2x).
//!
//! Each queue holds half its entries due and half pending, put in with
//! `insert_many` before the clock starts. Each page is read 21 times; the
//! median is reported, in microseconds, with the ratio 1M / 10k.
//!
//! `cargo bench --features redis,postgres --bench operations` against a
//! fresh local redis-server (persistence off) and the PostgreSQL at
//! `PUNCTUAL_PG_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`,
//! a fresh schema dropped at the end). `OPS_BENCH_BIG` changes the large
//! size (default 1,000,000).

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;
mod support;

use std::time::Duration;

use punctual::durable::{Cursor, Durable, EntryState};
use punctual::postgres::PgQueue;
use punctual::redis::RedisQueue;
use redis_server::RedisServer;
use support::median;
use tokio::time::Instant;

const SMALL: u64 = 10_000;
const PAGE: usize = 100;
const READS: usize = 21;

/// Puts `n` entries in: the first half due now, the rest an hour on.
async fn fill<Q: Durable<Item = u64>>(queue: &Q, n: u64) {
    let all: Vec<(u64, Duration)> = (0..n)
        .map(|i| {
            let delay = if i < n / 2 {
                Duration::ZERO
            } else {
                Duration::from_secs(3600) + Duration::from_millis(i)
            };
            (i, delay)
        })
        .collect();
    for chunk in all.chunks(2000) {
        queue.insert_many(chunk).await.expect("insert_many");
    }
}

/// Median µs of reading one page of `state` after `cursor`.
async fn page_us<Q: Durable<Item = u64>>(
    queue: &Q,
    state: EntryState,
    cursor: Option<&Cursor>,
) -> f64 {
    let mut times = Vec::with_capacity(READS);
    for _ in 0..READS {
        let start = Instant::now();
        let page = queue.entries(state, cursor, PAGE).await.expect("entries");
        times.push(start.elapsed().as_secs_f64() * 1e6);
        assert_eq!(page.entries.len(), PAGE);
    }
    median(&mut times)
}

/// A cursor about halfway through the pending entries: `pages` pages in.
async fn middle<Q: Durable<Item = u64>>(queue: &Q, n: u64) -> Cursor {
    // Walk with big pages to the middle of the pending half.
    let mut cursor = None;
    let mut seen = 0;
    while seen < n / 4 {
        let page = queue
            .entries(EntryState::Pending, cursor.as_ref(), 1000)
            .await
            .expect("entries");
        seen += page.entries.len() as u64;
        cursor = page.next;
    }
    cursor.expect("a cursor")
}

/// [first pending, middle pending, first due] in µs.
async fn measure<Q: Durable<Item = u64>>(queue: &Q, n: u64) -> [f64; 3] {
    fill(queue, n).await;
    let mid = middle(queue, n).await;
    [
        page_us(queue, EntryState::Pending, None).await,
        page_us(queue, EntryState::Pending, Some(&mid)).await,
        page_us(queue, EntryState::Due, None).await,
    ]
}

fn report(store: &str, small: [f64; 3], big: [f64; 3], n: u64) {
    for (i, what) in [
        "first pending page",
        "middle pending page",
        "first due page",
    ]
    .iter()
    .enumerate()
    {
        let ratio = big[i] / small[i];
        println!(
            "| {store} | {what} | {:.0} | {:.0} | {ratio:.2} | {} |",
            small[i],
            big[i],
            if ratio <= 2.0 { "met" } else { "NOT met" }
        );
    }
    let _ = n;
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let big: u64 = std::env::var("OPS_BENCH_BIG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let server = RedisServer::start_in_memory();
    let pg = std::env::var("PUNCTUAL_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let schema = format!("ops_bench_{}", std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut rows = Vec::new();
        for (label, n) in [("small", SMALL), ("big", big)] {
            let r: RedisQueue<u64> = RedisQueue::builder(&format!("ops-{label}"))
                .url(&server.url())
                .build()
                .await
                .expect("redis");
            let p: PgQueue<u64> = PgQueue::builder(&format!("ops-{label}"))
                .url(&pg)
                .schema(&schema)
                .build()
                .await
                .expect("postgres");
            eprintln!("filling {n} entries...");
            let redis = measure(&r, n).await;
            let postgres = measure(&p, n).await;
            r.purge().await.expect("purge");
            p.purge().await.expect("purge");
            rows.push((redis, postgres));
        }
        println!("\n| store | page of {PAGE} | {SMALL} entries (µs) | {big} entries (µs) | ratio | bar <= 2x |");
        println!("|---|---|---:|---:|---:|---|");
        report("redis", rows[0].0, rows[1].0, big);
        report("postgres", rows[0].1, rows[1].1, big);
        let pool = punctual::postgres::sqlx::PgPool::connect(&pg).await.expect("pg");
        punctual::postgres::sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(&pool)
            .await
            .expect("drop schema");
    });
}
