//! A service's background jobs on one `Scheduler`.
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
//! Run with `cargo run --example periodic_jobs`.

use punctual::Scheduler;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::main]
async fn main() {
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
