#![cfg(any(feature = "redis", feature = "postgres"))]
//! The worker's fences under faults a hostile test round found,
//! one body per store: a handler resumed on a busy runtime after its lease
//! ended, a handler that returns after its timeout without awaiting, a
//! handler blocking past a shutdown's grace, a shutdown on a silent link,
//! and calls on pooled connections that went silent.
//!
//! Real time throughout; links fail through the fault proxy of
//! `tests/common/proxy.rs`, put in front of the store's server.

mod common;

use common::proxied::Proxied;
use common::proxy::Proxy;
use common::wait::{WAIT, eventually, ms};
use punctual::durable::{Backoff, Job, Worker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// When a handler last reached an await, and how many it reached.
type Ticks = Arc<Mutex<Vec<Instant>>>;

/// What `ticking` handlers return.
type Run = std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// A handler that awaits every 10 ms for about `steps` steps, noting when.
fn ticking(steps: u32, ticks: &Ticks) -> impl Fn(Job<u64>) -> Run + Send + Sync + 'static {
    let ticks = Arc::clone(ticks);
    move |_job: Job<u64>| {
        let ticks = Arc::clone(&ticks);
        Box::pin(async move {
            for _ in 0..steps {
                ticks.lock().unwrap().push(Instant::now());
                sleep(ms(10)).await;
            }
            Ok(())
        })
    }
}

common::stores::on_every_store! {
    /// A run longer than the timeout fails even if it never awaits:
    /// `tokio::time::timeout` polls its future before it looks at the
    /// clock, so a handler that blocked past the limit and then returned
    /// `Ok` was acked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handler_that_returns_after_its_timeout_without_awaiting_fails() {
        let store = Store::start();
        let q: Q<u64> = store.builder("slow").lease(ms(5000)).build().await.expect("connect");
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let attempts: Arc<Mutex<Vec<u32>>> = Arc::default();
        let worker = Worker::builder(q.clone())
            .concurrency(1)
            .timeout(ms(100))
            .backoff(Backoff::fixed(ms(10)))
            .spawn({
                let attempts = Arc::clone(&attempts);
                move |job: Job<u64>| {
                    let attempts = Arc::clone(&attempts);
                    async move {
                        attempts.lock().unwrap().push(job.attempt());
                        if job.attempt() == 1 {
                            std::thread::sleep(ms(300)); // no await
                        }
                        Ok::<(), String>(())
                    }
                }
            });
        eventually("a second attempt is acked", || {
            let stats = worker.stats();
            async move { stats.completed == 1 }
        })
        .await;
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!(*attempts.lock().unwrap(), vec![1, 2], "{STORE}: {stats:?}");
        assert_eq!((stats.failed, stats.completed), (1, 1), "{STORE}: {stats:?}");
    }

    /// A handler that blocks its thread past the shutdown's grace cannot be
    /// dropped: it is still running when `shutdown` returns (by its grace),
    /// its lease is kept alive meanwhile, so no other consumer gets its
    /// entry while it runs (it was: the heartbeat extended running runs
    /// only, and the lease ran out), and once it returns `Ok` its entry is
    /// acked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_handler_blocking_past_the_grace_keeps_its_lease_until_it_ends() {
        let store = Store::start();
        let q: Q<u64> = store.builder("blocked").lease(ms(400)).build().await.expect("connect");
        let other: Q<u64> = store.builder("blocked").lease(ms(400)).build().await.expect("connect");
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let worker = Worker::builder(q.clone()).concurrency(1).spawn({
            let done = Arc::clone(&done);
            move |_job: Job<u64>| {
                let done = Arc::clone(&done);
                async move {
                    sleep(ms(10)).await;
                    // Past the grace and four leases; the runtime's other
                    // tasks (the engine) move to another thread meanwhile.
                    tokio::task::block_in_place(|| std::thread::sleep(ms(2000)));
                    done.store(true, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            }
        });
        eventually("a runs", || {
            let running = worker.stats().running == 1;
            async move { running }
        })
        .await;
        sleep(ms(100)).await;
        let started = Instant::now();
        let stats = worker.shutdown(ms(100)).await;
        let took = started.elapsed();
        assert!(took < ms(600), "{STORE}: shutdown(100 ms) took {took:?}");
        assert_eq!(stats.running, 1, "{STORE}: the blocked handler still runs: {stats:?}");
        while !done.load(Ordering::SeqCst) {
            if let Some(d) = other.try_take().await.unwrap() {
                let still_running = !done.load(Ordering::SeqCst);
                assert!(
                    !still_running,
                    "{STORE}: `{}` (attempt {}) handed to another consumer while its handler runs",
                    d.id(),
                    d.attempt()
                );
            }
            sleep(ms(20)).await;
        }
        eventually("the stopped run's entry is acked", || async {
            q.stats().await.unwrap() == Stats::default()
        })
        .await;
    }
}

