//! punctual's `Worker` against the job queues a team would otherwise pick,
//! each peer run in its own way in the same run, in turns.
//!
//! # Workloads
//!
//! 1. `pg`: 20,000 jobs due at once on PostgreSQL, put in before the clock
//!    starts; 8 at a time; jobs/s until the last is done (its completion
//!    written). Contenders: punctual's `Worker` (`concurrency(8)`), the
//!    same with `prefetch(n)` for each n of `PEERS_PREFETCH` (64, 256,
//!    500), graphile-worker tuned and at its defaults, and the floor of
//!    `benches/postgres.rs` (8 consumers, `DELETE … FOR UPDATE SKIP LOCKED`,
//!    10 ms sleep when none is due).
//! 2. `late`: workload 4 ("random") of `benches/postgres.rs`: 20,000 jobs
//!    each due 0 to 2 s after its insert (the same seeds), inserted by one
//!    producer with 256 calls in flight over a pool of 10 that the
//!    consumers share, the consumers running from the start; lateness is
//!    the wall clock when the handler starts minus the due time the store
//!    recorded, and "after insert" the jobs due after the last insert
//!    returned. Contenders: punctual (and with each prefetch), the floor,
//!    graphile-worker tuned (`addJob` with `runAt`, one job per call, 256
//!    in flight, over the pool its runner uses).
//! 3. `redis`: 20,000 jobs due at once on a fresh `redis-server` (started
//!    here, persistence off); 8 at a time. Contenders: punctual's `Worker`
//!    (and with each prefetch), the poller of `benches/redis.rs` (8 tasks
//!    on one connection, each popping one due member with a Lua script,
//!    10 ms sleep when none is due), and BullMQ 5 (a `Worker` with
//!    `concurrency: 8`, the jobs added with `addBulk`).
//!
//! Every run checks that each job ran exactly once (no duplicate, no loss)
//! and that nothing is left in the store. Each workload runs `PEERS_RUNS`
//! rounds (3); a round runs each contender once, in an order rotated by
//! one each round; the table gives medians. The 1-minute load average is
//! read before each run (the machine is shared).
//!
//! # The peers, and what each costs in guarantees
//!
//! punctual: at least once, by leases (30 s), renewed by the worker's
//! heartbeats; a crash leaves its claimed entries to come back after their
//! lease; a finish is written before the worker counts the job done. With
//! `prefetch(n)` up to n more entries are leased ahead, and a crash leaves
//! them leased for the same 30 s.
//!
//! graphile-worker 0.17.3 (Node.js), configured as its performance page
//! (`website/docs/performance.md` of graphile/worker, "Quick stats" and
//! "Batching", read for this bench) ran its figures: `localQueue: { size:
//! 500 }`, `completeJobBatchDelay: 0`, `failJobBatchDelay: 0`; otherwise
//! its defaults (`maxPoolSize` 10, `pollInterval` 2 s). What its docs say
//! that costs (the same page and `website/docs/config.md`):
//! - the local queue locks up to 500 jobs in one process when it fetches
//!   them; if the worker "doesn't exit gracefully (e.g. it crashes or is
//!   forcefully killed), more jobs will remain locked and unable to execute
//!   until the 4 hour limit expires"; newly added high-priority jobs wait
//!   until the local queue is exhausted; jobs may sit in one worker's local
//!   queue while another is idle (`localQueue.ttl`, 5 minutes by default,
//!   returns them);
//! - batched completions release jobs asynchronously: after a crash "more
//!   jobs may be left in the locked state", and the config page says such
//!   jobs may be "executed again once they expire (after 4 hours by
//!   default)" (completed work run again);
//! - at its defaults (local queue and batching off, `-1`) each job is
//!   fetched and completed by its own statement; a worker that exits
//!   without cleaning up leaves the jobs it was running locked "for at
//!   least 4 hours" all the same (`website/docs/error-handling.md`: a sweep
//!   every 8-10 minutes frees jobs locked longer than that).
//! - jobs scheduled in the future are found by polling (`pollInterval`, 2 s
//!   by default; its option docs: "for jobs scheduled in the future/
//!   retries"): `add_job` notifies listeners on every insert, whatever the
//!   job's `run_at` (`sql/000018.sql`).
//!
//! The floor (hand-written, `benches/postgres.rs`): no lease and no ack: a
//! consumer that dies between its `DELETE` and the job's end loses the job.
//!
//! The poller (hand-written, `benches/redis.rs`): no lease and no ack
//! either: the pop removes the member, so a consumer that dies after it
//! loses the job; it keeps 8 pops in flight.
//!
//! BullMQ 5.81.5 (Node.js) with its defaults, as its docs (the guide pages
//! "Stalled Jobs", "Concurrency", "Going to production" and "Adding jobs
//! in bulk" of taskforcesh/bullmq, read in the repository as of its 6.x
//! line) and the `WorkerOptions` typings of the 5.81.5 package give them:
//! a worker holds a lock on each active job (`lockDuration` 30 s, renewed
//! at half of it); a job whose lock was lost is "stalled" and moved back to
//! wait by the stalled-job check, every `stalledInterval` (30 s): a killed
//! worker's jobs run again "with a waiting time of about 30 seconds by
//! default"; a job that stalls more than `maxStalledCount` times (1) is
//! failed ("job stalled more than allowable limit"), so a job whose worker
//! died twice is not run a third time; the docs call the concurrency model
//! "at-least-once". Finished jobs are kept in the completed set unless
//! `removeOnComplete` (default: kept); "Going to production" asks for AOF
//! persistence (here: off for every Redis contender) and `maxmemory-policy
//! noeviction`.
//!
//! # Running it
//!
//! `cargo bench --features redis,postgres --bench peers`. It needs `node`
//! (20 or later) and `npm` on `PATH` (it runs `npm ci` in
//! `benches/peers` when `node_modules` is missing), `redis-server` on
//! `PATH`, and the local PostgreSQL (`PUNCTUAL_PG_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`), where it creates a
//! fresh database and drops it at the end. Environment:
//! - `PEERS_RUNS`: rounds (3);
//! - `PEERS_JOBS`: jobs per run (20,000);
//! - `PEERS_PREFETCH`: the prefetch rows, comma-separated (`64,256,500`;
//!   empty for none);
//! - `PEERS_ONLY`: workloads (`pg`, `late`, `redis`) and contenders
//!   (`punctual`, `punctual-prefetch`, `punctual-prefetch-256`, `graphile`,
//!   `graphile-tuned`, `graphile-default`, `floor`, `poller`, `bullmq`),
//!   comma-separated: a run is made when its workload is named (or none
//!   is) and its contender is named (or none is);
//! - `PEERS_GRAPHILE_BATCH_DELAY_MS`: graphile's batch delays (0);
//! - `PEERS_COMMIT`: the commit to print (else `git describe`).

