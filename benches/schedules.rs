//! Schedules on a `RedisQueue` shared by three replicas, one of them
//! killed: are ticks run once, never overlapping, none missed, and how soon
//! do the killed replica's ticks come back?
//!
//! The replicas are child processes: this binary, run again with
//! `PUNCTUAL_SCHEDULE_REPLICA` set. Each builds its own queue handle (lease
//! 1 s, other settings default), declares the same 20 schedules (every
//! 200 ms, `MissedTicks::Skip`, all on the same grid, so all 20 come due at
//! once) and runs a `Worker` (default concurrency 16) whose handler prints
//! when it starts and ends and takes 100 ms. The parent starts its own
//! `redis-server` (persistence off), waits until the three are ready, kills
//! one with SIGKILL 4 s later (at the first grid instant after 4 s, plus
//! 50 ms, so that it is in the middle of runs and holds ticks), lets the
//! other two run until 10 s, then closes their stdin (they shut down) and
//! reads what they printed. The replica killed is the one running the most
//! handlers at that moment (as far as its output shows):
//!
//! - duplicate runs: runs of a (schedule, instant) that another run of it
//!   already covered, not counting the redelivery of a run the kill
//!   interrupted;
//! - overlapping runs: a run of a schedule that starts before the previous
//!   one ended (a run the kill interrupted ends at the kill);
//! - ticks missed before the kill: grid instants from each schedule's first
//!   tick to the kill that no run started for;
//! - the ticks the killed replica held (started, never ended), how long
//!   after the kill each was started again elsewhere (attempt 2), and the
//!   instants the `Skip` policy then dropped while they were away.
//!
//! `cargo bench --all-features --bench schedules` runs it `RUNS` times in
//! one process and prints a markdown table.

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use punctual::MissedTicks;
use punctual::durable::Worker;
use punctual::redis::RedisQueue;
use redis_server::RedisServer;

const REPLICA_ENV: &str = "PUNCTUAL_SCHEDULE_REPLICA";
const RUNS: usize = 3;
const REPLICAS: usize = 3;
const SCHEDULES: usize = 20;
const PERIOD_MS: i64 = 200;
const LEASE: Duration = Duration::from_secs(1);
const WORK: Duration = Duration::from_millis(100);
const KILL_AFTER_MS: i64 = 4_000;
/// Past the grid instant where the kill falls: the replica is mid-run.
const KILL_PHASE_MS: i64 = 50;
const TOTAL_MS: i64 = 10_000;
/// How long replicas may take to start and declare their schedules.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[allow(clippy::disallowed_methods)] // a bench measures the real clock
fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn sleep_until_us(at: i64) {
    let left = at - unix_us();
    if left > 0 {
        thread::sleep(Duration::from_micros(left as u64));
    }
}

fn main() {
    if let Ok(spec) = std::env::var(REPLICA_ENV) {
        replica(&spec);
        return;
    }
    let server = RedisServer::start_in_memory();
    println!("# Schedules across {REPLICAS} replicas, one killed");
    println!();
    println!(
        "{SCHEDULES} schedules every {PERIOD_MS} ms (Skip), lease {LEASE:?}, handler {WORK:?}, \
         replicas = child processes, one SIGKILLed at ~{} s, {} s in all; {RUNS} runs",
        KILL_AFTER_MS / 1000,
        TOTAL_MS / 1000
    );
    let mut results = Vec::new();
    for run in 0..RUNS {
        let r = one_run(&server, run);
        println!("  run {}: {}", run + 1, r.summary());
        results.push(r);
    }
    print_table(&results);
}

// ---------------------------------------------------------------- replica

