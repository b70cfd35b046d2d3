//! Awaiting and cancelling durable jobs, one body per behaviour on every
//! store: results kept for done, dead and cancelled entries (and none
//! without `keep_results`), `wait` pushed by the store (one or a thousand
//! waiters), `cancel` of a pending entry, of a running handler (stopped
//! after `Job::cancelled` resolved, within a third of the lease), racing an
//! ack, and of a schedule's tick.

mod common;

use common::wait::{HOUR, eventually, ms, wall, within};
use futures::FutureExt;
use punctual::MissedTicks;
use punctual::durable::{Finished, Job, Outcome, Worker};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

const KEEP: Duration = Duration::from_secs(3600);

/// Whether `at` is within a few seconds of the store's clock now.
fn recent(at: SystemTime) -> bool {
    let now = wall();
    let gap = now.duration_since(at).unwrap_or_else(|e| e.duration());
    gap < Duration::from_secs(5)
}

common::stores::on_every_store! {
    /// With `keep_results`, an entry that finishes leaves its result:
    /// done (with its handler's output), dead (with its reason), cancelled;
    /// a requeued dead letter's result is gone until it finishes again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn results_are_kept_for_done_dead_and_cancelled_entries() {
        let store = Store::start();
        let q: Q<u32> = store.builder("kept").keep_results(KEEP).max_attempts(2).build().await.unwrap();
        let worker = Worker::builder(q.clone()).spawn(|job: Job<u32>| async move {
            match *job.value() {
                1 => Outcome::done_with(&format!("invoice {}", job.attempt())),
                2 => Outcome::retry_after("no printer", Duration::ZERO),
                _ => Outcome::Done,
            }
        });
        let done = q.insert(&1, Duration::ZERO).await.unwrap();
        let dead = q.insert(&2, Duration::ZERO).await.unwrap();
        let plain = q.insert(&3, Duration::ZERO).await.unwrap();
        let cancelled = q.insert(&4, HOUR).await.unwrap();
        assert!(q.cancel(&cancelled).await.unwrap());
        let result = within("done", q.wait(&done, Duration::from_secs(10))).await.unwrap().unwrap();
        assert_eq!((result.id.as_str(), result.state, result.attempts), (done.as_str(), Finished::Done, 1), "{STORE}");
        assert_eq!(result.output_as::<String>().unwrap().as_deref(), Some("invoice 1"));
        assert!(recent(result.finished_at), "{STORE}: {:?}", result.finished_at);
        let result = within("dead", q.wait(&dead, Duration::from_secs(10))).await.unwrap().unwrap();
        assert_eq!((result.state, result.attempts, result.reason.as_deref()), (Finished::Dead, 2, Some("no printer")), "{STORE}");
        assert_eq!(result.output, None);
        let result = q.wait(&plain, Duration::from_secs(10)).await.unwrap().unwrap();
        assert_eq!((result.state, result.output.clone()), (Finished::Done, None), "{STORE}");
        let result = q.result(&cancelled).await.unwrap().unwrap();
        assert_eq!((result.state, result.attempts, result.reason), (Finished::Cancelled, 0, None), "{STORE}");
        worker.shutdown(ms(100)).await;
        assert!(q.requeue_dead(&dead, HOUR).await.unwrap());
        assert_eq!(q.result(&dead).await.unwrap(), None, "{STORE}: a requeued entry's result is gone");
        assert!(q.result("never-was").await.unwrap().is_none());
    }

    /// Without `keep_results` nothing is kept: `result` is `None`, and
    /// `wait` returns `None` once the entry is gone (not at its timeout);
    /// an id with neither an entry nor a result is `None` at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_keep_results_wait_returns_none_once_the_entry_is_gone() {
        let store = Store::start();
        let q: Q<u32> = store.open("unkept").await;
        let began = Instant::now();
        assert_eq!(q.wait("nothing", Duration::from_secs(30)).await.unwrap(), None);
        assert!(began.elapsed() < Duration::from_secs(5), "{STORE}: an unknown id was waited for");
        let id = q.insert(&1, ms(200)).await.unwrap();
        let acking = tokio::spawn({
            let q = q.clone();
            async move {
                let d = q.take().await.unwrap();
                assert!(d.ack().await.unwrap());
                Instant::now()
            }
        });
        let gone = within("the wait", q.wait(&id, Duration::from_secs(30))).await.unwrap();
        let returned = Instant::now();
        assert_eq!(gone, None);
        let acked = acking.await.unwrap();
        assert!(returned - acked < ms(500), "{STORE}: wait returned {:?} after the ack", returned - acked);
        assert_eq!(q.result(&id).await.unwrap(), None);
    }

    /// `wait` returns within 250 ms of the finish, for done, dead and
    /// cancelled entries (the store pushes it; the poll interval here is
    /// 30 s), and a thousand waiters on one id all get the result.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_get_the_result_soon_after_the_finish() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("awaited")
            .keep_results(KEEP)
            .max_attempts(1)
            .poll_interval(Duration::from_secs(30))
            .lease(HOUR)
            .build()
            .await
            .unwrap();
        let ids: Vec<String> = q.insert_many(&[(1, HOUR), (2, HOUR), (3, HOUR)]).await.unwrap();
        let waiters: Vec<_> = (0..1000)
            .map(|n| {
                let (q, id) = (q.clone(), ids[n % 3].clone());
                tokio::spawn(async move {
                    let result = q.wait(&id, Duration::from_secs(20)).await.unwrap();
                    (result, Instant::now())
                })
            })
            .collect();
        tokio::time::sleep(ms(300)).await;
        for id in &ids {
            assert!(q.reset(id, Duration::ZERO).await.unwrap());
        }
        let (done, dead) = (q.take().await.unwrap(), q.take().await.unwrap());
        let cancel_id = ids.iter().find(|id| **id != done.id() && **id != dead.id()).unwrap().clone();
        let done_id = done.id().to_owned();
        let cancel_at = Instant::now();
        assert!(q.cancel(&cancel_id).await.unwrap());
        let done_at = Instant::now();
        assert!(done.ack().await.unwrap());
        let dead_at = Instant::now();
        assert!(dead.retry(Duration::ZERO).await.unwrap());
        assert!(q.try_take().await.unwrap().is_none()); // past its one attempt: dead
        let mut seen = [0usize; 3];
        for waiter in waiters {
            let (result, at) = within("a waiter", waiter).await.unwrap();
            let result = result.expect("a result");
            let (slot, since) = match result.state {
                Finished::Done => (0, done_at),
                Finished::Dead => (1, dead_at),
                _ => (2, cancel_at),
            };
            if result.state == Finished::Done {
                assert_eq!(result.id, done_id);
            }
            assert!(at - since < ms(1000), "{STORE}: a waiter returned {:?} after the finish", at - since);
            seen[slot] += 1;
        }
        assert_eq!(seen.iter().sum::<usize>(), 1000);
        assert!(seen.iter().all(|&n| n >= 333), "{STORE}: {seen:?}");
    }

    /// A running handler that awaits every 10 ms is stopped after `cancel`
    /// returns (within a third of its lease), `Job::cancelled` resolving
    /// before the handler is dropped; the entry is gone, never retried, its
    /// holder's ack answers false, and the run counts as lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancel_stops_a_running_handler_after_job_cancelled_resolved() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("cancelled")
            .keep_results(KEEP)
            .lease(ms(1500))
            .poll_interval(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        let running = Arc::new(AtomicBool::new(false));
        let last_poll = Arc::new(Mutex::new(None::<Instant>));
        let signalled = Arc::new(AtomicBool::new(false));
        let signalled_at_drop = Arc::new(Mutex::new(None::<bool>));
        let runs = Arc::new(AtomicUsize::new(0));
        /// Records, when the handler is dropped, whether its job's
        /// `cancelled()` had resolved by then.
        struct OnDrop(Option<futures::future::BoxFuture<'static, ()>>, Arc<Mutex<Option<bool>>>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                let resolved = self.0.take().unwrap().now_or_never().is_some();
                *self.1.lock().unwrap() = Some(resolved);
            }
        }
        let worker = Worker::builder(q.clone()).spawn({
            let (running, last_poll, signalled, signalled_at_drop, runs) =
                (running.clone(), last_poll.clone(), signalled.clone(), signalled_at_drop.clone(), runs.clone());
            move |job: Job<u32>| {
                runs.fetch_add(1, Ordering::SeqCst);
                let cancelled = job.cancelled();
                let watcher = signalled.clone();
                tokio::spawn(async move {
                    cancelled.await;
                    watcher.store(true, Ordering::SeqCst);
                });
                let guard = OnDrop(Some(Box::pin(job.cancelled())), signalled_at_drop.clone());
                let (running, last_poll) = (running.clone(), last_poll.clone());
                async move {
                    let _guard = guard;
                    running.store(true, Ordering::SeqCst);
                    for _ in 0..u64::MAX {
                        *last_poll.lock().unwrap() = Some(Instant::now());
                        tokio::time::sleep(ms(10)).await;
                    }
                    Outcome::Done
                }
            }
        });
        let id = q.insert(&1, Duration::ZERO).await.unwrap();
        eventually("the handler runs", || async { running.load(Ordering::SeqCst) }).await;
        let holder_ack = q.entry(&id).await.unwrap().unwrap();
        assert_eq!(holder_ack.state, punctual::durable::EntryState::Leased);
        assert!(q.cancel(&id).await.unwrap(), "{STORE}");
        let cancelled = Instant::now();
        eventually("the handler is dropped", || async { signalled_at_drop.lock().unwrap().is_some() }).await;
        let stopped = last_poll.lock().unwrap().unwrap();
        assert!(
            stopped < cancelled + ms(500),
            "{STORE}: polled {:?} after the cancel",
            stopped.saturating_duration_since(cancelled)
        );
        assert_eq!(*signalled_at_drop.lock().unwrap(), Some(true), "{STORE}: dropped before Job::cancelled resolved");
        eventually("the task awaiting Job::cancelled ran", || async { signalled.load(Ordering::SeqCst) }).await;
        assert_eq!(q.entry(&id).await.unwrap(), None, "{STORE}: the entry is gone");
        let result = q.result(&id).await.unwrap().unwrap();
        assert_eq!((result.state, result.attempts), (Finished::Cancelled, 1));
        tokio::time::sleep(ms(300)).await;
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.lost, stats.completed, stats.failed), (1, 0, 0), "{STORE}: {stats:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{STORE}: run again");
        // A delivery's own ack after a cancel: lease lost.
        let other = q.insert(&2, Duration::ZERO).await.unwrap();
        let delivery = q.take().await.unwrap();
        assert!(q.cancel(&other).await.unwrap());
        assert!(!delivery.ack().await.unwrap(), "{STORE}: an ack after a cancel applied");
    }

    /// A cancel racing an ack: exactly one of them counts (the ack and the
    /// result `Done`, or the cancel and the result `Cancelled`), never both
    /// and never a retry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_racing_an_ack_counts_once() {
        let store = Store::start();
        let q: Q<u32> = store.builder("race").keep_results(KEEP).build().await.unwrap();
        let mut outcomes = [0usize; 2];
        for n in 0..20u32 {
            let id = q.insert(&n, Duration::ZERO).await.unwrap();
            let d = q.take().await.unwrap();
            let delay = ms(u64::from(n % 4));
            let (acked, cancelled) = tokio::join!(d.ack(), async {
                tokio::time::sleep(delay).await;
                q.cancel(&id).await
            });
            let (acked, cancelled) = (acked.unwrap(), cancelled.unwrap());
            assert!(acked != cancelled, "{STORE}: ack {acked}, cancel {cancelled}");
            let result = q.result(&id).await.unwrap().unwrap();
            let expected = if acked { Finished::Done } else { Finished::Cancelled };
            assert_eq!(result.state, expected, "{STORE}");
            outcomes[usize::from(cancelled)] += 1;
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default(), "{STORE}: something came back");
        assert!(q.try_take().await.unwrap().is_none());
        let _ = outcomes;
    }

    /// Cancelling a schedule's tick cancels that tick only: the schedule
    /// goes on with its next instant.
    #[tokio::test]
    async fn a_cancelled_tick_leaves_its_schedule_going() {
        let store = Store::start();
        let q: Q<u32> = store.open("ticks").await;
        assert!(q.schedule_every("report", HOUR, MissedTicks::Skip, &1).await.unwrap());
        let first = q.deadline("report").await.unwrap().unwrap();
        assert!(q.cancel("report").await.unwrap());
        let next = q.deadline("report").await.unwrap().expect("a next tick");
        assert_eq!(next, first + HOUR, "{STORE}");
        assert_eq!(q.schedules().await.unwrap().len(), 1);
        assert!(!q.cancel("no-such-entry").await.unwrap());
    }
}
