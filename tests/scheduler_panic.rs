//! Panics in jobs are isolated, reported and stop periodic jobs.

use punctual::{JobError, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::sleep;

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn a_panic_is_isolated_and_the_worker_keeps_serving() {
    let scheduler = Scheduler::new(1);
    let bad = scheduler.schedule(MS, async { panic!("bad job") }).unwrap();
    let good = scheduler
        .schedule(MS * 2, async { "still serving" })
        .unwrap();
    let err = bad.await.unwrap_err();
    assert!(err.is_panic());
    assert_eq!(err.to_string(), "job panicked: bad job");
    let payload = err.try_into_panic().unwrap();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"bad job"));
    assert_eq!(good.await.unwrap(), "still serving");
    let stats = scheduler.stats();
    assert_eq!((stats.panicked, stats.completed, stats.running), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_periodic_panic_stops_later_runs() {
    let scheduler = Scheduler::new(1);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            let run = r.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if run == 3 {
                    panic!("third run fails: {run}");
                }
            }
        })
        .unwrap();
    let err = job.await.unwrap_err();
    assert_eq!(err.to_string(), "job panicked: third run fails: 3");
    sleep(MS * 100).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.panicked, stats.pending), (2, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_periodic_closure_itself_is_caught() {
    let scheduler = Scheduler::new(1);
    let mut calls = 0;
    let job = scheduler
        .schedule_with_fixed_delay(Duration::ZERO, MS, move || {
            calls += 1;
            assert!(calls < 2, "closure refuses to build run {calls}");
            async {}
        })
        .unwrap();
    sleep(MS * 5).await;
    assert!(job.is_finished());
    assert_eq!(job.runs(), 1, "a panicked run is not counted");
    assert_eq!(job.next_run(), None);
    assert!(!job.cancel(), "a panicked job is finished");
    assert!(!job.is_cancelled());
    assert!(matches!(job.await, Err(JobError::Panicked(_))));
    assert_eq!(scheduler.stats().panicked, 1);
}

#[tokio::test(start_paused = true)]
async fn non_string_payloads_still_report() {
    let scheduler = Scheduler::new(1);
    let job = scheduler
        .schedule(MS, async { std::panic::panic_any(42u32) })
        .unwrap();
    let err = job.await.unwrap_err();
    assert_eq!(err.to_string(), "job panicked");
    assert_eq!(format!("{err:?}"), "Panicked(\"..\")");
    assert_eq!(
        err.try_into_panic().unwrap().downcast_ref::<u32>(),
        Some(&42)
    );
}
