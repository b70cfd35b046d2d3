//! Handles always resolve: when the runtime that runs the workers shuts
//! down with jobs pending or running, every handle resolves to
//! `Err(JobError::Cancelled)` and `terminated()` resolves too.

mod common;

use common::Bomb;
use punctual::{ScheduleError, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::timeout;

const PATIENCE: Duration = Duration::from_secs(10);

fn runtime(multi: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().unwrap()
}

fn handles_resolve_after_the_runtime_is_dropped(multi: bool) {
    let rt = runtime(multi);
    let started = Arc::new(AtomicBool::new(false));
    let (scheduler, one_shot, periodic, running) = rt.block_on(async {
        let scheduler = Scheduler::new(2);
        let one_shot = scheduler
            .schedule(Duration::from_secs(3600), async { "never" })
            .unwrap();
        let periodic = scheduler
            .schedule_at_fixed_rate(Duration::from_secs(60), Duration::from_secs(60), || async {
            })
            .unwrap();
        let flag = started.clone();
        let running = scheduler
            .schedule(Duration::ZERO, async move {
                flag.store(true, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
            })
            .unwrap();
        while !started.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        (scheduler, one_shot, periodic, running)
    });
    assert_eq!(scheduler.stats().running, 1);
    drop(rt);

    let other = runtime(false);
    other.block_on(async {
        let one_shot = timeout(PATIENCE, one_shot).await.expect("one-shot hangs");
        assert!(one_shot.unwrap_err().is_cancelled());
        let periodic = timeout(PATIENCE, periodic).await.expect("periodic hangs");
        assert!(periodic.unwrap_err().is_cancelled());
        let running = timeout(PATIENCE, running).await.expect("running job hangs");
        assert!(running.unwrap_err().is_cancelled());
        timeout(PATIENCE, scheduler.terminated())
            .await
            .expect("terminated() hangs");
        assert!(scheduler.is_terminated());
        let stats = scheduler.stats();
        assert_eq!((stats.pending, stats.running, stats.cancelled), (0, 0, 3));
        let late = scheduler.schedule(Duration::ZERO, async {});
        assert_eq!(late.unwrap_err(), ScheduleError::Shutdown);
    });
}

#[test]
fn handles_resolve_after_a_current_thread_runtime_is_dropped() {
    handles_resolve_after_the_runtime_is_dropped(false);
}

#[test]
fn handles_resolve_after_a_multi_thread_runtime_is_dropped() {
    handles_resolve_after_the_runtime_is_dropped(true);
}

#[test]
fn a_handle_polled_before_the_runtime_drops_is_woken() {
    let rt = runtime(true);
    let scheduler = rt.block_on(async { Scheduler::new(1) });
    let job = rt.block_on(async { scheduler.schedule(Duration::from_secs(3600), async { 1 }) });
    // Park a waiter on the handle first, then drop the scheduler's runtime.
    let mut waiter = tokio_test::task::spawn(job.unwrap());
    tokio_test::assert_pending!(waiter.poll());
    drop(rt);
    assert!(waiter.is_woken(), "the parked handle was not woken");
    let result = tokio_test::assert_ready!(waiter.poll());
    assert!(result.unwrap_err().is_cancelled());
}

#[test]
fn a_running_job_whose_future_panics_on_drop_still_resolves_cancelled() {
    let rt = runtime(false);
    let started = Arc::new(AtomicBool::new(false));
    let (scheduler, running, periodic) = rt.block_on(async {
        let scheduler = Scheduler::new(2);
        let flag = started.clone();
        let bomb = Bomb;
        let running = scheduler
            .schedule(Duration::ZERO, async move {
                let _held = bomb;
                flag.store(true, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
            })
            .unwrap();
        let bomb = Bomb;
        let periodic = scheduler
            .schedule_with_fixed_delay(Duration::ZERO, Duration::from_secs(60), move || {
                let _ = &bomb;
                tokio::time::sleep(Duration::from_secs(3600))
            })
            .unwrap();
        while !started.load(Ordering::SeqCst) || scheduler.stats().running < 2 {
            tokio::task::yield_now().await;
        }
        (scheduler, running, periodic)
    });
    drop(rt);
    let other = runtime(false);
    other.block_on(async {
        for handle in [running, periodic] {
            let result = timeout(PATIENCE, handle).await.expect("a handle hangs");
            assert!(result.unwrap_err().is_cancelled());
        }
        timeout(PATIENCE, scheduler.terminated()).await.unwrap();
        assert_eq!(scheduler.stats().panicked, 0);
    });
}

/// A runtime dropped while its thread unwinds for a reason of its own (a
/// failed assertion, say) cancels the running job: no worker panicked.
#[test]
fn a_runtime_dropped_during_an_unrelated_panic_cancels_the_running_job() {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let scheduler = Scheduler::new(1);
            let started = Arc::new(AtomicBool::new(false));
            let flag = started.clone();
            let running = scheduler
                .schedule(Duration::ZERO, async move {
                    flag.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                })
                .unwrap();
            let pending = scheduler
                .schedule(Duration::from_secs(3600), async {})
                .unwrap();
            while !started.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
            tx.send((scheduler, running, pending)).unwrap();
        });
        // Something unrelated fails while `rt` is still alive: `rt` is
        // dropped during the unwind, which drops the scheduler's worker.
        panic!("an unrelated failure on the runtime's thread");
    });
    assert!(thread.join().is_err());
    let (scheduler, running, pending) = rx.recv().unwrap();

    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    other.block_on(async {
        let running = timeout(PATIENCE, running).await.expect("running job hangs");
        let pending = timeout(PATIENCE, pending).await.expect("pending job hangs");
        timeout(PATIENCE, scheduler.terminated())
            .await
            .expect("terminated() hangs");
        assert!(
            pending.unwrap_err().is_cancelled(),
            "the pending job was not cancelled"
        );
        let err = running.unwrap_err();
        let stats = scheduler.stats();
        assert!(
            err.is_cancelled(),
            "the job running when the runtime was dropped resolved to {err:?} \
             (stats {stats:?}); no worker panicked"
        );
        assert_eq!((stats.panicked, stats.cancelled), (0, 2), "{stats:?}");
    });
}
