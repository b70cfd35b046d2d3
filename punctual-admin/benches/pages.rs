//! How long the dashboard's pages take with 1,000 and with 1,000,000
//! entries in a queue, on Redis and on PostgreSQL, and what ten viewers
//! refreshing every second cost the store.
//!
//! ```text
//! cargo bench -p punctual-admin --bench pages
//! ```
//!
//! One run, no criterion: each store gets two queues named `orders`, one of
//! 1,000 entries and one of 1,000,000 (Redis: two throwaway servers;
//! PostgreSQL: two schemas of a private server started by the bench, with
//! `pg_stat_statements`). The entries are due over the next two hours (1%
//! of them due already), and each queue has two schedules. A dashboard per
//! queue serves it; after a warm-up, each page is requested through the
//! router `RENDERS` times in a row and the median is reported: the
//! overview, the queue page (counts, charts, the next hour's timeline,
//! schedules), and the first page of the pending entries. The counts come
//! from the dashboard's cache (refreshed in the background every 3 s, as
//! in use); the time of the count read behind it is reported apart.
//!
//! The health pages are timed too: the Running page and the Workers page
//! with 100 workers each holding a run (spawned where the store answers
//! `workers()`), the dead letters newest first, an entry, the audit log;
//! and the same pages on memory queues of 1,000 and 1,000,000 entries
//! (where every call is answered today). `PUNCTUAL_BENCH_STORES=memory`
//! (or `redis`, `postgres`, comma-separated) runs only those.
//!
//! Then ten simulated viewers refresh a page every second for ten seconds
//! (five on the overview, five on the queue page of the 1M queue), and the
//! store's own accounting says how often the counts were read: Redis
//! `MONITOR`, counting the calls of the counts script (its SHA learnt by
//! watching one `stats()` call); PostgreSQL `pg_stat_statements`, the calls
//! of the `stats()` function.

#[path = "../../tests/common/pg_server.rs"]
mod pg_server;
#[allow(dead_code)]
#[path = "../../tests/common/redis_server.rs"]
mod redis_server;

/// `pg_server` reads `crate::common::pg`.
#[allow(dead_code)]
#[path = "../../tests/common"]
mod common {
    pub mod pg;
}

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use pg_server::PgServer;
use punctual::MissedTicks;
use punctual::durable::{Durable, Job, Outcome, Worker};
use punctual::memory::MemoryQueue;
use punctual::postgres::PgQueue;
use punctual::redis::RedisQueue;
use punctual_admin::Dashboard;
use redis_server::RedisServer;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt;

const SMALL: usize = 1_000;
const LARGE: usize = 1_000_000;
const RENDERS: usize = 15;
const PAGES: [(&str, &str); 8] = [
    ("overview", "/"),
    ("queue page", "/queues/orders"),
    ("entries page", "/queues/orders/entries?state=pending"),
    ("running page", "/queues/orders/running"),
    ("workers page", "/queues/orders/workers"),
    ("dead, newest", "/queues/orders/entries?state=dead"),
    ("an entry", "/queues/orders/entries/order-0"),
    ("audit log", "/audit"),
];

/// Workers each holding a run, where the store answers `workers()`.
const WORKERS: usize = 100;

/// Dead letters in each queue.
const DEAD: usize = 100;

/// Whether the bench runs on `store` (`PUNCTUAL_BENCH_STORES`, every
/// store unless set).
fn runs_on(store: &str) -> bool {
    std::env::var("PUNCTUAL_BENCH_STORES")
        .map(|stores| stores.split(',').any(|s| s.trim() == store))
        .unwrap_or(true)
}

/// `WORKERS` workers on `queue`, each holding one due entry until the
/// bench ends; none where the store does not answer `workers()` yet.
async fn hold<Q>(queue: &Q) -> Vec<Worker>
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug + std::fmt::Display,
{
    if let Err(e) = queue.workers().await {
        println!("  no workers: the store answers workers() with {e}");
        return Vec::new();
    }
    // One due entry for each (the 1k queue has only 10 due).
    let runs: Vec<(Value, Duration)> = (0..WORKERS)
        .map(|i| (json!({"run": i}), Duration::ZERO))
        .collect();
    queue.insert_many(&runs).await.unwrap();
    let workers: Vec<Worker> = (0..WORKERS)
        .map(|i| {
            Worker::builder(queue.clone())
                .name(&format!("bench-{i}"))
                .concurrency(1)
                .spawn(|job: Job<Value>| async move {
                    job.cancelled().await;
                    Outcome::Done
                })
        })
        .collect();
    let started = Instant::now();
    loop {
        let listed = queue.workers().await.unwrap();
        let running: usize = listed.iter().map(|w| w.running.len()).sum();
        if listed.len() == WORKERS && running >= WORKERS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} workers, {running} runs",
            listed.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("  {WORKERS} workers each hold a run");
    workers
}