/// A replica: declares the schedules, runs a worker until stdin closes.
fn replica(spec: &str) {
    let mut parts = spec.split_whitespace();
    let (url, name) = (
        parts.next().expect("url").to_owned(),
        parts.next().expect("queue name").to_owned(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let queue: RedisQueue<u32> = RedisQueue::builder(&name)
            .url(&url)
            .lease(LEASE)
            .build()
            .await
            .expect("connect");
        for s in 0..SCHEDULES {
            let period = Duration::from_millis(PERIOD_MS as u64);
            queue
                .schedule_every(&format!("s{s:02}"), period, MissedTicks::Skip, &(s as u32))
                .await
                .expect("schedule_every");
        }
        let worker = Worker::builder(queue).spawn(|job| async move {
            let key = format!(
                "{} {} {}",
                job.schedule().unwrap_or("-"),
                micros(job.deadline()),
                job.attempt()
            );
            println!("start {key} {}", unix_us());
            tokio::time::sleep(WORK).await;
            println!("end {key} {}", unix_us());
            Ok::<(), Infallible>(())
        });
        println!("ready");
        // The parent closes stdin to stop us.
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
        let stats = worker.shutdown(Duration::from_secs(1)).await;
        println!(
            "stats {} {} {} {}",
            stats.completed, stats.failed, stats.dead, stats.lost
        );
        let _ = std::io::stdout().flush();
    });
}

// ---------------------------------------------------------------- parent

/// One run of a handler, as a replica printed it.
#[derive(Clone, Debug)]
struct RunOf {
    replica: usize,
    attempt: u32,
    start: i64,
    end: Option<i64>,
}

/// What one run of the bench saw.
struct Outcome {
    victim: usize,
    runs: usize,
    duplicates: usize,
    overlaps: usize,
    expected_before_kill: usize,
    missed_before_kill: usize,
    held: usize,
    /// ms after the kill each held tick started again (None: not back).
    back_ms: Vec<Option<f64>>,
    missed_after_held: usize,
    missed_after_other: usize,
    lateness_p50_ms: f64,
    lateness_p99_ms: f64,
    /// Runs started by a survivor and never ended.
    unfinished: usize,
    survivor_stats: Vec<String>,
}

impl Outcome {
    fn back_range(&self) -> String {
        if self.back_ms.is_empty() {
            return "—".to_owned();
        }
        if self.back_ms.iter().any(Option::is_none) {
            let n = self.back_ms.iter().filter(|b| b.is_none()).count();
            return format!("{n} not back");
        }
        let mut v: Vec<f64> = self.back_ms.iter().flatten().copied().collect();
        v.sort_by(f64::total_cmp);
        format!("{:.0}–{:.0}", v[0], v[v.len() - 1])
    }

    fn summary(&self) -> String {
        format!(
            "replica {} killed; {} runs, {} duplicate, {} overlapping, {}/{} missed before the kill, {} held by the \
             killed replica, back after {} ms, {} + {} missed after (held schedules + others), \
             lateness p50 {:.2} ms p99 {:.2} ms, {} unfinished on survivors, survivors' stats \
             (completed failed dead lost): {}",
            self.victim,
            self.runs,
            self.duplicates,
            self.overlaps,
            self.missed_before_kill,
            self.expected_before_kill,
            self.held,
            self.back_range(),
            self.missed_after_held,
            self.missed_after_other,
            self.lateness_p50_ms,
            self.lateness_p99_ms,
            self.unfinished,
            self.survivor_stats.join("; ")
        )
    }
}

fn spawn_replica(
    url: &str,
    name: &str,
    index: usize,
    lines: mpsc::Sender<(usize, String)>,
) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .env(REPLICA_ENV, format!("{url} {name}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn replica");
    let stdout = child.stdout.take().expect("stdout");
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send((index, line)).is_err() {
                break;
            }
        }
    });
    child
}