#[path = "peers/node.rs"]
mod node;
#[path = "peers/on_pg.rs"]
mod on_pg;
#[path = "peers/on_redis.rs"]
mod on_redis;
#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/pg.rs"]
mod pg;
#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;
mod support;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_server::RedisServer;
use tokio::time::Instant;

/// Handlers (or consumers) at once, on every side.
const CONCURRENCY: usize = 8;
/// A run that takes longer than this is broken.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

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

/// The 1-minute load average.
fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------- contenders

/// What is measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    PgDrain,
    PgLate,
    RedisDrain,
}

impl Workload {
    fn token(self) -> &'static str {
        match self {
            Workload::PgDrain => "pg",
            Workload::PgLate => "late",
            Workload::RedisDrain => "redis",
        }
    }
}

/// Who is measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    /// punctual's `Worker`, with this prefetch (0: none).
    Punctual(usize),
    GraphileTuned,
    GraphileDefault,
    Floor,
    Poller,
    Bullmq,
}

impl Contender {
    fn name(self) -> String {
        match self {
            Contender::Punctual(0) => "punctual".to_owned(),
            Contender::Punctual(n) => format!("punctual-prefetch-{n}"),
            Contender::GraphileTuned => "graphile-tuned".to_owned(),
            Contender::GraphileDefault => "graphile-default".to_owned(),
            Contender::Floor => "floor".to_owned(),
            Contender::Poller => "poller".to_owned(),
            Contender::Bullmq => "bullmq".to_owned(),
        }
    }

    /// How it is set up, for the table.
    fn config(self) -> String {
        match self {
            Contender::Punctual(0) => "`Worker::builder(q).concurrency(8)`".to_owned(),
            Contender::Punctual(n) => format!("`.concurrency(8).prefetch({n})`"),
            Contender::GraphileTuned => format!(
                "concurrency 8, `localQueue: {{ size: 500 }}`, `completeJobBatchDelay: {d}`, \
                 `failJobBatchDelay: {d}`",
                d = graphile_batch_delay()
            ),
            Contender::GraphileDefault => "concurrency 8, defaults".to_owned(),
            Contender::Floor => "8 consumers, `DELETE … SKIP LOCKED`, 10 ms poll".to_owned(),
            Contender::Poller => "8 pops in flight (Lua), 10 ms poll".to_owned(),
            Contender::Bullmq => "`Worker` concurrency 8, `addBulk`, defaults".to_owned(),
        }
    }

