//! `punctual::redis::RedisQueue` against the Redis delay queue most services
//! write by hand, same server, same run.
//!
//! The baseline: insert is one `ZADD key <due ms> <member>` (the member is
//! the payload), and each consumer runs a Lua script "pop one due entry"
//! (`TIME`, `ZRANGEBYSCORE key -inf <now> LIMIT 0 1`, `ZREM`) in a loop,
//! sleeping 10 ms whenever it finds nothing. It has no leases and no ack: a
//! consumer that dies after the pop loses the job. Ours runs `insert`, then
//! `take` + `ack` (or `take_many(16)` + `ack` each), with default settings
//! (30 s lease, 1 s poll interval). Each side's tasks share one multiplexed
//! connection (ours: the queue handle's), and the jobs do no work, so the
//! numbers are the queues' own costs.
//!
//! The bench starts its own `redis-server` (persistence off) on a free
//! loopback port and runs every workload `R` times per contender:
//!
//! 1. insert/s: 8 producers insert 20,000 entries;
//! 2. jobs/s: 20,000 entries all due at once, drained by 8 consumers
//!    (plus the server's command counts, CPU time per job and how busy the
//!    server was);
//! 3. lateness: 2,000 entries due uniformly over 4 s, 8 consumers; lateness
//!    is the wall clock when the take returned minus the due time stored in
//!    the entry (server and client share the clock on loopback);
//! 4. requests per job as the clients sent them, through a counting TCP
//!    proxy (2,000 entries due at once, and workload 3, which also runs
//!    through the proxy: it adds tens of µs to millisecond lateness);
//! 5. requests per second that 8 consumers make on an empty queue;
//! 6. to 9. the durable `Worker` (`concurrency(8)`) and `insert_many`
//!    against the same baseline: drain jobs/s, lateness while producers
//!    insert, inserts/s in chunks of 256, server commands per job by
//!    command (see `redis/worker.rs`).
//!
//! 10. with the feature `redis-cluster`: the worker on a 3-primary cluster
//!     with one queue per primary against one server with three queues
//!     (see `redis/cluster.rs`).
//! 11. lateness of jobs inserted with random delays (0-2 s) by one producer
//!     with 256 calls in flight while the `Worker`, `take` + `ack` and the
//!     poller run: p50, p99 and the p99 of the jobs due after the last
//!     insert (see `redis/late.rs`).
//!
//! `cargo bench --all-features --bench redis` prints progress and two
//! markdown tables. `REDIS_BENCH_ONLY=worker` runs workloads 6 to 9 alone,
//! `REDIS_BENCH_ONLY=cluster` workload 10, `REDIS_BENCH_ONLY=late` workload
//! 11 (`REDIS_BENCH_RUNS` runs, 5 by default; `REDIS_BENCH_SIDES=worker`
//! leaves out `take` + `ack`).
//! `REDIS_BENCH_SCALING=1` adds a drain run with 1, 8, 32
//! and 64 consumers.

#[cfg(feature = "redis-cluster")]
#[path = "redis/cluster.rs"]
mod cluster;
#[path = "redis/late.rs"]
mod late;
#[cfg(feature = "redis-cluster")]
#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_cluster.rs"]
mod redis_cluster;
#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;
#[path = "redis/worker.rs"]
mod worker;

use punctual::redis::RedisQueue;
use punctual::redis::client as rc;
use rc::aio::MultiplexedConnection;
use redis_server::RedisServer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Repetitions of every workload.
const R: usize = 5;
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
const INSERT_N: u64 = 20_000;
const DRAIN_N: u64 = 20_000;
const SPARSE_N: u64 = 2_000;
const SPARSE_SPREAD_MS: u64 = 4_000;
/// Time between the start of the sparse run and its first possible deadline,
/// so the inserts are done before entries come due.
const SPARSE_LEAD_MS: u64 = 300;
const COUNT_N: u64 = 2_000;
const BATCH: usize = 16;
const BASELINE_POLL: Duration = Duration::from_millis(10);
/// How long the idle workload counts requests.
const IDLE_WINDOW: Duration = Duration::from_secs(2);
/// A workload that takes longer than this is broken.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The baseline's "pop one due entry".
const BASELINE_POP: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return false end
redis.call('ZREM', KEYS[1], due[1])
return due[1]
"#;