/// `DEAD` dead letters, made as a worker makes them.
async fn dead_letters<Q>(queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    let chunk: Vec<(Value, Duration)> = (0..DEAD)
        .map(|i| (json!({"dead": i}), Duration::ZERO))
        .collect();
    queue.insert_many(&chunk).await.unwrap();
    let worker = Worker::builder(queue.clone())
        .spawn(|_job: Job<Value>| async { Outcome::discard("the bench's dead letter") });
    let started = Instant::now();
    while queue.stats().await.unwrap().dead < DEAD as u64 {
        assert!(started.elapsed() < Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.shutdown(Duration::from_secs(5)).await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    println!("punctual-admin pages: medians of {RENDERS} renders each\n");
    let mut failures = Vec::new();

    // Memory: every call answered today, 100 workers each holding a run.
    if runs_on("memory") {
        let small_q: MemoryQueue<Value> = MemoryQueue::builder("orders").max_attempts(1).build();
        let large_q: MemoryQueue<Value> = MemoryQueue::builder("orders").max_attempts(1).build();
        seed(&small_q, SMALL).await;
        seed(&large_q, LARGE).await;
        let held = [hold(&small_q).await, hold(&large_q).await];
        let small = Dashboard::builder().memory(small_q.clone()).router();
        let large = Dashboard::builder().memory(large_q.clone()).router();
        write_once(&small).await;
        write_once(&large).await;
        compare("memory", &small, &large, &small_q, &large_q, &mut failures).await;
        for workers in held {
            for w in workers {
                w.shutdown(Duration::from_millis(100)).await;
            }
        }
    }
    if runs_on("redis") {
        // Redis: a server per size.
        let small_redis = RedisServer::start_in_memory();
        let large_redis = RedisServer::start_in_memory();
        let small_q = redis_queue(&small_redis.url()).await;
        let large_q = redis_queue(&large_redis.url()).await;
        seed(&small_q, SMALL).await;
        seed(&large_q, LARGE).await;
        let held = [hold(&small_q).await, hold(&large_q).await];
        let small = Dashboard::builder().redis(&small_redis.url()).router();
        let large = Dashboard::builder().redis(&large_redis.url()).router();
        write_once(&small).await;
        write_once(&large).await;
        compare("redis", &small, &large, &small_q, &large_q, &mut failures).await;
        for workers in held {
            for w in workers {
                w.shutdown(Duration::from_millis(100)).await;
            }
        }
        // Only the viewers' dashboard may read the store from here (each
        // dashboard samples its queues every 5 s).
        drop((small, large));
        cold("redis", &small_redis.url(), &large_redis.url(), None).await;
        redis_viewers(&large_redis, &large_q).await;
        drop((small_q, large_q));
        drop((small_redis, large_redis));
    }

    if runs_on("postgres") {
        // PostgreSQL: a private server, a schema per size.
        let pg = tokio::task::block_in_place(|| {
            PgServer::start_with(|data| {
                let conf = data.join("postgresql.conf");
                let mut text = std::fs::read_to_string(&conf).unwrap();
                text.push_str(
                    "\nshared_preload_libraries = 'pg_stat_statements'\n\
                     fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n\
                     shared_buffers = '512MB'\nmax_wal_size = '4GB'\n",
                );
                std::fs::write(conf, text).unwrap();
            })
        });
        let url = pg.url();
        let small_q = pg_queue(&url, "small").await;
        let large_q = pg_queue(&url, "large").await;
        seed(&small_q, SMALL).await;
        seed(&large_q, LARGE).await;
        tokio::task::block_in_place(|| pg.psql("VACUUM ANALYZE"));
        let held = [hold(&small_q).await, hold(&large_q).await];
        let small = Dashboard::builder().postgres(&url, "small").router();
        let large = Dashboard::builder().postgres(&url, "large").router();
        write_once(&small).await;
        write_once(&large).await;
        compare(
            "postgres",
            &small,
            &large,
            &small_q,
            &large_q,
            &mut failures,
        )
        .await;
        for workers in held {
            for w in workers {
                w.shutdown(Duration::from_millis(100)).await;
            }
        }
        drop((small, large));
        cold("postgres", &url, &url, Some(("small", "large"))).await;
        pg_viewers(&pg, &large_q).await;
    }
    finish(failures);
}

/// One write through the dashboard, so that its audit log has a record
/// to list.
async fn write_once(router: &Router) {
    let request = Request::builder()
        .method("POST")
        .uri("/api/queues/orders/resume")
        .header("host", "127.0.0.1")
        .header("origin", "http://127.0.0.1")
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

fn finish(failures: Vec<String>) {
    if failures.is_empty() {
        println!("\nevery page at 1M within 2x of the same page at 1k");
    } else {
        println!("\nNOT within 2x: {}", failures.join(", "));
        std::process::exit(1);
    }
}

async fn redis_queue(url: &str) -> RedisQueue<Value> {
    RedisQueue::builder("orders")
        .url(url)
        .build()
        .await
        .unwrap()
}

async fn pg_queue(url: &str, schema: &str) -> PgQueue<Value> {
    PgQueue::builder("orders")
        .url(url)
        .schema(schema)
        .build()
        .await
        .unwrap()
}

/// `n` entries due over the next two hours (every 100th due now), two
/// schedules.
async fn seed<Q>(queue: &Q, n: usize)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    let started = Instant::now();
    dead_letters(queue).await;
    queue
        .insert_with_id("order-0", &json!({"order": 0}), Duration::from_secs(3600))
        .await
        .unwrap();
    let span = 7200.0 / n as f64;
    let mut i = 0;
    while i < n {
        let chunk: Vec<(Value, Duration)> = (i..(i + 5_000).min(n))
            .map(|k| {
                let delay = if k % 100 == 0 {
                    Duration::ZERO
                } else {
                    Duration::from_secs_f64(60.0 + k as f64 * span)
                };
                (
                    json!({"order": k, "total_cents": 1000 + k % 977, "currency": "EUR"}),
                    delay,
                )
            })
            .collect();
        i += chunk.len();
        queue.insert_many(&chunk).await.unwrap();
    }
    queue
        .schedule_every(
            "nightly-report",
            Duration::from_secs(3600),
            MissedTicks::Skip,
            &json!("r"),
        )
        .await
        .unwrap();
    queue
        .schedule_every(
            "sweep",
            Duration::from_secs(60),
            MissedTicks::Skip,
            &json!("s"),
        )
        .await
        .unwrap();
    let stats = queue.stats().await.unwrap();
    println!(
        "  seeded {} entries in {:.1} s: {stats:?}",
        n,
        started.elapsed().as_secs_f64()
    );
}

/// The time to answer `uri` through `router`, body read.
async fn render(router: &Router, uri: &str) -> Duration {
    let request = Request::builder()
        .uri(uri)
        .header("host", "127.0.0.1")
        .body(Body::empty())
        .unwrap();
    let started = Instant::now();
    let response = router.clone().oneshot(request).await.unwrap();
    assert!(
        response.status().is_success(),
        "{uri}: {}",
        response.status()
    );
    axum::body::to_bytes(response.into_body(), 64 << 20)
        .await
        .unwrap();
    started.elapsed()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn medians(router: &Router) -> Vec<Duration> {
    // Warm up: discovery, the queue opened, the counts and timeline read.
    for (_, uri) in PAGES {
        render(router, uri).await;
    }
    let mut out = Vec::new();
    for (_, uri) in PAGES {
        let mut times = Vec::with_capacity(RENDERS);
        for _ in 0..RENDERS {
            times.push(render(router, uri).await);
        }
        out.push(median(times));
    }
    out
}

async fn compare<Q>(
    store: &str,
    small: &Router,
    large: &Router,
    small_q: &Q,
    large_q: &Q,
    failures: &mut Vec<String>,
) where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    let at_small = medians(small).await;
    let at_large = medians(large).await;
    println!("\n{store}");
    println!(
        "  {:<14} {:>12} {:>12} {:>7}",
        "page", "1k entries", "1M entries", "ratio"
    );
    for (i, (name, _)) in PAGES.iter().enumerate() {
        let ratio = at_large[i].as_secs_f64() / at_small[i].as_secs_f64();
        println!(
            "  {name:<14} {:>12} {:>12} {ratio:>6.2}x",
            ms(at_small[i]),
            ms(at_large[i])
        );
        if ratio > 2.0 {
            failures.push(format!("{store} {name} ({ratio:.2}x)"));
        }
    }
    let count = |q: &Q| {
        let q = q.clone();
        async move {
            let mut times = Vec::new();
            for _ in 0..5 {
                let started = Instant::now();
                q.stats().await.unwrap();
                times.push(started.elapsed());
            }
            median(times)
        }
    };
    println!(
        "  the counts behind the cache (stats(), read in the background at most every 3 s): {} at 1k, {} at 1M",
        ms(count(small_q).await),
        ms(count(large_q).await)
    );
}

/// The same pages with every read fresh (`refresh_every(0)`: the counts,
/// the clock and the timeline read for each render; the list of queues
/// still once per 30 s): what the cache spares.
async fn cold(store: &str, small_url: &str, large_url: &str, schemas: Option<(&str, &str)>) {
    let dashboard = |url: &str, schema: Option<&str>| {
        let builder = Dashboard::builder().refresh_every(Duration::ZERO);
        match schema {
            Some(schema) => builder.postgres(url, schema).router(),
            None => builder.redis(url).router(),
        }
    };
    let small = dashboard(small_url, schemas.map(|s| s.0));
    let large = dashboard(large_url, schemas.map(|s| s.1));
    let at_small = medians(&small).await;
    let at_large = medians(&large).await;
    println!("  {store}, every read fresh (refresh_every(0), no cache):");
    for (i, (name, _)) in PAGES.iter().enumerate() {
        println!(
            "  {name:<14} {:>12} {:>12} {:>6.2}x",
            ms(at_small[i]),
            ms(at_large[i]),
            at_large[i].as_secs_f64() / at_small[i].as_secs_f64()
        );
    }
}

/// Ten viewers refreshing every second for ten seconds: five on the
/// overview, five on the queue page.
async fn viewers(router: &Router) -> Duration {
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for v in 0..10 {
        let router = router.clone();
        set.spawn(async move {
            let uri = if v % 2 == 0 { "/" } else { "/queues/orders" };
            // Spread over the second, as people are.
            tokio::time::sleep(Duration::from_millis(v * 97)).await;
            let mut every = tokio::time::interval(Duration::from_secs(1));
            for _ in 0..10 {
                every.tick().await;
                render(&router, uri).await;
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
    started.elapsed()
}

async fn redis_viewers(server: &RedisServer, queue: &RedisQueue<Value>) {
    // The counts script's SHA, from watching one call of it.
    let (lines, _monitor) = monitor(server);
    queue.stats().await.unwrap();
    let sha = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(5))
            .expect("MONITOR shows the call");
        if let Some(rest) = line.split("\"EVALSHA\" \"").nth(1) {
            break rest.split('"').next().unwrap().to_owned();
        }
    };
    drop(lines);
    let router = Dashboard::builder().redis(&server.url()).router();
    render(&router, "/").await;
    render(&router, "/queues/orders").await;
    let (lines, _monitor) = monitor(server);
    let took = viewers(&router).await;
    let (mut commands, mut in_scripts, mut counts) = (0, 0, 0);
    let mut by_name = std::collections::BTreeMap::<String, u64>::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        // MONITOR shows the commands a script runs too, as `[0 lua]`.
        if line.contains(" lua] ") {
            in_scripts += 1;
            continue;
        }
        commands += 1;
        *by_name
            .entry(line.split('"').nth(1).unwrap_or("?").to_owned())
            .or_default() += 1;
        if line.contains(&sha) {
            counts += 1;
        }
    }
    println!(
        "\nredis, ten viewers refreshing every second for {:.1} s (100 pages): {counts} reads of the 1M queue's counts; \
         {commands} commands from the dashboard ({by_name:?}), running {in_scripts} commands inside the scripts",
        took.as_secs_f64()
    );
}

/// The lines `MONITOR` prints on `server`, from a thread; the thread ends
/// when the receiver is dropped and the next line comes.
fn monitor(server: &RedisServer) -> (mpsc::Receiver<String>, std::thread::JoinHandle<()>) {
    let stream = redis_server::connect(server.port(), Duration::from_secs(30)).unwrap();
    redis_server::send(&stream, &["MONITOR"]).unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stream).lines();
        // +OK
        let _ = lines.next();
        for line in lines {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // MONITOR is on once its +OK came: the next command is seen.
    std::thread::sleep(Duration::from_millis(100));
    (rx, reader)
}

async fn pg_viewers(pg: &PgServer, _queue: &PgQueue<Value>) {
    let psql = |sql: &str| tokio::task::block_in_place(|| pg.psql(sql));
    psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    let router = Dashboard::builder().postgres(&pg.url(), "large").router();
    render(&router, "/").await;
    render(&router, "/queues/orders").await;
    psql("SELECT pg_stat_statements_reset()");
    let took = viewers(&router).await;
    let calls = |pattern: &str| -> u64 {
        psql(&format!(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '{pattern}'"
        ))
        .parse()
        .unwrap()
    };
    let counts = calls("%\"large\".stats(%");
    let all = calls("%");
    println!(
        "postgres, ten viewers refreshing every second for {:.1} s (100 pages): {counts} calls of the 1M queue's stats(), {all} statements in all",
        took.as_secs_f64()
    );
    let top = psql(
        "SELECT calls || ' × ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 90) \
         FROM pg_stat_statements ORDER BY calls DESC LIMIT 8",
    );
    for line in top.lines() {
        println!("    {line}");
    }
}
