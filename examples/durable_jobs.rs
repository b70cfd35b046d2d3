//! Durable jobs on Redis: two replicas of a service share one queue, run
//! reminder emails with retries, and declare the same two schedules (a
//! fixed-rate sweep every second and a cron report every three seconds);
//! every tick runs once, even though one replica is killed (SIGKILL) while
//! running one.
//!
//! Replica A runs in this process; replica B is this same program started
//! again as a child process (`PUNCTUAL_REPLICA=b`), which prints what it
//! runs on its standard output. B's first sweep hangs, and A kills B while
//! it runs it: the sweep's tick stays leased for B's lease (2 s), then A
//! gets it again as attempt 2. Reminders fail now and then (a flaky mail
//! server) and are retried with exponential backoff; one address always
//! bounces and ends in the dead letters after 3 attempts.
//!
//! Run it against a local server (`REDIS_URL`, default
//! `redis://127.0.0.1:6379/`):
//!
//! ```text
//! redis-server &    # if none is running
//! cargo run --features redis,cron --example durable_jobs
//! ```
//!
//! On a managed Redis, with TLS and an ACL user:
//!
//! ```text
//! REDIS_URL='rediss://user:password@host:6380/' \
//!     cargo run --features redis-tls,cron --example durable_jobs
//! ```
//!
//! It uses a queue named after its process id and purges it at the end. The
//! run takes about ten seconds and ends with a timeline and a summary; it
//! exits with an error if a tick ran twice or not at all.

use punctual::MissedTicks;
use punctual::durable::{Backoff, Job, Worker};
use punctual::redis::{Error, RedisQueue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::{Instant, sleep};

/// How long a replica holds a job before it is offered again.
const LEASE: Duration = Duration::from_secs(2);
/// How long the replicas run.
const RUN: Duration = Duration::from_secs(9);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Task {
    /// Send a reminder; the mail server refuses the first `flaky` attempts
    /// (`u32::MAX`: the address always bounces).
    Remind { to: String, flaky: u32 },
    /// Clean up expired carts: the fixed-rate schedule.
    Sweep,
    /// The cron schedule.
    Report,
}

/// One run, as the timeline shows it.
#[derive(Debug, Clone)]
struct Run {
    /// Wall clock, ms since the epoch: both replicas share it.
    at: u128,
    replica: String,
    id: String,
    attempt: u32,
    /// The tick's instant (ms since the epoch), for schedules.
    tick: Option<u128>,
    outcome: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    if let Ok(name) = std::env::var("PUNCTUAL_QUEUE") {
        return replica_b(&url, &name).await;
    }
    match replica_a(&url).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            let host = url.rfind('@').map_or(url.as_str(), |at| &url[at + 1..]);
            eprintln!("redis error: {error} (is a redis-server running at {host}?)");
            ExitCode::FAILURE
        }
    }
}

/// Both replicas open the queue and declare the same schedules: the second
/// declaration changes nothing.
async fn open(url: &str, name: &str) -> Result<RedisQueue<Task>, Error> {
    let queue = RedisQueue::builder(name)
        .url(url)
        .lease(LEASE)
        .max_attempts(3)
        .poll_interval(Duration::from_millis(200))
        .build()
        .await?;
    queue
        .schedule_every(
            "sweep",
            Duration::from_secs(1),
            MissedTicks::Skip,
            &Task::Sweep,
        )
        .await?;
    queue
        .schedule_cron("report", "*/3 * * * * *", &Task::Report)
        .await?;
    Ok(queue)
}

fn worker(
    queue: &RedisQueue<Task>,
    replica: &'static str,
    log: impl Fn(Run) + Send + Sync + 'static,
) -> Worker {
    let crash = replica == "b";
    Worker::builder(queue.clone())
        .concurrency(4)
        .backoff(Backoff::exponential(Duration::from_millis(300)))
        .spawn(move |job: Job<Task>| {
            let tick = job.schedule().map(|_| millis(job.deadline()));
            let mut run = Run {
                at: millis(wall()),
                replica: replica.to_owned(),
                id: job.id().to_owned(),
                attempt: job.attempt(),
                tick,
                outcome: String::new(),
            };
            let result = match job.value() {
                Task::Remind { to, flaky } if job.attempt() <= *flaky => {
                    Err(format!("mail server refused {to}"))
                }
                _ => Ok(()),
            };
            let hang = crash && *job.value() == Task::Sweep;
            run.outcome = match (&result, hang) {
                (_, true) => "started; the replica is killed".to_owned(),
                (Ok(()), _) => "ok".to_owned(),
                (Err(why), _) => format!("failed: {why}"),
            };
            log(run);
            async move {
                if hang {
                    sleep(Duration::from_secs(3600)).await; // killed meanwhile
                }
                result
            }
        })
}

/// Replica B: the child process. It prints each run as a line for A.
async fn replica_b(url: &str, name: &str) -> ExitCode {
    let Ok(queue) = open(url, name).await else {
        return ExitCode::FAILURE;
    };
    let _worker = worker(&queue, "b", |run| {
        println!(
            "RUN {}|{}|{}|{}|{}",
            run.at,
            run.id,
            run.attempt,
            run.tick.map_or(String::new(), |t| t.to_string()),
            run.outcome
        )
    });
    sleep(RUN * 2).await; // killed long before
    ExitCode::SUCCESS
}

