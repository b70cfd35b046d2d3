//! Concurrent churn: one producer task per runtime worker, each
//! arming a 5-30 s timeout per request and cancelling its oldest one, over
//! 1M pending timeouts. Every contender in the same run, same op pattern.
//!
//! Timeouts (criterion group `concurrent-churn`):
//! - `punctual`: one shared `punctual::DelayQueue<u64>`, a clone per
//!   producer; `insert` + `remove(key)`.
//! - `tokio-util-mutex`: one `tokio_util::time::DelayQueue<u64>` behind a
//!   `std::sync::Mutex` shared by every producer; `insert` + `remove(&key)`,
//!   one lock each, as punctual takes its lock once per call.
//! - `sleep-per-entry`: no shared structure, one `Pin<Box<tokio::time::Sleep>>`
//!   per timeout, polled once with a no-op waker so that tokio registers it
//!   in its timer wheel; cancelling drops it.
//!
//! Jobs (criterion group `concurrent-churn-jobs`):
//! - `punctual`: `Scheduler::schedule(delay, async {})` + `JobHandle::cancel`.
//! - `spawn-abort`: `tokio::spawn(async move { sleep(delay).await })` +
//!   `JoinHandle::abort`.
//!
//! Each producer owns the handles of its own timeouts in a `VecDeque`,
//! oldest first. The 1M are armed once per contender (untimed, spread over
//! the producers) and reused across criterion iterations: each measured op
//! arms one timeout and cancels the producer's oldest, so exactly 1M stay
//! pending. An iteration is a batch of `OPS` ops in all, `OPS / W` per
//! producer, timed in wall-clock from spawning the producers until the last
//! one finished: ns/op is wall time per op of the whole runtime (1 /
//! throughput). Producers yield every `YIELD_EVERY` ops, as request handlers
//! do, so that the runtime polls what they spawned (each spawned task
//! registers its sleep) and frees what they aborted within the batch.
//!
//! Real time, not paused time: paused time changes tokio's timer. Nothing
//! must come due during a run, or the per-entry peers would get cheaper
//! cancels: the summary prints an upper bound on how long any cancelled
//! timeout had been pending, which must stay below the 5 s minimum delay.
//!
//! W is the available parallelism (`CHURN_WORKERS` overrides it). No
//! counting allocator here: its shared atomic would tax the contenders that
//! allocate per op. Run without `--bench` (as `cargo test --benches` does),
//! every size shrinks to a smoke test.
//!
//! `cargo bench --bench churn` runs everything and prints the summary.

mod support;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::Duration;
use support::{Rng, Row};
use tokio::runtime::Runtime;
use tokio::task::{JoinHandle, yield_now};
use tokio::time::{Instant, Sleep, sleep};

/// Timeouts pending throughout.
const PENDING: usize = 1_000_000;
/// Ops (arm + cancel) per criterion iteration, over all producers.
const OPS: usize = 200_000;
/// A producer yields to the runtime after this many ops.
const YIELD_EVERY: usize = 64;
const MIN_DELAY: Duration = Duration::from_secs(5);
const DELAY_SPAN_US: u64 = 25_000_000;

const GROUP_QUEUE: &str = "concurrent-churn";
const GROUP_JOBS: &str = "concurrent-churn-jobs";

/// Sizes of this run.
#[derive(Clone, Copy)]
struct Config {
    workers: usize,
    pending: usize,
    ops: usize,
    smoke: bool,
}

impl Config {
    fn from_env() -> Self {
        let workers = std::env::var("CHURN_WORKERS")
            .ok()
            .and_then(|w| w.parse().ok())
            .filter(|&w: &usize| w > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        // `cargo bench` passes `--bench`; `cargo test --benches` does not.
        let smoke = !std::env::args().any(|a| a == "--bench");
        let (pending, ops) = if smoke {
            (10_000, 2_000)
        } else {
            (PENDING, OPS)
        };
        Config {
            workers,
            pending: pending / workers * workers,
            ops: ops / workers * workers,
            smoke,
        }
    }
}

fn runtime(workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

// ------------------------------------------------------------ contenders

/// One way to keep request timeouts.
trait Contender: Clone + Send + 'static {
    /// What a producer keeps to cancel one timeout.
    type Handle: Send + 'static;

    fn arm(&self, id: u64, delay: Duration) -> Self::Handle;
    fn cancel(&self, handle: Self::Handle);

    /// Timeouts pending, where the contender can tell.
    fn pending(&self) -> Option<usize> {
        None
    }

    /// Untimed: frees everything once the contender is done.
    fn teardown(self, handles: Vec<Self::Handle>) -> impl Future<Output = ()> + Send {
        async move { drop(handles) }
    }
}

impl Contender for punctual::DelayQueue<u64> {
    type Handle = punctual::Key;