#[derive(Serialize, Deserialize, Debug)]
struct Job {
    n: u64,
    due_ms: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Ours,
    OursMany,
    Baseline,
}

const ALL: [Variant; 3] = [Variant::Ours, Variant::OursMany, Variant::Baseline];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Ours => "ours",
            Variant::OursMany => "ours(take_many)",
            Variant::Baseline => "baseline",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Variant::Ours => "ours",
            Variant::OursMany => "many",
            Variant::Baseline => "base",
        }
    }
}

// ---------------------------------------------------------------- clocks

#[allow(clippy::disallowed_methods)] // a bench measures the real clock
fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn unix_ms() -> u64 {
    (unix_us() / 1000) as u64
}

/// CPU time (user + system) of this process so far, from `/proc/self/stat`
/// in clock ticks of 10 ms; `None` where there is no procfs.
fn client_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

// ---------------------------------------------------------------- contenders

#[derive(Clone)]
struct Baseline {
    key: String,
    conn: MultiplexedConnection,
    pop: Arc<rc::Script>,
}

#[derive(Clone)]
enum Target {
    Ours {
        queue: RedisQueue<Job>,
        batch: usize,
    },
    Baseline(Baseline),
}

impl Target {
    async fn open(variant: Variant, url: &str, name: &str) -> Target {
        match variant {
            Variant::Ours | Variant::OursMany => Target::Ours {
                queue: RedisQueue::builder(name)
                    .url(url)
                    .build()
                    .await
                    .expect("connect RedisQueue"),
                batch: if variant == Variant::Ours { 1 } else { BATCH },
            },
            Variant::Baseline => {
                let client = rc::Client::open(url).expect("redis url");
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect baseline");
                Target::Baseline(Baseline {
                    key: format!("baseline:{{{name}}}:due"),
                    conn,
                    pop: Arc::new(rc::Script::new(BASELINE_POP)),
                })
            }
        }
    }

    /// Inserts `job`: `delay` from now if given, else at `job.due_ms`. The
    /// baseline computes its due time on the client, as such code does.
    async fn insert(&self, job: &Job, delay: Option<Duration>) {
        match self {
            Target::Ours { queue, .. } => {
                match delay {
                    Some(delay) => queue.insert(job, delay).await,
                    None => {
                        let at = UNIX_EPOCH + Duration::from_millis(job.due_ms);
                        queue.insert_at(job, at).await
                    }
                }
                .expect("insert");
            }
            Target::Baseline(b) => {
                let member = serde_json::to_string(job).expect("encode");
                let _: i64 = rc::cmd("ZADD")
                    .arg(&b.key)
                    .arg(job.due_ms)
                    .arg(member)
                    .query_async(&mut b.conn.clone())
                    .await
                    .expect("ZADD");
            }
        }
    }

    /// Entries left in the queue, whatever their state.
    async fn remaining(&self) -> u64 {
        match self {
            Target::Ours { queue, .. } => {
                let s = queue.stats().await.expect("stats");
                s.pending + s.due + s.leased + s.dead
            }
            Target::Baseline(b) => rc::cmd("ZCARD")
                .arg(&b.key)
                .query_async(&mut b.conn.clone())
                .await
                .expect("ZCARD"),
        }
    }

    async fn purge(&self) {
        match self {
            Target::Ours { queue, .. } => queue.purge().await.expect("purge"),
            Target::Baseline(b) => {
                let _: i64 = rc::cmd("DEL")
                    .arg(&b.key)
                    .query_async(&mut b.conn.clone())
                    .await
                    .expect("DEL");
            }
        }
    }

