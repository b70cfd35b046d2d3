//! Testing your own durable jobs without a server, in virtual time.
//!
//! The service below is written once against `punctual::durable::Durable`:
//! in production it gets a `RedisQueue` or a `PgQueue`, and here a
//! `MemoryQueue` whose clock starts two evenings before Europe/Berlin
//! falls back (on 2026-10-25). Under Tokio's paused time, three nights of
//! schedules run in milliseconds, and the test checks that the nightly
//! report ran exactly once each night, at 03:00 Berlin time, and that an
//! e-mail that bounced was given up at once while one that hit a rate
//! limit was tried again after the time the provider asked for.
//!
//! Run it with `cargo run --features cron --example test_your_jobs`. In your
//! own crate the body of `main` is a `#[tokio::test(start_paused = true)]`
//! (tokio's `test-util` feature).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use punctual::durable::{Durable, Job, Outcome, Worker};
use punctual::memory::MemoryQueue;
use serde::{Deserialize, Serialize};

/// The service's jobs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
enum Task {
    NightlyReport,
    Email { to: String },
}

/// What the service did, as its tests see it.
#[derive(Debug, Default)]
struct Log {
    reports: Vec<SystemTime>,
    emails: Vec<(String, u32)>,
}

/// The service: declares its schedule at start-up (every replica may)...
async fn start<Q: Durable<Item = Task>>(jobs: &Q) -> Result<(), Q::Error> {
    jobs.schedule_cron(
        "nightly-report",
        "CRON_TZ=Europe/Berlin 0 3 * * *",
        &Task::NightlyReport,
    )
    .await?;
    Ok(())
}

/// ... and handles each job. The mail provider's answers are faked here.
fn handle(log: &Arc<Mutex<Log>>, job: Job<Task>) -> Outcome {
    let mut log = log.lock().unwrap();
    match job.value() {
        Task::NightlyReport => {
            log.reports.push(job.deadline());
            Outcome::Done
        }
        Task::Email { to } => {
            log.emails.push((to.clone(), job.attempt()));
            match (to.as_str(), job.attempt()) {
                // Retrying a bounced address will not help.
                ("nobody@example.com", _) => Outcome::discard("550 mailbox does not exist"),
                // The provider asks for 30 s on the first try.
                ("busy@example.com", 1) => {
                    Outcome::retry_after("429 rate limited", Duration::from_secs(30))
                }
                _ => Outcome::Done,
            }
        }
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), punctual::memory::Error> {
    // 2026-10-23 20:00 UTC: two evenings before the clocks go back.
    let evening = UNIX_EPOCH + Duration::from_secs(1_792_785_600);
    let jobs: MemoryQueue<Task> = MemoryQueue::builder("jobs").start_at(evening).build();
    start(&jobs).await?;
    let log: Arc<Mutex<Log>> = Arc::default();
    let worker = Worker::builder(jobs.clone()).spawn({
        let log = Arc::clone(&log);
        move |job| std::future::ready(handle(&log, job))
    });
    for to in [
        "alice@example.com",
        "nobody@example.com",
        "busy@example.com",
    ] {
        let email = Task::Email { to: to.to_owned() };
        jobs.insert(&email, Duration::from_secs(60)).await?;
    }

    // Three nights pass (paused time: at once).
    tokio::time::sleep(Duration::from_secs(3 * 86_400)).await;
    let stats = worker.shutdown(Duration::from_secs(1)).await;

    let dead = jobs.dead_letters(10).await?;
    let log = log.lock().unwrap();
    let hours: Vec<u64> = log
        .reports
        .iter()
        .map(|at| at.duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600 % 24)
        .collect();
    println!("reports at (UTC hour): {hours:?}");
    println!("e-mails (to, attempt): {:?}", log.emails);
    println!("worker: {stats:?}");
    // 03:00 CEST is 01:00 UTC; after the clocks go back, 03:00 CET is 02:00.
    assert_eq!(hours, [1, 2, 2], "once a night, at 03:00 in Berlin");
    assert_eq!(
        log.emails,
        [
            ("alice@example.com".to_owned(), 1),
            ("nobody@example.com".to_owned(), 1),
            ("busy@example.com".to_owned(), 1),
            ("busy@example.com".to_owned(), 2),
        ]
    );
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "550 mailbox does not exist");
    println!("ok: one report a night across the change, one e-mail given up");
    Ok(())
}