    fn arm(&self, id: u64, delay: Duration) -> punctual::Key {
        self.insert(id, delay)
    }
    fn cancel(&self, key: punctual::Key) {
        black_box(self.remove(key));
    }
    fn pending(&self) -> Option<usize> {
        Some(self.len())
    }
}

/// tokio-util's single-owner queue made shareable the obvious way.
#[derive(Clone)]
struct TokioUtilMutex(Arc<Mutex<tokio_util::time::DelayQueue<u64>>>);

impl Contender for TokioUtilMutex {
    type Handle = tokio_util::time::delay_queue::Key;

    fn arm(&self, id: u64, delay: Duration) -> Self::Handle {
        self.0.lock().unwrap().insert(id, delay)
    }
    fn cancel(&self, key: Self::Handle) {
        black_box(self.0.lock().unwrap().remove(&key));
    }
    fn pending(&self) -> Option<usize> {
        Some(self.0.lock().unwrap().len())
    }
}

/// One tokio timer per timeout, no task: what a request handler gets from
/// `tokio::time::timeout` or a pinned `sleep` in a `select!`.
#[derive(Clone)]
struct SleepPerEntry;

impl Contender for SleepPerEntry {
    type Handle = Pin<Box<Sleep>>;

    fn arm(&self, _id: u64, delay: Duration) -> Pin<Box<Sleep>> {
        let mut timer = Box::pin(sleep(delay));
        // A `Sleep` joins tokio's timer wheel on its first poll only.
        let pending = timer
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending();
        black_box(pending);
        timer
    }
    fn cancel(&self, timer: Pin<Box<Sleep>>) {
        drop(timer);
    }
}

impl Contender for punctual::Scheduler {
    type Handle = punctual::JobHandle<()>;

    fn arm(&self, _id: u64, delay: Duration) -> Self::Handle {
        self.schedule(delay, async {})
            .expect("scheduler is running")
    }
    fn cancel(&self, job: Self::Handle) {
        black_box(job.cancel());
    }
    fn pending(&self) -> Option<usize> {
        Some(self.stats().pending)
    }
    async fn teardown(self, handles: Vec<Self::Handle>) {
        self.shutdown_now();
        drop(handles);
        self.terminated().await;
    }
}

/// One task per job, the way a service without a scheduler does it.
#[derive(Clone)]
struct SpawnPerJob;

impl Contender for SpawnPerJob {
    type Handle = JoinHandle<()>;

    fn arm(&self, _id: u64, delay: Duration) -> JoinHandle<()> {
        tokio::spawn(async move { sleep(delay).await })
    }
    fn cancel(&self, task: JoinHandle<()>) {
        task.abort();
    }
    async fn teardown(self, handles: Vec<Self::Handle>) {
        handles.iter().for_each(JoinHandle::abort);
        for h in handles {
            let _ = h.await;
        }
    }
}

// ------------------------------------------------------------- producers

/// One producer's own timeouts, oldest first.
struct Producer<H> {
    rng: Rng,
    next_id: u64,
    live: VecDeque<H>,
}

impl<H> Producer<H> {
    fn arm<C: Contender<Handle = H>>(&mut self, contender: &C) {
        let delay = MIN_DELAY + Duration::from_micros(self.rng.below(DELAY_SPAN_US));
        self.live.push_back(contender.arm(self.next_id, delay));
        self.next_id += 1;
    }
}

async fn prefill<C: Contender>(
    contender: C,
    mut p: Producer<C::Handle>,
    n: usize,
) -> Producer<C::Handle> {
    for i in 1..=n {
        p.arm(&contender);
        if i % YIELD_EVERY == 0 {
            yield_now().await;
        }
    }
    yield_now().await;
    p
}

/// The measured loop: per request, arm a timeout and cancel the oldest.
async fn churn<C: Contender>(
    contender: C,
    mut p: Producer<C::Handle>,
    ops: usize,
) -> Producer<C::Handle> {
    for i in 1..=ops {
        p.arm(&contender);
        let oldest = p.live.pop_front().expect("a pending timeout");
        contender.cancel(oldest);
        if i % YIELD_EVERY == 0 {
            yield_now().await;
        }
    }
    // Lets the runtime run what the last ops spawned or aborted.
    yield_now().await;
    p
}

/// One contender with its 1M pending timeouts, across criterion iterations.
struct Run<C: Contender> {
    contender: C,
    producers: Vec<Producer<C::Handle>>,
    per_producer_pending: usize,
    per_producer_ops: usize,
    prefill_start: Instant,
    batch_starts: Vec<Instant>,
    /// Upper bound on how long any cancelled timeout had been pending.
    max_age: Duration,
}

impl<C: Contender> Run<C> {
    fn new(rt: &Runtime, cfg: &Config, contender: C) -> Self {
        let per_producer_pending = cfg.pending / cfg.workers;
        let prefill_start = Instant::now();
        let producers = rt.block_on(async {
            let tasks: Vec<_> = (0..cfg.workers)
                .map(|w| {
                    let p = Producer {
                        rng: Rng(0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1)),
                        next_id: (w as u64) << 48,
                        live: VecDeque::with_capacity(per_producer_pending + 1),
                    };
                    tokio::spawn(prefill(contender.clone(), p, per_producer_pending))
                })
                .collect();
            let mut producers = Vec::with_capacity(tasks.len());
            for t in tasks {
                producers.push(t.await.expect("prefill"));
            }
            producers
        });
        if !cfg.smoke {
            println!(
                "prefilled {} timeouts in {:.2} s",
                cfg.pending,
                prefill_start.elapsed().as_secs_f64()
            );
        }
        Run {
            contender,
            producers,
            per_producer_pending,
            per_producer_ops: cfg.ops / cfg.workers,
            prefill_start,
            batch_starts: Vec::new(),
            max_age: Duration::ZERO,
        }
    }

