//! `DelayQueue` against its peers, same workloads, same run.
//!
//! Peers: `tokio_util::time::DelayQueue` (single owner); for many consumers a
//! naive `Mutex<BinaryHeap>` + `Notify::notify_waiters()`, and a tokio-util
//! `DelayQueue` owned by one dispatcher task feeding consumers through a
//! shared `mpsc` receiver.
//!
//! `cargo bench --bench queue` runs everything and prints the table; the
//! memory figures come from fresh child processes of this binary.

mod support;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use futures::StreamExt;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use support::{Rng, Row};
use tokio::runtime::Runtime;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

#[global_allocator]
static ALLOC: support::CountingAlloc = support::CountingAlloc;

const CHURN_N: usize = 1_000_000;
const EXPIRE_N: usize = 1_000_000;
const DENSE_N: usize = 200_000;
const SPARSE_N: usize = 2_000;
const CONSUMERS: usize = 256;
const MEMORY_N: usize = 1_000_000;
type Payload = [u64; 2];

fn rt_current() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn rt_multi() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn churn_delays() -> Vec<Duration> {
    let mut rng = Rng(7);
    (0..CHURN_N)
        .map(|_| Duration::from_millis(60_000 + rng.below(3_540_000)))
        .collect()
}

fn shuffled_indices(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    Rng(11).shuffle(&mut order);
    order
}

// ---------------------------------------------------------------- churn

