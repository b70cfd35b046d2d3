//! A user value whose `Drop` panics (a job's future, closure or output) is
//! contained on every path: no panic reaches the caller of a scheduler
//! method, every other handle is still woken, and no worker dies.

mod common;

use common::Bomb;
use punctual::{JobHandle, Scheduler};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::{sleep, timeout};

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

/// A one-shot job that holds a bomb until it runs or is dropped.
fn armed_job(scheduler: &Scheduler, delay: Duration) -> JobHandle<()> {
    let bomb = Bomb;
    scheduler
        .schedule(delay, async move {
            std::mem::forget(bomb);
        })
        .unwrap()
}

/// A periodic job whose closure holds a bomb.
fn armed_periodic(scheduler: &Scheduler) -> JobHandle<()> {
    let bomb = Bomb;
    scheduler
        .schedule_at_fixed_rate(HOUR, HOUR, move || {
            let _ = &bomb;
            async {}
        })
        .unwrap()
}

async fn all_cancelled(handles: Vec<JobHandle<()>>) {
    for handle in handles {
        let result = timeout(HOUR, handle).await.expect("handle never woken");
        assert!(result.unwrap_err().is_cancelled());
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_contains_a_panicking_drop_and_wakes_every_other_handle() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .run_delayed_after_shutdown(false)
        .build();
    let mut handles = vec![armed_job(&scheduler, HOUR), armed_periodic(&scheduler)];
    for _ in 0..3 {
        handles.push(scheduler.schedule(HOUR, async {}).unwrap());
    }
    handles.push(armed_job(&scheduler, HOUR * 2));
    let shut = catch_unwind(AssertUnwindSafe(|| scheduler.shutdown()));
    assert!(shut.is_ok(), "a panic reached the caller of shutdown()");
    assert_eq!(scheduler.stats().cancelled, 6);
    all_cancelled(handles).await;
    timeout(HOUR, scheduler.terminated()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_now_contains_a_panicking_drop_and_counts_every_job() {
    let scheduler = Scheduler::new(1);
    let mut handles = vec![armed_job(&scheduler, HOUR), armed_periodic(&scheduler)];
    handles.push(scheduler.schedule(HOUR, async {}).unwrap());
    handles.push(armed_job(&scheduler, HOUR));
    let count = catch_unwind(AssertUnwindSafe(|| scheduler.shutdown_now()));
    assert_eq!(count.ok(), Some(4), "shutdown_now panicked or miscounted");
    all_cancelled(handles).await;
    timeout(HOUR, scheduler.terminated()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_scheduler_contains_a_panicking_drop() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .run_delayed_after_shutdown(false)
        .build();
    let handles = vec![
        armed_periodic(&scheduler),
        armed_job(&scheduler, HOUR),
        scheduler.schedule(HOUR, async {}).unwrap(),
    ];
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(scheduler)));
    assert!(dropped.is_ok(), "a panic escaped the last Scheduler's drop");
    all_cancelled(handles).await;
}

#[tokio::test(start_paused = true)]
async fn cancel_contains_a_panicking_drop() {
    let scheduler = Scheduler::new(1);
    let job = armed_job(&scheduler, HOUR);
    let cancelled = catch_unwind(AssertUnwindSafe(|| job.cancel()));
    assert_eq!(cancelled.ok(), Some(true));
    assert!(job.await.unwrap_err().is_cancelled());
    let next = scheduler.schedule(MS, async { "served" }).unwrap();
    assert_eq!(next.await.unwrap(), "served");
}

#[tokio::test(start_paused = true)]
async fn a_refused_job_with_a_panicking_drop_returns_the_error() {
    let scheduler = Scheduler::new(1);
    scheduler.shutdown();
    let refused = catch_unwind(AssertUnwindSafe(|| {
        let bomb = Bomb;
        scheduler
            .schedule(MS, async move {
                std::mem::forget(bomb);
            })
            .map(|_| ())
    }));
    assert_eq!(
        refused.ok(),
        Some(Err(punctual::ScheduleError::Shutdown)),
        "schedule() panicked instead of returning the error"
    );
}

/// Defect 3: the worker dropped a finished job's output outside
/// `catch_unwind` when nobody held the handle, and died.
#[tokio::test(start_paused = true)]
async fn an_output_that_panics_on_drop_with_no_handle_leaves_the_worker_serving() {
    let scheduler = Scheduler::new(1);
    drop(scheduler.schedule(MS, async { Bomb }).unwrap());
    sleep(MS * 2).await;
    let next = scheduler.schedule(MS, async { "still serving" }).unwrap();
    let served = timeout(HOUR, next).await.expect("the only worker died");
    assert_eq!(served.unwrap(), "still serving");
    assert_eq!(scheduler.stats().completed, 2);
    assert!(!scheduler.is_terminated());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_handle_whose_output_panics_on_drop_is_contained() {
    let scheduler = Scheduler::new(1);
    let job = scheduler.schedule(MS, async { Bomb }).unwrap();
    sleep(MS * 2).await;
    assert!(job.is_finished());
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(job)));
    assert!(dropped.is_ok(), "the handle's drop let the panic through");
    let next = scheduler.schedule(MS, async { 7 }).unwrap();
    assert_eq!(next.await.unwrap(), 7);
}

#[tokio::test(start_paused = true)]
async fn an_aborted_output_that_panics_on_drop_is_contained() {
    let scheduler = Scheduler::new(1);
    let job = Arc::new(std::sync::Mutex::new(None::<JobHandle<Bomb>>));
    let slot = job.clone();
    // The job aborts itself, then returns its output before another await:
    // the output is discarded, and its drop panics.
    let handle = scheduler
        .schedule(MS, async move {
            let me = slot.lock().unwrap().take().unwrap();
            assert!(me.abort());
            drop(me);
            Bomb
        })
        .unwrap();
    let probe = handle_probe(&scheduler);
    *job.lock().unwrap() = Some(handle);
    sleep(MS * 2).await;
    assert_eq!(timeout(HOUR, probe).await.unwrap().unwrap(), 1);
    let stats = scheduler.stats();
    assert_eq!((stats.cancelled, stats.running), (1, 0));
}

/// A job after the others, to show the worker is alive.
fn handle_probe(scheduler: &Scheduler) -> JobHandle<usize> {
    let count = Arc::new(AtomicUsize::new(0));
    scheduler
        .schedule(
            MS * 2,
            async move { count.fetch_add(1, Ordering::SeqCst) + 1 },
        )
        .unwrap()
}
