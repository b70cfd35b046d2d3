//! `shutdown`, `shutdown_now`, the policies and their defaults, termination.

use punctual::{ScheduleError, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

fn ticker(scheduler: &Scheduler, count: &Arc<AtomicUsize>) -> punctual::JobHandle<()> {
    let count = count.clone();
    scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            let count = count.clone();
            async move {
                count.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn default_shutdown_runs_delayed_jobs_and_cancels_periodic_ones() {
    let scheduler = Scheduler::new(1);
    let ticks = Arc::new(AtomicUsize::new(0));
    let periodic = ticker(&scheduler, &ticks);
    let delayed = scheduler
        .schedule(MS * 50, async { "ran after shutdown" })
        .unwrap();
    sleep(MS * 5).await;
    scheduler.shutdown();
    assert!(scheduler.is_shutdown());
    assert!(
        periodic.is_cancelled(),
        "policies applied before shutdown returns"
    );
    assert_eq!(scheduler.stats().pending, 1, "only the delayed job is left");
    assert!(!scheduler.is_terminated());
    let start = Instant::now();
    scheduler.terminated().await;
    assert_eq!(
        start.elapsed(),
        MS * 45,
        "workers exit once the delayed job ran"
    );
    assert_eq!(delayed.await.unwrap(), "ran after shutdown");
    assert!(periodic.await.unwrap_err().is_cancelled());
    assert_eq!(ticks.load(Ordering::SeqCst), 1);
    assert!(scheduler.is_terminated());
}

#[tokio::test(start_paused = true)]
async fn run_delayed_false_cancels_jobs_not_yet_due() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .run_delayed_after_shutdown(false)
        .build();
    let blocker = scheduler.schedule(Duration::ZERO, sleep(MS * 10)).unwrap();
    let due = scheduler
        .schedule(MS, async { "due before shutdown" })
        .unwrap();
    let later = scheduler.schedule(MS * 100, async {}).unwrap();
    sleep(MS * 5).await; // blocker running, `due` waiting for the worker
    scheduler.shutdown();
    assert!(later.is_cancelled());
    assert!(!due.is_cancelled(), "already due: it still runs");
    scheduler.terminated().await;
    blocker.await.unwrap();
    assert_eq!(due.await.unwrap(), "due before shutdown");
    assert!(later.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn continue_periodic_true_keeps_periodic_jobs_running() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .continue_periodic_after_shutdown(true)
        .build();
    let ticks = Arc::new(AtomicUsize::new(0));
    let periodic = ticker(&scheduler, &ticks);
    scheduler.shutdown();
    sleep(MS * 45).await;
    assert_eq!(ticks.load(Ordering::SeqCst), 5);
    assert!(
        !scheduler.is_terminated(),
        "periodic work keeps the pool alive"
    );
    assert_eq!(scheduler.shutdown_now(), 1);
    scheduler.terminated().await;
    assert!(periodic.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_periodic_run_in_progress_at_shutdown_finishes_and_is_the_last() {
    let scheduler = Scheduler::new(1);
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            let f = f.clone();
            async move {
                sleep(MS * 5).await;
                f.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    sleep(MS * 2).await;
    scheduler.shutdown();
    scheduler.terminated().await;
    assert_eq!(finished.load(Ordering::SeqCst), 1, "the run finished");
    assert!(job.await.unwrap_err().is_cancelled());
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.cancelled), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn shutdown_now_cancels_pending_aborts_running_and_counts() {
    let scheduler = Scheduler::new(2);
    let running = scheduler
        .schedule(Duration::ZERO, async {
            sleep(Duration::from_secs(3600)).await;
            unreachable!("aborted");
        })
        .unwrap();
    let ticks = Arc::new(AtomicUsize::new(0));
    let periodic = ticker(&scheduler, &ticks);
    let pending: Vec<_> = (0..5)
        .map(|i| scheduler.schedule(MS * (100 + i), async {}).unwrap())
        .collect();
    sleep(MS * 3).await; // `running` runs; the ticker waits for its next run
    assert_eq!(scheduler.shutdown_now(), 6, "five one-shots and the ticker");
    assert_eq!(scheduler.shutdown_now(), 0, "none left");
    assert!(running.is_cancelled());
    scheduler.terminated().await;
    assert!(running.await.unwrap_err().is_cancelled());
    assert!(periodic.await.unwrap_err().is_cancelled());
    for p in pending {
        assert!(p.await.unwrap_err().is_cancelled());
    }
    let stats = scheduler.stats();
    assert_eq!((stats.pending, stats.running, stats.cancelled), (0, 0, 7));
}

#[tokio::test(start_paused = true)]
async fn scheduling_after_shutdown_is_an_error() {
    let scheduler = Scheduler::new(1);
    scheduler.shutdown();
    assert_eq!(
        scheduler.schedule(MS, async {}).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        scheduler.schedule_at(Instant::now(), async {}).unwrap_err(),
        ScheduleError::Shutdown
    );
    let err = scheduler
        .schedule_at_fixed_rate(MS, MS, || async {})
        .unwrap_err();
    assert_eq!(err, ScheduleError::Shutdown);
    assert_eq!(err.to_string(), "scheduler is shut down");
    scheduler.terminated().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_twice_is_harmless() {
    let scheduler = Scheduler::new(1);
    scheduler.shutdown();
    scheduler.shutdown();
    scheduler.terminated().await;
    scheduler.shutdown();
    assert!(scheduler.is_terminated());
}

#[tokio::test(start_paused = true)]
async fn dropping_every_scheduler_handle_is_a_graceful_shutdown() {
    let scheduler = Scheduler::new(1);
    let ticks = Arc::new(AtomicUsize::new(0));
    let periodic = ticker(&scheduler, &ticks);
    let delayed = scheduler.schedule(MS * 20, async { 7 }).unwrap();
    let clone = scheduler.clone();
    drop(scheduler);
    sleep(MS * 5).await;
    assert!(!periodic.is_cancelled(), "a clone still holds the pool");
    drop(clone);
    assert!(periodic.is_cancelled());
    assert_eq!(delayed.await.unwrap(), 7, "pending one-shots still run");
    assert!(periodic.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn terminated_resolves_for_every_waiter() {
    let scheduler = Scheduler::new(3);
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let s = scheduler.clone();
            tokio::spawn(async move { s.terminated().await })
        })
        .collect();
    let _ = scheduler.schedule(MS * 10, async {});
    sleep(MS).await;
    scheduler.shutdown();
    for w in waiters {
        w.await.unwrap();
    }
    assert!(scheduler.is_terminated());
}
