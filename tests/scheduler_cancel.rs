//! `cancel` and `abort`, on one-shot and periodic jobs, before, during and
//! after a run.

use punctual::{JobError, Scheduler, Stats};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::sleep;

const MS: Duration = Duration::from_millis(1);

/// Sets its flag when dropped: tells when a job's future is released.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_before_start_removes_the_job_at_once() {
    let scheduler = Scheduler::new(1);
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let job = scheduler
        .schedule(Duration::from_secs(3600), async move {
            let _flag = flag;
            unreachable!("cancelled jobs never run");
        })
        .unwrap();
    let other = scheduler
        .schedule(Duration::from_secs(7200), async {})
        .unwrap();
    assert_eq!(scheduler.stats().pending, 2);
    assert!(job.cancel());
    assert_eq!(scheduler.stats().pending, 1, "pending drops at once");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the future is dropped at once"
    );
    assert!(job.is_cancelled());
    assert!(job.is_finished());
    assert_eq!(job.next_run(), None);
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert!(other.next_run().is_some());
    assert_eq!(scheduler.stats().cancelled, 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_after_finish_returns_false_and_changes_nothing() {
    let scheduler = Scheduler::new(1);
    let job = scheduler.schedule(MS, async { 5 }).unwrap();
    sleep(MS * 2).await;
    assert!(job.is_finished());
    assert!(!job.cancel());
    assert!(!job.abort());
    assert!(!job.is_cancelled());
    assert_eq!(job.await.unwrap(), 5);
    assert_eq!(
        scheduler.stats(),
        Stats {
            completed: 1,
            ..Stats::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_of_a_running_one_shot_returns_false_and_it_completes() {
    let scheduler = Scheduler::new(1);
    let job = scheduler
        .schedule(Duration::ZERO, async {
            sleep(MS * 10).await;
            "finished"
        })
        .unwrap();
    sleep(MS).await;
    assert_eq!(scheduler.stats().running, 1);
    assert!(!job.cancel());
    assert!(!job.is_cancelled());
    assert_eq!(job.await.unwrap(), "finished");
}

#[tokio::test(start_paused = true)]
async fn cancel_of_a_running_periodic_job_lets_the_run_finish_then_stops() {
    let scheduler = Scheduler::new(1);
    let finished_runs = Arc::new(AtomicUsize::new(0));
    let f = finished_runs.clone();
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            let f = f.clone();
            async move {
                sleep(MS * 5).await;
                f.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    sleep(MS * 12).await; // second run in progress
    assert!(job.cancel());
    assert!(!job.cancel(), "only the first cancel cancels");
    assert!(job.is_cancelled());
    assert!(!job.is_finished(), "its run is still in progress");
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert_eq!(finished_runs.load(Ordering::SeqCst), 2, "the run finished");
    sleep(MS * 50).await;
    assert_eq!(finished_runs.load(Ordering::SeqCst), 2, "no later run");
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.cancelled, stats.pending), (2, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn cancel_of_a_periodic_job_between_runs_removes_it() {
    let scheduler = Scheduler::new(1);
    let job = scheduler
        .schedule_with_fixed_delay(Duration::ZERO, MS * 10, || async {})
        .unwrap();
    sleep(MS * 5).await;
    assert_eq!(job.runs(), 1);
    assert_eq!(scheduler.stats().pending, 1);
    assert!(job.cancel());
    assert_eq!(scheduler.stats().pending, 0);
    assert!(job.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn abort_stops_a_running_one_shot_at_its_next_await() {
    let scheduler = Scheduler::new(1);
    let after_await = Arc::new(AtomicBool::new(false));
    let a = after_await.clone();
    let job = scheduler
        .schedule(Duration::ZERO, async move {
            sleep(MS * 10).await;
            a.store(true, Ordering::SeqCst);
        })
        .unwrap();
    sleep(MS).await;
    assert!(job.abort());
    assert!(job.is_cancelled());
    assert!(job.await.unwrap_err().is_cancelled());
    sleep(MS * 20).await;
    assert!(
        !after_await.load(Ordering::SeqCst),
        "code after the await never ran"
    );
    let stats = scheduler.stats();
    assert_eq!((stats.running, stats.completed, stats.cancelled), (0, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn abort_stops_a_running_periodic_job_and_every_later_run() {
    let scheduler = Scheduler::new(1);
    let completed = Arc::new(AtomicUsize::new(0));
    let c = completed.clone();
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            let c = c.clone();
            async move {
                sleep(MS * 5).await;
                c.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    sleep(MS * 12).await;
    assert!(job.abort());
    assert!(job.await.unwrap_err().is_cancelled());
    sleep(MS * 50).await;
    assert_eq!(
        completed.load(Ordering::SeqCst),
        1,
        "the aborted run never finished"
    );
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.cancelled), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn abort_before_start_is_a_cancel() {
    let scheduler = Scheduler::new(1);
    let job = scheduler.schedule(MS * 10, async {}).unwrap();
    assert!(job.abort());
    assert!(!job.abort());
    assert_eq!(scheduler.stats().pending, 0);
    assert!(job.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn cancelled_jobs_leave_nothing_in_the_queue() {
    let scheduler = Scheduler::new(1);
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            scheduler
                .schedule(Duration::from_secs(60 + i), async {})
                .unwrap()
        })
        .collect();
    for h in &handles {
        assert!(h.cancel());
    }
    assert_eq!(scheduler.stats().pending, 0);
    scheduler.shutdown();
    // With nothing left queued, the workers exit at once instead of waiting
    // for the cancelled deadlines.
    scheduler.terminated().await;
    assert_eq!(tokio::time::Instant::now().elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_second_cancel_leaves_the_job_that_reused_the_slot_alone() {
    let scheduler = Scheduler::new(1);
    let first = scheduler
        .schedule(Duration::from_secs(60), async { 1 })
        .unwrap();
    assert!(first.cancel());
    // Most likely in the slot the first job left: the first handle's record
    // of its queue position now points at this job.
    let second = scheduler
        .schedule(Duration::from_secs(60), async { 2 })
        .unwrap();
    assert!(!first.cancel());
    assert!(!first.abort());
    assert_eq!(scheduler.stats().pending, 1);
    assert!(second.next_run().is_some());
    sleep(Duration::from_secs(61)).await;
    assert_eq!(second.await.unwrap(), 2);
}