    /// One criterion iteration: every producer does its share of the ops.
    fn batch(&mut self, rt: &Runtime) -> Duration {
        let producers = std::mem::take(&mut self.producers);
        let ops = self.per_producer_ops;
        let contender = &self.contender;
        let (start, elapsed, producers) = rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = producers
                .into_iter()
                .map(|p| tokio::spawn(churn(contender.clone(), p, ops)))
                .collect();
            let mut back = Vec::with_capacity(tasks.len());
            for t in tasks {
                back.push(t.await.expect("producer"));
            }
            (start, start.elapsed(), back)
        });
        self.producers = producers;
        self.batch_starts.push(start);
        // Each producer arms its timeouts in sequence: the prefill first,
        // then `ops` per batch. The last one cancelled in this batch was
        // armed no earlier than the start of the batch (or prefill) that
        // armed it, and cancelled no later than now.
        let cancelled = (self.batch_starts.len() * ops) as u64;
        let last = cancelled - 1;
        let armed_from = match last.checked_sub(self.per_producer_pending as u64) {
            None => self.prefill_start,
            Some(k) => self.batch_starts[(k / ops as u64) as usize],
        };
        self.max_age = self.max_age.max((start + elapsed) - armed_from);
        elapsed
    }

    /// Checks that exactly the prefill is still pending, frees everything,
    /// and returns the age bound.
    fn finish(self, rt: &Runtime, expected: usize) -> Duration {
        let handles: Vec<C::Handle> = self.producers.into_iter().flat_map(|p| p.live).collect();
        assert_eq!(handles.len(), expected, "producers' own timeouts");
        if let Some(pending) = self.contender.pending() {
            assert_eq!(pending, expected, "timeouts pending in the contender");
        }
        rt.block_on(self.contender.teardown(handles));
        self.max_age
    }
}

/// Arms `cfg.pending` timeouts on `contender`, then lets criterion time
/// batches of churn on them. Returns the age bound.
fn bench<C: Contender>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    cfg: &Config,
    id: &str,
    contender: C,
) -> Duration {
    let mut run = Run::new(rt, cfg, contender);
    g.bench_function(id, |b| {
        b.iter_custom(|iters| (0..iters).map(|_| run.batch(rt)).sum())
    });
    run.finish(rt, cfg.pending)
}

