//! Many producers scheduling, cancelling and aborting at random on the
//! multi-thread runtime: every job ends exactly once and the counters agree.

mod common;

use common::Rng;
use punctual::{JobError, Scheduler};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{sleep, timeout};

const PRODUCERS: usize = 8;
const PER_PRODUCER: usize = 1_500;
const TOTAL: usize = PRODUCERS * PER_PRODUCER;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_schedule_cancel_abort_ends_every_job_exactly_once() {
    let scheduler = Scheduler::new(4);
    let ran: Arc<Vec<AtomicU8>> = Arc::new((0..TOTAL).map(|_| AtomicU8::new(0)).collect());
    let periodic_runs = Arc::new(AtomicU64::new(0));

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (scheduler, ran, periodic_runs) =
                (scheduler.clone(), ran.clone(), periodic_runs.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0xA5A5_5A5A_1234_5678 ^ ((p as u64 + 1) * 0x9E37_79B9));
                let mut outcomes = Vec::with_capacity(PER_PRODUCER);
                let mut handles = Vec::new();
                for i in 0..PER_PRODUCER {
                    let id = p * PER_PRODUCER + i;
                    let ran = ran.clone();
                    let work = rng.below(3);
                    let handle = scheduler
                        .schedule(Duration::from_micros(rng.below(20_000)), async move {
                            ran[id].fetch_add(1, Ordering::SeqCst);
                            if work > 0 {
                                sleep(Duration::from_micros(200 * work)).await;
                            }
                            id
                        })
                        .unwrap();
                    handles.push((id, handle));
                    match rng.below(6) {
                        0 => {
                            let (_, h) = &handles[rng.below(handles.len() as u64) as usize];
                            h.cancel();
                        }
                        1 => {
                            let (_, h) = &handles[rng.below(handles.len() as u64) as usize];
                            h.abort();
                        }
                        _ => {}
                    }
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                let counter = periodic_runs.clone();
                let periodic = scheduler
                    .schedule_at_fixed_rate(Duration::ZERO, Duration::from_millis(1), move || {
                        let counter = counter.clone();
                        async move {
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                    .unwrap();
                sleep(Duration::from_millis(5)).await;
                assert!(periodic.cancel());
                assert!(periodic.await.unwrap_err().is_cancelled());
                for (id, handle) in handles {
                    let result = timeout(Duration::from_secs(20), handle).await;
                    outcomes.push((id, result.expect("a job never ended")));
                }
                outcomes
            })
        })
        .collect();

    let (mut ok, mut cancelled) = (0u64, 0u64);
    for producer in producers {
        for (id, outcome) in producer.await.unwrap() {
            let times = ran[id].load(Ordering::SeqCst);
            match outcome {
                Ok(returned) => {
                    assert_eq!(returned, id);
                    assert_eq!(times, 1, "job {id} completed but ran {times} times");
                    ok += 1;
                }
                Err(JobError::Cancelled) => {
                    assert!(times <= 1, "job {id} ran {times} times");
                    cancelled += 1;
                }
                Err(e) => panic!("job {id}: {e}"),
            }
        }
    }
    assert_eq!(ok + cancelled, TOTAL as u64);
    assert!(cancelled > 0 && ok > 0);
    let stats = scheduler.stats();
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.running, 0);
    assert_eq!(stats.panicked, 0);
    assert_eq!(stats.completed, ok + periodic_runs.load(Ordering::SeqCst));
    assert_eq!(stats.cancelled, cancelled + PRODUCERS as u64);
    scheduler.shutdown();
    timeout(Duration::from_secs(20), scheduler.terminated())
        .await
        .unwrap();
}
