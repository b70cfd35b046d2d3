//! Fixed-rate and fixed-delay jobs.

use punctual::{ScheduleError, Scheduler};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

type Log = Arc<Mutex<Vec<Duration>>>;

#[tokio::test(start_paused = true)]
async fn fixed_rate_run_k_starts_at_initial_plus_k_periods() {
    let scheduler = Scheduler::new(1);
    let start = Instant::now();
    let log: Log = Arc::default();
    let l = log.clone();
    let job = scheduler
        .schedule_at_fixed_rate(MS * 5, MS * 10, move || {
            let l = l.clone();
            async move { l.lock().unwrap().push(start.elapsed()) }
        })
        .unwrap();
    sleep(MS * 100).await;
    let expected: Vec<_> = (0..10).map(|k| MS * (5 + 10 * k)).collect();
    assert_eq!(*log.lock().unwrap(), expected);
    assert_eq!(job.runs(), 10);
    assert_eq!(job.next_run(), Some(start + MS * 105));
}

#[tokio::test(start_paused = true)]
async fn fixed_rate_catches_up_back_to_back_without_overlap() {
    let scheduler = Scheduler::new(4);
    let start = Instant::now();
    let log: Log = Arc::default();
    let active = Arc::new(AtomicUsize::new(0));
    let (l, a) = (log.clone(), active.clone());
    let mut run = 0;
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            run += 1;
            let overrun = run == 1;
            let (l, a) = (l.clone(), a.clone());
            async move {
                assert_eq!(a.fetch_add(1, Ordering::SeqCst), 0, "runs overlap");
                l.lock().unwrap().push(start.elapsed());
                if overrun {
                    sleep(MS * 25).await;
                }
                a.fetch_sub(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    sleep(MS * 45).await;
    // Run 0 overruns to 25 ms; runs 1 (due 10) and 2 (due 20) follow at once,
    // then the schedule is caught up: run 3 at 30, run 4 at 40.
    assert_eq!(
        *log.lock().unwrap(),
        vec![Duration::ZERO, MS * 25, MS * 25, MS * 30, MS * 40]
    );
    assert!(job.cancel());
}

#[tokio::test(start_paused = true)]
async fn fixed_delay_counts_from_the_end_of_the_previous_run() {
    let scheduler = Scheduler::new(1);
    let start = Instant::now();
    let log: Log = Arc::default();
    let l = log.clone();
    let job = scheduler
        .schedule_with_fixed_delay(MS * 2, MS * 10, move || {
            let l = l.clone();
            async move {
                l.lock().unwrap().push(start.elapsed());
                sleep(MS * 3).await;
            }
        })
        .unwrap();
    sleep(MS * 50).await;
    assert_eq!(
        *log.lock().unwrap(),
        vec![MS * 2, MS * 15, MS * 28, MS * 41]
    );
    assert_eq!(job.next_run(), Some(start + MS * 54));
}

#[tokio::test(start_paused = true)]
async fn next_run_is_none_while_running() {
    let scheduler = Scheduler::new(1);
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, || sleep(MS * 4))
        .unwrap();
    sleep(MS * 2).await;
    assert_eq!(job.next_run(), None, "run in progress");
    assert_eq!(job.runs(), 0);
    sleep(MS * 3).await;
    assert!(job.next_run().is_some());
    assert_eq!(job.runs(), 1);
}

#[tokio::test(start_paused = true)]
async fn zero_period_is_an_error() {
    let scheduler = Scheduler::new(1);
    let rate = scheduler.schedule_at_fixed_rate(MS, Duration::ZERO, || async {});
    let delay = scheduler.schedule_with_fixed_delay(MS, Duration::ZERO, || async {});
    assert_eq!(rate.unwrap_err(), ScheduleError::ZeroPeriod);
    assert_eq!(delay.unwrap_err(), ScheduleError::ZeroPeriod);
    assert_eq!(scheduler.stats().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_error_wins_over_zero_period() {
    let scheduler = Scheduler::new(1);
    scheduler.shutdown();
    let err = scheduler
        .schedule_at_fixed_rate(MS, Duration::ZERO, || async {})
        .unwrap_err();
    assert_eq!(err, ScheduleError::Shutdown);
    let err = scheduler
        .schedule_with_fixed_delay(MS, Duration::ZERO, || async {})
        .unwrap_err();
    assert_eq!(err, ScheduleError::Shutdown);
}

#[tokio::test(start_paused = true)]
async fn each_periodic_run_counts_as_completed() {
    let scheduler = Scheduler::new(1);
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, || async {})
        .unwrap();
    sleep(MS * 35).await;
    assert_eq!(job.runs(), 4);
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.pending), (4, 1));
}
