//! Panics in jobs are isolated, reported and stop periodic jobs.

use punctual::{JobError, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::{sleep, timeout};

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

#[tokio::test(start_paused = true)]
async fn a_panic_while_the_worker_drops_a_job_does_not_kill_it() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("drop failed");
        }
    }
    /// Completes at once; its `Drop` panics, after the run.
    struct Finished(PanicsOnDrop);
    impl std::future::Future for Finished {
        type Output = u8;
        fn poll(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<u8> {
            std::task::Poll::Ready(1)
        }
    }

    let scheduler = Scheduler::new(1);
    let one_shot = scheduler.schedule(MS, Finished(PanicsOnDrop)).unwrap();
    // Bounded: a dead worker would otherwise hang the test.
    let limit = Duration::from_secs(3600);
    let one_shot = timeout(limit, one_shot).await.expect("worker died");
    assert_eq!(one_shot.unwrap(), 1, "the run itself succeeded");

    // Cancelled mid-run: the worker drops the closure when the run ends.
    let guard = PanicsOnDrop;
    let periodic = scheduler
        .schedule_at_fixed_rate(MS, MS * 10, move || {
            let _keep = &guard;
            sleep(MS * 5)
        })
        .unwrap();
    sleep(MS * 3).await;
    assert!(periodic.cancel());
    let periodic = timeout(limit, periodic).await.expect("handle never woken");
    assert!(periodic.unwrap_err().is_cancelled());

    let next = scheduler.schedule(MS, async { "still serving" }).unwrap();
    let next = timeout(limit, next).await.expect("worker died");
    assert_eq!(next.unwrap(), "still serving");
    let stats = scheduler.stats();
    assert_eq!((stats.running, stats.completed), (0, 3));
}
