//! One-shot jobs: results, ordering, concurrency bounds, bad delays.

use punctual::{Scheduler, Stats};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn result_comes_back_through_the_handle_at_the_deadline() {
    let scheduler = Scheduler::new(2);
    let start = Instant::now();
    let job = scheduler
        .schedule(MS * 30, async { (Instant::now(), "payload".to_string()) })
        .unwrap();
    let (ran_at, value) = job.await.unwrap();
    assert_eq!(ran_at, start + MS * 30);
    assert_eq!(value, "payload");
    assert_eq!(
        scheduler.stats(),
        Stats {
            completed: 1,
            ..Stats::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn jobs_run_in_deadline_order_then_submission_order() {
    let scheduler = Scheduler::new(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + MS * 10;
    let mut handles = Vec::new();
    for (label, at) in [
        ("c", MS * 20),
        ("a1", MS * 10),
        ("b", MS * 15),
        ("a2", MS * 10),
    ] {
        let order = order.clone();
        let at = if at == MS * 10 {
            deadline
        } else {
            Instant::now() + at
        };
        handles.push(
            scheduler
                .schedule_at(at, async move { order.lock().unwrap().push(label) })
                .unwrap(),
        );
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec!["a1", "a2", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_in_the_past_runs_at_once() {
    let scheduler = Scheduler::new(1);
    sleep(MS * 10).await;
    let past = Instant::now() - MS * 5;
    let start = Instant::now();
    let job = scheduler
        .schedule_at(past, async { Instant::now() })
        .unwrap();
    assert_eq!(job.await.unwrap(), start);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_detaches_the_job() {
    let scheduler = Scheduler::new(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    drop(scheduler.schedule(MS, async move { counter.fetch_add(1, Ordering::SeqCst) }));
    sleep(MS * 5).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(scheduler.stats().completed, 1);
}

#[tokio::test(start_paused = true)]
async fn workers_bound_how_many_jobs_run_at_once() {
    let scheduler = Scheduler::new(3);
    let active = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let (active, peak) = (active.clone(), peak.clone());
            scheduler
                .schedule(MS, async move {
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    sleep(MS * 10).await;
                    active.fetch_sub(1, Ordering::SeqCst);
                })
                .unwrap()
        })
        .collect();
    sleep(MS * 5).await;
    assert_eq!(scheduler.stats().running, 3, "n due jobs run on n workers");
    assert_eq!(scheduler.stats().pending, 7);
    let start = Instant::now();
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    // 10 jobs of 10 ms on 3 workers: four rounds, the first already begun.
    assert_eq!(start.elapsed(), MS * 36);
}

#[tokio::test(start_paused = true)]
async fn duration_max_delays_do_not_panic() {
    let scheduler = Scheduler::new(1);
    let never = scheduler.schedule(Duration::MAX, async {}).unwrap();
    let next = never.next_run().unwrap();
    assert!(next > Instant::now() + Duration::from_secs(29 * 365 * 86_400));
    let periodic = scheduler
        .schedule_at_fixed_rate(Duration::MAX, Duration::MAX, || async {})
        .unwrap();
    let fixed_delay = scheduler
        .schedule_with_fixed_delay(Duration::ZERO, Duration::MAX, || async {})
        .unwrap();
    sleep(MS).await;
    assert_eq!(fixed_delay.runs(), 1);
    assert!(fixed_delay.next_run().unwrap() > Instant::now() + Duration::from_secs(3600));
    assert_eq!(periodic.runs(), 0);
    assert!(never.cancel() && periodic.cancel() && fixed_delay.cancel());
}

#[tokio::test(start_paused = true)]
async fn a_job_can_return_a_non_clone_value() {
    struct Token(#[allow(dead_code)] Vec<u8>);
    let scheduler = Scheduler::new(1);
    let job = scheduler
        .schedule(MS, async { Token(vec![1, 2, 3]) })
        .unwrap();
    assert_eq!(job.await.unwrap().0, vec![1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn builder_defaults_to_available_parallelism_workers() {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let scheduler = Scheduler::builder().build();
    let handles: Vec<_> = (0..workers + 2)
        .map(|_| scheduler.schedule(MS, sleep(MS * 10)).unwrap())
        .collect();
    sleep(MS * 2).await;
    assert_eq!(scheduler.stats().running, workers);
    for h in handles {
        h.await.unwrap();
    }
}

#[test]
#[should_panic(expected = "within a Tokio runtime")]
fn building_outside_a_runtime_panics() {
    let _ = Scheduler::new(1);
}

#[test]
#[should_panic(expected = "number of workers `n` must be at least 1")]
fn zero_workers_panics() {
    let _ = Scheduler::builder().workers(0);
}

#[tokio::test]
#[should_panic(expected = "number of workers `n` must be at least 1")]
async fn scheduler_new_with_zero_workers_panics() {
    let _ = Scheduler::new(0);
}