    fn is_node(self) -> bool {
        matches!(
            self,
            Contender::GraphileTuned | Contender::GraphileDefault | Contender::Bullmq
        )
    }
}

fn graphile_batch_delay() -> u64 {
    support::env_u64("PEERS_GRAPHILE_BATCH_DELAY_MS", 0)
}

fn prefetches() -> Vec<usize> {
    std::env::var("PEERS_PREFETCH")
        .unwrap_or_else(|_| "64,256,500".to_owned())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect()
}

/// `PEERS_ONLY`, split into workload tokens and contender tokens.
struct Only {
    workloads: Vec<String>,
    contenders: Vec<String>,
}

impl Only {
    fn from_env() -> Only {
        let tokens: Vec<String> = std::env::var("PEERS_ONLY")
            .unwrap_or_default()
            .split(',')
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        let is_workload = |t: &String| ["pg", "late", "redis"].contains(&t.as_str());
        Only {
            workloads: tokens.iter().filter(|t| is_workload(t)).cloned().collect(),
            contenders: tokens.into_iter().filter(|t| !is_workload(t)).collect(),
        }
    }

    fn workload(&self, w: Workload) -> bool {
        self.workloads.is_empty() || self.workloads.iter().any(|t| t == w.token())
    }

    fn contender(&self, c: Contender) -> bool {
        let name = c.name();
        self.contenders.is_empty()
            || self
                .contenders
                .iter()
                .any(|t| name == *t || name.starts_with(&format!("{t}-")))
    }
}

fn contenders(workload: Workload, only: &Only) -> Vec<Contender> {
    if !only.workload(workload) {
        return Vec::new();
    }
    let mut all = vec![Contender::Punctual(0)];
    all.extend(prefetches().into_iter().map(Contender::Punctual));
    all.extend(match workload {
        Workload::PgDrain => vec![
            Contender::GraphileTuned,
            Contender::GraphileDefault,
            Contender::Floor,
        ],
        Workload::PgLate => vec![Contender::Floor, Contender::GraphileTuned],
        Workload::RedisDrain => vec![Contender::Poller, Contender::Bullmq],
    });
    all.retain(|&c| only.contender(c));
    all
}

// ---------------------------------------------------------------- checks

/// Runs per job number: no job twice, none lost.
struct Seen {
    counts: Vec<AtomicU32>,
    distinct: AtomicU64,
}

impl Seen {
    fn new(n: u64) -> Seen {
        Seen {
            counts: (0..n).map(|_| AtomicU32::new(0)).collect(),
            distinct: AtomicU64::new(0),
        }
    }

    fn run(&self, n: u64) {
        if self.counts[n as usize].fetch_add(1, Ordering::Relaxed) == 0 {
            self.distinct.fetch_add(1, Ordering::Release);
        }
    }