    fn spawn_consumers(&self, k: usize, sink: &Arc<Sink>) -> Vec<JoinHandle<()>> {
        (0..k)
            .map(|_| {
                let (target, sink) = (self.clone(), Arc::clone(sink));
                tokio::spawn(async move { target.consume(&sink).await })
            })
            .collect()
    }

    async fn consume(&self, sink: &Sink) {
        match self {
            Target::Ours { queue, batch: 1 } => loop {
                let delivery = queue.take().await.expect("take");
                sink.record(unix_us(), delivery.value().due_ms);
                assert!(delivery.ack().await.expect("ack"), "lease lost");
                sink.done();
            },
            Target::Ours { queue, batch } => loop {
                let deliveries = queue.take_many(*batch).await.expect("take_many");
                let now = unix_us();
                for delivery in &deliveries {
                    sink.record(now, delivery.value().due_ms);
                }
                for delivery in deliveries {
                    assert!(delivery.ack().await.expect("ack"), "lease lost");
                    sink.done();
                }
            },
            Target::Baseline(b) => {
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
                            let job: Job = serde_json::from_str(&member).expect("decode");
                            sink.record(unix_us(), job.due_ms);
                            sink.done();
                        }
                        None => tokio::time::sleep(BASELINE_POLL).await,
                    }
                }
            }
        }
    }
}

/// Where consumers report completed jobs.
struct Sink {
    target: u64,
    done: AtomicU64,
    finished: Notify,
    end: Mutex<Option<Instant>>,
    /// Lateness in µs, when recorded.
    lateness: Option<Mutex<Vec<i64>>>,
}

impl Sink {
    fn new(target: u64, record_lateness: bool) -> Arc<Sink> {
        Arc::new(Sink {
            target,
            done: AtomicU64::new(0),
            finished: Notify::new(),
            end: Mutex::new(None),
            lateness: record_lateness.then(|| Mutex::new(Vec::with_capacity(target as usize))),
        })
    }

    fn record(&self, now_us: i64, due_ms: u64) {
        if let Some(lateness) = &self.lateness {
            lateness.lock().unwrap().push(now_us - due_ms as i64 * 1000);
        }
    }

    fn done(&self) {
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            *self.end.lock().unwrap() = Some(Instant::now());
            self.finished.notify_one();
        }
    }

    /// Waits until `target` jobs are done; returns when the last one was.
    async fn wait(&self) -> Instant {
        tokio::time::timeout(WORKLOAD_TIMEOUT, async {
            while self.done.load(Ordering::Acquire) < self.target {
                self.finished.notified().await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "workload stuck at {}/{} jobs",
                self.done.load(Ordering::Relaxed),
                self.target
            )
        });
        self.end.lock().unwrap().expect("end time")
    }
}

