#![cfg(feature = "redis")]
//! Load on `punctual::redis::RedisQueue`: several consumer processes, each
//! with many consumer tasks on a multi-thread runtime, share one queue of
//! 20,000 entries with random delays; some deliveries are dropped without
//! an ack and come back after their lease, some are acked around the end of
//! their lease (too late if another consumer took the entry). At the end every entry was acked
//! exactly once, none was lost, and an entry was delivered again only after
//! a delivery that lost its lease.
//!
//! The consumer processes are this same test binary, re-run on the test with
//! `PUNCTUAL_TEST_CHILD` set (as `tests/scheduler_double_panics.rs` does);
//! each prints what it saw on stdout when the parent tells it to stop (a
//! file in the server's directory). Randomness is a seeded xorshift, so a
//! run only depends on scheduling, and the checks hold for any scheduling.

mod common;

use common::Rng;
use common::redis_queue::finish;
use common::redis_server::RedisServer;
use futures::StreamExt;
use punctual::redis::{RedisQueue, RedisStats};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};

const ENTRIES: u64 = 20_000;
const MAX_DELAY_MS: u64 = 500;
const PROCESSES: u64 = 3;
const CONSUMERS_PER_PROCESS: u64 = 8;
/// Percentage of deliveries dropped without an ack.
const DROP_PERCENT: u64 = 10;
/// Percentage of deliveries acked around the end of their lease.
const SLOW_PERCENT: u64 = 3;
const LEASE: Duration = Duration::from_millis(300);
const POLL: Duration = Duration::from_millis(100);
/// Inserts in flight at once (one multiplexed connection).
const INSERTS_IN_FLIGHT: usize = 64;
/// Bound on the whole run once the inserts are done; a healthy run on two
/// cores needs a few seconds.
const DRAIN_PATIENCE: Duration = Duration::from_secs(60);

const TEST: &str = "processes_of_consumers_ack_every_entry_exactly_once";
const CHILD: &str = "PUNCTUAL_TEST_CHILD";
const CHILD_URL: &str = "PUNCTUAL_TEST_REDIS_URL";
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
    /// `<process>/<consumer>`
    by: String,
}

