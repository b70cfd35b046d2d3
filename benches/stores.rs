//! The durable `Worker` on the memory store, beside the same worker on a
//! Redis store and the in-memory `Scheduler`, in one run.
//!
//! Workloads, each `R` times (5, `STORES_BENCH_RUNS` to change), the three
//! contenders' runs interleaved:
//!
//! 1. drain: 100,000 entries due at once are put in before the clock starts
//!    (`insert_many` in chunks of 1,000), then a `Worker` with
//!    `concurrency(8)` and a handler that returns at once runs until every
//!    entry is acked (done = `stats().completed`): on a `MemoryQueue`, and
//!    on a `RedisQueue` of a fresh local redis-server (persistence off;
//!    loopback).
//! 2. the `Scheduler` (8 workers) running 100,000 one-shot jobs that do
//!    nothing, all scheduled due at once before the clock starts, timed
//!    until `stats().completed` counts them all.
//! 3. memory per pending entry of a `MemoryQueue<u64>` (values of up to 6
//!    digits), in a child process: bytes requested from the allocator by
//!    100,000 inserts due in an hour, divided by 100,000.
//!
//! `cargo bench --features redis --bench stores` prints a markdown table
//! of medians, with the memory store's ratio to the Redis worker (the bar:
//! at least 10x). `STORES_BENCH_ONLY=memory` runs the memory drain alone
//! (for a profiler).

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;
mod support;

use std::time::Duration;

use punctual::Scheduler;
use punctual::durable::{Durable, Worker};
use punctual::memory::MemoryQueue;
use punctual::redis::RedisQueue;
use redis_server::RedisServer;
use support::{CountingAlloc, allocated_bytes, child_result, child_task, in_child, median};
use tokio::time::Instant;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const N: u64 = 100_000;
const CONCURRENCY: usize = 8;
const CHUNK: usize = 1000;

fn runs() -> usize {
    std::env::var("STORES_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
}

/// Puts `N` entries due now into `queue`, in chunks.
async fn fill<Q: Durable<Item = u64>>(queue: &Q) {
    let all: Vec<(u64, Duration)> = (0..N).map(|n| (n, Duration::ZERO)).collect();
    for chunk in all.chunks(CHUNK) {
        queue.insert_many(chunk).await.expect("insert_many");
    }
}

/// A worker with `CONCURRENCY` places drains `queue`; jobs per second.
async fn drain<Q: Durable<Item = u64>>(queue: &Q) -> f64 {
    fill(queue).await;
    let start = Instant::now();
    let worker = Worker::builder(queue.clone())
        .concurrency(CONCURRENCY)
        .spawn(|_job| async { Ok::<(), String>(()) });
    loop {
        let stats = worker.stats();
        assert_eq!(stats.failed + stats.lost, 0, "{stats:?}");
        if stats.completed >= N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = start.elapsed();
    let done = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(done.completed, N, "{done:?}");
    let left = queue.stats().await.expect("stats");
    assert_eq!(
        left.pending + left.due + left.leased + left.dead,
        0,
        "{left:?}"
    );
    N as f64 / took.as_secs_f64()
}

async fn memory_drain(run: usize) -> f64 {
    let queue: MemoryQueue<u64> = MemoryQueue::new(&format!("drain-{run}"));
    drain(&queue).await
}

async fn redis_drain(url: &str, run: usize) -> f64 {
    let queue: RedisQueue<u64> = RedisQueue::builder(&format!("drain-{run}"))
        .url(url)
        .build()
        .await
        .expect("connect");
    queue.purge().await.expect("purge");
    let rate = drain(&queue).await;
    queue.purge().await.expect("purge");
    rate
}

async fn scheduler_run() -> f64 {
    let scheduler = Scheduler::builder().workers(CONCURRENCY).build();
    for _ in 0..N {
        let handle = scheduler
            .schedule(Duration::ZERO, async {})
            .expect("schedule");
        drop(handle); // detached
    }
    let start = Instant::now();
    // (The jobs were due as they were scheduled; the workers may have
    // started on them already: the clock counts what is left.)
    let before = scheduler.stats().completed;
    while scheduler.stats().completed < N {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = start.elapsed();
    scheduler.shutdown();
    scheduler.terminated().await;
    (N - before) as f64 / took.as_secs_f64()
}

/// In a child process: bytes per pending entry of a memory queue.
fn bytes_per_entry() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let queue: MemoryQueue<u64> = MemoryQueue::new("footprint");
        // Warm up the state's maps, then measure a fresh batch.
        queue.insert(&0, Duration::from_secs(3600)).await.unwrap();
        let before = allocated_bytes();
        for n in 0..N {
            queue.insert(&n, Duration::from_secs(3600)).await.unwrap();
        }
        let after = allocated_bytes();
        assert_eq!(queue.stats().await.unwrap().pending, N + 1);
        child_result(&[(after - before) as f64 / N as f64]);
    });
}

fn main() {
    if child_task().as_deref() == Some("bytes") {
        bytes_per_entry();
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench --list`
    }
    if std::env::var("STORES_BENCH_ONLY").as_deref() == Ok("memory") {
        // The memory store's drain alone, for a profiler.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            for run in 0..runs() {
                println!("memory {:.0} jobs/s", memory_drain(run).await);
            }
        });
        return;
    }
    let server = RedisServer::start_in_memory();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let r = runs();
    let (mut memory, mut redis, mut scheduler) = (Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        for run in 0..r {
            memory.push(memory_drain(run).await);
            redis.push(redis_drain(&server.url(), run).await);
            scheduler.push(scheduler_run().await);
            println!(
                "run {}: memory {:.0}, redis {:.0}, scheduler {:.0} jobs/s",
                run + 1,
                memory[run],
                redis[run],
                scheduler[run]
            );
        }
    });
    let mut bytes: Vec<f64> = (0..3).map(|_| in_child("bytes")[0]).collect();
    let (m, rd, s) = (
        median(&mut memory),
        median(&mut redis),
        median(&mut scheduler),
    );
    println!();
    println!(
        "# Durable worker on each store, {N} jobs, concurrency {CONCURRENCY}; medians of {r}; {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| contender | jobs/s (median) | runs |");
    println!("|---|---:|---|");
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("| `Worker` on `MemoryQueue` | {m:.0} | {} |", list(&memory));
    println!(
        "| `Worker` on `RedisQueue` (local redis-server) | {rd:.0} | {} |",
        list(&redis)
    );
    println!(
        "| `Scheduler`, one-shot jobs | {s:.0} | {} |",
        list(&scheduler)
    );
    println!();
    println!(
        "memory / redis: {:.1}x (bar: >= 10x: {})",
        m / rd,
        if m / rd >= 10.0 { "met" } else { "NOT met" }
    );
    println!(
        "memory per pending `MemoryQueue<u64>` entry: {:.0} bytes (median of 3 children: {})",
        median(&mut bytes),
        list(&bytes)
    );
}