/// Inserts `jobs` from `PRODUCERS` tasks, each awaiting its inserts one by
/// one; returns the wall time taken.
async fn produce(target: &Target, jobs: Vec<(Job, Option<Duration>)>) -> Duration {
    let mut shares: Vec<Vec<(Job, Option<Duration>)>> =
        (0..PRODUCERS).map(|_| Vec::new()).collect();
    for (i, job) in jobs.into_iter().enumerate() {
        shares[i % PRODUCERS].push(job);
    }
    let start = Instant::now();
    let producers: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let target = target.clone();
            tokio::spawn(async move {
                for (job, delay) in share {
                    target.insert(&job, delay).await;
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer");
    }
    start.elapsed()
}

// ---------------------------------------------------------------- server stats

/// What `INFO commandstats` and `INFO cpu` say.
struct ServerStats {
    /// command → (calls, µs), the bench's own `INFO`/`CONFIG` left out.
    calls: BTreeMap<String, (u64, u64)>,
    cpu: Duration,
}

impl ServerStats {
    fn total_calls(&self) -> u64 {
        self.calls.values().map(|(calls, _)| calls).sum()
    }
}

async fn reset_stats(ctl: &mut MultiplexedConnection) {
    let _: () = rc::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(ctl)
        .await
        .expect("CONFIG RESETSTAT");
}

async fn server_stats(ctl: &mut MultiplexedConnection) -> ServerStats {
    let info: String = rc::cmd("INFO")
        .arg("commandstats")
        .query_async(ctl)
        .await
        .expect("INFO commandstats");
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if name == "info" || name.starts_with("config") {
            continue;
        }
        let field = |key: &str| -> u64 {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        calls.insert(name.to_owned(), (field("calls"), field("usec")));
    }
    let cpu_info: String = rc::cmd("INFO")
        .arg("cpu")
        .query_async(ctl)
        .await
        .expect("INFO cpu");
    let seconds: f64 = cpu_info
        .lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum();
    ServerStats {
        calls,
        cpu: Duration::from_secs_f64(seconds),
    }
}

// ---------------------------------------------------------------- counting proxy

/// A TCP relay in front of the server that counts the commands clients send
/// (RESP arrays), so requests per job are counted on the client side of the
/// wire, pub/sub connection included.
struct Proxy {
    url: String,
    requests: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind proxy");
        let url = format!("redis://{}/", listener.local_addr().expect("proxy addr"));
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, Arc::clone(&counter)));
            }
        });
        Proxy {
            url,
            requests,
            accept,
        }
    }

    fn reset(&self) {
        self.requests.store(0, Ordering::Relaxed);
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, requests: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let up = async {
        let mut buf = vec![0; 64 * 1024];
        let mut parser = CommandCounter::default();
        loop {
            let n = client_rx.read(&mut buf).await?;
            if n == 0 {
                return server_tx.shutdown().await;
            }
            requests.fetch_add(parser.feed(&buf[..n]), Ordering::Relaxed);
            server_tx.write_all(&buf[..n]).await?;
        }
    };
    let down = tokio::io::copy(&mut server_rx, &mut client_tx);
    let _: Result<(), std::io::Error> = tokio::select! {
        r = up => r,
        r = down => r.map(drop),
    };
}

/// Counts complete commands in the client-to-server byte stream.
#[derive(Default)]
struct CommandCounter {
    pending: Vec<u8>,
}

impl CommandCounter {
    fn feed(&mut self, data: &[u8]) -> u64 {
        self.pending.extend_from_slice(data);
        let (mut at, mut count) = (0, 0);
        while let Some(len) = command_len(&self.pending[at..]) {
            at += len;
            count += 1;
        }
        self.pending.drain(..at);
        count
    }
}

/// The length of the first command in `b` if it is complete.
fn command_len(b: &[u8]) -> Option<usize> {
    let line_end = |from: usize| {
        b.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    };
    let number = |from: usize, to: usize| -> Option<usize> {
        std::str::from_utf8(&b[from..to]).ok()?.parse().ok()
    };
    if *b.first()? != b'*' {
        return line_end(0).map(|end| end + 2); // an inline command
    }
    let end = line_end(0)?;
    let args = number(1, end)?;
    let mut at = end + 2;
    for _ in 0..args {
        if *b.get(at)? != b'$' {
            return None;
        }
        let end = line_end(at)?;
        at = end + 2 + number(at + 1, end)? + 2;
        if at > b.len() {
            return None;
        }
    }
    Some(at)
}

// ---------------------------------------------------------------- workloads

/// A tiny seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Workload 1: inserts per second.
async fn w_insert(variant: Variant, url: &str, run: usize) -> f64 {
    let target = Target::open(variant, url, &format!("insert-{}-{run}", variant.tag())).await;
    target.purge().await;
    let mut rng = Rng(0x1A5E_0000 + run as u64);
    let now = unix_ms();
    let jobs = (0..INSERT_N)
        .map(|n| {
            let delay = Duration::from_millis(60_000 + rng.below(600_000));
            let due_ms = now + delay.as_millis() as u64;
            (Job { n, due_ms }, Some(delay))
        })
        .collect();
    let took = produce(&target, jobs).await;
    assert_eq!(
        target.remaining().await,
        INSERT_N,
        "{variant:?} lost inserts"
    );
    target.purge().await;
    INSERT_N as f64 / took.as_secs_f64()
}

