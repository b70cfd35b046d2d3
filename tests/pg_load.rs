#![cfg(feature = "postgres")]
//! Load on `punctual::postgres::PgQueue`: several consumer processes, each
//! with many consumer tasks on a multi-thread runtime, share one queue of
//! 20,000 entries due at random times over two seconds. Each consumer takes
//! up to 16 due entries at once (`take_many`: fewer claims, so the run fits
//! in seconds on two cores) and acks them one by one; some deliveries are
//! dropped without an ack and come back after their (short) lease, and the
//! last acks of a batch may come after its lease ran out (too late if another
//! consumer took the entry meanwhile). At the end every entry was acked
//! exactly once, none was lost, the queue is empty, and an entry was
//! delivered again only after a delivery that lost its lease.
//!
//! The consumer processes are this same test binary, re-run on the test with
//! `PUNCTUAL_TEST_CHILD` set (as `tests/redis_load.rs` does); each prints
//! what it saw on stdout when the parent tells it to stop (a file in a
//! temporary directory). Randomness is a seeded xorshift, so a run only
//! depends on scheduling, and the checks hold for any scheduling.

mod common;

use common::Rng;
use common::pg::PgDb;
use common::redis_queue::finish;
use punctual::postgres::{PgQueue, PgStats};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};

const ENTRIES: u64 = 20_000;
const MAX_DELAY_MS: u64 = 2_000;
const PROCESSES: u64 = 3;
const CONSUMERS_PER_PROCESS: u64 = 8;
/// Percentage of deliveries dropped without an ack.
const DROP_PERCENT: u64 = 10;
const LEASE: Duration = Duration::from_millis(300);
const POLL: Duration = Duration::from_millis(100);
/// Most deliveries a consumer takes at once (`take_many`).
const BATCH: usize = 16;
/// Entries per `insert_many` call.
const CHUNK: usize = 1_000;
/// Bound on the whole run once the inserts are done (a liveness bound, far
/// above a healthy run).
const DRAIN_PATIENCE: Duration = Duration::from_secs(60);

const TEST: &str = "processes_of_consumers_ack_every_entry_exactly_once";
const CHILD: &str = "PUNCTUAL_TEST_CHILD";
const CHILD_URL: &str = "PUNCTUAL_TEST_PG_URL";
const CHILD_INDEX: &str = "PUNCTUAL_TEST_INDEX";
const CHILD_STOP: &str = "PUNCTUAL_TEST_STOP_FILE";
const QUEUE: &str = "load";

/// What became of one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// `ack()` returned `Ok(true)`.
    Acked,
    /// `ack()` returned `Ok(false)`: the lease was lost first.
    AckLost,
    /// `ack()` returned `Err`.
    AckFailed,
    /// Dropped without an ack.
    Dropped,
}

impl Outcome {
    fn code(self) -> &'static str {
        match self {
            Outcome::Acked => "acked",
            Outcome::AckLost => "lost",
            Outcome::AckFailed => "failed",
            Outcome::Dropped => "dropped",
        }
    }

    fn parse(code: &str) -> Outcome {
        match code {
            "acked" => Outcome::Acked,
            "lost" => Outcome::AckLost,
            "failed" => Outcome::AckFailed,
            "dropped" => Outcome::Dropped,
            other => panic!("unknown outcome {other:?}"),
        }
    }
}

/// One delivery as a consumer saw it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Record {
    id: String,
    attempt: u32,
    outcome: Outcome,
    value: u64,
    /// `<process>/<consumer>`
    by: String,
}

