//! The PostgreSQL contenders written in Rust: punctual's `Worker` on a
//! `PgQueue`, and the floor of `benches/postgres.rs` (same table, same
//! SQL, 8 consumers).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use punctual::durable::Worker;
use punctual::postgres::PgQueue;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use punctual::postgres::sqlx::{self, PgPool};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{CONCURRENCY, Late, Seen, late_delays, late_of, micros, pg, unix_us};

/// Connections of every pool here: `PgQueue::connect`'s default, and
/// graphile-worker's `maxPoolSize` default.
const POOL: u32 = 10;
/// The floor's consumers.
const CONSUMERS: usize = 8;
/// The floor's sleep when no row is due.
const FLOOR_POLL: Duration = Duration::from_millis(10);
const CHUNK: usize = 256;

#[derive(Serialize, Deserialize, Debug)]
struct Payload {
    n: u64,
    /// Unused here (0); kept so the value is the one `benches/postgres.rs`
    /// stores.
    due_us: i64,
}

/// The bench's database, dropped when this is.
pub(crate) struct Database {
    admin: String,
    name: String,
}

impl Database {
    pub(crate) fn create() -> Database {
        let admin = pg::admin_url();
        let stale = pg::psql(
            &admin,
            "SELECT datname FROM pg_database WHERE datname LIKE 'punctual\\_peers\\_%'",
        );
        for name in stale.lines() {
            let pid = name.strip_prefix("punctual_peers_").unwrap_or("");
            if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                pg::psql(
                    &admin,
                    &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
                );
            }
        }
        let name = format!("punctual_peers_{}", std::process::id());
        pg::psql(&admin, &format!("CREATE DATABASE \"{name}\""));
        Database { admin, name }
    }

    pub(crate) fn url(&self) -> String {
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

/// The server's version and commit setting, for the report.
pub(crate) async fn version(url: &str) -> String {
    let pool = pool(url).await;
    let (version, sync): (String, String) = sqlx::query_as(
        "SELECT current_setting('server_version'), current_setting('synchronous_commit')",
    )
    .fetch_one(&pool)
    .await
    .expect("version");
    pool.close().await;
    format!("PostgreSQL {version} (synchronous_commit = {sync})")
}

/// A pool as `PgQueue::connect` makes one, its connections opened.
async fn pool(url: &str) -> PgPool {
    let pool = PgPoolOptions::new()
        .max_connections(POOL)
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect");
    let mut held = Vec::new();
    for _ in 0..POOL {
        held.push(pool.acquire().await.expect("acquire"));
    }
    drop(held);
    pool
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn open_queue(pool: &PgPool, schema: &str) -> PgQueue<Payload> {
    PgQueue::builder("bench")
        .pool(pool.clone())
        .schema(schema)
        .build()
        .await
        .expect("build PgQueue")
}

fn worker(queue: &PgQueue<Payload>, prefetch: usize, seen: &Arc<Seen>) -> Worker {
    let seen = Arc::clone(seen);
    Worker::builder(queue.clone())
        .concurrency(CONCURRENCY)
        .prefetch(prefetch)
        .spawn(move |job| {
            seen.run(job.value().n);
            async { Ok::<(), Infallible>(()) }
        })
}

async fn worker_done(worker: Worker, queue: &PgQueue<Payload>, n: u64) {
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
}

/// Waits until `worker` counts `n` acked; when it did.
async fn acked(worker: &Worker, n: u64) -> Instant {
    tokio::time::timeout(crate::RUN_TIMEOUT, async {
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
    .unwrap_or_else(|_| panic!("worker stuck at {:?} of {n}", worker.stats()))
}

/// Workload `pg` for punctual: jobs/s.
pub(crate) async fn punctual_drain(url: &str, tag: &str, n: u64, prefetch: usize) -> f64 {
    let schema = format!("drain_{tag}");
    let pool = pool(url).await;
    let queue = open_queue(&pool, &schema).await;
    let entries: Vec<(Payload, Duration)> = (0..n)
        .map(|n| (Payload { n, due_us: 0 }, Duration::ZERO))
        .collect();
    for chunk in entries.chunks(CHUNK) {
        queue.insert_many(chunk).await.expect("insert_many");
    }
    let seen = Arc::new(Seen::new(n));
    let start = Instant::now();
    let worker = worker(&queue, prefetch, &seen);
    let end = acked(&worker, n).await;
    worker_done(worker, &queue, n).await;
    seen.assert_once("punctual");
    drop(queue);
    exec(&pool, &format!("DROP SCHEMA {schema} CASCADE")).await;
    pool.close().await;
    n as f64 / (end - start).as_secs_f64()
}

/// The floor's table.
async fn floor_table(pool: &PgPool, table: &str) {
    exec(
        pool,
        &format!(
            "DROP TABLE IF EXISTS {table}; \
             CREATE TABLE {table} (id bigserial PRIMARY KEY, due_at timestamptz NOT NULL, \
                 value text NOT NULL); \
             CREATE INDEX ON {table} (due_at, id);"
        ),
    )
    .await;
}

async fn floor_count(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .expect("count")
}

/// The floor's claim, as `benches/postgres.rs` writes it: for the drain
/// (`Floor::claim`), and with the due time in µs for the lateness workload
/// (`postgres/late.rs`).
fn floor_claim(table: &str, with_due: bool) -> String {
    format!(
        "DELETE FROM {table} WHERE id = (SELECT id FROM {table} \
             WHERE due_at <= (SELECT clock_timestamp()) \
             ORDER BY due_at, id FOR UPDATE SKIP LOCKED LIMIT 1) \
         RETURNING value{}",
        if with_due {
            ", (extract(epoch FROM due_at) * 1e6)::int8"
        } else {
            ", 0::int8"
        }
    )
}

/// `CONSUMERS` floor consumers; each job's (value, due µs or 0) goes to
/// `sink`.
fn floor_consumers(
    pool: &PgPool,
    table: &str,
    with_due: bool,
    sink: impl Fn(Payload, i64) + Clone + Send + 'static,
) -> Vec<tokio::task::JoinHandle<()>> {
    let claim = floor_claim(table, with_due);
    (0..CONSUMERS)
        .map(|_| {
            let (pool, claim, sink) = (pool.clone(), claim.clone(), sink.clone());
            tokio::spawn(async move {
                loop {
                    let row: Option<(String, i64)> = sqlx::query_as(&claim)
                        .fetch_optional(&pool)
                        .await
                        .expect("floor claim");
                    match row {
                        Some((value, due_us)) => {
                            sink(serde_json::from_str(&value).expect("decode"), due_us)
                        }
                        None => tokio::time::sleep(FLOOR_POLL).await,
                    }
                }
            })
        })
        .collect()
}

/// Workload `pg` for the floor: jobs/s.
pub(crate) async fn floor_drain(url: &str, tag: &str, n: u64) -> f64 {
    let table = format!("drain_{tag}");
    let pool = pool(url).await;
    floor_table(&pool, &table).await;
    let values: Vec<String> = (0..n)
        .map(|n| serde_json::to_string(&Payload { n, due_us: 0 }).expect("encode"))
        .collect();
    sqlx::query(&format!(
        "INSERT INTO {table} (due_at, value) SELECT clock_timestamp(), v FROM unnest($1::text[]) AS v"
    ))
    .bind(values)
    .execute(&pool)
    .await
    .expect("floor bulk insert");
    let seen = Arc::new(Seen::new(n));
    let start = Instant::now();
    let sink = Arc::clone(&seen);
    let consumers = floor_consumers(&pool, &table, false, move |p, _| sink.run(p.n));
    let end = seen.all_ran("floor").await;
    for consumer in consumers {
        consumer.abort();
    }
    assert_eq!(floor_count(&pool, &table).await, 0, "floor left entries");
    seen.assert_once("floor");
    exec(&pool, &format!("DROP TABLE {table}")).await;
    pool.close().await;
    n as f64 / (end - start).as_secs_f64()
}

/// Per job: (n, µs when its run started, due µs).
#[derive(Default)]
struct Runs(Mutex<Vec<(u64, i64, i64)>>);

impl Runs {
    fn push(&self, n: u64, started_us: i64, due_us: i64) {
        self.0.lock().unwrap().push((n, started_us, due_us));
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    async fn wait(&self, n: u64) {
        tokio::time::timeout(crate::RUN_TIMEOUT, async {
            while (self.len() as u64) < n {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("stuck at {} of {n} runs", self.len()));
    }

    fn take(&self) -> Vec<(u64, i64, i64)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// `insert(n, delay)` for every job from one task, `LATE_IN_FLIGHT` at a
/// time; (when it started, when the last returned), µs since the epoch.
async fn produce<F, Fut>(delays: &[Duration], insert: F) -> (i64, i64)
where
    F: Fn(u64, Duration) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = unix_us();
    futures::stream::iter(delays.iter().enumerate())
        .for_each_concurrent(crate::LATE_IN_FLIGHT, |(n, &delay)| insert(n as u64, delay))
        .await;
    (start, unix_us())
}

/// Workload `late` for punctual.
pub(crate) async fn punctual_late(
    url: &str,
    tag: &str,
    n: u64,
    run: usize,
    prefetch: usize,
) -> Late {
    let schema = format!("late_{tag}");
    let pool = pool(url).await;
    let queue = open_queue(&pool, &schema).await;
    let runs = Arc::new(Runs::default());
    let sink = Arc::clone(&runs);
    let worker = Worker::builder(queue.clone())
        .concurrency(CONCURRENCY)
        .prefetch(prefetch)
        .spawn(move |job| {
            let started = unix_us();
            sink.push(job.value().n, started, micros(job.deadline()));
            async { Ok::<(), Infallible>(()) }
        });
    tokio::time::sleep(Duration::from_millis(200)).await; // listening
    let (started, inserted) = produce(&late_delays(run, n), |n, delay| {
        let queue = &queue;
        async move {
            queue
                .insert(&Payload { n, due_us: 0 }, delay)
                .await
                .expect("insert");
        }
    })
    .await;
    runs.wait(n).await;
    worker_done(worker, &queue, n).await;
    drop(queue);
    exec(&pool, &format!("DROP SCHEMA {schema} CASCADE")).await;
    pool.close().await;
    late_of(n, runs.take(), started, inserted, "punctual")
}

/// Workload `late` for the floor.
pub(crate) async fn floor_late(url: &str, tag: &str, n: u64, run: usize) -> Late {
    let table = format!("late_{tag}");
    let pool = pool(url).await;
    floor_table(&pool, &table).await;
    let runs = Arc::new(Runs::default());
    let sink = Arc::clone(&runs);
    let consumers = floor_consumers(&pool, &table, true, move |p, due_us| {
        sink.push(p.n, unix_us(), due_us)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let insert = format!(
        "INSERT INTO {table} (due_at, value) \
         VALUES (clock_timestamp() + $1::float8 * interval '1 millisecond', $2) RETURNING id"
    );
    let (started, inserted) = produce(&late_delays(run, n), |n, delay| {
        let (pool, insert) = (&pool, &insert);
        async move {
            let value = serde_json::to_string(&Payload { n, due_us: 0 }).expect("encode");
            let _: i64 = sqlx::query_scalar(insert)
                .bind(delay.as_secs_f64() * 1e3)
                .bind(value)
                .fetch_one(pool)
                .await
                .expect("floor insert");
        }
    })
    .await;
    runs.wait(n).await;
    for consumer in consumers {
        consumer.abort();
    }
    assert_eq!(floor_count(&pool, &table).await, 0, "floor left entries");
    exec(&pool, &format!("DROP TABLE {table}")).await;
    pool.close().await;
    late_of(n, runs.take(), started, inserted, "floor")
}
