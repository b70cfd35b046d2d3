//! Workload 11: lateness of jobs inserted with random delays while the
//! consumers run, against the hand-written poller of the main file, same
//! server, same run.
//!
//! 20,000 jobs, each due 0 to 2 s (uniform) after its insert, inserted by
//! one producer task with 256 calls in flight at full speed: most inserts
//! land between entries already queued, and some become the new head while
//! the consumers sleep toward a later one (workload 7 inserts in due order,
//! so every insert is a new tail). The consumers run from the start: a
//! `Worker` with `concurrency(8)` whose handler returns at once; `take` +
//! `ack` from 8 tasks; the poller's 8 consumers (pop one due entry, sleep
//! 10 ms when none is). Lateness is the wall clock when the handler starts
//! (`take` or the pop returned) minus the due time the queue stored (ours:
//! `deadline()`, the server's clock; the poller: the score the producer
//! computed just before its `ZADD`). "After insert" counts the jobs due
//! after the producer's last insert returned, whose lateness is the
//! queue's alone. Every run checks that no job ran before its due time,
//! none twice and none was lost.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use futures::StreamExt;
use punctual::durable::Worker;
use punctual::redis::RedisQueue;

use crate::{Job, R, Rng, Samples, Target, Variant, WORKLOAD_TIMEOUT, fmt_num, unix_us};

const N: u64 = 20_000;
const SPREAD_MS: u64 = 2_000;
const IN_FLIGHT: usize = 256;
const CONCURRENCY: usize = 8;
const CONSUMERS: usize = 8;

/// The contenders, in the order each run measures them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Worker,
    TakeAck,
    Poller,
}

const SIDES: [Side; 3] = [Side::Worker, Side::TakeAck, Side::Poller];

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Worker => "Worker, concurrency(8)",
            Side::TakeAck => "take + ack, 8 consumers",
            Side::Poller => "poller, 8 consumers, 10 ms poll",
        }
    }
}

/// What the consumers saw: per job, (n, µs when its run started, due µs).
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

struct Lateness {
    p50_ms: f64,
    p99_ms: f64,
    after_p99_ms: f64,
    after_n: u64,
    max_ms: f64,
    inserts_per_s: f64,
}

/// Checks that every job ran exactly once and none early; the percentiles.
fn lateness_of(
    seen: Vec<(u64, i64, i64)>,
    (started_us, inserted_us): (i64, i64),
    side: Side,
) -> Lateness {
    let mut count = vec![0u32; N as usize];
    let mut early = 0;
    let mut all = Vec::with_capacity(seen.len());
    let mut after = Vec::new();
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
        "{}: jobs early, twice, lost",
        side.label()
    );
    let pct = |v: &mut Vec<i64>, p: usize| {
        v.sort_unstable();
        v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
            .map_or(f64::NAN, |&x| x as f64 / 1e3)
    };
    Lateness {
        p50_ms: pct(&mut all, 50),
        p99_ms: pct(&mut all, 99),
        max_ms: pct(&mut all, 100),
        after_p99_ms: pct(&mut after, 99),
        after_n: after.len() as u64,
        inserts_per_s: N as f64 / ((inserted_us - started_us) as f64 / 1e6),
    }
}

/// The jobs of one run with their delays (the same for every contender of
/// the run).
fn delays(run: usize) -> Vec<Duration> {
    let mut rng = Rng(0x0032_1A7E + run as u64);
    (0..N)
        .map(|_| Duration::from_millis(rng.below(SPREAD_MS + 1)))
        .collect()
}

/// Inserts job `n` with `delays[n]` from one task, `IN_FLIGHT` calls at a
/// time; (when it started, when the last insert returned), µs since the
/// epoch.
async fn produce(target: &Target, delays: &[Duration]) -> (i64, i64) {
    let start = unix_us();
    futures::stream::iter(delays.iter().enumerate())
        .for_each_concurrent(IN_FLIGHT, |(n, &delay)| async move {
            let due_ms = (unix_us() / 1000) as u64 + delay.as_millis() as u64;
            let job = Job {
                n: n as u64,
                due_ms,
            };
            target.insert(&job, Some(delay)).await;
        })
        .await;
    (start, unix_us())
}