fn churn(c: &mut Criterion) {
    let rt = rt_current();
    let _guard = rt.enter();
    let delays = churn_delays();
    let order = shuffled_indices(CHURN_N);
    let mut g = c.benchmark_group("churn");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(CHURN_N as u64));

    g.bench_function("insert/punctual", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let q = punctual::DelayQueue::new();
                let start = Instant::now();
                for (i, d) in delays.iter().enumerate() {
                    black_box(q.insert(i, *d));
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.bench_function("insert/tokio-util", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut q = tokio_util::time::DelayQueue::new();
                let start = Instant::now();
                for (i, d) in delays.iter().enumerate() {
                    black_box(q.insert(i, *d));
                }
                total += start.elapsed();
            }
            total
        })
    });
    // tokio-util behind the lock punctual takes: the cost of sharing.
    g.bench_function("insert/tokio-util-locked", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let q = parking_lot::Mutex::new(tokio_util::time::DelayQueue::new());
                let start = Instant::now();
                for (i, d) in delays.iter().enumerate() {
                    black_box(q.lock().insert(i, *d));
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.bench_function("remove/punctual", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let q = punctual::DelayQueue::new();
                let keys: Vec<_> = delays
                    .iter()
                    .enumerate()
                    .map(|(i, d)| q.insert(i, *d))
                    .collect();
                let start = Instant::now();
                for &i in &order {
                    black_box(q.remove(keys[i]));
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.bench_function("remove/tokio-util", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut q = tokio_util::time::DelayQueue::new();
                let keys: Vec<_> = delays
                    .iter()
                    .enumerate()
                    .map(|(i, d)| q.insert(i, *d))
                    .collect();
                let start = Instant::now();
                for &i in &order {
                    black_box(q.try_remove(&keys[i]));
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// Insert + remove of one entry while 0 or 1,000,000 others are queued.
fn single(c: &mut Criterion) {
    let rt = rt_current();
    let _guard = rt.enter();
    let delays = churn_delays();
    let mut g = c.benchmark_group("single");
    g.sample_size(20);
    for queued in [0usize, CHURN_N] {
        let ours = punctual::DelayQueue::new();
        let mut peer = tokio_util::time::DelayQueue::new();
        for (i, d) in delays.iter().take(queued).enumerate() {
            ours.insert(i, *d);
            peer.insert(i, *d);
        }
        let d = Duration::from_secs(1800);
        g.bench_with_input(BenchmarkId::new("punctual", queued), &queued, |b, _| {
            b.iter(|| ours.remove(ours.insert(usize::MAX, d)))
        });
        g.bench_with_input(BenchmarkId::new("tokio-util", queued), &queued, |b, _| {
            b.iter(|| {
                let key = peer.insert(usize::MAX, d);
                peer.try_remove(&key)
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------- expire

/// Inserts `EXPIRE_N` entries due within 200 ms (or, with `past`, already
/// 0–200 ms overdue), waits until all are due, and times taking them out.
fn expire(c: &mut Criterion) {
    let rt = rt_current();
    let mut rng = Rng(3);
    let offsets: Vec<Duration> = (0..EXPIRE_N)
        .map(|_| Duration::from_micros(rng.below(200_000)))
        .collect();
    let mut g = c.benchmark_group("expire");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(EXPIRE_N as u64));

    for past in [false, true] {
        let kind = if past { "past-due" } else { "ordered" };
        let deadline = |now: Instant, off: Duration| {
            if past { now - off } else { now + off }
        };
        g.bench_function(format!("{kind}/punctual"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let q = punctual::DelayQueue::new();
                        let now = Instant::now();
                        for (i, off) in offsets.iter().enumerate() {
                            q.insert_at(i, deadline(now, *off));
                        }
                        tokio::time::sleep_until(now + Duration::from_millis(201)).await;
                        let start = Instant::now();
                        for _ in 0..EXPIRE_N {
                            black_box(q.take().await);
                        }
                        total += start.elapsed();
                    }
                    total
                })
            })
        });
        g.bench_function(format!("{kind}/tokio-util"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut q = tokio_util::time::DelayQueue::new();
                        let now = Instant::now();
                        for (i, off) in offsets.iter().enumerate() {
                            q.insert_at(i, deadline(now, *off));
                        }
                        tokio::time::sleep_until(now + Duration::from_millis(201)).await;
                        let start = Instant::now();
                        for _ in 0..EXPIRE_N {
                            black_box(q.next().await);
                        }
                        total += start.elapsed();
                    }
                    total
                })
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------- many consumers

/// Counts the polls of the future it wraps.
struct Counted<'a, F> {
    inner: F,
    polls: &'a AtomicUsize,
}

impl<F: Future + Unpin> Future for Counted<'_, F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        Pin::new(&mut self.inner).poll(cx)
    }
}

async fn counted<F: Future>(fut: F, polls: &AtomicUsize) -> F::Output {
    Counted {
        inner: Box::pin(fut),
        polls,
    }
    .await
}

/// What one many-consumer run measured.
struct RunStats {
    elapsed: Duration,
    polls: usize,
    takes: usize,
}

/// Shared by the three many-consumer designs: consumers call `take` until
/// `n` values were delivered in all.
#[derive(Default)]
struct Tally {
    delivered: AtomicUsize,
    polls: AtomicUsize,
    takes: AtomicUsize,
    done: Notify,
}

impl Tally {
    fn delivered_one(&self, n: usize) {
        if self.delivered.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.done.notify_one();
        }
    }
}

/// Naive peer: one lock around a `BinaryHeap`, every waiter times the head
/// itself, and every insert wakes every waiter.
struct Naive {
    heap: Mutex<BinaryHeap<Reverse<(Instant, u64, u64)>>>,
    seq: AtomicUsize,
    notify: Notify,
}

impl Naive {
    fn insert(&self, value: u64, delay: Duration) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) as u64;
        self.heap
            .lock()
            .unwrap()
            .push(Reverse((Instant::now() + delay, seq, value)));
        self.notify.notify_waiters();
    }

    async fn take(&self) -> u64 {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let head = {
                let mut heap = self.heap.lock().unwrap();
                match heap.peek() {
                    Some(Reverse((d, _, _))) if *d <= Instant::now() => {
                        return heap.pop().unwrap().0.2;
                    }
                    Some(Reverse((d, _, _))) => Some(*d),
                    None => None,
                }
            };
            match head {
                Some(d) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(d) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// A queue that consumers share directly: ours and the naive peer.
trait SharedQueue: Clone + Send + Sync + 'static {
    fn insert(&self, value: u64, delay: Duration);
    fn take(&self) -> impl Future<Output = u64> + Send + '_;
}

impl SharedQueue for punctual::DelayQueue<u64> {
    fn insert(&self, value: u64, delay: Duration) {
        punctual::DelayQueue::insert(self, value, delay);
    }
    fn take(&self) -> impl Future<Output = u64> + Send + '_ {
        punctual::DelayQueue::take(self)
    }
}

impl SharedQueue for Arc<Naive> {
    fn insert(&self, value: u64, delay: Duration) {
        Naive::insert(self, value, delay);
    }
    fn take(&self) -> impl Future<Output = u64> + Send + '_ {
        Naive::take(self)
    }
}

/// Spawns `CONSUMERS` consumers on `queue`, then inserts every delay;
/// returns when inserting started.
async fn spawn_shared<Q: SharedQueue>(
    queue: Q,
    tally: &Arc<Tally>,
    n: usize,
    delays: &[Duration],
    consumers: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Instant {
    for _ in 0..CONSUMERS {
        let (q, tally) = (queue.clone(), tally.clone());
        consumers.push(tokio::spawn(async move {
            loop {
                tally.takes.fetch_add(1, Ordering::Relaxed);
                black_box(counted(q.take(), &tally.polls).await);
                tally.delivered_one(n);
            }
        }));
    }
    tokio::task::yield_now().await;
    let start = Instant::now();
    for (i, d) in delays.iter().enumerate() {
        queue.insert(i as u64, *d);
    }
    start
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Design {
    Punctual,
    Naive,
    Dispatcher,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::Punctual => "punctual",
            Design::Naive => "naive Mutex<BinaryHeap>+notify_waiters",
            Design::Dispatcher => "tokio-util DelayQueue + dispatcher task + mpsc",
        }
    }
}

/// `CONSUMERS` consumers take `delays.len()` values inserted at once.
fn many_consumers(rt: &Runtime, design: Design, delays: &[Duration]) -> RunStats {
    let n = delays.len();
    rt.block_on(async {
        let tally = Arc::new(Tally::default());
        let mut consumers = Vec::new();
        let start;
        match design {
            Design::Punctual => {
                start = spawn_shared(
                    punctual::DelayQueue::new(),
                    &tally,
                    n,
                    delays,
                    &mut consumers,
                )
                .await;
            }
            Design::Naive => {
                let naive = Arc::new(Naive {
                    heap: Mutex::new(BinaryHeap::new()),
                    seq: AtomicUsize::new(0),
                    notify: Notify::new(),
                });
                start = spawn_shared(naive, &tally, n, delays, &mut consumers).await;
            }
            Design::Dispatcher => {
                let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel::<(u64, Duration)>();
                let (out_tx, out_rx) = mpsc::unbounded_channel::<u64>();
                let out_rx = Arc::new(tokio::sync::Mutex::new(out_rx));
                consumers.push(tokio::spawn(async move {
                    let mut q = tokio_util::time::DelayQueue::new();
                    let mut open = true;
                    while open || !q.is_empty() {
                        tokio::select! {
                            cmd = cmd_rx.recv(), if open => match cmd {
                                Some((v, d)) => { q.insert(v, d); }
                                None => open = false,
                            },
                            Some(expired) = q.next(), if !q.is_empty() => {
                                let _ = out_tx.send(expired.into_inner());
                            }
                        }
                    }
                }));
                for _ in 0..CONSUMERS {
                    let (rx, tally) = (out_rx.clone(), tally.clone());
                    consumers.push(tokio::spawn(async move {
                        loop {
                            tally.takes.fetch_add(1, Ordering::Relaxed);
                            let got = counted(async { rx.lock().await.recv().await }, &tally.polls);
                            if black_box(got.await).is_none() {
                                return;
                            }
                            tally.delivered_one(n);
                        }
                    }));
                }
                tokio::task::yield_now().await;
                start = Instant::now();
                for (i, d) in delays.iter().enumerate() {
                    let _ = cmd_tx.send((i as u64, *d));
                }
                drop(cmd_tx);
            }
        }
        let wait = tally.done.notified();
        if tally.delivered.load(Ordering::Acquire) < n {
            wait.await;
        }
        let elapsed = start.elapsed();
        for c in consumers {
            c.abort();
        }
        RunStats {
            elapsed,
            polls: tally.polls.load(Ordering::Relaxed),
            takes: tally.takes.load(Ordering::Relaxed),
        }
    })
}

fn dense_delays() -> Vec<Duration> {
    let mut rng = Rng(5);
    (0..DENSE_N)
        .map(|_| Duration::from_micros(rng.below(50_000)))
        .collect()
}

fn sparse_delays() -> Vec<Duration> {
    let mut rng = Rng(9);
    (0..SPARSE_N)
        .map(|_| Duration::from_micros(rng.below(1_000_000)))
        .collect()
}

fn dense(c: &mut Criterion) {
    let rt = rt_multi();
    let delays = dense_delays();
    let mut g = c.benchmark_group("dense");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(DENSE_N as u64));
    for design in [Design::Punctual, Design::Dispatcher, Design::Naive] {
        g.bench_function(design_id(design), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| many_consumers(&rt, design, &delays).elapsed)
                    .sum()
            })
        });
    }
    g.finish();
}

