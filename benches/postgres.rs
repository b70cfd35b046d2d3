//! `punctual::postgres::PgQueue` and the durable `Worker` against the
//! PostgreSQL delay queue most services write by hand (the floor), same
//! server, same run.
//!
//! The floor: one table `(id bigserial primary key, due_at timestamptz,
//! value text)` with an index on `(due_at, id)`; an insert is one `INSERT …
//! RETURNING id` per call; each consumer claims one due row at a time with
//!
//! ```sql
//! DELETE FROM t WHERE id = (SELECT id FROM t WHERE due_at <= (SELECT clock_timestamp())
//!     ORDER BY due_at, id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING value, due_at
//! ```
//!
//! and sleeps 10 ms when none is due. It has no lease and no ack: a consumer
//! that dies after the delete loses the job. Ours runs with default settings
//! (30 s lease, 1 s poll interval). Both sides get a pool of the same size,
//! and the jobs do no work, so the numbers are the queues' own costs.
//!
//! The bench creates a database `punctual_bench_<pid>` on the local server
//! (`postgres://postgres@127.0.0.1:5432/postgres`, or `PUNCTUAL_PG_URL`),
//! gives every run fresh tables (ours: a fresh schema), and drops the
//! database at the end. Every workload runs `R` times per contender (3,
//! `PG_BENCH_RUNS` to change), the two contenders' runs interleaved:
//!
//! 1. drain: 20,000 entries all due, put in before the clock starts
//!    (`insert_many` in chunks of 256 / one multi-row `INSERT`), then timed
//!    until all are done: a `Worker` with `concurrency(8)` and a handler that
//!    returns `Ok(())` at once (done = `stats().completed`), against 8
//!    floor consumers. Also transactions, rows written (`tup_inserted +
//!    tup_updated + tup_deleted`) and WAL bytes per job over the drain, from
//!    `pg_stat_database` (the run's connections are closed and gone before
//!    it is read, so their lazily flushed counts are in) and the WAL
//!    between the two readings, read back with `pg_walinspect`: the records
//!    of this database's relations and of its transactions (a temporary
//!    replication slot keeps the WAL until it is read; without the
//!    extension, the whole server's WAL, which other sessions add to).
//! 2. lateness: 20,000 entries due uniformly over 2 s, inserted one by one
//!    (`insert_at`, in due order) by 8 producers at full speed while the
//!    worker (resp. the 8 consumers) runs. The first deadline comes after a
//!    lead long enough for the inserts to end before the last deadlines
//!    (1.25 times the time 8 producers took for 1,000 inserts just before,
//!    scaled to 20,000, less 1 s; at least 1 s; or `PG_BENCH_LATE_LEAD_MS`):
//!    on a server that inserts slower than 10,000 per second, the inserts
//!    end before the first deadline. Lateness is the wall clock
//!    when the handler starts (the floor: when its delete returned) minus
//!    the due time the producer computed; server and bench share the clock.
//!    The percentiles are over the entries due after the last insert
//!    returned (the earlier ones wait on the inserts as much as on the
//!    queue); the row below them says how many those were.
//! 3. insert: one per call, 2,000 from one task and 10,000 from 8 producers,
//!    `insert` against the floor's `INSERT`, both due 1 to 11 minutes out;
//!    transactions, rows and WAL bytes per insert over the first; then
//!    50,000 entries in chunks of 256 from 8 producers, `insert_many`
//!    against a multi-row `INSERT … SELECT FROM unnest(…)`.
//!
//! 4. random delays: 20,000 jobs each due 0 to 2 s after its
//!    insert, one producer with 256 calls in flight over a pool of 10 that
//!    the consumers share, the worker (resp. the floor's consumers) running
//!    from the start: lateness p50, p99 and the p99 of the jobs due after
//!    the last insert, and the producer's inserts per second (see
//!    `postgres/late.rs`; `PG_BENCH_RANDOM_SPREAD_MS` changes the 2 s).
//!
//! `cargo bench --features postgres --bench postgres` prints progress and a
//! markdown table. `PG_BENCH_ONLY=drain` (or `lateness`, `insert`,
//! `random`, or a comma-separated list) runs those workloads alone. For profiling the
//! drain: `PG_BENCH_CONCURRENCY=16` changes the worker's concurrency;
//! `PG_BENCH_CONSUMER_SET=synchronous_commit=off,track_functions=pl` sets
//! those on the drain consumers' sessions (both sides), and with
//! `track_functions` prints the server time of the queue's functions.

#[path = "postgres/late.rs"]
mod late;
#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/pg.rs"]
mod pg;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use punctual::durable::Worker;
use punctual::postgres::PgQueue;
use punctual::postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use punctual::postgres::sqlx::{self, PgPool, Row};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const DEFAULT_RUNS: usize = 3;
const CONSUMERS: usize = 8;
const PRODUCERS: usize = 8;
/// The worker's concurrency (`PG_BENCH_CONCURRENCY` to change).
const CONCURRENCY: usize = 8;
const DRAIN_N: u64 = 20_000;
const LATE_N: u64 = 20_000;
const LATE_SPREAD_MS: u64 = 2_000;
/// The shortest time before the first deadline of the lateness run.
const LATE_LEAD_MS: u64 = 1_000;
/// Inserts timed before the lateness run, to choose its lead.
const LATE_PROBE: u64 = 1_000;
const SEQ_N: u64 = 2_000;
const CONC_N: u64 = 10_000;
const BULK_N: u64 = 50_000;
const CHUNK: usize = 256;
const FLOOR_POLL: Duration = Duration::from_millis(10);
/// Connections of each side's pool (8 producers and 8 consumers fit).
const POOL_SIZE: u32 = 20;
/// A workload that takes longer than this is broken.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Serialize, Deserialize, Debug)]
struct Payload {
    n: u64,
    /// When the producer wanted it run, µs since the epoch.
    due_us: i64,
}

