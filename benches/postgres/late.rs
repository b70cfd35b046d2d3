//! Workload 4: jobs inserted with random delays while the consumers run,
//! against the floor, same server, same run.
//!
//! 20,000 jobs, each due 0 to 2 s (uniform) after its insert, inserted by
//! one producer task with 256 calls in flight at full speed, over a pool of
//! 10 connections (`PgQueue::connect`'s default) that the consumers share:
//! a `Worker` with `concurrency(8)` on the same handle, against the floor's
//! 8 consumers (`DELETE … SKIP LOCKED`, 10 ms poll). Lateness is the wall
//! clock when the handler starts (the floor: when its delete returned)
//! minus the due time the database stored (`Job::deadline()`; the floor's
//! `due_at`); "after insert" counts the jobs due after the last insert
//! returned. The inserts per second of that producer are the second
//! figure: `insert` against the floor's bare `INSERT` of the same row.
//! Every run checks that no job ran before its due time, none twice and
//! none was lost.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use punctual::durable::Worker;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use punctual::postgres::sqlx::{self, PgPool};

use crate::{Ctl, FLOOR_POLL, Payload, Rng, WORKLOAD_TIMEOUT, micros, unix_us};

const N: u64 = 20_000;
const SPREAD_MS: u64 = 2_000;
const IN_FLIGHT: usize = 256;
const POOL: u32 = 10;
const CONCURRENCY: usize = 8;
const CONSUMERS: usize = 8;

/// Per job: (n, µs when its run started, due µs).
#[derive(Default)]
struct Seen(Mutex<Vec<(u64, i64, i64)>>);

