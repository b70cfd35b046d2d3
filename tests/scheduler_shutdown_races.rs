//! Shutdown racing the workers, on the multi-thread runtime: a worker that
//! took a job off the queue but has not started it is covered by the
//! policies the moment `shutdown()` / `shutdown_now()` returns.
//!
//! Jobs here are always due (periods of a microsecond), so the workers spend
//! a good share of their time between taking a job and starting it: a few
//! hundred rounds hit that window many times on two cores.

mod common;

use common::{Bomb, Rng};
use punctual::{JobHandle, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::timeout;

const ROUNDS: usize = 300;
const TICK: Duration = Duration::from_micros(1);
const PATIENCE: Duration = Duration::from_secs(10);

fn busy_periodic(scheduler: &Scheduler, bomb: bool) -> JobHandle<()> {
    // Built only when asked for: a `Bomb` made and dropped goes off.
    let bomb = if bomb { Some(Bomb) } else { None };
    scheduler
        .schedule_at_fixed_rate(Duration::ZERO, TICK, move || {
            let _ = &bomb;
            async {}
        })
        .unwrap()
}

async fn spin(rng: &mut Rng) {
    for _ in 0..rng.below(40) {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_covers_periodic_jobs_a_worker_took_but_did_not_start() {
    let mut rng = Rng(0x5eed_0004);
    for round in 0..ROUNDS {
        let scheduler = Scheduler::new(2);
        let jobs: Vec<_> = (0..3).map(|_| busy_periodic(&scheduler, false)).collect();
        spin(&mut rng).await;
        scheduler.shutdown();
        // At once, with no await in between.
        let stats = scheduler.stats();
        assert_eq!(stats.pending, 0, "round {round}: {stats:?}");
        for job in &jobs {
            assert!(job.is_cancelled(), "round {round}: a periodic job goes on");
            assert_eq!(job.next_run(), None, "round {round}");
        }
        timeout(PATIENCE, scheduler.terminated()).await.unwrap();
        for job in jobs {
            assert!(job.await.unwrap_err().is_cancelled(), "round {round}");
        }
    }
}

/// Defect 2: the worker dropped the closure of a job it had taken just
/// before `shutdown()` outside `catch_unwind`; when that `Drop` panicked the
/// only worker died, counted as a normal exit, and pending one-shots never
/// ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_drop_at_shutdown_never_kills_the_worker() {
    let mut rng = Rng(0x5eed_0002);
    for round in 0..ROUNDS {
        let scheduler = Scheduler::new(1);
        let periodic = busy_periodic(&scheduler, true);
        let last_words = scheduler
            .schedule(Duration::from_millis(2), async { "ran" })
            .unwrap();
        spin(&mut rng).await;
        scheduler.shutdown();
        let ran = timeout(PATIENCE, last_words).await;
        let ran = ran.ok().and_then(Result::ok);
        assert_eq!(ran, Some("ran"), "round {round}: worker died");
        assert!(periodic.await.unwrap_err().is_cancelled(), "round {round}");
        timeout(PATIENCE, scheduler.terminated()).await.unwrap();
        let stats = scheduler.stats();
        assert_eq!((stats.pending, stats.running), (0, 0), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_now_counts_exactly_the_jobs_it_cancelled() {
    let mut rng = Rng(0x5eed_0003);
    for round in 0..ROUNDS {
        let scheduler = Scheduler::new(2);
        let mut jobs = Vec::new();
        for _ in 0..16 {
            let started = Arc::new(AtomicBool::new(false));
            let flag = started.clone();
            let delay = Duration::from_micros(rng.below(300));
            let handle = scheduler
                .schedule(delay, async move {
                    flag.store(true, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                })
                .unwrap();
            jobs.push((handle, started));
        }
        spin(&mut rng).await;
        let count = scheduler.shutdown_now();
        assert_eq!(scheduler.stats().pending, 0, "round {round}");
        let mut not_started = 0;
        for (handle, started) in jobs {
            let result = timeout(PATIENCE, handle).await.unwrap();
            if result.is_err() && !started.load(Ordering::SeqCst) {
                not_started += 1;
            }
        }
        assert_eq!(
            count, not_started,
            "round {round}: shutdown_now's count differs from the jobs that never started"
        );
        timeout(PATIENCE, scheduler.terminated()).await.unwrap();
    }
}