    /// Waits until every job ran once; when that was seen.
    async fn all_ran(&self, what: &str) -> Instant {
        let n = self.counts.len() as u64;
        tokio::time::timeout(RUN_TIMEOUT, async {
            loop {
                if self.distinct.load(Ordering::Acquire) >= n {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: stuck at {} of {n} jobs",
                self.distinct.load(Ordering::Relaxed)
            )
        })
    }

    /// Panics unless every job ran exactly once.
    fn assert_once(&self, what: &str) {
        let twice = self
            .counts
            .iter()
            .filter(|c| c.load(Ordering::Relaxed) > 1)
            .count();
        let lost = self
            .counts
            .iter()
            .filter(|c| c.load(Ordering::Relaxed) == 0)
            .count();
        assert_eq!((twice, lost), (0, 0), "{what}: jobs run twice, lost");
    }
}

/// Lateness of one run of workload `late`.
#[derive(Clone, Copy)]
struct Late {
    p50_ms: f64,
    p99_ms: f64,
    after_p99_ms: f64,
    after_n: f64,
    inserts_per_s: f64,
}

/// `n` delays of workload `late`, as `benches/postgres/late.rs` draws them.
fn late_delays(run: usize, n: u64) -> Vec<Duration> {
    let mut rng = support::Rng(late_seed(run));
    (0..n)
        .map(|_| Duration::from_millis(rng.below(LATE_SPREAD_MS + 1)))
        .collect()
}

fn late_seed(run: usize) -> u64 {
    0x0032_1A7E + run as u64
}

const LATE_SPREAD_MS: u64 = 2_000;
const LATE_IN_FLIGHT: usize = 256;

/// Percentiles of `seen` (n, started µs, due µs): all jobs, and the jobs due
/// after `inserted_us`; panics if one ran early, twice or never.
fn late_of(
    n: u64,
    seen: Vec<(u64, i64, i64)>,
    started_us: i64,
    inserted_us: i64,
    what: &str,
) -> Late {
    let mut count = vec![0u32; n as usize];
    let (mut early, mut all, mut after) = (0, Vec::new(), Vec::new());
    for (job, started, due) in seen {
        count[job as usize] += 1;
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
        inserts_per_s: n as f64 / ((inserted_us - started_us) as f64 / 1e6),
    }
}

// ---------------------------------------------------------------- report

/// What one run measured.
#[derive(Clone, Copy)]
enum Measured {
    JobsPerS(f64),
    Late(Late),
}

/// The runs of one contender in one workload.
struct Row {
    contender: Contender,
    runs: Vec<(Measured, f64)>,
}

impl Row {
    fn values(&self, f: impl Fn(&Measured) -> f64) -> Vec<f64> {
        self.runs.iter().map(|(m, _)| f(m)).collect()
    }

    /// The median over the runs that have a value (a lateness percentile
    /// of no jobs has none).
    fn median(&self, f: impl Fn(&Measured) -> f64) -> f64 {
        let mut v: Vec<f64> = self.values(f).into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            support::median(&mut v)
        }
    }

    fn loads(&self) -> String {
        let loads: Vec<f64> = self.runs.iter().map(|&(_, l)| l).collect();
        let min = loads.iter().copied().fold(f64::INFINITY, f64::min);
        let max = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{min:.2}–{max:.2}")
    }
}

fn jobs_per_s(m: &Measured) -> f64 {
    match m {
        Measured::JobsPerS(x) => *x,
        Measured::Late(_) => f64::NAN,
    }
}

fn late_field(m: &Measured, f: impl Fn(&Late) -> f64) -> f64 {
    match m {
        Measured::Late(l) => f(l),
        Measured::JobsPerS(_) => f64::NAN,
    }
}

