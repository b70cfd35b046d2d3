#![cfg(any(feature = "redis", feature = "postgres"))]
//! A hostile review of the durable worker (`src/durable/engine.rs`): each
//! test pins one bug it found. Each test's comment tells the bug as it was
//! found; each passes since its fix (see CHANGELOG.md).
//!
//! Real time throughout; links fail through the fault proxy of
//! `tests/common/proxy.rs`, put in front of the store's server.

mod common;

use common::proxied::Proxied;
use common::proxy::{Direction, Proxy};
use common::wait::{HOUR, WAIT, eventually, ms};
use punctual::durable::{Backoff, Job, Worker};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// When a handler last reached an await.
type LastTick = Arc<Mutex<Option<Instant>>>;

/// What `ticking` handlers return.
type Run = std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// A handler that runs about `steps` * 10 ms, noting each await it passes.
fn ticking(steps: u32, last: &LastTick) -> impl Fn(Job<u64>) -> Run + Send + Sync + 'static {
    let last = Arc::clone(last);
    move |_job: Job<u64>| {
        let last = Arc::clone(&last);
        Box::pin(async move {
            for _ in 0..steps {
                *last.lock().unwrap() = Some(Instant::now());
                sleep(ms(10)).await;
            }
            Ok(())
        })
    }
}

/// A panic payload whose `Drop` panics in turn, with a payload whose own
/// `Drop` panics (`common::Bomb`).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            std::panic::panic_any(common::Bomb);
        }
    }
}

common::stores::on_every_store! {
    /// "A panic never takes the worker down": a handler panics with a
    /// payload whose `Drop` panics with a payload whose own `Drop` panics.
    /// The first is dropped in the handler's task (Tokio catches that), the
    /// second in the engine's `joined`, which panics: the engine task dies
    /// and no entry runs again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_payload_that_panics_on_drop_does_not_kill_the_worker() {
        let store = Store::start();
        let q: Q<u64> = store.open("payload").await;
        let calls = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(q.clone())
            .concurrency(1)
            .backoff(Backoff::fixed(HOUR))
            .spawn({
                let calls = Arc::clone(&calls);
                move |job: Job<u64>| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if *job.value() == 1 {
                            std::panic::panic_any(PanicsOnDrop);
                        }
                        Ok::<(), String>(())
                    }
                }
            });
        q.insert_with_id("bad", &1, Duration::ZERO).await.unwrap();
        eventually("bad ran", || {
            let ran = calls.load(Ordering::SeqCst) == 1;
            async move { ran }
        })
        .await;
        sleep(ms(200)).await;
        q.insert_with_id("good", &2, Duration::ZERO).await.unwrap();
        let give_up = Instant::now() + ms(3000);
        while worker.stats().completed == 0 && Instant::now() < give_up {
            sleep(ms(20)).await;
        }
        let stats = worker.stats();
        let left = q.deadline("good").await.unwrap();
        let _ = worker.shutdown(ms(100)).await;
        assert_eq!(
            stats.completed, 1,
            "{STORE}: the worker died with the panic (`good` still due: {left:?}): {stats:?}"
        );
    }

    /// At the end of a shutdown's grace a handler is dropped; a value it
    /// holds panics in `Drop` (a drop guard): Tokio reports the abort as a
    /// panic, and the engine counts a failed attempt and retries the entry
    /// after the backoff (an hour) instead of giving it back due at once,
    /// counted in none of the stats.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_dropped_at_shutdown_is_given_back_even_if_its_drop_panics() {
        let store = Store::start();
        let q: Q<u64> = store.builder("guard").lease(Duration::from_secs(20)).build().await.expect("connect");
        let worker = Worker::builder(q.clone())
            .concurrency(1)
            .backoff(Backoff::fixed(HOUR))
            .spawn(|_job: Job<u64>| async move {
                let _guard = common::Bomb;
                sleep(Duration::from_secs(30)).await;
                Ok::<(), String>(())
            });
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        eventually("a runs", || {
            let running = worker.stats().running == 1;
            async move { running }
        })
        .await;
        let stats = worker.shutdown(ms(100)).await;
        let due = q.deadline("a").await.unwrap().expect("a is still there");
        let soon = common::wait::wall() + Duration::from_secs(60);
        assert!(
            stats.failed == 0 && due < soon,
            "{STORE}: a run dropped at shutdown was counted failed and retried after the \
             backoff ({:?} from now): {stats:?}",
            due.duration_since(common::wait::wall()).unwrap_or_default()
        );
    }
}