struct Drain {
    jobs_per_s: f64,
    server_commands_per_job: f64,
    by_command: BTreeMap<String, (f64, f64)>,
    server_cpu_us_per_job: f64,
    client_cpu_us_per_job: Option<f64>,
    server_busy: f64,
    requests_per_job: Option<f64>,
}

/// Workload 2 (and 4 through a proxy): `n` entries due at once, then drained
/// by `consumers`. Counts cover the whole lifecycle, inserts included.
async fn w_drain(
    variant: Variant,
    url: &str,
    proxy: Option<&Proxy>,
    ctl: &mut MultiplexedConnection,
    name: &str,
    n: u64,
    consumers: usize,
) -> Drain {
    let target = Target::open(variant, url, name).await;
    target.purge().await;
    reset_stats(ctl).await;
    if let Some(proxy) = proxy {
        proxy.reset();
    }
    let now = unix_ms();
    let jobs = (0..n)
        .map(|n| (Job { n, due_ms: now }, Some(Duration::ZERO)))
        .collect();
    produce(&target, jobs).await;

    let sink = Sink::new(n, false);
    let server_before = server_stats(ctl).await.cpu;
    let client_before = client_cpu();
    let start = Instant::now();
    let tasks = target.spawn_consumers(consumers, &sink);
    let end = sink.wait().await;
    let client_after = client_cpu();
    let stats = server_stats(ctl).await;
    let requests = proxy.map(Proxy::requests);
    for task in tasks {
        task.abort();
    }
    let took = end - start;
    let left = target.remaining().await;
    assert_eq!(left, 0, "{variant:?} left {left} entries");
    assert_eq!(
        sink.done.load(Ordering::Relaxed),
        n,
        "{variant:?} duplicates"
    );
    target.purge().await;

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
        requests_per_job: requests.map(|r| per_job(r as f64)),
    }
}

struct Sparse {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    server_commands_per_job: f64,
    requests_per_job: f64,
}

/// Workload 3: `SPARSE_N` entries due uniformly over `SPARSE_SPREAD_MS`,
/// consumed by `CONSUMERS` consumers through the counting proxy.
async fn w_sparse(
    variant: Variant,
    proxy: &Proxy,
    ctl: &mut MultiplexedConnection,
    run: usize,
) -> Sparse {
    let name = format!("sparse-{}-{run}", variant.tag());
    let target = Target::open(variant, &proxy.url, &name).await;
    target.purge().await;
    reset_stats(ctl).await;
    proxy.reset();
    let sink = Sink::new(SPARSE_N, true);
    let tasks = target.spawn_consumers(CONSUMERS, &sink);
    let mut rng = Rng(0x5BA_25E00 + run as u64);
    let base = unix_ms() + SPARSE_LEAD_MS;
    let jobs = (0..SPARSE_N)
        .map(|n| {
            let due_ms = base + rng.below(SPARSE_SPREAD_MS);
            (Job { n, due_ms }, None)
        })
        .collect();
    let took = produce(&target, jobs).await;
    if took >= Duration::from_millis(SPARSE_LEAD_MS) {
        println!(
            "  warning: {variant:?} took {took:?} to insert the sparse entries, more than the \
             {SPARSE_LEAD_MS} ms lead: early deadlines passed before their insert"
        );
    }
    sink.wait().await;
    let stats = server_stats(ctl).await;
    let requests = proxy.requests();
    for task in tasks {
        task.abort();
    }
    assert_eq!(target.remaining().await, 0, "{variant:?} left entries");
    target.purge().await;

    let mut lateness = sink.lateness.as_ref().unwrap().lock().unwrap().clone();
    lateness.sort_unstable();
    let at = |p: usize| lateness[(lateness.len() * p / 100).min(lateness.len() - 1)] as f64 / 1e3;
    Sparse {
        p50_ms: at(50),
        p99_ms: at(99),
        max_ms: at(100),
        server_commands_per_job: stats.total_calls() as f64 / SPARSE_N as f64,
        requests_per_job: requests as f64 / SPARSE_N as f64,
    }
}