// ---------------------------------------------------------------- clocks

#[allow(clippy::disallowed_methods)] // a bench measures the real clock
fn wall() -> SystemTime {
    SystemTime::now()
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn unix_us() -> i64 {
    micros(wall())
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

// ---------------------------------------------------------------- database

/// The bench's database, dropped when this is.
struct Database {
    admin: String,
    name: String,
}

impl Database {
    fn create() -> Database {
        let admin = pg::admin_url();
        let stale = pg::psql(
            &admin,
            "SELECT datname FROM pg_database WHERE datname LIKE 'punctual\\_bench\\_%'",
        );
        for name in stale.lines() {
            let pid = name.strip_prefix("punctual_bench_").unwrap_or("");
            if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                pg::psql(
                    &admin,
                    &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
                );
            }
        }
        let name = format!("punctual_bench_{}", std::process::id());
        pg::psql(&admin, &format!("CREATE DATABASE \"{name}\""));
        Database { admin, name }
    }

    fn url(&self) -> String {
        pg::with_db(&self.admin, &self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = std::process::Command::new("psql")
            .args([
                &self.admin,
                "-X",
                "-At",
                "-c",
                &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
            ])
            .output();
    }
}

/// A pool as `PgQueue::connect` makes one, bigger.
async fn new_pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect")
}

/// Settings of the drain's consumers' sessions (the worker's pool, the
/// floor consumers' pool), from `PG_BENCH_CONSUMER_SET`
/// (`synchronous_commit=off,track_functions=pl`, say).
fn consumer_settings() -> Vec<(String, String)> {
    std::env::var("PG_BENCH_CONSUMER_SET")
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The pool of the drain's consumers.
async fn consumer_pool(url: &str) -> PgPool {
    let settings = consumer_settings();
    if settings.is_empty() {
        return new_pool(url).await;
    }
    let options = url
        .parse::<PgConnectOptions>()
        .expect("url")
        .options(settings);
    PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .expect("connect")
}

/// Opens `n` connections of `pool` (so neither side pays for connecting
/// while timed).
async fn warm(pool: &PgPool, n: usize) {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.acquire().await.expect("acquire"));
    }
}

/// This database's counters from `pg_stat_database`, and the WAL position.
#[derive(Clone, Default)]
struct Counters {
    xacts: i64,
    rows: i64,
    lsn: String,
}

/// The bench's control connection.
struct Ctl {
    pool: PgPool,
    /// `%/<database oid>/%`: a WAL record's block reference to this
    /// database's relations.
    ours: String,
    /// Whether `pg_walinspect` is there (else WAL is the server's).
    walinspect: bool,
}

