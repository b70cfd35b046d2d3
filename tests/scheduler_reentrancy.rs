//! A job may use the scheduler that runs it without deadlock.

use punctual::{JobHandle, Scheduler};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{sleep, timeout};

const MS: Duration = Duration::from_millis(1);
/// Far beyond what any of these needs: a deadlock shows up as a timeout.
const LIMIT: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn a_job_can_schedule_more_jobs() {
    // Two workers: the outer job holds one while it awaits the inner one.
    let scheduler = Scheduler::new(2);
    let s = scheduler.clone();
    let outer = scheduler
        .schedule(MS, async move {
            let inner = s.schedule(MS, async { "inner" }).unwrap();
            let stats = s.stats();
            (inner.await.unwrap(), stats)
        })
        .unwrap();
    let (inner, stats) = timeout(LIMIT, outer).await.unwrap().unwrap();
    assert_eq!(inner, "inner");
    assert_eq!(
        (stats.running, stats.pending),
        (1, 1),
        "a job counts itself"
    );
}

#[tokio::test(start_paused = true)]
async fn a_periodic_job_can_cancel_itself() {
    let scheduler = Scheduler::new(1);
    let slot: Arc<Mutex<Option<JobHandle<()>>>> = Arc::default();
    let me = slot.clone();
    let mut run = 0;
    let job = scheduler
        .schedule_at_fixed_rate(Duration::ZERO, MS * 10, move || {
            run += 1;
            let me = me.clone();
            async move {
                if run == 3 {
                    let cancelled = me.lock().unwrap().as_ref().unwrap().cancel();
                    assert!(cancelled);
                }
            }
        })
        .unwrap();
    let runs = {
        *slot.lock().unwrap() = Some(job);
        sleep(MS * 100).await;
        let handle = slot.lock().unwrap().take().unwrap();
        assert!(handle.is_cancelled());
        handle.runs()
    };
    assert_eq!(runs, 3);
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_job_cancelling_itself_returns_false_and_completes() {
    let scheduler = Scheduler::new(1);
    let slot: Arc<Mutex<Option<Arc<JobHandle<()>>>>> = Arc::default();
    let said: Arc<Mutex<Option<bool>>> = Arc::default();
    let (me, s) = (slot.clone(), said.clone());
    let job = Arc::new(
        scheduler
            .schedule(MS, async move {
                let me = me.lock().unwrap().clone().unwrap();
                *s.lock().unwrap() = Some(me.cancel());
            })
            .unwrap(),
    );
    *slot.lock().unwrap() = Some(job.clone());
    timeout(LIMIT, async {
        while !job.is_finished() {
            sleep(MS).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(*said.lock().unwrap(), Some(false), "already running");
    assert!(!job.is_cancelled());
    assert_eq!(scheduler.stats().completed, 1);
}

#[tokio::test(start_paused = true)]
async fn a_job_can_shut_the_scheduler_down() {
    let scheduler = Scheduler::new(2);
    let seen: Arc<Mutex<Option<(bool, usize)>>> = Arc::default();
    let (s, out) = (scheduler.clone(), seen.clone());
    let job = scheduler
        .schedule(MS, async move {
            s.shutdown();
            let cancelled = s.shutdown_now();
            *out.lock().unwrap() = Some((s.is_shutdown(), cancelled));
        })
        .unwrap();
    let other = scheduler.schedule(MS * 50, async {}).unwrap();
    // `shutdown_now` aborts every running job, this one included: its
    // handle resolves to `Cancelled` even though it returned without
    // reaching another await.
    assert!(
        timeout(LIMIT, job)
            .await
            .unwrap()
            .unwrap_err()
            .is_cancelled()
    );
    timeout(LIMIT, scheduler.terminated()).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        Some((true, 1)),
        "the other pending job"
    );
    assert!(other.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_job_can_abort_itself() {
    let scheduler = Scheduler::new(1);
    let slot: Arc<Mutex<Option<Arc<JobHandle<()>>>>> = Arc::default();
    let me = slot.clone();
    let reached = Arc::new(Mutex::new(false));
    let r = reached.clone();
    let job = Arc::new(
        scheduler
            .schedule(MS * 5, async move {
                let me = me.lock().unwrap().clone().unwrap();
                assert!(me.abort());
                tokio::task::yield_now().await;
                *r.lock().unwrap() = true;
            })
            .unwrap(),
    );
    *slot.lock().unwrap() = Some(job.clone());
    sleep(MS * 10).await;
    assert!(!*reached.lock().unwrap(), "stopped at its next await");
    assert!(job.is_cancelled() && job.is_finished());
    assert_eq!(scheduler.stats().cancelled, 1);
}