async fn run_side(url: &str, side: Side, run: usize) -> Lateness {
    let name = format!("late32-{run}-{}", side as u8);
    let seen = Arc::new(Seen::default());
    let delays = delays(run);
    let micros = |t: std::time::SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
    };
    let inserted = match side {
        Side::Worker => {
            let queue: RedisQueue<Job> = RedisQueue::builder(&name)
                .url(url)
                .build()
                .await
                .expect("connect");
            queue.purge().await.expect("purge");
            let sink = Arc::clone(&seen);
            let worker = Worker::builder(queue.clone())
                .concurrency(CONCURRENCY)
                .spawn(move |job| {
                    let started = unix_us();
                    sink.push(job.value().n, started, micros(job.deadline()));
                    async { Ok::<(), Infallible>(()) }
                });
            tokio::time::sleep(Duration::from_millis(200)).await; // subscribed
            let target = Target::Ours {
                queue: queue.clone(),
                batch: 1,
            };
            let inserted = produce(&target, &delays).await;
            seen.wait(N).await;
            let done = worker.shutdown(Duration::from_secs(1)).await;
            assert_eq!(done.completed, N, "worker: {done:?}");
            let left = queue.stats().await.expect("stats");
            assert_eq!(left.pending + left.due + left.leased + left.dead, 0);
            queue.purge().await.expect("purge");
            inserted
        }
        Side::TakeAck => {
            let queue: RedisQueue<Job> = RedisQueue::builder(&name)
                .url(url)
                .build()
                .await
                .expect("connect");
            queue.purge().await.expect("purge");
            let consumers: Vec<_> = (0..CONSUMERS)
                .map(|_| {
                    let (queue, sink) = (queue.clone(), Arc::clone(&seen));
                    tokio::spawn(async move {
                        loop {
                            let delivery = queue.take().await.expect("take");
                            let started = unix_us();
                            sink.push(delivery.value().n, started, micros(delivery.deadline()));
                            assert!(delivery.ack().await.expect("ack"), "lease lost");
                        }
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let target = Target::Ours {
                queue: queue.clone(),
                batch: 1,
            };
            let inserted = produce(&target, &delays).await;
            seen.wait(N).await;
            // The last acks are on their way: wait for them.
            tokio::time::timeout(WORKLOAD_TIMEOUT, async {
                loop {
                    let left = queue.stats().await.expect("stats");
                    if left.pending + left.due + left.leased + left.dead == 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("acks landed");
            for consumer in consumers {
                consumer.abort();
            }
            queue.purge().await.expect("purge");
            inserted
        }
        Side::Poller => {
            let target = Target::open(Variant::Baseline, url, &name).await;
            target.purge().await;
            let Target::Baseline(b) = &target else {
                unreachable!()
            };
            let consumers: Vec<_> = (0..CONSUMERS)
                .map(|_| {
                    let (b, sink) = (b.clone(), Arc::clone(&seen));
                    tokio::spawn(async move {
                        let mut conn = b.conn.clone();
                        loop {
                            let popped: Option<String> = b
                                .pop
                                .key(&b.key)
                                .invoke_async(&mut conn)
                                .await
                                .expect("pop");
                            match popped {
                                Some(member) => {
                                    let started = unix_us();
                                    let job: Job = serde_json::from_str(&member).expect("decode");
                                    sink.push(job.n, started, job.due_ms as i64 * 1000);
                                }
                                None => tokio::time::sleep(crate::BASELINE_POLL).await,
                            }
                        }
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let inserted = produce(&target, &delays).await;
            seen.wait(N).await;
            for consumer in consumers {
                consumer.abort();
            }
            assert_eq!(target.remaining().await, 0, "poller left entries");
            target.purge().await;
            inserted
        }
    };
    let seen = std::mem::take(&mut *seen.0.lock().unwrap());
    lateness_of(seen, inserted, side)
}

/// Runs workload 11 `R` times per contender, interleaved, and prints its
/// table.
pub(crate) async fn bench(url: &str) {
    let runs: usize = std::env::var("REDIS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(R);
    let sides: Vec<Side> = match std::env::var("REDIS_BENCH_SIDES").as_deref() {
        Ok("worker") => vec![Side::Worker, Side::Poller],
        _ => SIDES.to_vec(),
    };
    println!(
        "\n11. lateness, {N} jobs due 0-{SPREAD_MS} ms after their insert, one producer with \
         {IN_FLIGHT} calls in flight"
    );
    // [side][metric]
    let mut samples: Vec<[Samples; 6]> = (0..3).map(|_| Default::default()).collect();
    for run in 0..runs {
        for &side in &sides {
            let l = run_side(url, side, run).await;
            println!(
                "  run {run} {:<32} p50 {:>8.2} ms  p99 {:>8.2} ms  after-insert p99 {:>8.2} ms \
                 ({} jobs)  max {:>8.2} ms  {:>6.0} inserts/s",
                side.label(),
                l.p50_ms,
                l.p99_ms,
                l.after_p99_ms,
                l.after_n,
                l.max_ms,
                l.inserts_per_s
            );
            let s = &mut samples[side as usize];
            for (i, x) in [
                l.p50_ms,
                l.p99_ms,
                l.after_p99_ms,
                l.after_n as f64,
                l.max_ms,
                l.inserts_per_s,
            ]
            .into_iter()
            .enumerate()
            {
                s[i].push(x);
            }
        }
    }
    println!(
        "\n## Lateness with random delays (median of {runs} runs, min–max in parentheses; \
         ratio = ours / poller)\n"
    );
    println!(
        "| contender | p50 ms | p99 ms | after-insert p99 ms | jobs due after insert | max ms | \
         producer's inserts/s | p99 / poller's | after-insert p99 / poller's |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let poller = &samples[Side::Poller as usize];
    for &side in &sides {
        let s = &samples[side as usize];
        let ratio = |i: usize| {
            let base = poller[i].median();
            if side == Side::Poller || base.is_nan() || base == 0.0 {
                "—".to_owned()
            } else {
                format!("{:.2}×", s[i].median() / base)
            }
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            side.label(),
            s[0].cell(2),
            s[1].cell(2),
            s[2].cell(2),
            s[3].cell(0),
            s[4].cell(2),
            s[5].cell(0),
            ratio(1),
            ratio(2),
        );
    }
    let worker = &samples[Side::Worker as usize];
    if !worker[1].0.is_empty() && !poller[1].0.is_empty() {
        println!(
            "\nbars (Worker): p99 ≤ 2× the poller's: {} ({}×); after-insert p99 ≤ 15 ms: {} ({} ms)",
            if worker[1].median() <= 2.0 * poller[1].median() {
                "met"
            } else {
                "not met"
            },
            fmt_num(worker[1].median() / poller[1].median(), 2),
            if worker[2].median() <= 15.0 {
                "met"
            } else {
                "not met"
            },
            fmt_num(worker[2].median(), 2),
        );
    }
}