async fn replica_a(url: &str) -> Result<bool, Error> {
    let name = format!("durable-jobs-{}", std::process::id());
    let queue = open(url, &name).await?;
    let start = Instant::now();
    let started = millis(wall());
    let timeline = Arc::new(Mutex::new(Vec::<Run>::new()));

    let mut b = spawn_b(url, &name);
    let from_b = read_b(&mut b, Arc::clone(&timeline));

    let a = worker(&queue, "a", {
        let timeline = Arc::clone(&timeline);
        move |run| timeline.lock().unwrap().push(run)
    });
    let reminders = [
        ("ada@example.com", 0),
        ("bob@example.com", 1),
        ("cy@example.com", 0),
        ("dee@example.com", 2),
        ("bounce@example.invalid", u32::MAX),
        ("eve@example.com", 0),
    ];
    let entries: Vec<(Task, Duration)> = reminders
        .iter()
        .enumerate()
        .map(|(i, (to, flaky))| {
            let task = Task::Remind {
                to: (*to).to_owned(),
                flaky: *flaky,
            };
            (task, Duration::from_millis(300 * i as u64))
        })
        .collect();
    queue.insert_many(&entries).await?;

    // Kill B while it runs its first sweep.
    let mut killed = false;
    while start.elapsed() < RUN {
        sleep(Duration::from_millis(20)).await;
        let b_sweeping = timeline
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.replica == "b" && r.outcome.starts_with("started"));
        if b_sweeping && !killed {
            b.kill().ok(); // SIGKILL on Unix
            b.wait().ok();
            killed = true;
            timeline.lock().unwrap().push(Run {
                at: millis(wall()),
                replica: "b".into(),
                id: "-".into(),
                attempt: 0,
                tick: None,
                outcome: "killed (SIGKILL)".into(),
            });
        }
    }
    if !killed {
        b.kill().ok();
        b.wait().ok();
    }
    from_b.join().ok();
    let stats = a.shutdown(Duration::from_secs(2)).await;
    let dead = queue.dead_letters(10).await?;
    let schedules = queue.schedules().await?;
    queue.purge().await?;

    let mut runs = timeline.lock().unwrap().clone();
    runs.sort_by_key(|r| r.at);
    println!("timeline (s since start):");
    for run in &runs {
        let tick = run.tick.map_or(String::new(), |t| {
            format!(" tick {}.{:03}", t / 1000 % 100, t % 1000)
        });
        println!(
            "  {:>5.2}  replica {}  {:<24} attempt {}{tick}: {}",
            run.at.saturating_sub(started) as f64 / 1000.0,
            run.replica,
            run.id,
            run.attempt,
            run.outcome
        );
    }
    // Every tick instant of a schedule ran to its end exactly once, except
    // the one that was still running when the run ended.
    let mut ticks: BTreeMap<(String, u128), u32> = BTreeMap::new();
    for run in runs
        .iter()
        .filter(|r| r.tick.is_some() && r.outcome == "ok")
    {
        *ticks
            .entry((run.id.clone(), run.tick.unwrap()))
            .or_default() += 1;
    }
    let twice: Vec<_> = ticks.iter().filter(|(_, n)| **n > 1).collect();
    let retried = runs.iter().filter(|r| r.attempt > 1).count();
    println!("\nsummary:");
    println!(
        "  runs: {} ({} by replica a, {} by replica b)",
        runs.iter().filter(|r| r.attempt > 0).count(),
        runs.iter().filter(|r| r.replica == "a").count(),
        runs.iter()
            .filter(|r| r.replica == "b" && r.attempt > 0)
            .count()
    );
    println!("  retries (attempt > 1): {retried}");
    println!(
        "  ticks run to the end: {} (sweep {}, report {}), twice: {}",
        ticks.len(),
        ticks.keys().filter(|(s, _)| s == "sweep").count(),
        ticks.keys().filter(|(s, _)| s == "report").count(),
        twice.len()
    );
    println!(
        "  replica a: {} acked, {} failed attempts, {} dead-lettered",
        stats.completed, stats.failed, stats.dead
    );
    for letter in &dead {
        println!(
            "  dead letter {} after {} attempts: {}",
            letter.id, letter.attempts, letter.reason
        );
    }
    for schedule in &schedules {
        println!("  schedule {}: {}", schedule.name, schedule.spec);
    }
    let recovered = runs
        .iter()
        .any(|r| r.id == "sweep" && r.replica == "a" && r.attempt == 2);
    println!("  the killed replica's sweep came back to replica a as attempt 2: {recovered}");
    Ok(killed && twice.is_empty() && recovered && dead.len() == 1)
}

fn spawn_b(url: &str, name: &str) -> Child {
    Command::new(std::env::current_exe().expect("the example's own path"))
        .env("PUNCTUAL_QUEUE", name)
        .env("REDIS_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start replica b")
}

/// Reads B's runs into the timeline, until B's output ends.
fn read_b(b: &mut Child, timeline: Arc<Mutex<Vec<Run>>>) -> std::thread::JoinHandle<()> {
    let out = b.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Some(fields) = line.strip_prefix("RUN ") else {
                continue;
            };
            let f: Vec<&str> = fields.splitn(5, '|').collect();
            if f.len() < 5 {
                continue;
            }
            timeline.lock().unwrap().push(Run {
                at: f[0].parse().unwrap_or(0),
                replica: "b".into(),
                id: f[1].into(),
                attempt: f[2].parse().unwrap_or(0),
                tick: f[3].parse().ok(),
                outcome: f[4].into(),
            });
        }
    })
}

/// The wall clock: the timeline merges two processes' runs by it.
#[allow(clippy::disallowed_methods)]
fn wall() -> SystemTime {
    SystemTime::now()
}

fn millis(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}