fn one_run(server: &RedisServer, run: usize) -> Outcome {
    let name = format!("sched-{run}");
    let (tx, rx) = mpsc::channel();
    let mut children: Vec<Option<Child>> = (0..REPLICAS)
        .map(|i| Some(spawn_replica(&server.url(), &name, i, tx.clone())))
        .collect();
    drop(tx);
    let mut lines: Vec<(usize, String)> = Vec::new();
    let mut ready = 0;
    while ready < REPLICAS {
        let (i, line) = rx.recv_timeout(READY_TIMEOUT).expect("replicas ready");
        if line == "ready" {
            ready += 1;
        } else {
            lines.push((i, line));
        }
    }
    let t0 = unix_us();
    let period_us = PERIOD_MS * 1000;
    let after = t0 + KILL_AFTER_MS * 1000;
    let kill_at = (after / period_us + 1) * period_us + KILL_PHASE_MS * 1000;
    sleep_until_us(kill_at);
    // The replica running the most handlers now (as far as its output has
    // come through): the one whose death tests the most.
    lines.extend(rx.try_iter());
    let mut running = [0i64; REPLICAS];
    for (i, line) in &lines {
        if line.starts_with("start ") {
            running[*i] += 1;
        } else if line.starts_with("end ") {
            running[*i] -= 1;
        }
    }
    let victim = (0..REPLICAS)
        .max_by_key(|&i| (running[i], std::cmp::Reverse(i)))
        .expect("replicas");
    let mut killed = children[victim].take().expect("victim");
    killed.kill().expect("SIGKILL"); // SIGKILL on Unix
    let kill_us = unix_us();
    killed.wait().expect("reap");
    sleep_until_us(t0 + TOTAL_MS * 1000);
    let end_us = unix_us();
    for child in children.iter_mut().flatten() {
        drop(child.stdin.take()); // the replica shuts down
    }
    for child in children.iter_mut().flatten() {
        child.wait().expect("replica exit");
    }
    lines.extend(rx); // every reader ends at its child's exit
    analyse(&lines, victim, kill_us, end_us)
}

fn analyse(lines: &[(usize, String)], victim: usize, kill_us: i64, end_us: i64) -> Outcome {
    // (schedule, instant µs) -> runs; a run is keyed by replica and attempt.
    let mut ticks: BTreeMap<(String, i64), Vec<RunOf>> = BTreeMap::new();
    let mut survivor_stats = Vec::new();
    for (replica, line) in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["start", schedule, instant, attempt, at] => {
                ticks
                    .entry(((*schedule).to_owned(), instant.parse().expect("instant")))
                    .or_default()
                    .push(RunOf {
                        replica: *replica,
                        attempt: attempt.parse().expect("attempt"),
                        start: at.parse().expect("start"),
                        end: None,
                    });
            }
            ["end", schedule, instant, attempt, at] => {
                let key = ((*schedule).to_owned(), instant.parse().expect("instant"));
                let attempt: u32 = attempt.parse().expect("attempt");
                let run = ticks
                    .get_mut(&key)
                    .and_then(|runs| {
                        runs.iter_mut().find(|r| {
                            r.replica == *replica && r.attempt == attempt && r.end.is_none()
                        })
                    })
                    .expect("an end without its start");
                run.end = Some(at.parse().expect("end"));
            }
            ["stats", rest @ ..] => survivor_stats.push(format!("r{replica} {}", rest.join(" "))),
            _ => eprintln!("replica {replica}: {line}"),
        }
    }
    let interrupted = |r: &RunOf| r.replica == victim && r.end.is_none();

    let mut runs = 0;
    let mut duplicates = 0;
    let mut held = Vec::new();
    let mut lateness = Vec::new();
    let mut unfinished = 0;
    for ((schedule, instant), list) in &ticks {
        runs += list.len();
        let cut = list.iter().filter(|r| interrupted(r)).count();
        duplicates += list.len().saturating_sub(1 + cut);
        unfinished += list
            .iter()
            .filter(|r| r.replica != victim && r.end.is_none())
            .count();
        for r in list {
            if r.attempt == 1 {
                lateness.push((r.start - instant) as f64 / 1e3);
            }
            if interrupted(r) {
                let back = list
                    .iter()
                    .filter(|o| o.start > r.start && o.replica != victim)
                    .map(|o| o.start)
                    .min();
                held.push((schedule.clone(), back.map(|b| (b - kill_us) as f64 / 1e3)));
            }
        }
    }

    // Per schedule, in start order.
    let mut by_schedule: BTreeMap<&str, Vec<(i64, &RunOf)>> = BTreeMap::new();
    for ((schedule, instant), list) in &ticks {
        for r in list {
            by_schedule.entry(schedule).or_default().push((*instant, r));
        }
    }
    let held_schedules: BTreeSet<&str> = held.iter().map(|(s, _)| s.as_str()).collect();
    let period_us = PERIOD_MS * 1000;
    let mut overlaps = 0;
    let (mut expected_before_kill, mut missed_before_kill) = (0, 0);
    let (mut missed_after_held, mut missed_after_other) = (0, 0);
    for (schedule, list) in &mut by_schedule {
        list.sort_by_key(|(_, r)| r.start);
        let mut busy_until = i64::MIN;
        for (_, r) in list.iter() {
            if r.start < busy_until {
                overlaps += 1;
            }
            let end = r.end.unwrap_or(if r.replica == victim {
                kill_us
            } else {
                i64::MAX
            });
            busy_until = busy_until.max(end);
        }
        let seen: BTreeSet<i64> = list.iter().map(|(instant, _)| *instant).collect();
        let first = *seen.first().expect("a run");
        // Instants due before the kill, then those due after it that had
        // time to start before the end.
        let mut instant = first;
        while instant < end_us - period_us / 2 {
            let missed = !seen.contains(&instant);
            if instant < kill_us {
                expected_before_kill += 1;
                missed_before_kill += usize::from(missed);
            } else if held_schedules.contains(schedule) {
                missed_after_held += usize::from(missed);
            } else {
                missed_after_other += usize::from(missed);
            }
            instant += period_us;
        }
    }
    lateness.sort_by(f64::total_cmp);
    let at = |p: usize| lateness[(lateness.len() * p / 100).min(lateness.len() - 1)];
    Outcome {
        victim,
        runs,
        duplicates,
        overlaps,
        expected_before_kill,
        missed_before_kill,
        held: held.len(),
        back_ms: held.into_iter().map(|(_, back)| back).collect(),
        missed_after_held,
        missed_after_other,
        lateness_p50_ms: at(50),
        lateness_p99_ms: at(99),
        unfinished,
        survivor_stats,
    }
}