/// Workload 5: requests per second of `CONSUMERS` consumers waiting on an
/// empty queue, counted by the proxy.
async fn w_idle(variant: Variant, proxy: &Proxy, run: usize) -> f64 {
    let name = format!("idle-{}-{run}", variant.tag());
    let target = Target::open(variant, &proxy.url, &name).await;
    target.purge().await;
    let sink = Sink::new(1, false);
    let tasks = target.spawn_consumers(CONSUMERS, &sink);
    tokio::time::sleep(Duration::from_millis(200)).await; // connected, subscribed
    proxy.reset();
    tokio::time::sleep(IDLE_WINDOW).await;
    let requests = proxy.requests();
    for task in tasks {
        task.abort();
    }
    target.purge().await;
    requests as f64 / IDLE_WINDOW.as_secs_f64()
}

// ---------------------------------------------------------------- report

/// Median and range of one metric over the runs.
#[derive(Clone, Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, x: f64) {
        self.0.push(x);
    }

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

    fn min(&self) -> f64 {
        self.0.iter().copied().fold(f64::INFINITY, f64::min)
    }

    fn max(&self) -> f64 {
        self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }

    fn cell(&self, decimals: usize) -> String {
        if self.0.is_empty() {
            return "—".to_owned();
        }
        let f = |x: f64| fmt_num(x, decimals);
        if self.0.len() == 1 || self.min() == self.max() {
            f(self.median())
        } else {
            format!("{} ({}–{})", f(self.median()), f(self.min()), f(self.max()))
        }
    }

    fn list(&self, decimals: usize) -> String {
        let v: Vec<String> = self.0.iter().map(|&x| fmt_num(x, decimals)).collect();
        v.join(", ")
    }
}

/// `x` with `decimals` decimals and thin thousands separators.
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

/// One metric for the three contenders.
struct Metric {
    name: String,
    decimals: usize,
    values: [Samples; 3],
}

impl Metric {
    fn new(name: &str, decimals: usize) -> Metric {
        Metric {
            name: name.to_owned(),
            decimals,
            values: Default::default(),
        }
    }

    fn push(&mut self, variant: Variant, x: f64) {
        let i = ALL.iter().position(|&v| v == variant).unwrap();
        self.values[i].push(x);
    }

    fn row(&self) -> String {
        let [ours, many, base] = &self.values;
        let ratio = |s: &Samples| {
            if s.0.is_empty() || base.0.is_empty() || base.median() == 0.0 {
                None
            } else {
                Some(s.median() / base.median())
            }
        };
        let times = |x: f64| {
            if x < 0.1 {
                format!("{x:.4}×")
            } else {
                format!("{x:.2}×")
            }
        };
        let ratio = match (ratio(ours), ratio(many)) {
            (Some(a), Some(b)) => format!("{} / {}", times(a), times(b)),
            (Some(a), None) => times(a),
            (None, Some(b)) => format!("— / {}", times(b)),
            (None, None) => "—".to_owned(),
        };
        format!(
            "| {} | {} | {} | {} | {} |",
            self.name,
            ours.cell(self.decimals),
            many.cell(self.decimals),
            base.cell(self.decimals),
            ratio
        )
    }

    fn progress(&self, variant: Variant) {
        let i = ALL.iter().position(|&v| v == variant).unwrap();
        println!(
            "  {:<44} {:<16} {}",
            self.name,
            variant.label(),
            self.values[i].list(self.decimals)
        );
    }
}

fn main() {
    let server = RedisServer::start_in_memory();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench(&server));
}