#[cfg(feature = "redis")]
mod redis_only {
    use super::*;
    use common::redis_server::RedisServer;
    use common::stores::redis::{Q, STORE, Store};
    use punctual::redis::RedisQueue;

    /// A claim whose reply is lost (response timeout 1.5 s) is sent again
    /// and recovers what its first sending leased, with that sending's
    /// lease end (here already past: lease 1 s). The engine fences the
    /// entry from the *resend* (`valid_until = sent_at + lease` of the
    /// reply it got), ignoring `Taken::lease_until`: it starts a handler on
    /// an entry another consumer can take at once, and both run it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_recovered_by_a_resent_claim_is_fenced_by_its_first_sending() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let direct: RedisQueue<u64> = RedisQueue::builder("recovered")
            .url(&server.url())
            .lease(ms(1000))
            .poll_interval(ms(50))
            .build()
            .await
            .unwrap();
        // Loads the claim script: the worker's claim is one EVALSHA.
        assert!(direct.try_take().await.unwrap().is_none());
        direct
            .insert_with_id("a", &1, Duration::ZERO)
            .await
            .unwrap();
        let via: RedisQueue<u64> = RedisQueue::builder("recovered")
            .url(&proxy.url())
            .lease(ms(1000))
            .poll_interval(ms(50))
            .response_timeout(ms(1500))
            .build()
            .await
            .unwrap();
        proxy.swallow_replies_after_next_request(Some(common::redis_queue::claim_sha().as_bytes()));
        let starts: Arc<Mutex<Vec<u32>>> = Arc::default();
        let last: LastTick = Arc::default();
        let worker = Worker::builder(via.clone()).concurrency(1).spawn({
            let starts = Arc::clone(&starts);
            let last = Arc::clone(&last);
            move |job: Job<u64>| {
                starts.lock().unwrap().push(job.attempt());
                let last = Arc::clone(&last);
                async move {
                    for _ in 0..300 {
                        *last.lock().unwrap() = Some(Instant::now());
                        sleep(ms(10)).await;
                    }
                    Ok::<(), String>(())
                }
            }
        });
        eventually("a handler starts", || {
            let started = !starts.lock().unwrap().is_empty();
            async move { started }
        })
        .await;
        assert!(!proxy.armed(), "the swallow did not fire");
        let other = direct.try_take().await.unwrap();
        let taken_at = Instant::now();
        sleep(ms(300)).await;
        let last = last.lock().unwrap().expect("ran");
        let starts = starts.lock().unwrap().clone();
        let stats = worker.shutdown(ms(100)).await;
        if let Some(other) = other {
            let ran_on = last.saturating_duration_since(taken_at);
            assert!(
                ran_on < ms(50),
                "two runs of `a` side by side for {ran_on:?}: the worker started attempts \
                 {starts:?}, another consumer took attempt {} (the recovered lease had run \
                 out): {stats:?}",
                other.attempt()
            );
        }
    }

    /// A shutdown on Redis: a handler acks during the grace while a claim
    /// is on its way (its reply is slow; requests reach the store at once).
    /// Finishes ride with claims, so the ack waits for that claim's reply,
    /// although no claim will carry it while stopping; the shutdown gives
    /// up first, and the acked entry waits for its lease to run out (to be
    /// run again). PostgreSQL sends it beside the claim.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_ack_during_the_grace_does_not_wait_behind_a_slow_claim() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let direct: RedisQueue<u64> = RedisQueue::builder("slowclaim")
            .url(&server.url())
            .build()
            .await
            .unwrap();
        let via: RedisQueue<u64> = RedisQueue::builder("slowclaim")
            .url(&proxy.url())
            .lease(Duration::from_secs(20))
            .poll_interval(ms(50))
            .response_timeout(Duration::from_secs(8))
            .build()
            .await
            .unwrap();
        let gate = Arc::new(tokio::sync::Notify::new());
        let returned = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(via.clone()).concurrency(2).spawn({
            let gate = Arc::clone(&gate);
            let returned = Arc::clone(&returned);
            move |_job: Job<u64>| {
                let gate = Arc::clone(&gate);
                let returned = Arc::clone(&returned);
                async move {
                    gate.notified().await;
                    returned.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            }
        });
        direct
            .insert_with_id("a", &1, Duration::ZERO)
            .await
            .unwrap();
        eventually("a runs", || {
            let running = worker.stats().running == 1;
            async move { running }
        })
        .await;
        // Replies take 3 s from now on; wait for a claim to reach the
        // server (the worker, with a free place, claims every 50 ms).
        proxy.set_latency_in(Direction::Replies, ms(3000));
        sleep(ms(100)).await;
        let calls = || {
            server
                .command(&["INFO", "commandstats"])
                .render()
                .lines()
                .find(|l| l.starts_with("cmdstat_evalsha:"))
                .and_then(|l| l.split(['=', ',']).nth(1).map(str::to_owned))
                .unwrap_or_default()
        };
        let before = calls();
        let give_up = Instant::now() + WAIT;
        while calls() == before {
            assert!(Instant::now() < give_up, "no claim");
            sleep(ms(2)).await;
        }
        // A claim is on its way back (3 s); the handler acks at once.
        let stopping = tokio::spawn(worker.shutdown(ms(300)));
        sleep(ms(20)).await;
        gate.notify_one();
        let stats = stopping.await.unwrap();
        assert_eq!(
            returned.load(Ordering::SeqCst),
            1,
            "the handler returned Ok in the grace"
        );
        proxy.set_latency_in(Direction::Replies, Duration::ZERO);
        sleep(ms(300)).await;
        let s = direct.stats().await.unwrap();
        assert_eq!(
            s.leased, 0,
            "`a`, acked during the grace, is still leased (to be run again): {s:?} {stats:?}"
        );
    }

    /// After an outage longer than a lease, the claim the worker sends again
    /// (it failed while the server could not be reached) leases fresh
    /// entries for a whole lease: they run at once, with attempt 1. (A fix
    /// of this session first fenced every entry of a resend from the first
    /// sending's time, long past here, so the fresh lease was thrown away
    /// and the entry ran only after it ran out, with attempt 2.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_an_outage_a_resent_claim_runs_what_it_leased_at_once() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let direct: Q<u64> = store.open("outage").await;
        let via: Q<u64> = store
            .via(&proxy, "outage")
            .lease(ms(600))
            .build()
            .await
            .expect("connect");
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(via.clone()).concurrency(2).spawn({
            let attempts = Arc::clone(&attempts);
            move |job: Job<u64>| {
                let attempts = Arc::clone(&attempts);
                async move {
                    attempts.lock().unwrap().push(job.attempt());
                    Ok::<(), String>(())
                }
            }
        });
        sleep(ms(300)).await;
        proxy.refuse(true);
        proxy.kill_all();
        direct
            .insert_with_id("a", &1, Duration::ZERO)
            .await
            .unwrap();
        // Longer than a lease: the worker's claims fail meanwhile.
        sleep(ms(1500)).await;
        proxy.refuse(false);
        let back = Instant::now();
        eventually("a runs", || {
            let ran = !attempts.lock().unwrap().is_empty();
            async move { ran }
        })
        .await;
        let ran_after = back.elapsed();
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!(
            attempts.lock().unwrap().first().copied(),
            Some(1),
            "{STORE}: `a` ran first with another attempt ({ran_after:?} after the server came back): {stats:?}"
        );
    }

    /// A claim still on its way when a shutdown gives up waiting (its
    /// reply is slow; the store takes requests at once) is given up as the
    /// engine drops it, and the engine's last request gives back what it
    /// leased. (It once waited for its lease, 20 s here.) Redis only: on
    /// PostgreSQL that last request goes through the pool, and on a link
    /// this slow it does not get through within the bound of a shutdown
    /// (the entry then comes back after its lease).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_in_flight_at_shutdown_is_given_back() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let direct: Q<u64> = store.builder("inflight").build().await.expect("connect");
        let via: Q<u64> = store
            .via(&proxy, "inflight")
            .lease(Duration::from_secs(20))
            .build()
            .await
            .expect("connect");
        let worker = Worker::builder(via.clone())
            .concurrency(4)
            .spawn(|_job: Job<u64>| async move { Ok::<(), String>(()) });
        sleep(ms(300)).await;
        // Replies take 2.5 s (less than Redis's response timeout of 3 s):
        // slow, not lost.
        proxy.set_latency_in(Direction::Replies, ms(2500));
        direct
            .insert_with_id("y", &1, Duration::ZERO)
            .await
            .unwrap();
        eventually("a claim leased y", || {
            let direct = direct.clone();
            async move { direct.stats().await.unwrap().leased == 1 }
        })
        .await;
        let started = Instant::now();
        let stats = worker.shutdown(Duration::ZERO).await;
        assert!(started.elapsed() < ms(4000), "{:?}", started.elapsed());
        proxy.set_latency_in(Direction::Replies, Duration::ZERO);
        sleep(ms(500)).await;
        let s = direct.stats().await.unwrap();
        assert_eq!(
            s.leased, 0,
            "{STORE}: `y`, leased by a claim in flight at shutdown, waits for its lease: \
             {s:?} {stats:?}"
        );
    }
}

