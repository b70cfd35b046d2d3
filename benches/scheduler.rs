//! `Scheduler` against one `tokio::spawn` per job, same workloads, same run.
//!
//! The peer: `tokio::spawn(async { sleep_until(deadline).await; job })`,
//! cancelled with `JoinHandle::abort`; for periodic work,
//! `tokio::time::interval` (fixed rate) and a `sleep` loop (fixed delay).
//!
//! `cargo bench --bench scheduler` runs everything and prints the table. The
//! memory and lateness figures come from fresh child processes of this binary.

mod support;

use criterion::{Criterion, SamplingMode, Throughput};
use punctual::Scheduler;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{Rng, Row};
use tokio::runtime::Runtime;
use tokio::time::{Instant, sleep, sleep_until};

#[global_allocator]
static ALLOC: support::CountingAlloc = support::CountingAlloc;

const CHURN_N: usize = 1_000_000;
const LATENESS_N: usize = 100_000;
const LATENESS_SPAN: Duration = Duration::from_secs(2);
const DRIFT_RUNS: u32 = 500;
const DRIFT_PERIOD: Duration = Duration::from_millis(10);
const WORKERS: usize = 2;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .unwrap()
}

fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    Rng(17).shuffle(&mut order);
    order
}

// ------------------------------------------------------- schedule + cancel

/// `CHURN_N` one-shot jobs due in an hour, on the scheduler.
fn schedule_ours(scheduler: &Scheduler) -> Vec<punctual::JobHandle<u64>> {
    let hour = Duration::from_secs(3600);
    (0..CHURN_N as u64)
        .map(|i| {
            scheduler
                .schedule(hour, async move { black_box(i) })
                .unwrap()
        })
        .collect()
}

/// `CHURN_N` jobs due in an hour, one task each.
fn spawn_peer() -> Vec<tokio::task::JoinHandle<u64>> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    (0..CHURN_N as u64)
        .map(|i| {
            tokio::spawn(async move {
                sleep_until(deadline).await;
                black_box(i)
            })
        })
        .collect()
}

/// What a churn iteration times.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Scheduling `CHURN_N` jobs due in an hour.
    Schedule,
    /// The cancel calls, in random order.
    Cancel,
    /// From the first cancel until every job is freed. The same as `Cancel`
    /// for punctual (`cancel` removes and drops the job); for the peer it
    /// adds the runtime's work of dropping the aborted tasks.
    CancelFreed,
}

fn churn_ours(rt: &Runtime, order: &[usize], phase: Phase) -> Duration {
    rt.block_on(async {
        let scheduler = Scheduler::new(WORKERS);
        let start = Instant::now();
        let handles = schedule_ours(&scheduler);
        let scheduled = start.elapsed();
        let start = Instant::now();
        for &i in order {
            black_box(handles[i].cancel());
        }
        let cancelled = start.elapsed();
        scheduler.shutdown_now();
        if phase == Phase::Schedule {
            scheduled
        } else {
            cancelled
        }
    })
}

fn churn_spawn(rt: &Runtime, order: &[usize], phase: Phase) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        let handles = spawn_peer();
        let scheduled = start.elapsed();
        let start = Instant::now();
        for &i in order {
            handles[i].abort();
        }
        let cancelled = start.elapsed();
        for h in handles {
            let _ = h.await;
        }
        let freed = start.elapsed();
        match phase {
            Phase::Schedule => scheduled,
            Phase::Cancel => cancelled,
            Phase::CancelFreed => freed,
        }
    })
}

fn churn(c: &mut Criterion) {
    let rt = runtime();
    let order = shuffled(CHURN_N);
    let mut g = c.benchmark_group("jobs");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(CHURN_N as u64));
    for (op, phase) in [("schedule", Phase::Schedule), ("cancel", Phase::Cancel)] {
        g.bench_function(format!("{op}/punctual"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| churn_ours(&rt, &order, phase)).sum())
        });
        g.bench_function(format!("{op}/spawn"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| churn_spawn(&rt, &order, phase)).sum())
        });
    }
    g.bench_function("cancel-freed/spawn", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| churn_spawn(&rt, &order, Phase::CancelFreed))
                .sum()
        })
    });
    g.finish();
}

// ------------------------------------------------------------- children

