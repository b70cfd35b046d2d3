//! A paused `MemoryQueue` on Tokio's paused clock: its consumers sleep
//! until `resume` wakes them, instead of claiming again and again because
//! the head is due (which starves a current-thread runtime and keeps paused
//! time from ever advancing).

use punctual::durable::{Job, Worker};
use punctual::memory::MemoryQueue;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;
use tokio_test::{assert_pending, assert_ready, task};

const HOUR: Duration = Duration::from_secs(3600);

/// A waiting `take` on a paused queue with a due entry is not woken as time
/// passes (a timer that fired would mean it claims again on its own), and
/// `resume` wakes it with the entry.
#[tokio::test(start_paused = true)]
async fn a_take_on_a_paused_queue_sleeps_until_resume() {
    let queue: MemoryQueue<u64> = MemoryQueue::new("paused");
    queue.insert(&7, Duration::ZERO).await.unwrap();
    assert!(queue.pause().await.unwrap());
    let mut take = task::spawn(queue.take_timeout(10 * HOUR));
    assert_pending!(take.poll());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        !take.is_woken(),
        "woken 1 ms on: it claims again on its own"
    );
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(!take.is_woken(), "woken a minute on while paused");
    assert_pending!(take.poll());
    assert!(queue.resume().await.unwrap());
    assert!(take.is_woken(), "resume wakes the waiting take");
    let taken = assert_ready!(take.poll()).unwrap().expect("the entry");
    assert_eq!(*taken.value(), 7);
}

/// A worker on a paused queue with due entries runs nothing, lets paused
/// time advance (a day passes at once), and runs them when resumed. Run on
/// a thread of its own under a watchdog: a worker that claims in a loop
/// never lets the runtime go idle, so the day would never pass.
#[test]
fn a_worker_on_a_paused_queue_lets_time_advance_and_runs_after_resume() {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let ran = rt.block_on(async {
            let queue: MemoryQueue<u64> = MemoryQueue::new("paused-worker");
            assert!(queue.pause().await.unwrap());
            for n in 0..3 {
                queue.insert(&n, Duration::ZERO).await.unwrap();
            }
            let ran = Arc::new(AtomicUsize::new(0));
            let worker = Worker::builder(queue.clone()).spawn({
                let ran = Arc::clone(&ran);
                move |_job: Job<u64>| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<(), String>(()) }
                }
            });
            tokio::time::sleep(24 * HOUR).await;
            let before = ran.load(Ordering::SeqCst);
            assert!(queue.resume().await.unwrap());
            tokio::time::sleep(Duration::from_secs(1)).await;
            let stats = worker.shutdown(Duration::from_secs(1)).await;
            (before, stats.completed)
        });
        let _ = done.send(ran);
    });
    let (before, after) = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("a day of paused time never passed: the worker keeps the runtime busy");
    assert_eq!(before, 0, "ran while paused");
    assert_eq!(after, 3, "not run after resume");
}