#[test]
fn processes_of_consumers_ack_every_entry_exactly_once() {
    if let Ok(role) = std::env::var(CHILD) {
        assert_eq!(role, "consumers");
        consumer_process();
        return;
    }

    let db = PgDb::new();
    let url = db.url();
    let dir = TempDir::new();
    let stop_file = dir.0.join("stop");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let q: PgQueue<u64> = rt.block_on(open(&url));

    // Whatever happens below, the children end with the test.
    let mut children = Children(
        (0..PROCESSES)
            .map(|index| spawn_consumers(&url, index, &stop_file))
            .collect(),
    );

    let start = Instant::now();
    let ids = rt.block_on(insert_all(&q));
    let inserted_in = start.elapsed();

    // Until every entry is acked: nothing pending, due, leased or dead.
    let final_stats = rt.block_on(async {
        loop {
            let stats = q.stats().await.unwrap();
            if stats == PgStats::default() {
                return stats;
            }
            assert!(
                start.elapsed() < DRAIN_PATIENCE,
                "not drained after {DRAIN_PATIENCE:?}: {stats:?}"
            );
            sleep(Duration::from_millis(100)).await;
        }
    });
    let drained_in = start.elapsed();
    std::fs::write(&stop_file, b"stop").unwrap();

    let mut records = Vec::new();
    let mut take_errors = Vec::new();
    for (index, child) in children.0.iter_mut().enumerate() {
        let (status, stdout, stderr) = finish(child, Duration::from_secs(30));
        assert!(
            status.success(),
            "consumer process {index} failed ({status:?}):\n{stderr}"
        );
        let mut reported = false;
        for line in stdout.lines() {
            // The harness may have printed `test <name> ... ` on the line.
            let Some((_, line)) = line.split_once("@@ ") else {
                continue;
            };
            let fields: Vec<&str> = line.split(' ').collect();
            match fields[..] {
                ["REC", by, id, value, attempt, outcome] => records.push(Record {
                    id: id.to_owned(),
                    attempt: attempt.parse().unwrap(),
                    outcome: Outcome::parse(outcome),
                    value: value.parse().unwrap(),
                    by: by.to_owned(),
                }),
                ["TAKE_ERR", ..] => take_errors.push(line.to_owned()),
                ["DONE", ..] => reported = true,
                _ => panic!("unexpected line from process {index}: {line:?}"),
            }
        }
        assert!(
            reported,
            "process {index} did not report:\n{stdout}\n{stderr}"
        );
    }

    let by_outcome = |outcome| records.iter().filter(|r| r.outcome == outcome).count();
    eprintln!(
        "{ENTRIES} entries inserted in {inserted_in:?}, drained {drained_in:?} after the start; \
         {} deliveries: {} acked, {} dropped, {} acks too late, {} acks failed; {} take errors",
        records.len(),
        by_outcome(Outcome::Acked),
        by_outcome(Outcome::Dropped),
        by_outcome(Outcome::AckLost),
        by_outcome(Outcome::AckFailed),
        take_errors.len(),
    );
    assert!(take_errors.is_empty(), "take failed: {take_errors:?}");
    assert_eq!(final_stats, PgStats::default());
    let mut gaps = 0;
    check(&records, &ids, &mut gaps);
    eprintln!("{gaps} attempts claimed but seen by no consumer");
}