#[test]
fn processes_of_consumers_ack_every_entry_exactly_once() {
    if let Ok(index) = std::env::var(CHILD) {
        assert_eq!(index, "consumers");
        consumer_process();
        return;
    }

    let server = RedisServer::start();
    let stop_file = server.dir().join("stop");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let q: RedisQueue<u64> = rt.block_on(async {
        RedisQueue::builder(QUEUE)
            .url(&server.url())
            .lease(LEASE)
            .max_attempts(0)
            .poll_interval(POLL)
            .build()
            .await
            .unwrap()
    });

    // Whatever happens below, the children end with the test.
    let mut children = Children(
        (0..PROCESSES)
            .map(|index| spawn_consumers(&server.url(), index, &stop_file))
            .collect(),
    );

    let start = Instant::now();
    let insert_retries = rt
        .block_on(async { timeout(DRAIN_PATIENCE, insert_all(&q)).await })
        .expect("inserts done in time");
    let inserted_in = start.elapsed();

    // Until every entry is acked: nothing pending, due or leased.
    let final_stats = rt.block_on(async {
        let drain_start = Instant::now();
        loop {
            let stats = q.stats().await.unwrap();
            if stats.pending == 0 && stats.due == 0 && stats.leased == 0 {
                return stats;
            }
            assert!(
                drain_start.elapsed() < DRAIN_PATIENCE,
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
                ["REC", by, id, attempt, outcome] => records.push(Record {
                    id: id.to_owned(),
                    attempt: attempt.parse().unwrap(),
                    outcome: Outcome::parse(outcome),
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
        "{ENTRIES} entries inserted in {inserted_in:?} ({insert_retries} retried), \
         drained {drained_in:?} after the start; {} deliveries: {} acked, {} dropped, \
         {} acks too late, {} acks failed; {} take errors",
        records.len(),
        by_outcome(Outcome::Acked),
        by_outcome(Outcome::Dropped),
        by_outcome(Outcome::AckLost),
        by_outcome(Outcome::AckFailed),
        take_errors.len(),
    );
    assert!(take_errors.is_empty(), "take failed: {take_errors:?}");
    assert_eq!(final_stats, RedisStats::default());
    let mut gaps = 0;
    check(&records, &mut gaps);
    eprintln!("{gaps} attempts claimed but seen by no consumer");
}

/// The delivery guarantees, from what the consumers saw; adds to `gaps` the
/// attempts no consumer saw.
fn check(records: &[Record], gaps: &mut usize) {
    let mut by_id: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for record in records {
        by_id.entry(&record.id).or_default().push(record);
    }
    let expected: BTreeSet<String> = (0..ENTRIES).map(|n| format!("e{n}")).collect();
    let delivered: BTreeSet<String> = by_id.keys().map(|id| (*id).to_owned()).collect();
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

/// Inserts `e0..e{ENTRIES}`, due in 0 to 500 ms, many at a time; returns
/// how many inserts had to be retried.
async fn insert_all(q: &RedisQueue<u64>) -> usize {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let delays: Vec<u64> = (0..ENTRIES).map(|_| rng.below(MAX_DELAY_MS + 1)).collect();
    let retries: Vec<usize> = futures::stream::iter(delays.into_iter().enumerate())
        .map(|(n, delay)| {
            let q = q.clone();
            async move {
                let id = format!("e{n}");
                let delay = Duration::from_millis(delay);
                // A retried insert after an `Err` never duplicates, but it
                // could re-insert an entry already taken and acked; count them.
                for retry in 0..3 {
                    match q.insert_with_id(&id, &(n as u64), delay).await {
                        Ok(inserted) => {
                            assert!(inserted || retry > 0, "{id} was already there");
                            return retry;
                        }
                        Err(error) => eprintln!("insert {id} failed: {error}"),
                    }
                }
                panic!("insert {id} failed 3 times");
            }
        })
        .buffer_unordered(INSERTS_IN_FLIGHT)
        .collect()
        .await;
    retries.iter().sum()
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
        let q: RedisQueue<u64> = RedisQueue::builder(QUEUE)
            .url(&url)
            .lease(LEASE)
            .max_attempts(0)
            .poll_interval(POLL)
            .build()
            .await
            .unwrap();
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

/// One consumer: takes, then acks, or drops the delivery ([`DROP_PERCENT`]),
/// or acks it around the end of its lease ([`SLOW_PERCENT`]); a line per
/// delivery.
async fn consume(
    q: RedisQueue<u64>,
    process: u64,
    consumer: u64,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (process << 32 | consumer).wrapping_add(1));
    let by = format!("{process}/{consumer}");
    let mut lines = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let delivery = match q.take_timeout(Duration::from_millis(200)).await {
            Ok(Some(delivery)) => delivery,
            Ok(None) => continue,
            Err(error) => {
                lines.push(format!("TAKE_ERR {by} {error}"));
                continue;
            }
        };
        let id = delivery.id().to_owned();
        let attempt = delivery.attempt();
        assert_eq!(format!("e{}", delivery.value()), id);
        let roll = rng.below(100);
        let outcome = if roll < DROP_PERCENT {
            drop(delivery);
            Outcome::Dropped
        } else {
            if roll < DROP_PERCENT + SLOW_PERCENT {
                // Slow work: the lease may run out, and the entry may or
                // may not be taken again before the ack.
                sleep(LEASE - Duration::from_millis(100) + Duration::from_millis(rng.below(200)))
                    .await;
            }
            match delivery.ack().await {
                Ok(true) => Outcome::Acked,
                Ok(false) => Outcome::AckLost,
                Err(_) => Outcome::AckFailed,
            }
        };
        lines.push(format!("REC {by} {id} {attempt} {}", outcome.code()));
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