/// CPU time this process used so far, from `/proc/self/stat` (clock ticks of
/// 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Lateness of `LATENESS_N` jobs due uniformly over `LATENESS_SPAN`: p50,
/// p99 and max in ms for the jobs due after scheduling finished, and CPU s.
fn lateness_child(ours: bool) -> Vec<f64> {
    let rt = runtime();
    let cpu0 = cpu_seconds();
    let late = rt.block_on(async {
        let records = Arc::new(Mutex::new(Vec::with_capacity(LATENESS_N)));
        let start = Instant::now() + Duration::from_millis(5);
        let mut rng = Rng(23);
        let deadlines: Vec<Instant> = (0..LATENESS_N)
            .map(|_| start + Duration::from_micros(rng.below(LATENESS_SPAN.as_micros() as u64)))
            .collect();
        let scheduler = Scheduler::new(WORKERS);
        let mut ours_handles = Vec::new();
        let mut spawn_handles = Vec::new();
        for &deadline in &deadlines {
            let records = records.clone();
            let job = async move {
                let late = Instant::now().saturating_duration_since(deadline);
                records.lock().unwrap().push((deadline, late));
            };
            if ours {
                ours_handles.push(scheduler.schedule_at(deadline, job).unwrap());
            } else {
                spawn_handles.push(tokio::spawn(async move {
                    sleep_until(deadline).await;
                    job.await
                }));
            }
        }
        let scheduled = Instant::now();
        for h in ours_handles {
            h.await.unwrap();
        }
        for h in spawn_handles {
            h.await.unwrap();
        }
        let records = records.lock().unwrap();
        records
            .iter()
            .filter(|(deadline, _)| *deadline > scheduled)
            .map(|(_, late)| late.as_secs_f64() * 1e3)
            .collect::<Vec<f64>>()
    });
    let cpu = cpu_seconds() - cpu0;
    let mut late = late;
    late.sort_by(f64::total_cmp);
    vec![
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        *late.last().unwrap_or(&0.0),
        cpu,
    ]
}

/// Bytes per pending one-shot job at `CHURN_N` pending: RSS growth and
/// requested heap, handles included.
fn memory_child(ours: bool) -> Vec<f64> {
    let rt = runtime();
    rt.block_on(async {
        let scheduler = Scheduler::new(WORKERS);
        tokio::task::yield_now().await;
        let (rss0, heap0) = (support::rss_bytes(), support::allocated_bytes());
        let per = || {
            vec![
                (support::rss_bytes() - rss0) as f64 / CHURN_N as f64,
                (support::allocated_bytes() - heap0) as f64 / CHURN_N as f64,
            ]
        };
        if ours {
            let handles = schedule_ours(&scheduler);
            let v = per();
            black_box(&handles);
            scheduler.shutdown_now();
            v
        } else {
            let handles = spawn_peer();
            // Let the workers poll every task once, so each holds its timer.
            sleep(Duration::from_millis(200)).await;
            let v = per();
            handles.iter().for_each(|h| h.abort());
            v
        }
    })
}

/// Periodic drift. Fixed rate: how late the last of `DRIFT_RUNS` runs
/// starts against its ideal start, in ms. Fixed delay: total time minus
/// `DRIFT_RUNS` periods, in ms per run.
fn drift_child(task: &str) -> Vec<f64> {
    let rt = runtime();
    rt.block_on(async {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let begin = Instant::now();
        let record = {
            let starts = starts.clone();
            move || starts.lock().unwrap().push(Instant::now())
        };
        match task {
            "drift:rate:punctual" | "drift:delay:punctual" => {
                let scheduler = Scheduler::new(WORKERS);
                let record = Arc::new(record);
                let job = move || {
                    let record = record.clone();
                    async move { record() }
                };
                let handle = if task.contains("rate") {
                    scheduler.schedule_at_fixed_rate(DRIFT_PERIOD, DRIFT_PERIOD, job)
                } else {
                    scheduler.schedule_with_fixed_delay(DRIFT_PERIOD, DRIFT_PERIOD, job)
                }
                .unwrap();
                while starts.lock().unwrap().len() < DRIFT_RUNS as usize {
                    sleep(Duration::from_millis(20)).await;
                }
                handle.cancel();
            }
            "drift:rate:interval" => {
                let mut interval = tokio::time::interval_at(begin + DRIFT_PERIOD, DRIFT_PERIOD);
                for _ in 0..DRIFT_RUNS {
                    interval.tick().await;
                    record();
                }
            }
            "drift:delay:sleep" => {
                for _ in 0..DRIFT_RUNS {
                    sleep(DRIFT_PERIOD).await;
                    record();
                }
            }
            other => panic!("unknown child task {other}"),
        }
        let starts = starts.lock().unwrap();
        let last = starts[DRIFT_RUNS as usize - 1];
        let ideal = begin + DRIFT_PERIOD * DRIFT_RUNS;
        let lost_ms = last.saturating_duration_since(ideal).as_secs_f64() * 1e3;
        if task.starts_with("drift:rate") {
            vec![lost_ms]
        } else {
            vec![lost_ms / f64::from(DRIFT_RUNS)]
        }
    })
}