#[cfg(feature = "postgres")]
mod pg_only {
    use super::*;
    use common::stores::pg::{Q, Store};

    /// A claim whose connection goes silent (a NAT that dropped its state)
    /// never returns on PostgreSQL (no response timeout), and the engine
    /// sends one claim at a time and never gives one up: the worker never
    /// claims again, though the pool has other connections.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silenced_claim_does_not_stop_the_worker_for_good() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let direct: Q<u64> = store.open("silentclaimq").await;
        let via: Q<u64> = store
            .via(&proxy, "silentclaimq")
            .build()
            .await
            .expect("connect");
        let done = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(via.clone()).concurrency(4).spawn({
            let done = Arc::clone(&done);
            move |_job: Job<u64>| {
                let done = Arc::clone(&done);
                async move {
                    done.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            }
        });
        // Idle: the worker polls every 50 ms; its listener is connected.
        sleep(ms(500)).await;
        proxy.swallow_replies_after_next_request(Some(b"silentclaimq"));
        let give_up = Instant::now() + WAIT;
        while proxy.armed() {
            assert!(Instant::now() < give_up, "no claim");
            sleep(ms(5)).await;
        }
        for i in 0..5 {
            direct
                .insert_with_id(&format!("e{i}"), &i, Duration::ZERO)
                .await
                .unwrap();
        }
        let give_up = Instant::now() + ms(5000);
        while done.load(Ordering::SeqCst) < 5 && Instant::now() < give_up {
            sleep(ms(20)).await;
        }
        let ran = done.load(Ordering::SeqCst);
        let stats = tokio::time::timeout(ms(3000), worker.shutdown(ms(10))).await;
        assert_eq!(
            ran, 5,
            "entries due for 5 s, yet the worker ran {ran}: its claim hangs ({stats:?})"
        );
    }
}

