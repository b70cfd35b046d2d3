//! Workloads 6 to 9: the durable [`Worker`] and `insert_many` against the
//! hand-written poller of the main file, same server, same run.
//!
//! 6. jobs/s: 20,000 entries all due at once, put in with `insert_many`
//!    (chunks of 256) before the worker starts, drained by one `Worker`
//!    with `concurrency(8)` whose handler returns `Ok(())` at once; the
//!    clock stops when the worker has acked them all (`stats().completed`,
//!    read every millisecond). The poller's side is workload 2's drain
//!    (8 consumers), run here again between the worker's runs.
//! 7. lateness: 20,000 entries due uniformly over 2 s, the first ones
//!    `LATE_LEAD_MS` after the start, inserted one by one (`insert_at`, in
//!    due order) by 8 producers at full speed while the worker (or the 8
//!    polling consumers) runs. Lateness is the wall clock when the handler
//!    starts minus `Job::deadline()` (the poller: when its pop returned
//!    minus the due time in the payload).
//! 8. inserts/s: 100,000 entries in chunks of 256 from 8 producers:
//!    `insert_many` against a pipeline of 256 `ZADD`s.
//! 9. server commands per job over workload 6 (inserts included), by
//!    command, from `INFO commandstats` (which counts the commands scripts
//!    call as well as the scripts).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use punctual::durable::Worker;
use punctual::redis::RedisQueue;
use punctual::redis::client as rc;
use rc::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::{
    Drain, Job, PRODUCERS, R, Rng, Samples, Sink, Target, Variant, WORKLOAD_TIMEOUT, client_cpu,
    fmt_num, reset_stats, server_stats, unix_ms, unix_us, w_drain,
};

const WORKER_CONCURRENCY: usize = 8;
const WORKER_DRAIN_N: u64 = 20_000;
const LATE_N: u64 = 20_000;
const LATE_SPREAD_MS: u64 = 2_000;
/// Time between the start of the lateness run and its first deadline.
const LATE_LEAD_MS: u64 = 300;
const BULK_N: u64 = 100_000;
const CHUNK: usize = 256;

/// A bar a row is held to.
#[derive(Clone, Copy)]
enum Bar {
    /// ours / poller at least this.
    RatioAtLeast(f64),
    /// ours at most this.
    AtMost(f64),
}

/// One metric, ours against the poller.
struct Pair {
    name: String,
    decimals: usize,
    ours: Samples,
    poller: Samples,
    bar: Option<Bar>,
}

impl Pair {
    fn new(name: &str, decimals: usize, bar: Option<Bar>) -> Pair {
        Pair {
            name: name.to_owned(),
            decimals,
            ours: Samples::default(),
            poller: Samples::default(),
            bar,
        }
    }