/// Median of each value over `runs` fresh child processes.
fn children(task: &str, runs: usize) -> Vec<f64> {
    let samples: Vec<Vec<f64>> = (0..runs).map(|_| support::in_child(task)).collect();
    (0..samples[0].len())
        .map(|i| support::median(&mut samples.iter().map(|s| s[i]).collect::<Vec<_>>()))
        .collect()
}

fn main() {
    if let Some(task) = support::child_task() {
        let values = match task.as_str() {
            "memory:punctual" => memory_child(true),
            "memory:spawn" => memory_child(false),
            "lateness:punctual" => lateness_child(true),
            "lateness:spawn" => lateness_child(false),
            drift => drift_child(drift),
        };
        support::child_result(&values);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    churn(&mut c);
    c.final_summary();

    let mut rows = Vec::new();
    let spawn = "tokio::spawn + sleep_until per job";
    let per_job = |id: &str| {
        support::criterion_median_ns("jobs", id).map_or(f64::NAN, |ns| ns / CHURN_N as f64)
    };
    let (s_ours, s_peer) = (per_job("schedule_punctual"), per_job("schedule_spawn"));
    let (c_ours, c_peer) = (per_job("cancel_punctual"), per_job("cancel_spawn"));
    let freed_peer = per_job("cancel-freed_spawn");
    for (label, ours, peer) in [
        ("schedule 1M one-shot jobs due in 1 h", s_ours, s_peer),
        ("cancel them through handles, random order", c_ours, c_peer),
        ("schedule + cancel, total", s_ours + c_ours, s_peer + c_peer),
        ("cancel until every job is freed", c_ours, freed_peer),
        (
            "schedule + cancel until freed, total",
            s_ours + c_ours,
            s_peer + freed_peer,
        ),
    ] {
        rows.push(Row {
            workload: label.into(),
            unit: "ns/job",
            ours,
            peer_name: spawn.into(),
            peer,
            higher_is_better: false,
        });
    }
    let ours_mem = children("memory:punctual", 1);
    let peer_mem = children("memory:spawn", 1);
    for (i, what) in ["RSS growth", "requested heap"].into_iter().enumerate() {
        rows.push(Row {
            workload: format!("memory, 1M pending one-shot jobs: {what}"),
            unit: "B/job",
            ours: ours_mem[i],
            peer_name: spawn.into(),
            peer: peer_mem[i],
            higher_is_better: false,
        });
    }
    let ours_late = children("lateness:punctual", 3);
    let peer_late = children("lateness:spawn", 3);
    for (i, (what, unit)) in [
        ("p50", "ms"),
        ("p99", "ms"),
        ("max", "ms"),
        ("process CPU", "s"),
    ]
    .into_iter()
    .enumerate()
    {
        rows.push(Row {
            workload: format!("lateness, 100k jobs over 2 s: {what}"),
            unit,
            ours: ours_late[i],
            peer_name: spawn.into(),
            peer: peer_late[i],
            higher_is_better: false,
        });
    }
    rows.push(Row {
        workload: "fixed rate 10 ms x 500: last start - ideal".into(),
        unit: "ms",
        ours: children("drift:rate:punctual", 3)[0],
        peer_name: "tokio::time::interval".into(),
        peer: children("drift:rate:interval", 3)[0],
        higher_is_better: false,
    });
    rows.push(Row {
        workload: "fixed delay 10 ms x 500: time lost per run".into(),
        unit: "ms/run",
        ours: children("drift:delay:punctual", 3)[0],
        peer_name: "sleep loop".into(),
        peer: children("drift:delay:sleep", 3)[0],
        higher_is_better: false,
    });
    support::print_table("Scheduler vs one task per job (medians)", &rows);
}