/// The `Sleep` peer is only fair if arming it really registers a timer:
/// armed sleeps that were never polled again must still fire.
fn check_sleep_registers(rt: &Runtime) {
    rt.block_on(async {
        tokio::spawn(async {
            let sleeps: Vec<_> = (0..256)
                .map(|i| SleepPerEntry.arm(i, Duration::from_millis(20)))
                .collect();
            sleep(Duration::from_millis(200)).await;
            let fired = sleeps.iter().filter(|s| s.is_elapsed()).count();
            assert_eq!(fired, sleeps.len(), "armed sleeps must be registered");
        })
        .await
        .unwrap();
    });
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let cfg = Config::from_env();
    let load_before = load_average();
    let rt = runtime(cfg.workers);
    check_sleep_registers(&rt);
    let mut c = Criterion::default().configure_from_args();
    let mut ages = Vec::new();

    let mut g = c.benchmark_group(GROUP_QUEUE);
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(cfg.ops as u64));
    ages.push(bench(
        &mut g,
        &rt,
        &cfg,
        "punctual",
        punctual::DelayQueue::new(),
    ));
    ages.push(bench(
        &mut g,
        &rt,
        &cfg,
        "tokio-util-mutex",
        TokioUtilMutex(Arc::new(Mutex::new(tokio_util::time::DelayQueue::new()))),
    ));
    ages.push(bench(&mut g, &rt, &cfg, "sleep-per-entry", SleepPerEntry));
    g.finish();

    let mut g = c.benchmark_group(GROUP_JOBS);
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(cfg.ops as u64));
    let scheduler = {
        let _guard = rt.enter();
        punctual::Scheduler::new(cfg.workers)
    };
    ages.push(bench(&mut g, &rt, &cfg, "punctual", scheduler));
    ages.push(bench(&mut g, &rt, &cfg, "spawn-abort", SpawnPerJob));
    g.finish();
    c.final_summary();
    if cfg.smoke {
        return;
    }

    let ns_per_op = |group: &str, id: &str| {
        support::criterion_median_ns(group, id).map_or(f64::NAN, |ns| ns / cfg.ops as f64)
    };
    let queue = ns_per_op(GROUP_QUEUE, "punctual");
    let tu = ns_per_op(GROUP_QUEUE, "tokio-util-mutex");
    let sleeps = ns_per_op(GROUP_QUEUE, "sleep-per-entry");
    let jobs = ns_per_op(GROUP_JOBS, "punctual");
    let spawn = ns_per_op(GROUP_JOBS, "spawn-abort");
    let mops = |ns: f64| 1e3 / ns;

    println!(
        "\n## Concurrent churn: {} producers on {} workers, {} pending, \
         {}-{} s timeouts, {} ops per iteration (medians)\n",
        cfg.workers,
        cfg.workers,
        cfg.pending,
        MIN_DELAY.as_secs(),
        MIN_DELAY.as_secs() + DELAY_SPAN_US / 1_000_000,
        cfg.ops
    );
    println!("| contender | ns/op (arm + cancel, wall) | M ops/s |");
    println!("|---|---:|---:|");
    for (name, ns) in [
        ("punctual DelayQueue, shared", queue),
        ("tokio-util DelayQueue behind a Mutex", tu),
        ("one pinned tokio Sleep per entry", sleeps),
        ("punctual Scheduler schedule + cancel", jobs),
        ("tokio::spawn + sleep per job, abort", spawn),
    ] {
        println!("| {name} | {ns:.1} | {:.2} |", mops(ns));
    }

    let row = |workload: &str, ours: f64, peer_name: &str, peer: f64| Row {
        workload: workload.into(),
        unit: "M ops/s",
        ours: mops(ours),
        peer_name: peer_name.into(),
        peer: mops(peer),
        higher_is_better: true,
    };
    let workload = "concurrent churn, 1M pending, arm 5-30 s + cancel oldest";
    support::print_table(
        "Concurrent churn vs peers (medians; ours / peer = throughput ratio)",
        &[
            row(workload, queue, "tokio-util DelayQueue + Mutex", tu),
            row(workload, queue, "pinned Sleep per entry", sleeps),
            row(workload, jobs, "tokio::spawn per job + abort", spawn),
        ],
    );

    let best_peer = tu.min(sleeps);
    let verdict = |ratio: f64, bar: f64| if ratio >= bar { "met" } else { "NOT met" };
    let queue_ratio = best_peer / queue;
    let jobs_ratio = spawn / jobs;
    println!("\nBars (throughput ratio = peer time / our time):");
    println!(
        "- DelayQueue >= 1.2x the best of (tokio-util + Mutex, Sleep per entry): \
         {queue_ratio:.2}x against {} -> {}",
        if tu <= sleeps {
            "tokio-util + Mutex"
        } else {
            "Sleep per entry"
        },
        verdict(queue_ratio, 1.2)
    );
    println!(
        "- Scheduler schedule + cancel >= 2x spawn + abort: {jobs_ratio:.2}x -> {}",
        verdict(jobs_ratio, 2.0)
    );
    let max_age = ages.into_iter().max().unwrap_or_default();
    println!(
        "\nLongest any cancelled timeout was pending (upper bound): {:.2} s \
         ({}; nothing came due)",
        max_age.as_secs_f64(),
        if max_age < MIN_DELAY {
            "below the 5 s minimum delay"
        } else {
            "WARNING: not below the 5 s minimum delay, some may have fired"
        }
    );
    println!(
        "Load average (1, 5, 15 min): {load_before} before, {} after",
        load_average()
    );
}