    fn ratio(&self) -> Option<f64> {
        let base = self.poller.median();
        (!self.ours.0.is_empty() && !self.poller.0.is_empty() && base != 0.0)
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
            self.poller.cell(self.decimals),
        )
    }

    fn progress(&self) {
        println!(
            "  {:<52} ours {:<40} poller {}",
            self.name,
            self.ours.list(self.decimals),
            self.poller.list(self.decimals)
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

/// SystemTime as µs since the epoch.
fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

async fn open(url: &str, name: &str) -> RedisQueue<Job> {
    let queue = RedisQueue::builder(name)
        .url(url)
        .build()
        .await
        .expect("connect RedisQueue");
    queue.purge().await.expect("purge");
    queue
}

/// Waits until `worker` has acked `n` runs; returns when it saw them.
async fn acked(worker: &Worker, n: u64) -> Instant {
    tokio::time::timeout(WORKLOAD_TIMEOUT, async {
        loop {
            let stats = worker.stats();
            assert_eq!(stats.failed + stats.lost, 0, "worker: {stats:?}");
            if stats.completed >= n {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("worker stuck at {:?} of {n}", worker.stats()))
}

/// A worker whose handler does nothing.
fn idle_worker(queue: &RedisQueue<Job>) -> Worker {
    Worker::builder(queue.clone())
        .concurrency(WORKER_CONCURRENCY)
        .spawn(|_job| async { Ok::<(), Infallible>(()) })
}

/// Workloads 6 and 9 for the worker.
async fn worker_drain(url: &str, ctl: &mut MultiplexedConnection, run: usize) -> Drain {
    let n = WORKER_DRAIN_N;
    let queue = open(url, &format!("wdrain-{run}")).await;
    reset_stats(ctl).await;
    let now = unix_ms();
    let entries: Vec<(Job, Duration)> = (0..n)
        .map(|n| (Job { n, due_ms: now }, Duration::ZERO))
        .collect();
    insert_chunks(&queue, entries).await;

    let server_before = server_stats(ctl).await.cpu;
    let client_before = client_cpu();
    let start = Instant::now();
    let worker = idle_worker(&queue);
    let end = acked(&worker, n).await;
    let client_after = client_cpu();
    let stats = server_stats(ctl).await;
    let done = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(done.completed, n, "worker: {done:?}");
    let left = queue.stats().await.expect("stats");
    assert_eq!(
        left.pending + left.due + left.leased + left.dead,
        0,
        "left {left:?}"
    );
    queue.purge().await.expect("purge");

    let took = end - start;
    let per_job = |x: f64| x / n as f64;
    let server_cpu = stats.cpu.saturating_sub(server_before);
    Drain {
        jobs_per_s: n as f64 / took.as_secs_f64(),
        server_commands_per_job: per_job(stats.total_calls() as f64),
        by_command: stats
            .calls
            .iter()
            .map(|(name, &(calls, us))| (name.clone(), (per_job(calls as f64), per_job(us as f64))))
            .collect(),
        server_cpu_us_per_job: per_job(server_cpu.as_secs_f64() * 1e6),
        client_cpu_us_per_job: client_before
            .zip(client_after)
            .map(|(before, after)| per_job((after - before).as_secs_f64() * 1e6)),
        server_busy: server_cpu.as_secs_f64() / took.as_secs_f64(),
        requests_per_job: None,
    }
}

/// `entries` by `insert_many` in chunks of `CHUNK`, dealt round-robin to
/// `PRODUCERS` tasks; returns the wall time taken.
async fn insert_chunks(queue: &RedisQueue<Job>, entries: Vec<(Job, Duration)>) -> Duration {
    let mut shares: Vec<Vec<Vec<(Job, Duration)>>> = (0..PRODUCERS).map(|_| Vec::new()).collect();
    let mut entries = entries.into_iter().peekable();
    let mut i = 0;
    while entries.peek().is_some() {
        shares[i % PRODUCERS].push(entries.by_ref().take(CHUNK).collect());
        i += 1;
    }
    let start = Instant::now();
    let producers: Vec<_> = shares
        .into_iter()
        .map(|chunks| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for chunk in chunks {
                    let ids = queue.insert_many(&chunk).await.expect("insert_many");
                    assert_eq!(ids.len(), chunk.len());
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer");
    }
    start.elapsed()
}

/// The poller's side of workload 8: pipelines of `CHUNK` `ZADD`s.
async fn zadd_chunks(conn: &MultiplexedConnection, key: &str, entries: Vec<Job>) -> Duration {
    let mut shares: Vec<Vec<Vec<Job>>> = (0..PRODUCERS).map(|_| Vec::new()).collect();
    let mut entries = entries.into_iter().peekable();
    let mut i = 0;
    while entries.peek().is_some() {
        shares[i % PRODUCERS].push(entries.by_ref().take(CHUNK).collect());
        i += 1;
    }
    let start = Instant::now();
    let producers: Vec<_> = shares
        .into_iter()
        .map(|chunks| {
            let (mut conn, key) = (conn.clone(), key.to_owned());
            tokio::spawn(async move {
                for chunk in chunks {
                    let mut pipe = rc::pipe();
                    for job in &chunk {
                        let member = serde_json::to_string(job).expect("encode");
                        pipe.cmd("ZADD")
                            .arg(&key)
                            .arg(job.due_ms)
                            .arg(member)
                            .ignore();
                    }
                    let _: () = pipe.query_async(&mut conn).await.expect("ZADD pipeline");
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer");
    }
    start.elapsed()
}

/// One side of workload 8.
struct Bulk {
    per_s: f64,
    server_cpu_us: f64,
    client_cpu_us: Option<f64>,
}

impl Bulk {
    async fn measure<F: Future<Output = Duration>>(
        ctl: &mut MultiplexedConnection,
        insert: F,
    ) -> Bulk {
        let server_before = server_stats(ctl).await.cpu;
        let client_before = client_cpu();
        let took = insert.await;
        let client_after = client_cpu();
        let server_cpu = server_stats(ctl).await.cpu.saturating_sub(server_before);
        let per = |x: Duration| x.as_secs_f64() * 1e6 / BULK_N as f64;
        Bulk {
            per_s: BULK_N as f64 / took.as_secs_f64(),
            server_cpu_us: per(server_cpu),
            client_cpu_us: client_before.zip(client_after).map(|(b, a)| per(a - b)),
        }
    }
}

/// Workload 8: (`insert_many`, pipelined `ZADD`s).
async fn bulk_insert(url: &str, ctl: &mut MultiplexedConnection, run: usize) -> [Bulk; 2] {
    let mut rng = Rng(0xB01C_0000 + run as u64);
    let now = unix_ms();
    let delays: Vec<Duration> = (0..BULK_N)
        .map(|_| Duration::from_millis(60_000 + rng.below(600_000)))
        .collect();
    let jobs = |delays: &[Duration]| {
        delays
            .iter()
            .enumerate()
            .map(|(n, d)| Job {
                n: n as u64,
                due_ms: now + d.as_millis() as u64,
            })
            .collect::<Vec<_>>()
    };

    let queue = open(url, &format!("bulk-{run}")).await;
    let entries = jobs(&delays)
        .into_iter()
        .zip(delays.iter().copied())
        .collect();
    let ours = Bulk::measure(ctl, insert_chunks(&queue, entries)).await;
    let stats = queue.stats().await.expect("stats");
    assert_eq!(
        stats.pending + stats.due,
        BULK_N,
        "insert_many lost entries"
    );
    queue.purge().await.expect("purge");

    let client = rc::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect poller");
    let key = format!("baseline:{{bulk-{run}}}:due");
    let poller = Bulk::measure(ctl, zadd_chunks(&conn, &key, jobs(&delays))).await;
    let count: u64 = rc::cmd("ZCARD")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(count, BULK_N, "ZADD pipelines lost entries");
    let _: i64 = rc::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    [ours, poller]
}

struct Lateness {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Inserts that returned after their entry's due time.
    late_inserts: u64,
}

fn lateness_of(mut us: Vec<i64>, late_inserts: u64) -> Lateness {
    us.sort_unstable();
    let at = |p: usize| us[(us.len() * p / 100).min(us.len() - 1)] as f64 / 1e3;
    Lateness {
        p50_ms: at(50),
        p99_ms: at(99),
        max_ms: at(100),
        late_inserts,
    }
}

/// The jobs of workload 7, in due order.
fn late_jobs(run: usize) -> Vec<Job> {
    let mut rng = Rng(0x1A7E_0000 + run as u64);
    let base = unix_ms() + LATE_LEAD_MS;
    let mut dues: Vec<u64> = (0..LATE_N)
        .map(|_| base + rng.below(LATE_SPREAD_MS))
        .collect();
    dues.sort_unstable();
    dues.into_iter()
        .enumerate()
        .map(|(n, due_ms)| Job {
            n: n as u64,
            due_ms,
        })
        .collect()
}

/// Inserts `jobs` (in due order) from `PRODUCERS` tasks, one by one at
/// their due time (`insert_at`, or `ZADD` at it); returns how many inserts
/// returned after their due time.
async fn produce_on_time(target: &Target, jobs: Vec<Job>) -> u64 {
    let mut shares: Vec<Vec<Job>> = (0..PRODUCERS).map(|_| Vec::new()).collect();
    for (i, job) in jobs.into_iter().enumerate() {
        shares[i % PRODUCERS].push(job);
    }
    let late = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let (target, late) = (target.clone(), Arc::clone(&late));
            tokio::spawn(async move {
                for job in share {
                    target.insert(&job, None).await;
                    if unix_ms() > job.due_ms {
                        late.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer");
    }
    late.load(Ordering::Relaxed)
}

/// Workload 7 for the worker.
async fn worker_lateness(url: &str, run: usize) -> Lateness {
    let queue = open(url, &format!("wlate-{run}")).await;
    let seen = Arc::new(Mutex::new(Vec::with_capacity(LATE_N as usize)));
    let sink = Arc::clone(&seen);
    let worker = Worker::builder(queue.clone())
        .concurrency(WORKER_CONCURRENCY)
        .spawn(move |job| {
            let sink = Arc::clone(&sink);
            async move {
                let late = unix_us() - micros(job.deadline());
                sink.lock().unwrap().push(late);
                Ok::<(), Infallible>(())
            }
        });
    tokio::time::sleep(Duration::from_millis(200)).await; // connected, subscribed
    let target = Target::Ours {
        queue: queue.clone(),
        batch: 1,
    };
    let late_inserts = produce_on_time(&target, late_jobs(run)).await;
    acked(&worker, LATE_N).await;
    let done = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(done.completed, LATE_N, "worker: {done:?}");
    queue.purge().await.expect("purge");
    let us = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(us.len() as u64, LATE_N, "runs");
    lateness_of(us, late_inserts)
}

/// Workload 7 for the poller: 8 consumers.
async fn poller_lateness(url: &str, run: usize) -> Lateness {
    let target = Target::open(Variant::Baseline, url, &format!("plate-{run}")).await;
    target.purge().await;
    let sink = Sink::new(LATE_N, true);
    let tasks = target.spawn_consumers(crate::CONSUMERS, &sink);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late_inserts = produce_on_time(&target, late_jobs(run)).await;
    sink.wait().await;
    for task in tasks {
        task.abort();
    }
    assert_eq!(target.remaining().await, 0, "poller left entries");
    target.purge().await;
    let us = sink.lateness.as_ref().unwrap().lock().unwrap().clone();
    lateness_of(us, late_inserts)
}

/// Runs workloads 6 to 9, `R` times each, and prints their table.
pub(crate) async fn bench(url: &str, ctl: &mut MultiplexedConnection) {
    let mut jobs = Pair::new(
        &format!(
            "jobs/s, {WORKER_DRAIN_N} due at once (Worker concurrency {WORKER_CONCURRENCY} / 8 consumers)"
        ),
        0,
        Some(Bar::RatioAtLeast(1.0)),
    );
    let mut p50 = Pair::new(
        &format!(
            "lateness p50 ms, {LATE_N} due over {} s, inserted meanwhile",
            LATE_SPREAD_MS / 1000
        ),
        2,
        None,
    );
    let mut p99 = Pair::new("lateness p99 ms", 2, Some(Bar::AtMost(10.0)));
    let mut max = Pair::new("lateness max ms", 2, None);
    let mut late_inserts = Pair::new("inserts returned after their due time", 0, None);
    let mut inserts = Pair::new(
        &format!(
            "inserts/s, {BULK_N} in chunks of {CHUNK}, {PRODUCERS} producers (insert_many / ZADD pipeline)"
        ),
        0,
        Some(Bar::RatioAtLeast(0.5)),
    );
    let mut insert_server = Pair::new("server CPU µs/insert, chunks of 256", 2, None);
    let mut insert_client = Pair::new("client CPU µs/insert, chunks of 256", 2, None);
    let mut commands = Pair::new(
        &format!("server commands/job, drain of {WORKER_DRAIN_N} incl. insert"),
        2,
        Some(Bar::AtMost(10.0)),
    );
    let mut server_cpu = Pair::new("server CPU µs/job, drain (claim + ack / pop)", 1, None);
    let mut client_cpu = Pair::new("client CPU µs/job, drain", 1, None);
    let mut busy = Pair::new("server busy during drain (CPU s / wall s)", 2, None);
    let mut breakdown: [std::collections::BTreeMap<String, (f64, f64)>; 2] = Default::default();

    println!("\n6. + 9. Worker drain (poller: workload 2's drain, interleaved)");
    for run in 0..R {
        let ours = worker_drain(url, ctl, run).await;
        let name = format!("wdrain-base-{run}");
        let poller = w_drain(
            Variant::Baseline,
            url,
            None,
            ctl,
            &name,
            WORKER_DRAIN_N,
            crate::CONSUMERS,
        )
        .await;
        for (d, side) in [(&ours, 0), (&poller, 1)] {
            let push = |pair: &mut Pair, x: f64| {
                if side == 0 {
                    pair.ours.push(x);
                } else {
                    pair.poller.push(x);
                }
            };
            push(&mut jobs, d.jobs_per_s);
            push(&mut commands, d.server_commands_per_job);
            push(&mut server_cpu, d.server_cpu_us_per_job);
            if let Some(cpu) = d.client_cpu_us_per_job {
                push(&mut client_cpu, cpu);
            }
            push(&mut busy, d.server_busy);
        }
        breakdown = [ours.by_command, poller.by_command];
    }
    jobs.progress();
    commands.progress();

    println!("\n7. lateness under inserts");
    for run in 0..R {
        for (ours, l) in [
            (true, worker_lateness(url, run).await),
            (false, poller_lateness(url, run).await),
        ] {
            for (pair, x) in [
                (&mut p50, l.p50_ms),
                (&mut p99, l.p99_ms),
                (&mut max, l.max_ms),
                (&mut late_inserts, l.late_inserts as f64),
            ] {
                if ours {
                    pair.ours.push(x);
                } else {
                    pair.poller.push(x);
                }
            }
        }
    }
    p50.progress();
    p99.progress();
    late_inserts.progress();

    println!("\n8. insert_many vs ZADD pipelines");
    for run in 0..R {
        let [ours, poller] = bulk_insert(url, ctl, run).await;
        for (b, ours) in [(ours, true), (poller, false)] {
            let mut rows = vec![
                (&mut inserts, b.per_s),
                (&mut insert_server, b.server_cpu_us),
            ];
            if let Some(cpu) = b.client_cpu_us {
                rows.push((&mut insert_client, cpu));
            }
            for (pair, x) in rows {
                if ours {
                    pair.ours.push(x);
                } else {
                    pair.poller.push(x);
                }
            }
        }
    }
    inserts.progress();
    insert_server.progress();

    println!(
        "\n## Worker and insert_many vs the poller (median of {R} runs, min–max in parentheses; \
         ratio = ours / poller)\n"
    );
    println!("| metric | ours | poller | ratio | bar | met |");
    println!("|---|---:|---:|---:|---|---|");
    for pair in [
        &jobs,
        &p50,
        &p99,
        &max,
        &late_inserts,
        &inserts,
        &insert_server,
        &insert_client,
        &commands,
        &server_cpu,
        &client_cpu,
        &busy,
    ] {
        println!("{}", pair.row());
    }

    println!(
        "\n## Server commands per job by command, Worker drain of {WORKER_DRAIN_N} with \
         insert_many, vs the poller (last run; calls/job, µs/job)\n"
    );
    println!("| command | Worker | poller |");
    println!("|---|---:|---:|");
    let mut names: Vec<&String> = breakdown.iter().flat_map(|b| b.keys()).collect();
    names.sort();
    names.dedup();
    let calls = |b: &std::collections::BTreeMap<String, (f64, f64)>, n: &String| {
        b.get(n).map_or(0.0, |c| c.0)
    };
    names.sort_by(|a, b| {
        (calls(&breakdown[0], b) + calls(&breakdown[1], b))
            .total_cmp(&(calls(&breakdown[0], a) + calls(&breakdown[1], a)))
    });
    for name in names {
        let cell = |b: &std::collections::BTreeMap<String, (f64, f64)>| {
            b.get(name).map_or("—".to_owned(), |(calls, us)| {
                format!("{calls:.3} / {us:.2}")
            })
        };
        println!(
            "| {name} | {} | {} |",
            cell(&breakdown[0]),
            cell(&breakdown[1])
        );
    }
}
