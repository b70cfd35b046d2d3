//! A service's background jobs on one `Scheduler`.
//!
//! First, what a fixed-rate job does after missed runs, the three
//! `MissedTicks` policies side by side with a cron job on one timeline:
//! each fixed-rate job has a period of 500 ms and a first run that takes
//! 1250 ms; the cron job (`* * * * * *`, with `--features cron`) runs at
//! every whole second.
//!
//! Then a service's jobs:
//!
//! - `metrics`: fixed rate, every 300 ms, however long a flush takes;
//! - `cache`: fixed delay, 400 ms after the previous refresh ended;
//! - `sync`: fixed rate, panics on its third run: the worker survives, the
//!   job stops, and its handle reports the panic;
//! - `reminder`: a one-shot job cancelled through its handle before it runs;
//! - `report`: a one-shot job with a result, still run after shutdown.
//!
//! Then a graceful `shutdown()`: periodic jobs are cancelled, the pending
//! report still runs, and `terminated()` resolves once the workers are done.
//!
//! Run with `cargo run --example periodic_jobs`, or
//! `cargo run --example periodic_jobs --features cron` to add the cron job.

use punctual::{MissedTicks, Scheduler};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One run: which job, from when to when (ms since the start).
type Runs = Arc<Mutex<Vec<(usize, u128, u128)>>>;

/// A fixed-rate job per policy, and a cron job, for 3.5 s; then their runs
/// drawn on one timeline, one column per 50 ms.
async fn policies() {
    const NAMES: [&str; 4] = ["Burst", "Delay", "Skip", "cron"];
    let scheduler = Scheduler::new(4);
    let start = Instant::now();
    let runs: Runs = Arc::default();
    let policies = [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip];
    let mut jobs = Vec::new();
    for (row, missed) in policies.into_iter().enumerate() {
        let runs = runs.clone();
        let mut first = true;
        let job = scheduler
            .schedule_at_fixed_rate_with(ms(0), ms(500), missed, move || {
                let takes = if std::mem::take(&mut first) {
                    1250
                } else {
                    100
                };
                run(runs.clone(), row, start, ms(takes))
            })
            .unwrap();
        jobs.push(job);
    }
    #[cfg(feature = "cron")]
    {
        let runs = runs.clone();
        let job = scheduler
            .schedule_cron("* * * * * *", move || run(runs.clone(), 3, start, ms(100)))
            .unwrap();
        jobs.push(job);
    }
    sleep(ms(3_500)).await;
    scheduler.shutdown_now();
    scheduler.terminated().await;

    println!("missed ticks: period 500 ms, first run 1250 ms, later runs 100 ms");
    let cells = 3_500 / 50;
    let mut ruler: String = (0..cells)
        .map(|c| if c % 10 == 0 { '|' } else { ' ' })
        .collect();
    ruler.insert_str(0, "       ");
    println!("{ruler}  (| every 500 ms)");
    let runs = runs.lock().unwrap();
    for (row, name) in NAMES.iter().enumerate().take(jobs.len()) {
        let mut line = vec![' '; cells];
        for &(_, from, to) in runs.iter().filter(|r| r.0 == row) {
            let (from, to) = ((from / 50) as usize, (to / 50) as usize);
            for cell in line.iter_mut().take(to.max(from + 1)).skip(from) {
                *cell = '=';
            }
            if let Some(cell) = line.get_mut(from) {
                *cell = '[';
            }
        }
        println!("{name:>6} {}", line.into_iter().collect::<String>());
    }
    if jobs.len() == 3 {
        println!("  (run with --features cron to add a cron job)");
    }
    println!();
}

/// One logged run of `takes`.
async fn run(runs: Runs, row: usize, start: Instant, takes: Duration) {
    let from = start.elapsed().as_millis();
    sleep(takes).await;
    runs.lock()
        .unwrap()
        .push((row, from, start.elapsed().as_millis()));
}

#[tokio::main]
async fn main() {
    policies().await;
    service_jobs().await;
}

async fn service_jobs() {
    let start = Instant::now();
    let stamp = move || format!("[{:>5} ms]", start.elapsed().as_millis());
    // One line per panic instead of the default hook's report: the job's
    // handle carries the details.
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("{} (panic hook) {info}", stamp());
    }));
    let scheduler = Scheduler::builder().workers(2).build();

    let metrics = scheduler
        .schedule_at_fixed_rate(ms(0), ms(300), move || async move {
            println!("{} metrics: flushed", stamp());
        })
        .unwrap();

    let cache = scheduler
        .schedule_with_fixed_delay(ms(100), ms(400), move || async move {
            println!("{} cache:   refreshing (takes 150 ms)", stamp());
            sleep(ms(150)).await;
        })
        .unwrap();

    let sync_runs = Arc::new(AtomicU32::new(0));
    let runs = sync_runs.clone();
    let sync = scheduler
        .schedule_at_fixed_rate(ms(50), ms(250), move || {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                println!("{} sync:    run {run}", stamp());
                if run == 3 {
                    panic!("upstream returned garbage on run {run}");
                }
            }
        })
        .unwrap();

    let reminder = scheduler
        .schedule(
            ms(1_000),
            async move { println!("{} reminder: sent", stamp()) },
        )
        .unwrap();
    let report = scheduler
        .schedule(ms(1_600), async move {
            println!("{} report:  generated", stamp());
            "report #1: 5 metric flushes"
        })
        .unwrap();

    // The panicking job's handle resolves as soon as it stops.
    match sync.await {
        Err(e) => println!(
            "{} sync stopped: {e} (runs completed: {})",
            stamp(),
            sync_runs.load(Ordering::SeqCst) - 1
        ),
        Ok(()) => unreachable!("a periodic job only ends by cancel or panic"),
    }

    sleep_until(start + ms(700)).await;
    println!(
        "{} the user acted: cancelling the reminder -> {}",
        stamp(),
        reminder.cancel()
    );

    sleep_until(start + ms(1_400)).await;
    println!("{} shutting down: {:?}", stamp(), scheduler.stats());
    scheduler.shutdown();
    scheduler.terminated().await;
    println!("{} terminated", stamp());

    println!("\n--- summary ---");
    println!(
        "metrics:  {} runs, then {}",
        metrics.runs(),
        metrics.await.unwrap_err()
    );
    println!(
        "cache:    {} runs, then {}",
        cache.runs(),
        cache.await.unwrap_err()
    );
    println!("reminder: {}", reminder.await.unwrap_err());
    println!("report:   {}", report.await.unwrap());
    println!("stats:    {:?}", scheduler.stats());
}