impl Seen {
    fn push(&self, n: u64, started_us: i64, due_us: i64) {
        self.0.lock().unwrap().push((n, started_us, due_us));
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    async fn wait(&self, n: u64) {
        tokio::time::timeout(WORKLOAD_TIMEOUT, async {
            while (self.len() as u64) < n {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("stuck at {} of {n} runs", self.len()));
    }
}

pub(crate) struct Late {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) after_p99_ms: f64,
    pub(crate) after_n: f64,
    pub(crate) inserts_per_s: f64,
}

fn late_of(seen: Vec<(u64, i64, i64)>, started_us: i64, inserted_us: i64, what: &str) -> Late {
    let mut count = vec![0u32; N as usize];
    let (mut early, mut all, mut after) = (0, Vec::new(), Vec::new());
    for (n, started, due) in seen {
        count[n as usize] += 1;
        let late = started - due;
        if late < 0 {
            early += 1;
        }
        all.push(late);
        if due > inserted_us {
            after.push(late);
        }
    }
    let twice = count.iter().filter(|&&c| c > 1).count();
    let lost = count.iter().filter(|&&c| c == 0).count();
    assert_eq!(
        (early, twice, lost),
        (0, 0, 0),
        "{what}: jobs early, twice, lost"
    );
    let pct = |v: &mut Vec<i64>, p: usize| {
        v.sort_unstable();
        v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
            .map_or(f64::NAN, |&x| x as f64 / 1e3)
    };
    Late {
        p50_ms: pct(&mut all, 50),
        p99_ms: pct(&mut all, 99),
        after_p99_ms: pct(&mut after, 99),
        after_n: after.len() as f64,
        inserts_per_s: N as f64 / ((inserted_us - started_us) as f64 / 1e6),
    }
}

fn delays(run: usize) -> Vec<Duration> {
    let spread = std::env::var("PG_BENCH_RANDOM_SPREAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SPREAD_MS);
    let mut rng = Rng(0x0032_1A7E + run as u64);
    (0..N)
        .map(|_| Duration::from_millis(rng.below(spread + 1)))
        .collect()
}

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

/// `insert(n, delay)` for every job from one task, `IN_FLIGHT` at a time;
/// (when it started, when the last returned), µs since the epoch.
async fn produce<F, Fut>(delays: &[Duration], insert: F) -> (i64, i64)
where
    F: Fn(u64, Duration) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = unix_us();
    futures::stream::iter(delays.iter().enumerate())
        .for_each_concurrent(IN_FLIGHT, |(n, &delay)| insert(n as u64, delay))
        .await;
    (start, unix_us())
}

pub(crate) async fn ours(url: &str, ctl: &Ctl, run: usize) -> Late {
    let schema = format!("late32_ours_{run}");
    let pool = pool(url).await;
    let queue = crate::open_queue(&pool, &schema).await;
    let seen = Arc::new(Seen::default());
    let sink = Arc::clone(&seen);
    let worker = Worker::builder(queue.clone())
        .concurrency(CONCURRENCY)
        .spawn(move |job| {
            let started = unix_us();
            sink.push(job.value().n, started, micros(job.deadline()));
            async { Ok::<(), Infallible>(()) }
        });
    tokio::time::sleep(Duration::from_millis(200)).await; // listening
    let (started, inserted) = produce(&delays(run), |n, delay| {
        let queue = &queue;
        async move {
            let p = Payload { n, due_us: 0 };
            queue.insert(&p, delay).await.expect("insert");
        }
    })
    .await;
    seen.wait(N).await;
    let stats = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(
        (stats.completed, stats.failed, stats.lost),
        (N, 0, 0),
        "{stats:?}"
    );
    crate::assert_empty(&queue).await;
    drop(queue);
    pool.close().await;
    ctl.exec(&format!("DROP SCHEMA {schema} CASCADE")).await;
    let seen = std::mem::take(&mut *seen.0.lock().unwrap());
    late_of(seen, started, inserted, "Worker")
}

pub(crate) async fn floor(url: &str, ctl: &Ctl, run: usize) -> Late {
    let table = format!("late32_floor_{run}");
    let pool = pool(url).await;
    let floor = crate::Floor::create(ctl, &pool, &table).await;
    let seen = Arc::new(Seen::default());
    let claim = format!(
        "DELETE FROM {t} WHERE id = (SELECT id FROM {t} \
             WHERE due_at <= (SELECT clock_timestamp()) \
             ORDER BY due_at, id FOR UPDATE SKIP LOCKED LIMIT 1) \
         RETURNING value, (extract(epoch FROM due_at) * 1e6)::int8",
        t = table
    );
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (pool, sink, claim) = (pool.clone(), Arc::clone(&seen), claim.clone());
            tokio::spawn(async move {
                loop {
                    let row: Option<(String, i64)> = sqlx::query_as(&claim)
                        .fetch_optional(&pool)
                        .await
                        .expect("floor claim");
                    match row {
                        Some((value, due_us)) => {
                            let started = unix_us();
                            let p: Payload = serde_json::from_str(&value).expect("decode");
                            sink.push(p.n, started, due_us);
                        }
                        None => tokio::time::sleep(FLOOR_POLL).await,
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (started, inserted) = produce(&delays(run), |n, delay| {
        let floor = &floor;
        async move {
            floor.insert(&Payload { n, due_us: 0 }, delay).await;
        }
    })
    .await;
    seen.wait(N).await;
    for consumer in consumers {
        consumer.abort();
    }
    assert_eq!(floor.count(ctl).await, 0, "floor left entries");
    pool.close().await;
    ctl.exec(&format!("DROP TABLE {table}")).await;
    let seen = std::mem::take(&mut *seen.0.lock().unwrap());
    late_of(seen, started, inserted, "floor")
}

/// The rows of workload 4, (ours, floor) per metric.
pub(crate) fn rows() -> [(&'static str, usize, Option<crate::Bar>); 5] {
    [
        ("random delays: lateness p50 ms, all jobs", 2, None),
        ("random delays: lateness p99 ms, all jobs", 2, None),
        (
            "random delays: lateness p99 ms, jobs due after the last insert",
            2,
            Some(crate::Bar::AtMost(50.0)),
        ),
        ("random delays: jobs due after the last insert", 0, None),
        (
            "random delays: inserts/s, 1 producer, 256 in flight, pool of 10",
            0,
            Some(crate::Bar::RatioAtLeast(0.8)),
        ),
    ]
}

impl Late {
    pub(crate) fn values(&self) -> [f64; 5] {
        [
            self.p50_ms,
            self.p99_ms,
            self.after_p99_ms,
            self.after_n,
            self.inserts_per_s,
        ]
    }
}
