#![cfg(any(feature = "redis", feature = "postgres"))]
//! `punctual::durable::Worker` on every durable store (`RedisQueue`,
//! `PgQueue`): acks, retries with backoff, dead letters, panics, timeouts,
//! the concurrency bound, leases kept alive and lost, shutdown, claiming
//! ahead, and a worker process killed mid-handler (alone, and with its
//! prefetch window full).
//!
//! Real time: the store server's clock decides what is due and when a lease
//! runs out. Waits are bounded by `WAIT` (never reached when green).

mod common;

use common::wait::{
    HOUR, OpenInParent, WAIT, child_command, child_role, eventually, finish, ms, wall, within,
};
use punctual::durable::{Backoff, Job, Worker, WorkerStats};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// Waits until `worker`'s stats satisfy `check`.
async fn stats_until(worker: &Worker, what: &str, check: impl Fn(&WorkerStats) -> bool) {
    eventually(what, || {
        let stats = worker.stats();
        let ok = check(&stats);
        async move { ok }
    })
    .await;
}

common::stores::on_every_store! {
    /// Queue `name` of `u64` on `store` with the given lease and max attempts,
    /// polling every 50 ms.
    async fn queue(store: &Store, name: &str, lease: Duration, max_attempts: u32) -> Q<u64> {
        store
            .builder(name)
            .lease(lease)
            .max_attempts(max_attempts)
            .poll_interval(ms(50))
            .build()
            .await
            .expect("connect")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ok_acks_every_entry() {
        let store = Store::start();
        let q = queue(&store, "acks", HOUR, 10).await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(q.clone()).concurrency(4).spawn({
            let seen = Arc::clone(&seen);
            move |job: Job<u64>| {
                let seen = Arc::clone(&seen);
                async move {
                    assert_eq!(job.attempt(), 1);
                    assert_eq!(job.schedule(), None);
                    seen.lock().unwrap().push(job.into_value());
                    Ok::<(), String>(())
                }
            }
        });
        let values: Vec<(u64, Duration)> = (0..20).map(|i| (i, ms(i * 10))).collect();
        q.insert_many(&values).await.unwrap();
        stats_until(&worker, "20 acked", |s| s.completed == 20).await;
        let mut seen = seen.lock().unwrap().clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!(
            stats,
            WorkerStats {
                completed: 20,
                ..WorkerStats::default()
            }
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_error_is_retried_after_the_backoff_with_the_next_attempt() {
        let store = Store::start();
        let q = queue(&store, "retries", HOUR, 10).await;
        let runs = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(q.clone())
            .backoff(Backoff::fixed(ms(300)))
            .spawn({
                let runs = Arc::clone(&runs);
                move |job: Job<u64>| {
                    let runs = Arc::clone(&runs);
                    async move {
                        runs.lock().unwrap().push((job.attempt(), Instant::now()));
                        if job.attempt() == 1 {
                            Err("not yet")
                        } else {
                            Ok(())
                        }
                    }
                }
            });
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        stats_until(&worker, "acked on the second attempt", |s| s.completed == 1).await;
        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].0, runs[1].0), (1, 2));
        let gap = runs[1].1 - runs[0].1;
        assert!(gap >= ms(290), "retried after {gap:?}, before the backoff");
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.failed, stats.dead), (1, 1, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_dead_letter_after_max_attempts_with_the_errors_display() {
        let store = Store::start();
        let q = queue(&store, "dies", HOUR, 3).await;
        let worker = Worker::builder(q.clone())
            .backoff(Backoff::fixed(ms(10)))
            .spawn(|job: Job<u64>| async move { Err(format!("boom {}", job.attempt())) });
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        stats_until(&worker, "dead", |s| s.dead == 1).await;
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (
                dead[0].id.as_str(),
                dead[0].value,
                dead[0].attempts,
                dead[0].reason.as_str()
            ),
            ("a", Some(1), 3, "boom 3")
        );
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.failed, stats.dead), (0, 3, 1));
    }

    /// An error message holding a NUL (which PostgreSQL text cannot store)
    /// still fails its attempts and dead-letters the entry, and the other
    /// entries' acks go through: a finish the store refused would otherwise
    /// be sent again forever, with every later ack riding with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_error_message_with_a_nul_dead_letters_and_blocks_no_ack() {
        let store = Store::start();
        let q = queue(&store, "nul", HOUR, 2).await;
        let worker = Worker::builder(q.clone())
            .backoff(Backoff::fixed(ms(10)))
            .spawn(|job: Job<u64>| async move {
                if *job.value() == 0 {
                    Err(format!("bad\0byte {}", job.attempt()))
                } else {
                    Ok(())
                }
            });
        q.insert_with_id("bad", &0, Duration::ZERO).await.unwrap();
        for n in 1..=20u64 {
            q.insert(&n, Duration::ZERO).await.unwrap();
        }
        stats_until(&worker, "dead and done", |s| s.dead == 1 && s.completed == 20).await;
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].id.as_str(), dead[0].attempts), ("bad", 2));
        assert!(
            dead[0].reason.starts_with("bad") && dead[0].reason.ends_with("byte 2"),
            "{:?}",
            dead[0].reason
        );
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.failed, stats.dead), (20, 2, 1));
        assert_eq!(q.stats().await.unwrap().pending, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_handler_is_a_failed_attempt_and_the_worker_survives() {
        let store = Store::start();
        let q = queue(&store, "panics", HOUR, 1).await;
        let worker = Worker::builder(q.clone())
            .concurrency(1)
            .spawn(|job: Job<u64>| async move {
                if *job.value() == 0 {
                    panic!("handler exploded");
                }
                Ok::<(), String>(())
            });
        q.insert_with_id("bad", &0, Duration::ZERO).await.unwrap();
        q.insert_with_id("good", &1, ms(50)).await.unwrap();
        stats_until(&worker, "the good one acked", |s| s.completed == 1).await;
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (dead[0].id.as_str(), dead[0].reason.as_str()),
            ("bad", "handler exploded")
        );
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.failed, stats.dead), (1, 1, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_past_the_timeout_fails_and_is_dropped() {
        let store = Store::start();
        let q = queue(&store, "slow", HOUR, 1).await;
        let finished = Arc::new(AtomicBool::new(false));
        let worker = Worker::builder(q.clone()).timeout(ms(200)).spawn({
            let finished = Arc::clone(&finished);
            move |_job: Job<u64>| {
                let finished = Arc::clone(&finished);
                async move {
                    sleep(Duration::from_secs(5)).await;
                    finished.store(true, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            }
        });
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        stats_until(&worker, "timed out", |s| s.dead == 1).await;
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead[0].reason, "timed out after 200ms");
        assert!(!finished.load(Ordering::SeqCst), "the run was dropped");
        worker.shutdown(ms(100)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrency_is_never_exceeded_and_is_reached() {
        let store = Store::start();
        let q = queue(&store, "bounded", HOUR, 10).await;
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(q.clone()).concurrency(3).spawn({
            let (now, most) = (Arc::clone(&now), Arc::clone(&most));
            move |_job: Job<u64>| {
                let (now, most) = (Arc::clone(&now), Arc::clone(&most));
                async move {
                    let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(running, Ordering::SeqCst);
                    sleep(ms(30)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            }
        });
        let values: Vec<(u64, Duration)> = (0..30).map(|i| (i, Duration::ZERO)).collect();
        q.insert_many(&values).await.unwrap();
        stats_until(&worker, "30 acked", |s| s.completed == 30).await;
        assert_eq!(most.load(Ordering::SeqCst), 3);
        assert!(worker.stats().running <= 3);
        worker.shutdown(ms(100)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_lease_is_kept_alive_through_a_long_handler() {
        let store = Store::start();
        let q = queue(&store, "kept", ms(300), 10).await;
        let runs = Arc::new(AtomicU32::new(0));
        let worker = Worker::builder(q.clone()).spawn({
            let runs = Arc::clone(&runs);
            move |_job: Job<u64>| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    sleep(Duration::from_secs(2)).await;
                    Ok::<(), String>(())
                }
            }
        });
        q.insert_with_id("long", &1, Duration::ZERO).await.unwrap();
        stats_until(&worker, "running", |s| s.running == 1).await;
        // Another consumer watches: a lapsed lease would hand it the entry.
        let rival = q.take_timeout(Duration::from_millis(2500)).await.unwrap();
        assert!(rival.is_none(), "the lease lapsed: {rival:?}");
        stats_until(&worker, "acked", |s| s.completed == 1).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.lost), (1, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_removed_mid_run_drops_its_handler_at_the_next_await() {
        let store = Store::start();
        let q = queue(&store, "removed", ms(300), 10).await;
        let started = Arc::new(AtomicBool::new(false));
        let went_on = Arc::new(AtomicBool::new(false));
        let worker = Worker::builder(q.clone()).spawn({
            let (started, went_on) = (Arc::clone(&started), Arc::clone(&went_on));
            move |_job: Job<u64>| {
                let (started, went_on) = (Arc::clone(&started), Arc::clone(&went_on));
                async move {
                    started.store(true, Ordering::SeqCst);
                    sleep(Duration::from_secs(3)).await;
                    went_on.store(true, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            }
        });
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let flag = Arc::clone(&started);
        eventually("started", move || {
            let ok = flag.load(Ordering::SeqCst);
            async move { ok }
        })
        .await;
        assert!(q.remove("a").await.unwrap());
        stats_until(&worker, "lost", |s| s.lost == 1 && s.running == 0).await;
        sleep(Duration::from_secs(3)).await;
        assert!(!went_on.load(Ordering::SeqCst), "the handler ran on");
        let stats = worker.shutdown(ms(100)).await;
        assert_eq!((stats.completed, stats.failed, stats.lost), (0, 0, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_gives_back_what_it_holds_at_once() {
        let store = Store::start();
        let q = queue(&store, "shutdown", Duration::from_secs(30), 10).await;
        let quick_done = Arc::new(AtomicBool::new(false));
        let worker = Worker::builder(q.clone()).concurrency(2).spawn({
            let quick_done = Arc::clone(&quick_done);
            move |job: Job<u64>| {
                let quick_done = Arc::clone(&quick_done);
                async move {
                    if *job.value() == 0 {
                        sleep(ms(100)).await; // finishes within the grace
                        quick_done.store(true, Ordering::SeqCst);
                    } else {
                        sleep(HOUR).await; // past the grace
                    }
                    Ok::<(), String>(())
                }
            }
        });
        q.insert_with_id("quick", &0, Duration::ZERO).await.unwrap();
        q.insert_with_id("stuck", &1, Duration::ZERO).await.unwrap();
        stats_until(&worker, "both running", |s| s.running == 2).await;
        q.insert_with_id("waiting", &2, Duration::ZERO)
            .await
            .unwrap();
        let start = Instant::now();
        let stats = worker.shutdown(ms(500)).await;
        let took = start.elapsed();
        assert!(took >= ms(450) && took < Duration::from_secs(3), "{took:?}");
        assert!(quick_done.load(Ordering::SeqCst));
        assert_eq!(
            (stats.running, stats.completed, stats.failed, stats.lost),
            (0, 1, 0, 0)
        );
        // Everything it held is back, due at once: no lease to wait for.
        let mut back = BTreeMap::new();
        for _ in 0..2 {
            let d = within("take", q.take()).await.unwrap();
            back.insert(d.id().to_owned(), d.attempt());
        }
        let want = BTreeMap::from([("stuck".to_owned(), 2), ("waiting".to_owned(), 1)]);
        assert_eq!(
            back, want,
            "the run past the grace counts, the unstarted one does not"
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no lease was waited for"
        );
    }

    #[test]
    #[should_panic(expected = "`concurrency` must be greater than zero")]
    fn concurrency_zero_panics() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store = Store::start();
        let q: Q<u64> = rt.block_on(queue(&store, "zero", HOUR, 1));
        let _ = Worker::builder(q).concurrency(0);
    }
}

common::stores::on_durable_stores! {
    /// The child side of the SIGKILL test: a worker whose handler announces
    /// the run on stdout and never ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killed_worker_child() {
        if child_role(STORE).is_none_or(|(role, _)| role != "worker") {
            return; // only as a child
        }
        let q: Q<u64> = Q::builder("killed")
            .in_parents_store()
            .lease(ms(800))
            .poll_interval(ms(50))
            .build()
            .await
            .unwrap();
        let _worker = Worker::builder(q).spawn(|job: Job<u64>| async move {
            println!("running {} attempt {}", job.id(), job.attempt());
            sleep(HOUR).await;
            Ok::<(), String>(())
        });
        sleep(WAIT).await;
    }

    /// The child side of the SIGKILL test with a full prefetch window: a
    /// worker of 2 places and 8 ahead whose first 4 runs (values 0 to 3)
    /// end at once and whose later runs never end, each announced on stdout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killed_prefetching_worker_child() {
        if child_role(STORE).is_none_or(|(role, _)| role != "ahead") {
            return; // only as a child
        }
        let q: Q<u64> = Q::builder("killed-ahead")
            .in_parents_store()
            .lease(ms(1500))
            .poll_interval(ms(50))
            .build()
            .await
            .unwrap();
        let _worker = Worker::builder(q).concurrency(2).prefetch(8).spawn(|job: Job<u64>| async move {
            if *job.value() < 4 {
                println!("finished {}", job.id());
                return Ok::<(), String>(());
            }
            println!("holding {}", job.id());
            sleep(HOUR).await;
            Ok(())
        });
        sleep(WAIT).await;
    }

    /// A worker process SIGKILLed with both places running and its prefetch
    /// window full: what it acked stays acked, and every other entry (run,
    /// claimed ahead, or never claimed) runs exactly once more, one it held
    /// once its lease has run out and within one lease of the kill.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_killed_with_a_full_prefetch_window_loses_nothing_and_runs_nothing_twice_at_once() {
        let lease = ms(1500);
        let store = Store::start();
        let q: Q<u64> = store
            .builder("killed-ahead")
            .lease(lease)
            .poll_interval(ms(50))
            .build()
            .await
            .expect("connect");
        let all: Vec<String> = (0..24u64).map(|n| format!("e{n:02}")).collect();
        for (n, id) in all.iter().enumerate() {
            assert!(q.insert_with_id(id, &(n as u64), Duration::ZERO).await.unwrap());
        }
        let mut child = child_command(module_path!(), "killed_prefetching_worker_child", "ahead", &store)
            .spawn()
            .unwrap();
        // 2 runs that never end and more than half the window claimed ahead
        // (it is claimed again once half empty: 5 to 8 are held at rest).
        let give_up = Instant::now() + WAIT;
        loop {
            let stats = q.stats().await.unwrap();
            if stats.leased >= 7 {
                break;
            }
            assert!(Instant::now() < give_up, "{STORE}: the child's window is not full: {stats:?}");
            sleep(ms(20)).await;
        }
        sleep(ms(200)).await;
        let killed_at = wall();
        child.kill().unwrap(); // SIGKILL
        let (_, out, _) = finish(&mut child, WAIT);
        // (The first line follows the test harness's own "test ... ".)
        let said = |what: &str| -> Vec<String> {
            out.lines()
                .filter_map(|l| l.split_once(what).map(|(_, id)| id.trim().to_owned()))
                .collect()
        };
        let (done, running) = (said("finished "), said("holding "));
        assert_eq!(running.len(), 2, "{STORE}: {out}");
        let held = q.stats().await.unwrap();
        assert!(held.leased >= 7, "{STORE}: leases outlive their holder: {held:?}");
        // Everything left runs again, once, in another worker.
        let runs = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(q.clone()).concurrency(8).spawn({
            let runs = runs.clone();
            move |job: Job<u64>| {
                let runs = runs.clone();
                async move {
                    runs.lock().unwrap().push((job.id().to_owned(), job.deadline(), wall()));
                    Ok::<(), String>(())
                }
            }
        });
        let left = held.due + held.leased + held.pending;
        stats_until(&worker, "the rest ran", |s| s.completed >= left).await;
        let stats = worker.shutdown(ms(500)).await;
        assert_eq!(stats.completed, left, "{STORE}: {stats:?}");
        assert_eq!(q.stats().await.unwrap(), Stats::default(), "{STORE}");
        let runs = runs.lock().unwrap().clone();
        let mut ran: Vec<&str> = runs.iter().map(|(id, _, _)| id.as_str()).collect();
        ran.sort_unstable();
        let mut once = ran.clone();
        once.dedup();
        assert_eq!(ran, once, "{STORE}: an entry ran twice after the kill");
        // Nothing lost: an entry the store no longer held was acked by the
        // child (a "done" whose ack had not landed runs again: at least once).
        for id in &all {
            assert!(
                ran.contains(&id.as_str()) || done.contains(id),
                "{STORE}: {id} neither acked by the child nor run again"
            );
        }
        // What the child ran or held ahead came back only when its lease ran
        // out, and within one lease of the kill.
        for (id, due, started) in &runs {
            if running.contains(id) {
                assert!(*due + ms(5) >= killed_at, "{STORE}: {id} due again before the kill");
            }
            assert!(*started + ms(5) >= *due, "{STORE}: {id} started before its lease ran out");
            assert!(
                *due <= killed_at + lease + ms(50),
                "{STORE}: {id} held past one lease after the kill"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_killed_mid_handler_leaves_the_entry_to_come_back_after_its_lease() {
        let store = Store::start();
        let q: Q<u64> = store
            .builder("killed")
            .lease(ms(800))
            .poll_interval(ms(50))
            .build()
            .await
            .expect("connect");
        q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
        let mut child = child_command(module_path!(), "killed_worker_child", "worker", &store)
            .spawn()
            .unwrap();
        eventually("the child holds the entry", || {
            let leased = q.clone();
            async move { leased.stats().await.unwrap().leased == 1 }
        })
        .await;
        // Leased is not yet running: give its handler a moment to start
        // (and print) before the kill, well inside the 800 ms lease.
        sleep(ms(200)).await;
        let killed_at = wall();
        child.kill().unwrap(); // SIGKILL
        let (_, out, _) = finish(&mut child, WAIT);
        assert!(out.contains("running a attempt 1"), "{out}");
        let d = within("take", q.take()).await.unwrap();
        assert_eq!((d.id(), d.attempt()), ("a", 2));
        assert!(
            d.deadline() + ms(5) >= killed_at,
            "due again when the lease ran out"
        );
        assert!(d.ack().await.unwrap());
    }
}

/// Claiming ahead (`WorkerBuilder::prefetch`).
mod ahead {
    use super::*;

    crate::common::stores::on_every_store! {
        /// With `prefetch`, a worker with a backlog claims beyond its free
        /// places (more leased than it runs), never runs more than its
        /// concurrency at once, runs each entry once, and gives what it claimed
        /// ahead back at once at shutdown (due again, no attempt counted).
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_worker_claims_ahead_within_its_window_and_gives_it_back() {
            let store = Store::start();
            let q: Q<u32> = store.builder("ahead").lease(HOUR).build().await.unwrap();
            let all: Vec<(u32, Duration)> = (0..40).map(|n| (n, Duration::ZERO)).collect();
            q.insert_many(&all).await.unwrap();
            let running = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let seen = Arc::new(Mutex::new(Vec::new()));
            let gate = Arc::new(tokio::sync::Semaphore::new(0));
            let worker = Worker::builder(q.clone()).concurrency(2).prefetch(6).spawn({
                let (running, most, seen, gate) = (running.clone(), most.clone(), seen.clone(), gate.clone());
                move |job: Job<u32>| {
                    let (running, most, seen, gate) = (running.clone(), most.clone(), seen.clone(), gate.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        seen.lock().unwrap().push((*job.value(), job.attempt()));
                        gate.acquire().await.unwrap().forget();
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<(), String>(())
                    }
                }
            });
            // Let a few through so the first claim sees its backlog; once
            // their acks have landed (a finish may still be on its way beside
            // the next claim until then), what is leased is what it holds.
            gate.add_permits(4);
            stats_until(&worker, "the first 4 acked", |s| s.completed == 4).await;
            eventually("claimed ahead", || async { q.stats().await.unwrap().leased > 2 }).await;
            let leased = q.stats().await.unwrap().leased;
            assert!(leased <= 8, "{STORE}: {leased} leased by a worker of 2 places and 6 ahead");
            let stats = worker.shutdown(ms(200)).await;
            gate.add_permits(100);
            assert!(most.load(Ordering::SeqCst) <= 2, "{STORE}: ran more than its places");
            let after = q.stats().await.unwrap();
            assert_eq!(after.leased, 0, "{STORE}: claimed ahead and kept");
            assert_eq!(40 - stats.completed, after.due, "{STORE}");
            // What came back was never started: its next delivery is attempt 1.
            let started: Vec<u32> = seen.lock().unwrap().iter().map(|&(v, _)| v).collect();
            while let Some(d) = q.try_take().await.unwrap() {
                if !started.contains(d.value()) {
                    assert_eq!(d.attempt(), 1, "{STORE}: a prefetched entry was counted");
                }
                d.ack().await.unwrap();
            }
        }
    }
}