impl Ctl {
    async fn exec(&self, sql: &str) {
        sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn connect(url: &str) -> Ctl {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect(url)
            .await
            .expect("control connection");
        let oid: i64 = sqlx::query_scalar(
            "SELECT oid::bigint FROM pg_database WHERE datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .expect("database oid");
        // The WAL read back is kept by a temporary slot of this session
        // (a checkpoint would remove it otherwise), moved on after each read.
        let walinspect = sqlx::raw_sql(&format!(
            "CREATE EXTENSION IF NOT EXISTS pg_walinspect; \
             SELECT pg_create_physical_replication_slot('punctual_bench_{}', true, true);",
            std::process::id()
        ))
        .execute(&pool)
        .await
        .map_err(|e| println!("  note: no pg_walinspect ({e}): WAL is the server's"))
        .is_ok();
        Ctl {
            pool,
            ours: format!("%/{oid}/%"),
            walinspect,
        }
    }

    /// WAL bytes written between `from` and `to`: the records that touch
    /// this database's relations and those of its transactions (commits),
    /// read with `pg_walinspect`; without it, everything the server wrote.
    async fn wal_between(&self, from: &str, to: &str) -> f64 {
        if self.walinspect {
            // pg_walinspect reads flushed WAL only.
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                let flushed: bool =
                    sqlx::query_scalar("SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn")
                        .bind(to)
                        .fetch_one(&self.pool)
                        .await
                        .expect("pg_current_wal_flush_lsn");
                if flushed {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let ours = sqlx::query_scalar(
                "WITH r AS MATERIALIZED ( \
                     SELECT xid::text::bigint AS x, record_length, block_ref LIKE $3 AS ours \
                     FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)) \
                 SELECT coalesce(sum(record_length), 0)::float8 FROM r \
                 WHERE ours OR (x <> 0 AND x IN (SELECT x FROM r WHERE ours))",
            )
            .bind(from)
            .bind(to)
            .bind(&self.ours)
            .fetch_one(&self.pool)
            .await;
            let _ = sqlx::query("SELECT pg_replication_slot_advance($1, $2::pg_lsn)")
                .bind(format!("punctual_bench_{}", std::process::id()))
                .bind(to)
                .execute(&self.pool)
                .await;
            match ours {
                Ok(bytes) => return bytes,
                Err(e) => println!("  warning: pg_walinspect: {e}; counting the server's WAL"),
            }
        }
        sqlx::query_scalar("SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::float8")
            .bind(from)
            .bind(to)
            .fetch_one(&self.pool)
            .await
            .expect("pg_wal_lsn_diff")
    }

    /// Transactions, rows written and WAL bytes per job from `before` to
    /// `after`.
    async fn cost(&self, before: &Counters, after: &Counters, n: u64) -> Cost {
        let wal = self.wal_between(&before.lsn, &after.lsn).await;
        Cost {
            xacts: (after.xacts - before.xacts) as f64 / n as f64,
            rows: (after.rows - before.rows) as f64 / n as f64,
            wal: wal / n as f64,
        }
    }

    /// Closes `pool` and reads the counters once its connections are gone
    /// (a backend flushes its statistics lazily, at the latest when it
    /// exits; a straggler is terminated, which flushes them too).
    async fn settle(&self, pool: Option<PgPool>) -> Counters {
        if let Some(pool) = pool {
            let _ = tokio::time::timeout(Duration::from_secs(2), pool.close()).await;
        }
        let others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                      AND pid <> pg_backend_pid() AND backend_type = 'client backend'";
        let start = Instant::now();
        while self.count(others).await > 0 {
            if start.elapsed() > Duration::from_secs(1) {
                self.exec(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                     AND backend_type = 'client backend'",
                )
                .await;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "connections stay"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A backend leaves pg_stat_activity just before it flushes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.exec("SELECT pg_stat_force_next_flush()").await;
        let row = sqlx::query(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted, \
                 pg_current_wal_lsn()::text \
             FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&self.pool)
        .await
        .expect("pg_stat_database");
        Counters {
            xacts: row.get(0),
            rows: row.get(1),
            lsn: row.get(2),
        }
    }
}

/// Transactions, rows written and WAL bytes per job.
#[derive(Clone, Copy, Default)]
struct Cost {
    xacts: f64,
    rows: f64,
    wal: f64,
}

// ---------------------------------------------------------------- contenders

async fn open_queue(pool: &PgPool, schema: &str) -> PgQueue<Payload> {
    PgQueue::builder("bench")
        .pool(pool.clone())
        .schema(schema)
        .build()
        .await
        .expect("build PgQueue")
}

/// The hand-written queue.
#[derive(Clone)]
struct Floor {
    pool: PgPool,
    table: String,
}

impl Floor {
    async fn create(ctl: &Ctl, pool: &PgPool, table: &str) -> Floor {
        ctl.exec(&format!(
            "DROP TABLE IF EXISTS {table}; \
             CREATE TABLE {table} (id bigserial PRIMARY KEY, due_at timestamptz NOT NULL, \
                 value text NOT NULL); \
             CREATE INDEX ON {table} (due_at, id);"
        ))
        .await;
        Floor {
            pool: pool.clone(),
            table: table.to_owned(),
        }
    }

    /// Due `delay` from now, on the database's clock.
    async fn insert(&self, payload: &Payload, delay: Duration) -> i64 {
        let value = serde_json::to_string(payload).expect("encode");
        sqlx::query_scalar(&format!(
            "INSERT INTO {} (due_at, value) \
             VALUES (clock_timestamp() + $1::float8 * interval '1 millisecond', $2) RETURNING id",
            self.table
        ))
        .bind(delay.as_secs_f64() * 1e3)
        .bind(value)
        .fetch_one(&self.pool)
        .await
        .expect("floor insert")
    }

    /// Due at `payload.due_us`.
    async fn insert_at(&self, payload: &Payload) -> i64 {
        let value = serde_json::to_string(payload).expect("encode");
        sqlx::query_scalar(&format!(
            "INSERT INTO {} (due_at, value) VALUES (to_timestamp($1::float8 / 1e6), $2) \
             RETURNING id",
            self.table
        ))
        .bind(payload.due_us as f64)
        .bind(value)
        .fetch_one(&self.pool)
        .await
        .expect("floor insert_at")
    }

    /// All of `entries` in one statement.
    async fn insert_chunk(&self, entries: &[(Payload, Duration)]) -> Vec<i64> {
        let values: Vec<String> = entries
            .iter()
            .map(|(p, _)| serde_json::to_string(p).expect("encode"))
            .collect();
        let delays: Vec<f64> = entries.iter().map(|(_, d)| d.as_secs_f64() * 1e3).collect();
        sqlx::query_scalar(&format!(
            "INSERT INTO {} (due_at, value) \
             SELECT clock_timestamp() + u.ms * interval '1 millisecond', u.value \
             FROM unnest($1::text[], $2::float8[]) AS u(value, ms) RETURNING id",
            self.table
        ))
        .bind(values)
        .bind(delays)
        .fetch_all(&self.pool)
        .await
        .expect("floor insert chunk")
    }

    /// One due entry, deleted.
    async fn claim(&self) -> Option<Payload> {
        let value: Option<String> = sqlx::query_scalar(&format!(
            "DELETE FROM {t} WHERE id = (SELECT id FROM {t} \
                 WHERE due_at <= (SELECT clock_timestamp()) \
                 ORDER BY due_at, id FOR UPDATE SKIP LOCKED LIMIT 1) \
             RETURNING value",
            t = self.table
        ))
        .fetch_optional(&self.pool)
        .await
        .expect("floor claim");
        value.map(|v| serde_json::from_str(&v).expect("decode"))
    }

    fn spawn_consumers(&self, sink: &Arc<Sink>) -> Vec<JoinHandle<()>> {
        (0..CONSUMERS)
            .map(|_| {
                let (floor, sink) = (self.clone(), Arc::clone(sink));
                tokio::spawn(async move {
                    loop {
                        match floor.claim().await {
                            Some(payload) => sink.record(&payload),
                            None => tokio::time::sleep(FLOOR_POLL).await,
                        }
                    }
                })
            })
            .collect()
    }

    async fn count(&self, ctl: &Ctl) -> i64 {
        ctl.count(&format!("SELECT count(*) FROM {}", self.table))
            .await
    }
}

/// Where runs are reported: a count, and (due µs, lateness µs) pairs.
struct Sink {
    done: AtomicU64,
    lateness: Option<Mutex<Vec<(i64, i64)>>>,
}

impl Sink {
    fn new(lateness: bool) -> Arc<Sink> {
        Arc::new(Sink {
            done: AtomicU64::new(0),
            lateness: lateness.then(|| Mutex::new(Vec::with_capacity(LATE_N as usize))),
        })
    }

    fn record(&self, payload: &Payload) {
        if let Some(lateness) = &self.lateness {
            let late = unix_us() - payload.due_us;
            lateness.lock().unwrap().push((payload.due_us, late));
        }
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    fn lateness(&self) -> Vec<(i64, i64)> {
        std::mem::take(&mut *self.lateness.as_ref().unwrap().lock().unwrap())
    }
}

/// Waits until `done()` reaches `n`, looking every millisecond; when it did.
async fn reached(what: &str, n: u64, done: impl Fn() -> u64) -> Instant {
    tokio::time::timeout(WORKLOAD_TIMEOUT, async {
        loop {
            if done() >= n {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} stuck at {} of {n}", done()))
}

fn concurrency() -> usize {
    std::env::var("PG_BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CONCURRENCY)
}

/// A worker of `queue` reporting to `sink`.
fn spawn_worker(queue: &PgQueue<Payload>, sink: &Arc<Sink>) -> Worker {
    let sink = Arc::clone(sink);
    Worker::builder(queue.clone())
        .concurrency(concurrency())
        .spawn(move |job| {
            sink.record(job.value());
            async { Ok::<(), Infallible>(()) }
        })
}

async fn worker_done(worker: Worker, n: u64) {
    let stats = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(
        (stats.completed, stats.failed, stats.lost),
        (n, 0, 0),
        "{stats:?}"
    );
}

async fn assert_empty(queue: &PgQueue<Payload>) {
    let left = queue.stats().await.expect("stats");
    assert_eq!(
        left.pending + left.due + left.leased + left.dead,
        0,
        "left {left:?}"
    );
}

/// Deals `items` round-robin to `k` shares.
fn deal<T>(items: Vec<T>, k: usize) -> Vec<Vec<T>> {
    let mut shares: Vec<Vec<T>> = (0..k).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        shares[i % k].push(item);
    }
    shares
}

/// Runs `f` on each share from its own task, each awaiting its items one by
/// one; returns the wall time taken.
async fn from_tasks<T, F, Fut>(shares: Vec<Vec<T>>, f: F) -> Duration
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let tasks: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let f = f.clone();
            tokio::spawn(async move {
                for item in share {
                    f(item).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("producer");
    }
    start.elapsed()
}

/// `n` payloads due now, with their delays (zero).
fn due_now(n: u64) -> Vec<(Payload, Duration)> {
    let now = unix_us();
    (0..n)
        .map(|n| (Payload { n, due_us: now }, Duration::ZERO))
        .collect()
}

/// `n` payloads due 1 to 11 minutes out.
fn due_later(n: u64, seed: u64) -> Vec<(Payload, Duration)> {
    let mut rng = Rng(seed);
    let now = unix_us();
    (0..n)
        .map(|n| {
            let delay = Duration::from_millis(60_000 + rng.below(600_000));
            let due_us = now + delay.as_micros() as i64;
            (Payload { n, due_us }, delay)
        })
        .collect()
}

fn chunks(entries: Vec<(Payload, Duration)>) -> Vec<Vec<(Payload, Duration)>> {
    let mut out = Vec::new();
    let mut entries = entries.into_iter().peekable();
    while entries.peek().is_some() {
        out.push(entries.by_ref().take(CHUNK).collect());
    }
    out
}

// ---------------------------------------------------------------- 1. drain

struct Drain {
    jobs_per_s: f64,
    cost: Cost,
}

async fn drain_ours(url: &str, ctl: &Ctl, run: usize) -> Drain {
    let schema = format!("drain_ours_{run}");
    let loader = new_pool(url).await;
    let queue = open_queue(&loader, &schema).await;
    for chunk in chunks(due_now(DRAIN_N)) {
        queue.insert_many(&chunk).await.expect("insert_many");
    }
    drop(queue);
    let before = ctl.settle(Some(loader)).await;

    let pool = consumer_pool(url).await;
    let queue = open_queue(&pool, &schema).await;
    warm(&pool, 2).await;
    let sink = Sink::new(false);
    let start = Instant::now();
    let worker = spawn_worker(&queue, &sink);
    let end = reached("worker", DRAIN_N, || sink.done.load(Ordering::Relaxed)).await;
    worker_done(worker, DRAIN_N).await;
    assert_empty(&queue).await;
    drop(queue);
    let after = ctl.settle(Some(pool)).await;
    if consumer_settings()
        .iter()
        .any(|(k, _)| k == "track_functions")
    {
        functions(ctl, &schema, DRAIN_N).await;
    }
    ctl.exec(&format!("DROP SCHEMA {schema} CASCADE")).await;
    Drain {
        jobs_per_s: DRAIN_N as f64 / (end - start).as_secs_f64(),
        cost: ctl.cost(&before, &after, DRAIN_N).await,
    }
}

/// Prints where the server's time went by function (`track_functions`).
async fn functions(ctl: &Ctl, schema: &str, n: u64) {
    let rows = sqlx::query(
        "SELECT funcname::text, calls, total_time, self_time FROM pg_stat_user_functions \
         WHERE schemaname = $1 ORDER BY total_time DESC",
    )
    .bind(schema)
    .fetch_all(&ctl.pool)
    .await
    .expect("pg_stat_user_functions");
    println!("  function: calls, total ms, self ms, total µs/call, total µs/job");
    for row in rows {
        let (name, calls, total, own): (String, i64, f64, f64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        println!(
            "    {name}: {calls}, {total:.1}, {own:.1}, {:.1}, {:.1}",
            total * 1e3 / calls.max(1) as f64,
            total * 1e3 / n as f64
        );
    }
}

async fn drain_floor(url: &str, ctl: &Ctl, run: usize) -> Drain {
    let loader = new_pool(url).await;
    let floor = Floor::create(ctl, &loader, &format!("drain_floor_{run}")).await;
    let values: Vec<String> = due_now(DRAIN_N)
        .iter()
        .map(|(p, _)| serde_json::to_string(p).expect("encode"))
        .collect();
    sqlx::query(&format!(
        "INSERT INTO {} (due_at, value) SELECT clock_timestamp(), v FROM unnest($1::text[]) AS v",
        floor.table
    ))
    .bind(values)
    .execute(&loader)
    .await
    .expect("floor bulk insert");
    let before = ctl.settle(Some(loader)).await;

    let pool = consumer_pool(url).await;
    let floor = Floor { pool, ..floor };
    warm(&floor.pool, CONSUMERS).await;
    let sink = Sink::new(false);
    let start = Instant::now();
    let consumers = floor.spawn_consumers(&sink);
    let end = reached("floor", DRAIN_N, || sink.done.load(Ordering::Relaxed)).await;
    for consumer in consumers {
        consumer.abort();
    }
    assert_eq!(floor.count(ctl).await, 0, "floor left entries");
    let after = ctl.settle(Some(floor.pool.clone())).await;
    ctl.exec(&format!("DROP TABLE {}", floor.table)).await;
    Drain {
        jobs_per_s: DRAIN_N as f64 / (end - start).as_secs_f64(),
        cost: ctl.cost(&before, &after, DRAIN_N).await,
    }
}

// ---------------------------------------------------------------- 2. lateness

struct Lateness {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Entries due after the last insert returned (the ones measured).
    counted: u64,
    /// p99 over all entries.
    all_p99_ms: f64,
}

fn lateness_of(mut pairs: Vec<(i64, i64)>, inserted_at: i64) -> Lateness {
    assert_eq!(pairs.len() as u64, LATE_N, "runs seen");
    let pct = |v: &[i64], p: usize| v[(v.len() * p / 100).min(v.len() - 1)] as f64 / 1e3;
    let mut all: Vec<i64> = pairs.iter().map(|&(_, l)| l).collect();
    all.sort_unstable();
    pairs.retain(|&(due, _)| due > inserted_at);
    let mut after: Vec<i64> = pairs.iter().map(|&(_, l)| l).collect();
    after.sort_unstable();
    if after.is_empty() {
        println!("  warning: no entry was due after the inserts finished");
        after.push(i64::MAX);
    }
    Lateness {
        p50_ms: pct(&after, 50),
        p99_ms: pct(&after, 99),
        max_ms: pct(&after, 100),
        counted: pairs.len() as u64,
        all_p99_ms: pct(&all, 99),
    }
}

/// The time before the first deadline of the lateness run: long enough
/// for the inserts to end before the last deadlines, judged by how long
/// `probe` took for `LATE_PROBE` entries (unless `PG_BENCH_LATE_LEAD_MS`
/// says).
fn late_lead(probe: Duration) -> Duration {
    if let Some(ms) = std::env::var("PG_BENCH_LATE_LEAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Duration::from_millis(ms);
    }
    let inserts = probe.mul_f64(LATE_N as f64 / LATE_PROBE as f64);
    inserts
        .mul_f64(1.25)
        .saturating_sub(Duration::from_millis(LATE_SPREAD_MS / 2))
        .max(Duration::from_millis(LATE_LEAD_MS))
}

/// The entries of the lateness run, in due order.
fn late_payloads(run: usize, lead: Duration) -> Vec<Payload> {
    let mut rng = Rng(0x1A7E_0000 + run as u64);
    let base = unix_us() + lead.as_micros() as i64;
    let mut dues: Vec<i64> = (0..LATE_N)
        .map(|_| base + rng.below(LATE_SPREAD_MS * 1000) as i64)
        .collect();
    dues.sort_unstable();
    dues.into_iter()
        .enumerate()
        .map(|(n, due_us)| Payload {
            n: n as u64,
            due_us,
        })
        .collect()
}

async fn lateness_ours(url: &str, ctl: &Ctl, run: usize) -> Lateness {
    let schema = format!("late_ours_{run}");
    let pool = new_pool(url).await;
    let queue = open_queue(&pool, &schema).await;
    warm(&pool, PRODUCERS + 2).await;
    let producer = queue.clone();
    let probe = from_tasks(
        deal(due_later(LATE_PROBE, run as u64), PRODUCERS),
        move |(p, delay): (Payload, Duration)| {
            let queue = producer.clone();
            async move {
                queue.insert(&p, delay).await.expect("insert");
            }
        },
    )
    .await;
    queue.purge().await.expect("purge");
    let sink = Sink::new(true);
    let worker = spawn_worker(&queue, &sink);
    tokio::time::sleep(Duration::from_millis(200)).await; // listening
    let producer = queue.clone();
    let late = late_payloads(run, late_lead(probe));
    from_tasks(deal(late, PRODUCERS), move |p: Payload| {
        let queue = producer.clone();
        async move {
            let at = UNIX_EPOCH + Duration::from_micros(p.due_us as u64);
            queue.insert_at(&p, at).await.expect("insert_at");
        }
    })
    .await;
    let inserted_at = unix_us();
    reached("worker", LATE_N, || sink.done.load(Ordering::Relaxed)).await;
    worker_done(worker, LATE_N).await;
    assert_empty(&queue).await;
    drop(queue);
    pool.close().await;
    ctl.exec(&format!("DROP SCHEMA {schema} CASCADE")).await;
    lateness_of(sink.lateness(), inserted_at)
}

async fn lateness_floor(url: &str, ctl: &Ctl, run: usize) -> Lateness {
    let pool = new_pool(url).await;
    let floor = Floor::create(ctl, &pool, &format!("late_floor_{run}")).await;
    warm(&pool, PRODUCERS + CONSUMERS).await;
    let producer = floor.clone();
    let probe = from_tasks(
        deal(due_later(LATE_PROBE, run as u64), PRODUCERS),
        move |(p, delay): (Payload, Duration)| {
            let floor = producer.clone();
            async move {
                floor.insert(&p, delay).await;
            }
        },
    )
    .await;
    ctl.exec(&format!("TRUNCATE {}", floor.table)).await;
    let sink = Sink::new(true);
    let consumers = floor.spawn_consumers(&sink);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let producer = floor.clone();
    let late = late_payloads(run, late_lead(probe));
    from_tasks(deal(late, PRODUCERS), move |p: Payload| {
        let floor = producer.clone();
        async move {
            floor.insert_at(&p).await;
        }
    })
    .await;
    let inserted_at = unix_us();
    reached("floor", LATE_N, || sink.done.load(Ordering::Relaxed)).await;
    for consumer in consumers {
        consumer.abort();
    }
    assert_eq!(floor.count(ctl).await, 0, "floor left entries");
    pool.close().await;
    ctl.exec(&format!("DROP TABLE {}", floor.table)).await;
    lateness_of(sink.lateness(), inserted_at)
}

// ---------------------------------------------------------------- 3. insert

/// One side of the insert workload.
struct Inserts {
    seq_per_s: f64,
    seq_cost: Cost,
    conc_per_s: f64,
    chunked_per_s: f64,
}

async fn inserts_ours(url: &str, ctl: &Ctl, run: usize) -> Inserts {
    let schema = format!("insert_ours_{run}");
    let setup = new_pool(url).await;
    open_queue(&setup, &schema).await;
    let before = ctl.settle(Some(setup)).await;

    let pool = new_pool(url).await;
    let queue = open_queue(&pool, &schema).await;
    let entries = due_later(SEQ_N, 0x5E0_0000 + run as u64);
    let start = Instant::now();
    for (payload, delay) in &entries {
        queue.insert(payload, *delay).await.expect("insert");
    }
    let seq = start.elapsed();
    drop(queue);
    let after = ctl.settle(Some(pool)).await;

    let pool = new_pool(url).await;
    let queue = open_queue(&pool, &schema).await;
    queue.purge().await.expect("purge");
    warm(&pool, PRODUCERS).await;
    let producer = queue.clone();
    let conc = from_tasks(
        deal(due_later(CONC_N, 0xC0_0000 + run as u64), PRODUCERS),
        move |(p, delay): (Payload, Duration)| {
            let queue = producer.clone();
            async move {
                queue.insert(&p, delay).await.expect("insert");
            }
        },
    )
    .await;
    let stats = queue.stats().await.expect("stats");
    assert_eq!(stats.pending, CONC_N, "inserts lost");
    queue.purge().await.expect("purge");

    let producer = queue.clone();
    let chunked = from_tasks(
        deal(chunks(due_later(BULK_N, 0xB0_0000 + run as u64)), PRODUCERS),
        move |chunk: Vec<(Payload, Duration)>| {
            let queue = producer.clone();
            async move {
                let ids = queue.insert_many(&chunk).await.expect("insert_many");
                assert_eq!(ids.len(), chunk.len());
            }
        },
    )
    .await;
    let stats = queue.stats().await.expect("stats");
    assert_eq!(stats.pending, BULK_N, "insert_many lost entries");
    drop(queue);
    pool.close().await;
    ctl.exec(&format!("DROP SCHEMA {schema} CASCADE")).await;
    Inserts {
        seq_per_s: SEQ_N as f64 / seq.as_secs_f64(),
        seq_cost: ctl.cost(&before, &after, SEQ_N).await,
        conc_per_s: CONC_N as f64 / conc.as_secs_f64(),
        chunked_per_s: BULK_N as f64 / chunked.as_secs_f64(),
    }
}

async fn inserts_floor(url: &str, ctl: &Ctl, run: usize) -> Inserts {
    let table = format!("insert_floor_{run}");
    let floor = Floor::create(ctl, &ctl.pool, &table).await;
    let before = ctl.settle(None).await;
    let pool = new_pool(url).await;
    let floor = Floor { pool, ..floor };
    let entries = due_later(SEQ_N, 0x5E0_0000 + run as u64);
    let start = Instant::now();
    for (payload, delay) in &entries {
        floor.insert(payload, *delay).await;
    }
    let seq = start.elapsed();
    let after = ctl.settle(Some(floor.pool.clone())).await;

    let pool = new_pool(url).await;
    let floor = Floor { pool, ..floor };
    ctl.exec(&format!("TRUNCATE {table}")).await;
    warm(&floor.pool, PRODUCERS).await;
    let producer = floor.clone();
    let conc = from_tasks(
        deal(due_later(CONC_N, 0xC0_0000 + run as u64), PRODUCERS),
        move |(p, delay): (Payload, Duration)| {
            let floor = producer.clone();
            async move {
                floor.insert(&p, delay).await;
            }
        },
    )
    .await;
    assert_eq!(floor.count(ctl).await, CONC_N as i64, "inserts lost");
    ctl.exec(&format!("TRUNCATE {table}")).await;

    let producer = floor.clone();
    let chunked = from_tasks(
        deal(chunks(due_later(BULK_N, 0xB0_0000 + run as u64)), PRODUCERS),
        move |chunk: Vec<(Payload, Duration)>| {
            let floor = producer.clone();
            async move {
                let ids = floor.insert_chunk(&chunk).await;
                assert_eq!(ids.len(), chunk.len());
            }
        },
    )
    .await;
    assert_eq!(floor.count(ctl).await, BULK_N as i64, "chunks lost");
    floor.pool.close().await;
    ctl.exec(&format!("DROP TABLE {table}")).await;
    Inserts {
        seq_per_s: SEQ_N as f64 / seq.as_secs_f64(),
        seq_cost: ctl.cost(&before, &after, SEQ_N).await,
        conc_per_s: CONC_N as f64 / conc.as_secs_f64(),
        chunked_per_s: BULK_N as f64 / chunked.as_secs_f64(),
    }
}

// ---------------------------------------------------------------- report

/// The values of one metric over the runs.
#[derive(Clone, Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            f64::NAN
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    fn cell(&self, decimals: usize) -> String {
        if self.0.is_empty() {
            return "—".to_owned();
        }
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let f = |x: f64| fmt_num(x, decimals);
        if self.0.len() == 1 || min == max {
            f(self.median())
        } else {
            format!("{} ({}–{})", f(self.median()), f(min), f(max))
        }
    }

    fn list(&self, decimals: usize) -> String {
        let v: Vec<String> = self.0.iter().map(|&x| fmt_num(x, decimals)).collect();
        v.join(", ")
    }
}

/// `x` with `decimals` decimals and thousands separators.
fn fmt_num(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// A bar a row is held to.
#[derive(Clone, Copy)]
enum Bar {
    /// ours / floor at least this.
    RatioAtLeast(f64),
    /// ours at most this.
    AtMost(f64),
}

/// One metric, ours against the floor.
struct Pair {
    name: String,
    decimals: usize,
    ours: Samples,
    floor: Samples,
    bar: Option<Bar>,
}

impl Pair {
    fn new(name: &str, decimals: usize, bar: Option<Bar>) -> Pair {
        Pair {
            name: name.to_owned(),
            decimals,
            ours: Samples::default(),
            floor: Samples::default(),
            bar,
        }
    }

    fn push(&mut self, ours: bool, x: f64) {
        if ours {
            self.ours.0.push(x);
        } else {
            self.floor.0.push(x);
        }
    }

    fn ratio(&self) -> Option<f64> {
        let base = self.floor.median();
        (!self.ours.0.is_empty() && !self.floor.0.is_empty() && base != 0.0)
            .then(|| self.ours.median() / base)
    }

    fn row(&self) -> String {
        let ratio = self.ratio().map_or("—".to_owned(), |r| format!("{r:.2}×"));
        let (bar, met) = match self.bar {
            None => ("—".to_owned(), "—".to_owned()),
            Some(Bar::RatioAtLeast(x)) => (
                format!("≥ {x:.1}×"),
                verdict(self.ratio().map(|r| r >= x), self.ratio().map(|r| r / x)),
            ),
            Some(Bar::AtMost(x)) => {
                let ours = self.ours.median();
                let ok = (!ours.is_nan()).then_some(ours <= x);
                (
                    format!("≤ {}", fmt_num(x, 0)),
                    verdict(ok, (!ours.is_nan()).then(|| x / ours)),
                )
            }
        };
        format!(
            "| {} | {} | {} | {ratio} | {bar} | {met} |",
            self.name,
            self.ours.cell(self.decimals),
            self.floor.cell(self.decimals),
        )
    }

    fn progress(&self) {
        println!(
            "  {:<50} ours {:<32} floor {}",
            self.name,
            self.ours.list(self.decimals),
            self.floor.list(self.decimals)
        );
    }
}

/// "met", or "no" with how far off the bar is (`share`: the share of the
/// bar reached, 1.0 = exactly met).
fn verdict(met: Option<bool>, share: Option<f64>) -> String {
    match (met, share) {
        (Some(true), _) => "met".to_owned(),
        (Some(false), Some(share)) => format!("no ({:.0}% of the bar)", share * 100.0),
        _ => "—".to_owned(),
    }
}

fn selected(workload: &str) -> bool {
    match std::env::var("PG_BENCH_ONLY") {
        Ok(only) => only.split(',').any(|w| w.trim() == workload),
        Err(_) => true,
    }
}

fn main() {
    let db = Database::create();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench(&db.url()));
    drop(runtime);
    drop(db);
}

async fn bench(url: &str) {
    let started = Instant::now();
    let runs: usize = std::env::var("PG_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RUNS);
    let ctl = Ctl::connect(url).await;
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&ctl.pool)
        .await
        .expect("version");
    let sync: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&ctl.pool)
        .await
        .expect("synchronous_commit");
    println!("# PgQueue vs the hand-written DELETE … SKIP LOCKED floor");
    println!();
    println!(
        "PostgreSQL {version} on the local server (synchronous_commit = {sync}); {} CPUs; \
         tokio multi-thread runtime; pools of {POOL_SIZE}; R = {runs} runs per workload",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let settings = consumer_settings();
    if !settings.is_empty() {
        println!("drain consumers (both sides) with {settings:?}");
    }

    let mut jobs = Pair::new(
        &format!(
            "jobs/s, {DRAIN_N} due (Worker concurrency {} / {CONSUMERS} consumers)",
            concurrency()
        ),
        0,
        Some(Bar::RatioAtLeast(1.5)),
    );
    let mut xacts = Pair::new("transactions/job, drain", 3, None);
    let mut rows = Pair::new("rows written/job, drain", 3, None);
    let mut wal = Pair::new("WAL bytes/job, drain", 0, None);
    let mut p50 = Pair::new(
        &format!(
            "lateness p50 ms, {LATE_N} due over {} s, inserted meanwhile",
            LATE_SPREAD_MS / 1000
        ),
        2,
        None,
    );
    let mut p99 = Pair::new("lateness p99 ms", 2, Some(Bar::AtMost(50.0)));
    let mut max = Pair::new("lateness max ms", 2, None);
    let mut counted = Pair::new("entries due after the last insert (measured)", 0, None);
    let mut all_p99 = Pair::new("lateness p99 ms, all entries", 2, None);
    let mut seq = Pair::new(
        &format!("inserts/s, one per call, {SEQ_N} from 1 task"),
        0,
        Some(Bar::RatioAtLeast(1.0)),
    );
    let mut conc = Pair::new(
        &format!("inserts/s, one per call, {CONC_N} from {PRODUCERS} producers"),
        0,
        Some(Bar::RatioAtLeast(1.0)),
    );
    let mut chunked = Pair::new(
        &format!(
            "inserts/s, {BULK_N} in chunks of {CHUNK}, {PRODUCERS} producers (insert_many / multi-row INSERT)"
        ),
        0,
        None,
    );
    let mut ins_xacts = Pair::new("transactions/insert, one per call", 3, None);
    let mut ins_rows = Pair::new("rows written/insert, one per call", 3, None);
    let mut ins_wal = Pair::new("WAL bytes/insert, one per call", 0, None);

    if selected("drain") {
        println!("\n1. drain");
        for run in 0..runs {
            for ours in [true, false] {
                let d = if ours {
                    drain_ours(url, &ctl, run).await
                } else {
                    drain_floor(url, &ctl, run).await
                };
                jobs.push(ours, d.jobs_per_s);
                xacts.push(ours, d.cost.xacts);
                rows.push(ours, d.cost.rows);
                wal.push(ours, d.cost.wal);
            }
        }
        for pair in [&jobs, &xacts, &rows, &wal] {
            pair.progress();
        }
    }

    if selected("lateness") {
        println!("\n2. lateness");
        for run in 0..runs {
            for ours in [true, false] {
                let l = if ours {
                    lateness_ours(url, &ctl, run).await
                } else {
                    lateness_floor(url, &ctl, run).await
                };
                p50.push(ours, l.p50_ms);
                p99.push(ours, l.p99_ms);
                max.push(ours, l.max_ms);
                counted.push(ours, l.counted as f64);
                all_p99.push(ours, l.all_p99_ms);
            }
        }
        for pair in [&p50, &p99, &max, &counted, &all_p99] {
            pair.progress();
        }
    }

    let mut random: Vec<Pair> = late::rows()
        .into_iter()
        .map(|(name, decimals, bar)| Pair::new(name, decimals, bar))
        .collect();
    if selected("random") {
        println!("\n4. random delays, one producer with 256 in flight");
        for run in 0..runs {
            for ours in [true, false] {
                let l = if ours {
                    late::ours(url, &ctl, run).await
                } else {
                    late::floor(url, &ctl, run).await
                };
                println!(
                    "  run {run} {}: p50 {:.2} ms, p99 {:.2} ms, after-insert p99 {:.2} ms ({} jobs), {:.0} inserts/s",
                    if ours { "Worker" } else { "floor" },
                    l.p50_ms,
                    l.p99_ms,
                    l.after_p99_ms,
                    l.after_n,
                    l.inserts_per_s
                );
                for (pair, x) in random.iter_mut().zip(l.values()) {
                    pair.push(ours, x);
                }
            }
        }
    }

    if selected("insert") {
        println!("\n3. insert");
        for run in 0..runs {
            for ours in [true, false] {
                let i = if ours {
                    inserts_ours(url, &ctl, run).await
                } else {
                    inserts_floor(url, &ctl, run).await
                };
                seq.push(ours, i.seq_per_s);
                conc.push(ours, i.conc_per_s);
                chunked.push(ours, i.chunked_per_s);
                ins_xacts.push(ours, i.seq_cost.xacts);
                ins_rows.push(ours, i.seq_cost.rows);
                ins_wal.push(ours, i.seq_cost.wal);
            }
        }
        for pair in [&seq, &conc, &chunked, &ins_xacts, &ins_rows, &ins_wal] {
            pair.progress();
        }
    }

    println!(
        "\n## PgQueue vs the floor (median of {runs} runs, min–max in parentheses; \
         ratio = ours / floor)\n"
    );
    println!("| metric | punctual | floor | ratio | bar | met |");
    println!("|---|---:|---:|---:|---|---|");
    for pair in [
        &jobs, &xacts, &rows, &wal, &p50, &p99, &max, &counted, &all_p99, &seq, &conc, &chunked,
        &ins_xacts, &ins_rows, &ins_wal,
    ]
    .into_iter()
    .chain(random.iter())
    {
        if !pair.ours.0.is_empty() || !pair.floor.0.is_empty() {
            println!("{}", pair.row());
        }
    }
    if !chunked.ours.0.is_empty() && !conc.floor.0.is_empty() {
        println!(
            "\ninsert_many in chunks of {CHUNK} / the floor's one-per-call inserts \
             ({PRODUCERS} producers): {:.1}×",
            chunked.ours.median() / conc.floor.median()
        );
    }
    println!(
        "\nTransactions and rows written are this database's, from pg_stat_database; WAL bytes {}.",
        if ctl.walinspect {
            "are the records of this database's relations and transactions, read back with \
             pg_walinspect"
        } else {
            "are the whole server's (other sessions writing meanwhile add to them)"
        }
    );
    ctl.pool.close().await;
    println!(
        "\ntotal bench time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