fn design_id(design: Design) -> &'static str {
    match design {
        Design::Punctual => "punctual",
        Design::Naive => "naive",
        Design::Dispatcher => "dispatcher",
    }
}

/// Sparse: wake-ups are the measure, not time. Five runs per design; the
/// median of (polls of take futures - takes started) / delivered, i.e. the
/// times a parked consumer was polled again, and of all polls / delivered.
fn sparse_wakeups(design: Design) -> (f64, f64) {
    let rt = rt_multi();
    let delays = sparse_delays();
    let mut wakeups = Vec::new();
    let mut polls = Vec::new();
    for _ in 0..5 {
        let s = many_consumers(&rt, design, &delays);
        // A take's first poll is not a wake-up; every later poll is.
        let extra = s.polls.saturating_sub(s.takes);
        wakeups.push(extra as f64 / SPARSE_N as f64);
        polls.push(s.polls as f64 / SPARSE_N as f64);
    }
    (support::median(&mut wakeups), support::median(&mut polls))
}

// ---------------------------------------------------------------- memory

fn memory_child(task: &str) {
    let rt = rt_current();
    let _guard = rt.enter();
    let delays = churn_delays();
    let (rss0, heap0) = (support::rss_bytes(), support::allocated_bytes());
    let per = |rss1: usize, heap1: usize| {
        vec![
            (rss1 - rss0) as f64 / MEMORY_N as f64,
            (heap1 - heap0) as f64 / MEMORY_N as f64,
        ]
    };
    let values = match task {
        "memory:punctual" => {
            let q = punctual::DelayQueue::new();
            for (i, d) in delays.iter().enumerate().take(MEMORY_N) {
                q.insert([i as u64; 2] as Payload, *d);
            }
            let v = per(support::rss_bytes(), support::allocated_bytes());
            black_box(&q);
            v
        }
        "memory:tokio-util" => {
            let mut q = tokio_util::time::DelayQueue::new();
            for (i, d) in delays.iter().enumerate().take(MEMORY_N) {
                q.insert([i as u64; 2] as Payload, *d);
            }
            let v = per(support::rss_bytes(), support::allocated_bytes());
            black_box(&q);
            v
        }
        other => panic!("unknown child task {other}"),
    };
    support::child_result(&values);
}