/// The median of the values that are numbers.
fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
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

fn print_table(results: &[Outcome]) {
    println!("\n## Results ({RUNS} runs; median of the runs in the last column)\n");
    let head: Vec<String> = (1..=results.len()).map(|i| format!("run {i}")).collect();
    println!("| metric | {} | median |", head.join(" | "));
    println!("|---|{}---:|", "---:|".repeat(results.len()));
    let row = |name: &str, decimals: usize, f: &dyn Fn(&Outcome) -> f64| {
        let values: Vec<f64> = results.iter().map(f).collect();
        let cells: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
        println!(
            "| {name} | {} | {:.decimals$} |",
            cells.join(" | "),
            median(values)
        );
    };
    row("runs started", 0, &|o| o.runs as f64);
    row("duplicate runs", 0, &|o| o.duplicates as f64);
    row("overlapping runs", 0, &|o| o.overlaps as f64);
    row("grid instants due before the kill", 0, &|o| {
        o.expected_before_kill as f64
    });
    row("ticks missed before the kill", 0, &|o| {
        o.missed_before_kill as f64
    });
    row("ticks the killed replica held", 0, &|o| o.held as f64);
    row("held ticks back after the kill, first ms", 0, &|o| {
        o.back_ms.iter().flatten().copied().fold(f64::NAN, f64::min)
    });
    row("held ticks back after the kill, last ms", 0, &|o| {
        if o.back_ms.iter().any(Option::is_none) {
            f64::INFINITY
        } else {
            o.back_ms.iter().flatten().copied().fold(f64::NAN, f64::max)
        }
    });
    row("ticks skipped after the kill, held schedules", 0, &|o| {
        o.missed_after_held as f64
    });
    row("ticks missed after the kill, other schedules", 0, &|o| {
        o.missed_after_other as f64
    });
    row("tick lateness p50 ms (first attempts)", 2, &|o| {
        o.lateness_p50_ms
    });
    row("tick lateness p99 ms (first attempts)", 2, &|o| {
        o.lateness_p99_ms
    });
    row("runs unfinished on the survivors", 0, &|o| {
        o.unfinished as f64
    });
}