async fn bench(server: &RedisServer) {
    let started = Instant::now();
    println!("# RedisQueue vs hand-written ZADD + Lua pop");
    println!();
    println!(
        "{} on {} (persistence off); {} CPUs; tokio multi-thread runtime; R = {R} runs per workload",
        redis_server_version(),
        server.url(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let client = rc::Client::open(server.url()).expect("url");
    let mut ctl = client
        .get_multiplexed_async_connection()
        .await
        .expect("control connection");
    let proxy = Proxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()))).await;
    let url = server.url();
    #[cfg(feature = "redis-cluster")]
    if std::env::var("REDIS_BENCH_ONLY").as_deref() == Ok("cluster") {
        cluster::bench(&url).await;
        return;
    }
    if std::env::var("REDIS_BENCH_ONLY").as_deref() == Ok("late") {
        // Workload 11 alone.
        late::bench(&url).await;
        return;
    }
    if std::env::var("REDIS_BENCH_ONLY").as_deref() == Ok("worker") {
        // Workloads 6 to 9 alone, for a quick look at the worker.
        worker::bench(&url, &mut ctl).await;
        return;
    }

    // 1. inserts
    let mut insert = Metric::new(
        &format!("insert/s ({PRODUCERS} producers, {INSERT_N} entries)"),
        0,
    );
    println!("\n1. insert");
    for variant in [Variant::Ours, Variant::Baseline] {
        for run in 0..R {
            let rate = w_insert(variant, &url, run).await;
            insert.push(variant, rate);
        }
        insert.progress(variant);
    }

    // 2. drain
    let mut jobs = Metric::new(
        &format!("jobs/s ({DRAIN_N} due at once, {CONSUMERS} consumers)"),
        0,
    );
    let mut commands = Metric::new("server commands/job, drain (commandstats)", 1);
    let mut server_cpu = Metric::new("server CPU µs/job, drain phase (take + ack)", 1);
    let mut client_cpu = Metric::new("client CPU µs/job, drain phase (take + ack)", 1);
    let mut busy = Metric::new("server busy during drain (CPU s / wall s)", 2);
    let mut breakdown: [BTreeMap<String, (f64, f64)>; 3] = Default::default();
    println!("\n2. drain");
    for (i, variant) in ALL.into_iter().enumerate() {
        for run in 0..R {
            let name = format!("drain-{}-{run}", variant.tag());
            let d = w_drain(variant, &url, None, &mut ctl, &name, DRAIN_N, CONSUMERS).await;
            jobs.push(variant, d.jobs_per_s);
            commands.push(variant, d.server_commands_per_job);
            server_cpu.push(variant, d.server_cpu_us_per_job);
            if let Some(cpu) = d.client_cpu_us_per_job {
                client_cpu.push(variant, cpu);
            }
            busy.push(variant, d.server_busy);
            breakdown[i] = d.by_command;
        }
        jobs.progress(variant);
        commands.progress(variant);
    }

    // 3. lateness
    let mut p50 = Metric::new(
        &format!(
            "lateness p50 ms ({SPARSE_N} due over {} s, {CONSUMERS} consumers)",
            SPARSE_SPREAD_MS / 1000
        ),
        2,
    );
    let mut p99 = Metric::new("lateness p99 ms", 2);
    let mut max = Metric::new("lateness max ms", 2);
    let mut sparse_commands = Metric::new("server commands/job, sparse (commandstats)", 1);
    let mut sparse_requests = Metric::new("requests/job sent, sparse (proxy count)", 2);
    println!("\n3. lateness");
    for variant in ALL {
        for run in 0..R {
            let s = w_sparse(variant, &proxy, &mut ctl, run).await;
            p50.push(variant, s.p50_ms);
            p99.push(variant, s.p99_ms);
            max.push(variant, s.max_ms);
            sparse_commands.push(variant, s.server_commands_per_job);
            sparse_requests.push(variant, s.requests_per_job);
        }
        p50.progress(variant);
        p99.progress(variant);
    }

    // 4. requests per job, client side
    let mut requests = Metric::new(
        &format!("requests/job sent, {COUNT_N} due at once (proxy count)"),
        2,
    );
    let mut count_commands = Metric::new(
        &format!("server commands/job, {COUNT_N} due at once (proxy run)"),
        1,
    );
    println!("\n4. requests per job");
    for variant in ALL {
        for run in 0..R {
            let name = format!("count-{}-{run}", variant.tag());
            let d = w_drain(
                variant,
                &proxy.url,
                Some(&proxy),
                &mut ctl,
                &name,
                COUNT_N,
                CONSUMERS,
            )
            .await;
            requests.push(variant, d.requests_per_job.unwrap_or(f64::NAN));
            count_commands.push(variant, d.server_commands_per_job);
        }
        requests.progress(variant);
    }

    // 5. idle
    let mut idle = Metric::new(
        &format!("requests/s, idle ({CONSUMERS} consumers, empty queue)"),
        1,
    );
    println!("\n5. idle");
    for variant in ALL {
        for run in 0..R {
            idle.push(variant, w_idle(variant, &proxy, run).await);
        }
        idle.progress(variant);
    }

    println!(
        "\n## Results (median of {R} runs, min–max in parentheses; ratio = ours / baseline, \
         ours(take_many) / baseline)\n"
    );
    println!("| metric | ours | ours(take_many) | baseline | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for metric in [
        &insert,
        &jobs,
        &p50,
        &p99,
        &max,
        &commands,
        &sparse_commands,
        &requests,
        &sparse_requests,
        &idle,
        &server_cpu,
        &client_cpu,
        &busy,
    ] {
        println!("{}", metric.row());
    }
    println!("\nours(take_many) inserts exactly as ours: the insert row has no separate column.");

    println!(
        "\n## Server commands per job by command, drain of {DRAIN_N} (last run; calls/job, µs/job)\n"
    );
    println!("| command | ours | ours(take_many) | baseline |");
    println!("|---|---:|---:|---:|");
    let mut names: Vec<&String> = breakdown.iter().flat_map(|b| b.keys()).collect();
    names.sort();
    names.dedup();
    names.sort_by(|a, b| {
        let calls = |n: &String| breakdown[0].get(n).map_or(0.0, |c| c.0);
        calls(b).total_cmp(&calls(a))
    });
    for name in names {
        let cell = |b: &BTreeMap<String, (f64, f64)>| {
            b.get(name).map_or("—".to_owned(), |(calls, us)| {
                format!("{calls:.2} / {us:.2}")
            })
        };
        println!(
            "| {name} | {} | {} | {} |",
            cell(&breakdown[0]),
            cell(&breakdown[1]),
            cell(&breakdown[2])
        );
    }

    worker::bench(&url, &mut ctl).await;
    late::bench(&url).await;
    #[cfg(feature = "redis-cluster")]
    cluster::bench(&url).await;

    if std::env::var_os("REDIS_BENCH_SCALING").is_some() {
        println!("\n## Drain of {DRAIN_N} by consumer count (jobs/s, median of 3)\n");
        println!("| consumers | ours | ours(take_many) | baseline |");
        println!("|---:|---:|---:|---:|");
        for consumers in [1, 8, 32, 64] {
            let mut cells = Vec::new();
            for variant in ALL {
                let mut rate = Samples::default();
                for run in 0..3 {
                    let name = format!("scale-{}-{consumers}-{run}", variant.tag());
                    let d = w_drain(variant, &url, None, &mut ctl, &name, DRAIN_N, consumers).await;
                    rate.push(d.jobs_per_s);
                }
                cells.push(rate.cell(0));
            }
            println!("| {consumers} | {} |", cells.join(" | "));
        }
    }

    println!(
        "\ntotal bench time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// `redis-server --version`'s first line, for the report.
fn redis_server_version() -> String {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