/// `x` with `decimals` decimals and thousands separators.
fn fmt_num(x: f64, decimals: usize) -> String {
    if x.is_nan() {
        return "—".to_owned();
    }
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

fn list(values: &[f64], decimals: usize) -> String {
    values
        .iter()
        .map(|&x| fmt_num(x, decimals))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The prefetch row with the best median jobs/s, if any ran.
fn best_prefetch(rows: &[Row]) -> Option<&Row> {
    rows.iter()
        .filter(|r| matches!(r.contender, Contender::Punctual(n) if n > 0))
        .max_by(|a, b| a.median(jobs_per_s).total_cmp(&b.median(jobs_per_s)))
}

fn drain_table(title: &str, rows: &[Row]) {
    let plain = rows
        .iter()
        .find(|r| r.contender == Contender::Punctual(0))
        .map(|r| r.median(jobs_per_s));
    let best = best_prefetch(rows);
    println!("\n### {title}\n");
    println!(
        "| contender | configuration | jobs/s (median) | runs | punctual ÷ this | {} ÷ this | load |",
        best.map_or("prefetch best".to_owned(), |b| b.contender.name())
    );
    println!("|---|---|---:|---|---:|---:|---|");
    for row in rows {
        let median = row.median(jobs_per_s);
        let ratio = |ours: Option<f64>| {
            ours.filter(|o| !o.is_nan())
                .map_or("—".to_owned(), |o| format!("{:.2}×", o / median))
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.contender.name(),
            row.contender.config(),
            fmt_num(median, 0),
            list(&row.values(jobs_per_s), 0),
            ratio(plain),
            ratio(best.map(|b| b.median(jobs_per_s))),
            row.loads()
        );
    }
    if let Some(best) = best {
        println!(
            "\nBest prefetch: {} ({} jobs/s, {:.2}× punctual without prefetch).",
            best.contender.name(),
            fmt_num(best.median(jobs_per_s), 0),
            best.median(jobs_per_s) / plain.unwrap_or(f64::NAN)
        );
    }
}

fn late_table(jobs: u64, rows: &[Row]) {
    let plain = rows
        .iter()
        .find(|r| r.contender == Contender::Punctual(0))
        .map(|r| r.median(|m| late_field(m, |l| l.after_p99_ms)));
    println!(
        "\n### PostgreSQL lateness: {} due over {} s, one producer, {LATE_IN_FLIGHT} in flight\n",
        fmt_num(jobs as f64, 0),
        LATE_SPREAD_MS / 1000
    );
    println!(
        "| contender | p50 ms | p99 ms | after-insert p99 ms (runs) | jobs due after the last insert | inserts/s | punctual ÷ this, after-insert p99 | load |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---|");
    for row in rows {
        let after = row.median(|m| late_field(m, |l| l.after_p99_ms));
        println!(
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            row.contender.name(),
            fmt_num(row.median(|m| late_field(m, |l| l.p50_ms)), 2),
            fmt_num(row.median(|m| late_field(m, |l| l.p99_ms)), 2),
            fmt_num(after, 2),
            list(&row.values(|m| late_field(m, |l| l.after_p99_ms)), 2),
            fmt_num(row.median(|m| late_field(m, |l| l.after_n)), 0),
            fmt_num(row.median(|m| late_field(m, |l| l.inserts_per_s)), 0),
            plain.map_or("—".to_owned(), |p| format!("{:.2}×", p / after)),
            row.loads()
        );
    }
}

// ---------------------------------------------------------------- main

/// What the runs need: the servers and their URLs.
struct Env {
    pg_url: Option<String>,
    redis_url: Option<String>,
    jobs: u64,
}

async fn run_one(env: &Env, workload: Workload, contender: Contender, run: usize) -> Measured {
    let n = env.jobs;
    let pg = || env.pg_url.as_deref().expect("database");
    let redis = || env.redis_url.as_deref().expect("redis-server");
    let tag = format!("{}_{run}", contender.name().replace('-', "_"));
    match (workload, contender) {
        (Workload::PgDrain, Contender::Punctual(p)) => {
            Measured::JobsPerS(on_pg::punctual_drain(pg(), &tag, n, p).await)
        }
        (Workload::PgDrain, Contender::Floor) => {
            Measured::JobsPerS(on_pg::floor_drain(pg(), &tag, n).await)
        }
        (Workload::PgDrain, Contender::GraphileTuned | Contender::GraphileDefault) => {
            let config = if contender == Contender::GraphileTuned {
                "tuned"
            } else {
                "default"
            };
            let out = node::run(
                "graphile.mjs",
                &[("url", pg()), ("workload", "drain"), ("config", config)],
                n,
                &tag,
            )
            .await;
            Measured::JobsPerS(node::field(&out, "jobs_per_s"))
        }
        (Workload::PgLate, Contender::Punctual(p)) => {
            Measured::Late(on_pg::punctual_late(pg(), &tag, n, run, p).await)
        }
        (Workload::PgLate, Contender::Floor) => {
            Measured::Late(on_pg::floor_late(pg(), &tag, n, run).await)
        }
        (Workload::PgLate, Contender::GraphileTuned) => {
            let seed = late_seed(run).to_string();
            let out = node::run(
                "graphile.mjs",
                &[
                    ("url", pg()),
                    ("workload", "late"),
                    ("config", "tuned"),
                    ("seed", &seed),
                    ("spread", &LATE_SPREAD_MS.to_string()),
                    ("inflight", &LATE_IN_FLIGHT.to_string()),
                ],
                n,
                &tag,
            )
            .await;
            let ours: u64 = late_delays(run, n)
                .iter()
                .map(|d| d.as_millis() as u64)
                .sum();
            assert_eq!(
                node::field(&out, "delays_sum") as u64,
                ours,
                "graphile's delays differ from the Rust side's"
            );
            assert_eq!(node::field(&out, "early"), 0.0, "graphile: jobs ran early");
            Measured::Late(Late {
                p50_ms: node::field(&out, "p50_ms"),
                p99_ms: node::field(&out, "p99_ms"),
                after_p99_ms: node::field(&out, "after_p99_ms"),
                after_n: node::field(&out, "after_n"),
                inserts_per_s: node::field(&out, "inserts_per_s"),
            })
        }
        (Workload::RedisDrain, Contender::Punctual(p)) => {
            Measured::JobsPerS(on_redis::punctual_drain(redis(), &tag, n, p).await)
        }
        (Workload::RedisDrain, Contender::Poller) => {
            Measured::JobsPerS(on_redis::poller_drain(redis(), &tag, n).await)
        }
        (Workload::RedisDrain, Contender::Bullmq) => {
            let out = node::run("bullmq.mjs", &[("url", redis())], n, &tag).await;
            Measured::JobsPerS(node::field(&out, "jobs_per_s"))
        }
        (w, c) => unreachable!("{c:?} has no {w:?}"),
    }
}

fn commit() -> String {
    if let Ok(commit) = std::env::var("PEERS_COMMIT") {
        return commit;
    }
    std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_owned(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        })
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench --list`
    }
    let started = Instant::now();
    let runs = support::env_u64("PEERS_RUNS", 3).max(1) as usize;
    let only = Only::from_env();
    let plan: Vec<(Workload, Vec<Contender>)> =
        [Workload::PgDrain, Workload::PgLate, Workload::RedisDrain]
            .into_iter()
            .map(|w| (w, contenders(w, &only)))
            .filter(|(_, c)| !c.is_empty())
            .collect();
    let any = |f: &dyn Fn(Workload, Contender) -> bool| {
        plan.iter().any(|(w, cs)| cs.iter().any(|&c| f(*w, c)))
    };
    if any(&|_, c| c.is_node()) {
        node::install();
    }
    let redis = any(&|w, _| w == Workload::RedisDrain).then(RedisServer::start_in_memory);
    let db = any(&|w, _| w != Workload::RedisDrain).then(on_pg::Database::create);
    let env = Env {
        pg_url: db.as_ref().map(on_pg::Database::url),
        redis_url: redis.as_ref().map(RedisServer::url),
        jobs: support::env_u64("PEERS_JOBS", 20_000),
    };

    println!("# punctual against its peers\n");
    println!(
        "code: {}; {} CPUs; load {:.2}; {runs} rounds, {} jobs per run, concurrency {CONCURRENCY}",
        commit(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load(),
        fmt_num(env.jobs as f64, 0)
    );
    println!("{}", node::versions());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(url) = &env.pg_url {
        println!("{}", runtime.block_on(on_pg::version(url)));
    }
    if let Some(server) = &redis {
        println!(
            "redis-server {}",
            server
                .cli(&["INFO", "server"])
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .trim()
        );
    }

    let mut tables: Vec<(Workload, Vec<Row>)> = Vec::new();
    for (workload, contenders) in &plan {
        println!("\n{} ({} rounds)", workload.token(), runs);
        let mut rows: Vec<Row> = contenders
            .iter()
            .map(|&contender| Row {
                contender,
                runs: Vec::new(),
            })
            .collect();
        for run in 0..runs {
            for k in 0..rows.len() {
                let i = (k + run) % rows.len();
                let contender = rows[i].contender;
                let l = load();
                let m = runtime.block_on(run_one(&env, *workload, contender, run));
                match m {
                    Measured::JobsPerS(x) => println!(
                        "  round {} {:<22} {:>9} jobs/s   (load {l:.2})",
                        run + 1,
                        contender.name(),
                        fmt_num(x, 0)
                    ),
                    Measured::Late(t) => println!(
                        "  round {} {:<22} p50 {} ms, p99 {} ms, after-insert p99 {} ms ({} jobs), {} inserts/s   (load {l:.2})",
                        run + 1,
                        contender.name(),
                        fmt_num(t.p50_ms, 2),
                        fmt_num(t.p99_ms, 2),
                        fmt_num(t.after_p99_ms, 2),
                        fmt_num(t.after_n, 0),
                        fmt_num(t.inserts_per_s, 0)
                    ),
                }
                rows[i].runs.push((m, l));
            }
        }
        tables.push((*workload, rows));
    }
    drop(runtime);

    println!(
        "\n## Medians of {runs} rounds (contenders in turns; \"punctual ÷ this\": punctual's median over this row's; load: 1-minute load average before each run)"
    );
    for (workload, rows) in &tables {
        match workload {
            Workload::PgDrain => drain_table(
                &format!(
                    "PostgreSQL drain: {} due, concurrency {CONCURRENCY}",
                    fmt_num(env.jobs as f64, 0)
                ),
                rows,
            ),
            Workload::PgLate => late_table(env.jobs, rows),
            Workload::RedisDrain => drain_table(
                &format!(
                    "Redis drain: {} due, concurrency {CONCURRENCY}",
                    fmt_num(env.jobs as f64, 0)
                ),
                rows,
            ),
        }
    }
    println!(
        "\nEvery run: each job ran exactly once, nothing left in the store. Total bench time: {:.0} s",
        started.elapsed().as_secs_f64()
    );
    drop(db);
    drop(redis);
}