common::stores::on_durable_stores! {
    /// Fencing must not wait for the store: while an extension hangs (the
    /// link went silent: a NAT that dropped its state), a running handler
    /// is still dropped once its lease may have run out. The engine only
    /// checks `valid_until` in `heartbeat()`, and the heartbeat arm is off
    /// while an extension is in flight: on Redis the handler runs on until
    /// the response timeout, on PostgreSQL (no timeout) for good, while
    /// another consumer runs the same entry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_is_dropped_at_its_lease_while_an_extension_hangs() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let direct: Q<u64> = store.builder("hang").lease(ms(1000)).build().await.expect("connect");
        let via: Q<u64> = store.via(&proxy, "hang").lease(ms(1000)).build().await.expect("connect");
        direct.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let last: LastTick = Arc::default();
        let worker = Worker::builder(via.clone()).concurrency(1).spawn(ticking(600, &last));
        eventually("a runs", || {
            let running = worker.stats().running == 1;
            async move { running }
        })
        .await;
        sleep(ms(100)).await;
        // The link goes silent: the next extension never hears back.
        proxy.refuse(true);
        proxy.black_hole_open();
        // Another consumer takes `a` once its lease has run out.
        let give_up = Instant::now() + WAIT;
        let taken_at = loop {
            if let Some(d) = direct.try_take().await.unwrap() {
                assert_eq!((d.id(), d.attempt()), ("a", 2));
                break Instant::now();
            }
            assert!(Instant::now() < give_up, "the lease never ran out");
            sleep(ms(10)).await;
        };
        sleep(ms(500)).await;
        let last = last.lock().unwrap().expect("ran");
        let stats = worker.stats();
        let _ = tokio::time::timeout(ms(3000), worker.shutdown(ms(10))).await;
        let ran_on = last.saturating_duration_since(taken_at);
        assert!(
            ran_on < ms(100),
            "{STORE}: the handler ran on {ran_on:?} after another consumer took its entry \
             (its lease had run out): {stats:?}"
        );
    }

    /// A failed attempt whose request lost its reply (it applied: the
    /// entry is retried an hour on) is sent again and found `Lost`: the
    /// worker counts that run in `lost`, as if its lease had been lost,
    /// beside `failed`. (`Ack` has the `resent` case; `Fail` has not.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failure_whose_reply_was_lost_is_not_counted_lost() {
        let store = Store::start();
        let proxy = Proxy::start(store.upstream_port());
        let direct: Q<u64> = store.builder("flost").build().await.expect("connect");
        let via: Q<u64> = store
            .via(&proxy, "flost")
            .lease(Duration::from_secs(20))
            .build()
            .await
            .expect("connect");
        let worker = Worker::builder(via.clone())
            .concurrency(2)
            .backoff(Backoff::fixed(HOUR))
            .spawn(|_job: Job<u64>| async move {
                sleep(ms(200)).await;
                Err::<(), _>("unique-failure-reason-7f3a")
            });
        sleep(ms(200)).await;
        // The request carrying the failure reaches the store; its reply is lost.
        proxy.cut_after_next_request(Some(b"unique-failure-reason-7f3a"));
        direct.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        eventually("the failure is applied", || {
            let direct = direct.clone();
            async move {
                let due = direct.deadline("a").await.unwrap();
                due.is_some_and(|at| at > common::wait::wall() + Duration::from_secs(1800))
            }
        })
        .await;
        assert!(!proxy.armed(), "the cut did not fire");
        sleep(ms(1000)).await;
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!(
            (stats.failed, stats.lost, stats.completed),
            (1, 0, 0),
            "{STORE}: one failed attempt, applied (retried an hour on), no lease lost: {stats:?}"
        );
    }
}