fn main() {
    if let Some(task) = support::child_task() {
        memory_child(&task);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    churn(&mut c);
    single(&mut c);
    expire(&mut c);
    dense(&mut c);
    c.final_summary();

    let ns_per = |group: &str, id: &str, n: usize| {
        support::criterion_median_ns(group, id).map_or(f64::NAN, |ns| ns / n as f64)
    };
    let mut rows = Vec::new();
    let tu = "tokio-util DelayQueue";
    for (label, id, n) in [
        ("churn insert (1M queued, 60 s-1 h)", "insert", CHURN_N),
        ("churn remove by key (random order)", "remove", CHURN_N),
    ] {
        rows.push(Row {
            workload: label.into(),
            unit: "ns/op",
            ours: ns_per("churn", &format!("{id}_punctual"), n),
            peer_name: tu.into(),
            peer: ns_per("churn", &format!("{id}_tokio-util"), n),
            higher_is_better: false,
        });
    }
    rows.push(Row {
        workload: "churn insert, peer behind a parking_lot Mutex".into(),
        unit: "ns/op",
        ours: ns_per("churn", "insert_punctual", CHURN_N),
        peer_name: format!("{tu} + Mutex"),
        peer: ns_per("churn", "insert_tokio-util-locked", CHURN_N),
        higher_is_better: false,
    });
    for queued in [0, CHURN_N] {
        rows.push(Row {
            workload: format!("insert + remove one, {queued} queued"),
            unit: "ns/op",
            ours: ns_per("single", &format!("punctual/{queued}"), 1),
            peer_name: tu.into(),
            peer: ns_per("single", &format!("tokio-util/{queued}"), 1),
            higher_is_better: false,
        });
    }
    for (label, kind) in [
        ("expire 1M, due within 200 ms, in order", "ordered"),
        ("expire 1M inserted past due", "past-due"),
    ] {
        rows.push(Row {
            workload: label.into(),
            unit: "ns/item",
            ours: ns_per("expire", &format!("{kind}_punctual"), EXPIRE_N),
            peer_name: tu.into(),
            peer: ns_per("expire", &format!("{kind}_tokio-util"), EXPIRE_N),
            higher_is_better: false,
        });
    }
    let items_per_s = |id: &str| {
        support::criterion_median_ns("dense", id)
            .map_or(f64::NAN, |ns| DENSE_N as f64 / (ns / 1e9) / 1e6)
    };
    for peer in [Design::Dispatcher, Design::Naive] {
        rows.push(Row {
            workload: format!("{CONSUMERS} consumers, dense ({DENSE_N} over 0-50 ms)"),
            unit: "M items/s",
            ours: items_per_s("punctual"),
            peer_name: peer.name().into(),
            peer: items_per_s(design_id(peer)),
            higher_is_better: true,
        });
    }
    let (ours_wake, ours_polls) = sparse_wakeups(Design::Punctual);
    for peer in [Design::Naive, Design::Dispatcher] {
        let (peer_wake, peer_polls) = sparse_wakeups(peer);
        rows.push(Row {
            workload: format!("{CONSUMERS} consumers, sparse ({SPARSE_N} over 1 s): wake-ups"),
            unit: "per entry",
            ours: ours_wake,
            peer_name: peer.name().into(),
            peer: peer_wake,
            higher_is_better: false,
        });
        rows.push(Row {
            workload: format!("{CONSUMERS} consumers, sparse: all polls incl. first"),
            unit: "per entry",
            ours: ours_polls,
            peer_name: peer.name().into(),
            peer: peer_polls,
            higher_is_better: false,
        });
    }
    let ours_mem = support::in_child("memory:punctual");
    let peer_mem = support::in_child("memory:tokio-util");
    for (i, what) in ["RSS growth", "requested heap"].into_iter().enumerate() {
        rows.push(Row {
            workload: format!("memory, 1M pending, 16-byte payload: {what}"),
            unit: "B/entry",
            ours: ours_mem[i],
            peer_name: tu.into(),
            peer: peer_mem[i],
            higher_is_better: false,
        });
    }
    support::print_table("DelayQueue vs peers (medians)", &rows);
}