common::stores::on_durable_stores! {
    /// The fence must sit in the handler's own task: on a busy runtime the
    /// engine's fence timer may be served after the handler's own wake-up.
    /// Here the link goes silent (extensions hang), then the runtime (one
    /// thread) is blocked across the end of the lease while another
    /// consumer, on a thread of its own, takes the entry. When the runtime
    /// is free again, the handler must not take one more step: it was found
    /// resuming 47-57 ms after the other consumer had the entry.
    #[tokio::test(flavor = "current_thread")]
    async fn a_handler_is_never_polled_past_its_lease_on_a_busy_runtime() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let via: Q<u64> = store.via(&proxy, "busy").lease(ms(400)).build().await.expect("connect");
        via.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let ticks: Ticks = Arc::default();
        let worker = Worker::builder(via.clone()).concurrency(1).spawn(ticking(2000, &ticks));
        eventually("a runs", || {
            let running = worker.stats().running == 1;
            async move { running }
        })
        .await;
        // Another consumer, on its own thread and runtime, polls for `a`.
        let other = store.builder::<u64>("busy").lease(ms(400));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let taker = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let direct = other.build().await.expect("connect");
                ready_tx.send(()).unwrap();
                let give_up = Instant::now() + WAIT;
                loop {
                    if let Some(d) = direct.try_take().await.unwrap() {
                        return (d.id().to_owned(), d.attempt(), Instant::now());
                    }
                    assert!(Instant::now() < give_up, "the lease never ran out");
                    sleep(ms(5)).await;
                }
            })
        });
        ready_rx.recv().unwrap();
        // The link goes silent, then this runtime is busy for longer than a
        // lease: the lease ends inside that time.
        proxy.refuse(true);
        proxy.black_hole_open();
        std::thread::sleep(ms(900));
        let (id, attempt, taken_at) = taker.join().unwrap();
        assert_eq!((id.as_str(), attempt), ("a", 2));
        // The runtime runs again: the handler's timer is long due.
        sleep(ms(200)).await;
        let after: Vec<Duration> = ticks
            .lock()
            .unwrap()
            .iter()
            .filter(|t| **t >= taken_at)
            .map(|t| t.duration_since(taken_at))
            .collect();
        let stats = worker.stats();
        drop(worker);
        assert!(
            after.is_empty(),
            "{STORE}: the handler took {} more steps after another consumer took its entry \
             (the first {:?} after): {stats:?}",
            after.len(),
            after.first()
        );
        assert_eq!(stats.lost, 1, "{stats:?}");
    }

    /// `shutdown(grace)` returns by its grace when the store no longer
    /// answers (it used to wait a second more for give-backs that could not
    /// land); what it holds comes back after its lease.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_returns_by_its_grace_on_a_silent_link() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let via: Q<u64> = store.via(&proxy, "silentstop").lease(ms(2000)).build().await.expect("connect");
        via.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let ticks: Ticks = Arc::default();
        let worker = Worker::builder(via.clone()).concurrency(2).spawn(ticking(2000, &ticks));
        eventually("a runs", || {
            let running = worker.stats().running == 1;
            async move { running }
        })
        .await;
        proxy.refuse(true);
        proxy.black_hole_open();
        let started = Instant::now();
        let stats = worker.shutdown(ms(200)).await;
        let took = started.elapsed();
        assert!(took < ms(600), "{STORE}: shutdown(200 ms) took {took:?}: {stats:?}");
        assert_eq!(stats.running, 0, "{STORE}: the handler was dropped: {stats:?}");
    }

    /// A call on a pooled connection that went silent returns within the
    /// response timeout (on PostgreSQL it never returned: no timeout, and
    /// sqlx's pool hands out idle connections untested), and the handle
    /// works again on a fresh connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_on_a_silent_connection_returns_within_the_response_timeout() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let via: Q<u64> = store
            .via(&proxy, "silentcall")
            .response_timeout(ms(500))
            .build()
            .await
            .expect("connect");
        via.insert(&1, Duration::ZERO).await.unwrap();
        proxy.black_hole_open(); // new connections still work
        let started = Instant::now();
        let first = tokio::time::timeout(ms(5000), via.insert(&2, Duration::ZERO))
            .await
            .unwrap_or_else(|_| panic!("{STORE}: insert on a silent connection hung"));
        let took = started.elapsed();
        assert!(took < ms(2000), "{STORE}: {took:?} ({first:?})");
        // Whether or not that one failed, the next calls get through.
        let mut ok = 0;
        let give_up = Instant::now() + WAIT;
        while ok < 3 {
            assert!(Instant::now() < give_up, "{STORE}: the handle does not recover");
            ok = if via.stats().await.is_ok() { ok + 1 } else { 0 };
        }
    }

    /// A consumer waiting in `take()` whose pooled connections went silent
    /// still gets an entry that comes due (it waited forever on
    /// PostgreSQL: its claim hung on a silent idle connection).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_take_rides_through_silent_pooled_connections() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let direct: Q<u64> = store.open("silenttake").await;
        let via: Q<u64> = store
            .via(&proxy, "silenttake")
            .response_timeout(ms(500))
            .build()
            .await
            .expect("connect");
        // Some pooled connections, then a waiting consumer.
        for _ in 0..4 {
            via.stats().await.unwrap();
        }
        let taker = tokio::spawn({
            let via = via.clone();
            async move { via.take().await }
        });
        sleep(ms(200)).await;
        proxy.black_hole_open();
        direct.insert_with_id("a", &1, ms(100)).await.unwrap();
        let d = tokio::time::timeout(ms(8000), taker)
            .await
            .unwrap_or_else(|_| panic!("{STORE}: take hung on a silent connection"))
            .unwrap()
            .expect("take rides through");
        assert_eq!(d.id(), "a");
    }
}
