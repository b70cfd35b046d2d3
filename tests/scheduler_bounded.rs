//! `Builder::max_pending` and `ScheduleError::Full`.

use punctual::{MissedTicks, ScheduleError, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::sleep;

const S: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn every_schedule_call_is_refused_at_the_bound_and_drops_its_job() {
    let scheduler = Scheduler::builder().workers(1).max_pending(2).build();
    let a = scheduler.schedule(S, async { 1 }).unwrap();
    let b = scheduler.schedule_at_fixed_rate(S, S, || async {}).unwrap();
    assert_eq!(scheduler.stats().pending, 2);

    let dropped = Arc::new(AtomicBool::new(false));
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = Flag(dropped.clone());
    let refused = scheduler.schedule(S, async move { drop(flag) });
    assert_eq!(refused.unwrap_err(), ScheduleError::Full);
    assert!(dropped.load(Ordering::SeqCst), "the refused job was kept");

    let now = tokio::time::Instant::now();
    assert_eq!(
        scheduler.schedule_at(now, async {}).unwrap_err(),
        ScheduleError::Full
    );
    assert_eq!(
        scheduler
            .schedule_at_fixed_rate(S, S, || async {})
            .unwrap_err(),
        ScheduleError::Full
    );
    assert_eq!(
        scheduler
            .schedule_at_fixed_rate_with(S, S, MissedTicks::Skip, || async {})
            .unwrap_err(),
        ScheduleError::Full
    );
    assert_eq!(
        scheduler
            .schedule_with_fixed_delay(S, S, || async {})
            .unwrap_err(),
        ScheduleError::Full
    );
    assert_eq!(scheduler.stats().pending, 2);
    assert_eq!(scheduler.stats().cancelled, 0);
    assert!(a.next_run().is_some() && b.next_run().is_some());
    assert_eq!(a.await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_and_abort_free_a_place_at_once() {
    let scheduler = Scheduler::builder().workers(1).max_pending(1).build();
    let job = scheduler.schedule(S, async {}).unwrap();
    assert_eq!(
        scheduler.schedule(S, async {}).unwrap_err(),
        ScheduleError::Full
    );
    assert!(job.cancel());
    let job = scheduler.schedule(S, async {}).unwrap();
    assert!(job.abort());
    let periodic = scheduler
        .schedule_with_fixed_delay(S, S, || async {})
        .unwrap();
    assert!(periodic.cancel());
    assert!(scheduler.schedule(S, async {}).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_started_job_no_longer_counts() {
    let scheduler = Scheduler::builder().workers(1).max_pending(1).build();
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (s, r) = (started.clone(), release.clone());
    let running = scheduler
        .schedule(Duration::ZERO, async move {
            s.notify_one();
            r.notified().await;
        })
        .unwrap();
    started.notified().await;
    assert_eq!(scheduler.stats().pending, 0);
    assert_eq!(scheduler.stats().running, 1);
    let next = scheduler.schedule(S, async {}).unwrap();
    assert_eq!(
        scheduler.schedule(S, async {}).unwrap_err(),
        ScheduleError::Full
    );
    release.notify_one();
    running.await.unwrap();
    next.await.unwrap();
    assert!(scheduler.schedule(S, async {}).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_periodic_job_counts_once_across_its_runs() {
    let scheduler = Scheduler::builder().workers(1).max_pending(2).build();
    let periodic = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, S, || async {})
        .unwrap();
    for _ in 0..5 {
        sleep(S).await;
        assert_eq!(scheduler.stats().pending, 1);
    }
    assert!(periodic.runs() >= 5);
    let other = scheduler.schedule(S * 60, async {}).unwrap();
    assert_eq!(
        scheduler.schedule(S, async {}).unwrap_err(),
        ScheduleError::Full
    );
    assert!(periodic.cancel());
    assert!(other.cancel());
}

#[tokio::test(start_paused = true)]
async fn a_periodic_run_frees_its_place_while_it_runs() {
    let scheduler = Scheduler::builder().workers(1).max_pending(1).build();
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (s, r) = (started.clone(), release.clone());
    let periodic = scheduler
        .schedule_with_fixed_delay(Duration::ZERO, S, move || {
            let (s, r) = (s.clone(), r.clone());
            async move {
                s.notify_one();
                r.notified().await;
            }
        })
        .unwrap();
    started.notified().await;
    // The place is free while the run is in progress...
    let one_shot = scheduler.schedule(S * 60, async {}).unwrap();
    // ...and the periodic job is queued again when its run ends, past the
    // bound (which only refuses `schedule*` calls).
    release.notify_one();
    sleep(S / 2).await;
    assert_eq!(periodic.runs(), 1);
    assert_eq!(scheduler.stats().pending, 2);
    assert_eq!(
        scheduler.schedule(S, async {}).unwrap_err(),
        ScheduleError::Full
    );
    assert!(one_shot.cancel());
    assert!(periodic.cancel());
}

#[tokio::test(start_paused = true)]
async fn shutdown_wins_over_full_and_zero_period() {
    let scheduler = Scheduler::builder().workers(1).max_pending(1).build();
    scheduler.schedule(S, async {}).unwrap();
    assert_eq!(
        scheduler
            .schedule_at_fixed_rate(S, Duration::ZERO, || async {})
            .unwrap_err(),
        ScheduleError::ZeroPeriod,
        "a bad argument wins over Full"
    );
    scheduler.shutdown();
    assert_eq!(scheduler.stats().pending, 1, "the one-shot job still runs");
    assert_eq!(
        scheduler.schedule(S, async {}).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        scheduler
            .schedule_at_fixed_rate_with(S, Duration::ZERO, MissedTicks::Delay, || async {})
            .unwrap_err(),
        ScheduleError::Shutdown
    );
    scheduler.terminated().await;
}

#[test]
#[should_panic(expected = "the bound `n` on pending jobs must be at least 1, got 0")]
fn max_pending_zero_panics() {
    let _ = Scheduler::builder().max_pending(0);
}

#[test]
fn full_and_invalid_cron_display_lowercase() {
    assert_eq!(
        ScheduleError::Full.to_string(),
        "scheduler has its maximum of pending jobs"
    );
    assert_eq!(
        ScheduleError::InvalidCron("bad field".into()).to_string(),
        "invalid cron expression: bad field"
    );
}