/// The delivery guarantees, from what the consumers saw (`ids[n]` is the
/// id `insert_many` gave value `n`); adds to `gaps` the attempts no
/// consumer saw.
fn check(records: &[Record], ids: &[String], gaps: &mut usize) {
    let mut by_id: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for record in records {
        by_id.entry(&record.id).or_default().push(record);
    }
    let expected: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(expected.len(), ids.len(), "insert_many gave an id twice");
    let delivered: BTreeSet<&str> = by_id.keys().copied().collect();
    let lost: Vec<_> = expected.difference(&delivered).take(10).collect();
    assert!(lost.is_empty(), "never delivered: {lost:?}...");
    let unknown: Vec<_> = delivered.difference(&expected).take(10).collect();
    assert!(
        unknown.is_empty(),
        "delivered but never inserted: {unknown:?}"
    );

    let mut failures = Vec::new();
    for (id, deliveries) in &mut by_id {
        deliveries.sort();
        if let Some(wrong) = deliveries
            .iter()
            .find(|r| ids.get(r.value as usize).map(String::as_str) != Some(*id))
        {
            failures.push(format!(
                "{id}: delivered with another entry's value: {wrong:?}"
            ));
        }
        let attempts: Vec<u32> = deliveries.iter().map(|r| r.attempt).collect();
        let acked = deliveries
            .iter()
            .filter(|r| r.outcome == Outcome::Acked)
            .count();
        // Each claim counts one attempt, so no two deliveries share one. A
        // gap is a claim no consumer saw (one cut short by a `take_timeout`
        // running out): the entry came back after that lease, as after a
        // dropped delivery.
        if attempts.windows(2).any(|pair| pair[0] >= pair[1]) {
            failures.push(format!("{id}: attempts {attempts:?}"));
        }
        *gaps += (attempts.last().copied().unwrap_or(0) as usize).saturating_sub(attempts.len());
        if acked != 1 {
            failures.push(format!(
                "{id}: acked Ok(true) {acked} times: {deliveries:?}"
            ));
        }
        // Acked on the last delivery; every earlier one lost its lease
        // (dropped, or acked too late), so a duplicate follows a lost lease.
        let (last, earlier) = deliveries.split_last().unwrap();
        if last.outcome != Outcome::Acked {
            failures.push(format!("{id}: last delivery not acked: {deliveries:?}"));
        }
        if let Some(bad) = earlier
            .iter()
            .find(|r| !matches!(r.outcome, Outcome::Dropped | Outcome::AckLost))
        {
            failures.push(format!(
                "{id}: delivered again after {bad:?}, which did not lose its lease: {deliveries:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} entries broke the guarantees, e.g.:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

async fn open(url: &str) -> PgQueue<u64> {
    PgQueue::builder(QUEUE)
        .url(url)
        .lease(LEASE)
        .max_attempts(0)
        .poll_interval(POLL)
        .build()
        .await
        .unwrap()
}

/// Inserts values `0..ENTRIES`, due in 0 to 2 s, [`CHUNK`] per call; the
/// id of each value.
async fn insert_all(q: &PgQueue<u64>) -> Vec<String> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let entries: Vec<(u64, Duration)> = (0..ENTRIES)
        .map(|n| (n, Duration::from_millis(rng.below(MAX_DELAY_MS + 1))))
        .collect();
    let mut ids = Vec::with_capacity(entries.len());
    for chunk in entries.chunks(CHUNK) {
        let got = q.insert_many(chunk).await.expect("insert_many");
        assert_eq!(got.len(), chunk.len());
        ids.extend(got);
    }
    ids
}

/// The child: `CONSUMERS_PER_PROCESS` consumer tasks on one queue handle,
/// until the stop file appears; then prints one `@@ REC` line per delivery.
fn consumer_process() {
    let url = std::env::var(CHILD_URL).unwrap();
    let index: u64 = std::env::var(CHILD_INDEX).unwrap().parse().unwrap();
    let stop_file = PathBuf::from(std::env::var(CHILD_STOP).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let lines = rt.block_on(async move {
        let q = open(&url).await;
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                // Bounded even if the parent never says stop.
                let start = Instant::now();
                while !stop_file.exists() && start.elapsed() < Duration::from_secs(180) {
                    sleep(Duration::from_millis(50)).await;
                }
                stop.store(true, Ordering::SeqCst);
            })
        };
        let consumers: Vec<_> = (0..CONSUMERS_PER_PROCESS)
            .map(|c| tokio::spawn(consume(q.clone(), index, c, Arc::clone(&stop))))
            .collect();
        let mut lines = Vec::new();
        for consumer in consumers {
            lines.extend(consumer.await.unwrap());
        }
        watcher.await.unwrap();
        lines
    });
    let mut out = String::new();
    for line in lines {
        out.push_str("\n@@ ");
        out.push_str(&line);
    }
    out.push_str("\n@@ DONE\n");
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).unwrap();
    stdout.flush().unwrap();
}

/// One consumer: takes up to [`BATCH`] entries, then acks each, or drops it
/// ([`DROP_PERCENT`]); a line per delivery. A `take_many` cut short by the
/// 200 ms timeout loses nothing: what it claimed comes back (API.md).
async fn consume(
    q: PgQueue<u64>,
    process: u64,
    consumer: u64,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (process << 32 | consumer).wrapping_add(1));
    let by = format!("{process}/{consumer}");
    let mut lines = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let batch = match timeout(Duration::from_millis(200), q.take_many(BATCH)).await {
            Ok(Ok(batch)) => batch,
            Err(_) => continue,
            Ok(Err(error)) => {
                lines.push(format!("TAKE_ERR {by} {error}"));
                continue;
            }
        };
        for delivery in batch {
            let id = delivery.id().to_owned();
            let value = *delivery.value();
            let attempt = delivery.attempt();
            let outcome = if rng.below(100) < DROP_PERCENT {
                drop(delivery);
                Outcome::Dropped
            } else {
                match delivery.ack().await {
                    Ok(true) => Outcome::Acked,
                    Ok(false) => Outcome::AckLost,
                    Err(_) => Outcome::AckFailed,
                }
            };
            lines.push(format!(
                "REC {by} {id} {value} {attempt} {}",
                outcome.code()
            ));
        }
    }
    lines
}

/// The consumer processes, killed when dropped (they have exited by then,
/// unless the test failed).
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A fresh temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!("punctual-pg-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spawn_consumers(url: &str, index: u64, stop_file: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "consumers")
        .env(CHILD_URL, url)
        .env(CHILD_INDEX, index.to_string())
        .env(CHILD_STOP, stop_file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a consumer process")
}
