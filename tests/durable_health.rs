//! Health at a glance, one body per behaviour on every store: workers and
//! what they run, latency, the per-minute history, schedules paused one by
//! one, an entry's failed attempts and holder, dead letters newest first.

mod common;

use common::wait::{
    HOUR, OpenInParent, WAIT, child_command, child_role, eventually, finish, ms, wall, within,
};
use punctual::MissedTicks;
use punctual::durable::{EntryState, Finished, Job, Outcome, Worker};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

common::stores::on_every_store! {
    /// A worker appears in `workers()` from its start, with its name, host,
    /// process, places and the runs it has under way (each with when it
    /// began, by the store's clock); a leased entry names it; it is gone
    /// after its shutdown.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_is_listed_with_its_runs_until_it_shuts_down() {
        let store = Store::start();
        // Heartbeats every second: a record not refreshed is gone after 3 s.
        let q: Q<u32> = store.builder("workers").lease(ms(3000)).build().await.unwrap();
        let worker = Worker::builder(q.clone())
            .name("renderer")
            .concurrency(3)
            .spawn(|_job: Job<u32>| async {
                tokio::time::sleep(HOUR).await;
                Outcome::Done
            });
        eventually("registered", || async { q.workers().await.unwrap().len() == 1 }).await;
        let listed = q.workers().await.unwrap().remove(0);
        assert_eq!((listed.name.as_deref(), listed.concurrency, listed.pid), (Some("renderer"), 3, std::process::id()));
        assert!(!listed.host.is_empty() && !listed.stopping);
        let before = wall();
        let ids = q.insert_many(&[(1, Duration::ZERO), (2, Duration::ZERO)]).await.unwrap();
        eventually("both run and are listed", || async {
            q.workers().await.unwrap().first().is_some_and(|w| w.running.len() == 2)
        })
        .await;
        let listed = q.workers().await.unwrap().remove(0);
        let mut running: Vec<&str> = listed.running.iter().map(|r| r.id.as_str()).collect();
        running.sort_unstable();
        let mut expected: Vec<&str> = ids.iter().map(String::as_str).collect();
        expected.sort_unstable();
        assert_eq!(running, expected, "{STORE}");
        for run in &listed.running {
            assert_eq!(run.attempt, 1);
            assert!(run.started_at + ms(50) >= before, "{STORE}: began {:?} before the insert", before.duration_since(run.started_at));
        }
        let info = q.entry(&ids[0]).await.unwrap().unwrap();
        assert_eq!(info.state, EntryState::Leased);
        assert_eq!(info.worker.as_deref(), Some(listed.id.as_str()), "{STORE}");
        assert!(info.started_at.is_some());
        worker.shutdown(ms(50)).await;
        // `shutdown` returns within its grace + 0.1 s even when the store is
        // slow to answer; the record is removed by the worker (well before
        // it would be gone for want of heartbeats), not left to expire.
        let gone_by = tokio::time::Instant::now() + ms(1500);
        while !q.workers().await.unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < gone_by, "{STORE}: listed after its shutdown");
            tokio::time::sleep(ms(10)).await;
        }
    }

    /// `latency` is now minus the due time of the oldest due entry not
    /// leased, by the store's clock; `None` when nothing is due.
    #[tokio::test]
    async fn latency_is_the_age_of_the_oldest_due_entry() {
        let store = Store::start();
        let q: Q<u32> = store.builder("latency").lease(HOUR).build().await.unwrap();
        assert_eq!(q.latency().await.unwrap(), None);
        q.insert(&1, HOUR).await.unwrap();
        assert_eq!(q.latency().await.unwrap(), None, "{STORE}: nothing is due");
        let due = q.now().await.unwrap() - Duration::from_secs(90);
        q.insert_at(&2, due).await.unwrap();
        q.insert(&3, Duration::ZERO).await.unwrap();
        let late = q.latency().await.unwrap().expect("due");
        assert!(late >= Duration::from_secs(90) && late < Duration::from_secs(95), "{STORE}: {late:?}");
        let taken = q.take().await.unwrap();
        assert_eq!(*taken.value(), 2);
        let late = q.latency().await.unwrap().expect("still one due");
        assert!(late < Duration::from_secs(5), "{STORE}: a leased entry counted: {late:?}");
    }

    /// The history counts what was inserted (ticks included), acked,
    /// failed and dead-lettered, per minute of the store's clock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn history_counts_inserts_acks_failures_and_deaths() {
        let store = Store::start();
        let q: Q<u32> = store.builder("history").max_attempts(2).build().await.unwrap();
        let since = q.now().await.unwrap() - Duration::from_secs(1);
        q.insert_many(&[(1, Duration::ZERO), (2, Duration::ZERO), (3, Duration::ZERO)]).await.unwrap();
        q.insert(&4, HOUR).await.unwrap();
        let worker = Worker::builder(q.clone()).spawn(|job: Job<u32>| async move {
            match *job.value() {
                2 => Outcome::retry_after("flaky", Duration::ZERO),
                3 => Outcome::discard("bad"),
                _ => Outcome::Done,
            }
        });
        eventually("settled", || async {
            let stats = q.stats().await.unwrap();
            stats.dead == 2 && stats.due + stats.leased == 0
        })
        .await;
        worker.shutdown(ms(100)).await;
        let minutes = q.history(since).await.unwrap();
        assert!(!minutes.is_empty() && minutes.len() <= 2, "{STORE}: {minutes:?}");
        let sum = |f: fn(&punctual::durable::Minute) -> u64| minutes.iter().map(f).sum::<u64>();
        assert_eq!(sum(|m| m.inserted), 4, "{STORE}: {minutes:?}");
        assert_eq!(sum(|m| m.done), 1, "{STORE}: {minutes:?}");
        // Entry 2 failed twice (the second sent it to the dead letters),
        // entry 3 once (discarded).
        assert_eq!(sum(|m| m.failed), 3, "{STORE}: {minutes:?}");
        assert_eq!(sum(|m| m.dead), 2, "{STORE}: {minutes:?}");
        assert!(minutes.windows(2).all(|w| w[0].at < w[1].at));
        let later = q.now().await.unwrap() + Duration::from_secs(120);
        assert!(q.history(later).await.unwrap().is_empty());
    }

    /// A paused schedule's tick is not delivered; `run_now` runs one tick
    /// of it; resumed, the tick that came due meanwhile runs once, late,
    /// and the schedule goes on by its rule. Its info shows it paused, and
    /// its last run and outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paused_schedule_runs_nothing_until_resumed() {
        let store = Store::start();
        let q: Q<u32> = store.open("paused-schedule").await;
        assert!(q.schedule_every("tick", ms(200), MissedTicks::Skip, &7).await.unwrap());
        assert!(q.pause_schedule("tick").await.unwrap());
        assert!(!q.pause_schedule("tick").await.unwrap(), "{STORE}: paused twice");
        assert!(!q.pause_schedule("no-such").await.unwrap());
        let runs = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(q.clone()).spawn({
            let runs = runs.clone();
            move |_job: Job<u32>| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Outcome::Done }
            }
        });
        tokio::time::sleep(ms(700)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{STORE}: a paused schedule ran");
        let info = q.schedules().await.unwrap().remove(0);
        assert!(info.paused && info.last_run.is_none() && info.last_outcome.is_none(), "{STORE}: {info:?}");
        assert!(q.run_now("tick").await.unwrap());
        eventually("run_now ran one tick", || async { runs.load(Ordering::SeqCst) == 1 }).await;
        tokio::time::sleep(ms(500)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{STORE}: more than the one tick ran while paused");
        let info = q.schedules().await.unwrap().remove(0);
        assert_eq!(info.last_outcome, Some(Finished::Done), "{STORE}");
        assert!(info.last_run.is_some());
        assert!(q.resume_schedule("tick").await.unwrap());
        eventually("it goes on", || async { runs.load(Ordering::SeqCst) >= 3 }).await;
        worker.shutdown(ms(100)).await;
        assert!(!q.schedules().await.unwrap()[0].paused);
    }

    /// A paused schedule's tick stays pending: counted so by `stats()`,
    /// listed among the pending entries at its own instant (also once that
    /// instant has passed), never due; resumed, it is due again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paused_schedules_tick_is_pending_at_its_instant() {
        let store = Store::start();
        let q: Q<u32> = store.open("paused-tick").await;
        assert!(q.schedule_every("tick", ms(300), MissedTicks::Skip, &7).await.unwrap());
        let due_before = q.entry("tick").await.unwrap().expect("the tick").due;
        assert!(q.pause_schedule("tick").await.unwrap());
        let counts = |s: punctual::durable::QueueStats| (s.pending, s.due, s.leased);
        assert_eq!(counts(q.stats().await.unwrap()), (1, 0, 0), "{STORE}: paused before its instant");
        let listed = q.entries(EntryState::Pending, None, 10).await.unwrap().entries;
        let listed: Vec<(&str, std::time::SystemTime)> = listed.iter().map(|e| (e.id.as_str(), e.due)).collect();
        assert_eq!(listed, [("tick", due_before)], "{STORE}");
        let info = q.entry("tick").await.unwrap().expect("the tick");
        assert_eq!((info.state, info.due), (EntryState::Pending, due_before), "{STORE}");
        assert_eq!(q.deadline("tick").await.unwrap(), Some(due_before), "{STORE}");
        let schedule = q.schedules().await.unwrap().remove(0);
        assert_eq!((schedule.paused, schedule.next), (true, Some(due_before)), "{STORE}");
        // Its instant passes while it is paused: still pending, not due.
        tokio::time::sleep(ms(600)).await;
        assert_eq!(counts(q.stats().await.unwrap()), (1, 0, 0), "{STORE}: paused past its instant");
        assert!(q.entries(EntryState::Due, None, 10).await.unwrap().entries.is_empty(), "{STORE}");
        assert_eq!(q.latency().await.unwrap(), None, "{STORE}: a paused tick is not waiting to run");
        let listed = q.entries(EntryState::Pending, None, 10).await.unwrap().entries;
        assert_eq!(listed.iter().map(|e| (e.id.as_str(), e.due)).collect::<Vec<_>>(), [("tick", due_before)], "{STORE}");
        // Listed after the entries that will come due, page by page.
        q.insert_with_id("later", &1, HOUR).await.unwrap();
        let first = q.entries(EntryState::Pending, None, 1).await.unwrap();
        assert_eq!(first.entries[0].id, "later", "{STORE}");
        let rest = q.entries(EntryState::Pending, first.next.as_ref(), 1).await.unwrap();
        assert_eq!((rest.entries[0].id.as_str(), rest.entries[0].due), ("tick", due_before), "{STORE}");
        assert!(rest.next.is_none(), "{STORE}");
        assert!(q.resume_schedule("tick").await.unwrap());
        assert_eq!(counts(q.stats().await.unwrap()), (1, 1, 0), "{STORE}: resumed, its tick is due");
    }

    /// An entry keeps its last failed attempts (attempt, when, why); a
    /// dead tick names its schedule; dead letters read newest first, page
    /// by page, with cursors of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_attempts_and_dead_letters_newest_first() {
        let store = Store::start();
        let q: Q<u32> = store.builder("errors").max_attempts(3).build().await.unwrap();
        q.insert_with_id("flaky", &0, Duration::ZERO).await.unwrap();
        for n in 1..=5u32 {
            q.insert_with_id(&format!("dead-{n}"), &n, Duration::ZERO).await.unwrap();
        }
        let worker = Worker::builder(q.clone()).spawn(|job: Job<u32>| async move {
            if *job.value() == 0 {
                Outcome::retry_after(format_args!("try {}", job.attempt()), Duration::ZERO)
            } else {
                Outcome::discard(format_args!("bad {}", job.value()))
            }
        });
        eventually("all dead", || async { q.stats().await.unwrap().dead == 6 }).await;
        worker.shutdown(ms(100)).await;
        let flaky = q.entry("flaky").await.unwrap().unwrap();
        let errors: Vec<(u32, &str)> = flaky.errors.iter().map(|e| (e.attempt, e.reason.as_str())).collect();
        assert_eq!(errors, [(1, "try 1"), (2, "try 2"), (3, "try 3")], "{STORE}");
        assert!(flaky.errors.windows(2).all(|w| w[0].at <= w[1].at));
        // Newest first, in pages of 4, then back to the oldest-first walk.
        let first = q.entries_newest(EntryState::Dead, None, 4).await.unwrap();
        let cursor = first.next.clone().expect("a second page");
        let rest = q.entries_newest(EntryState::Dead, Some(&cursor), 4).await.unwrap();
        assert!(rest.next.is_none());
        let newest: Vec<String> = first.entries.iter().chain(&rest.entries).map(|e| e.id.clone()).collect();
        let oldest = q.entries(EntryState::Dead, None, 10).await.unwrap();
        let mut reversed: Vec<String> = oldest.entries.iter().map(|e| e.id.clone()).collect();
        reversed.reverse();
        assert_eq!(newest, reversed, "{STORE}");
        assert!(matches!(q.entries(EntryState::Dead, Some(&cursor), 4).await, Err(Error::InvalidId(_))));
    }

    /// A tick that goes to the dead letters names its schedule there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_tick_names_its_schedule() {
        let store = Store::start();
        let q: Q<u32> = store.builder("dead-tick").max_attempts(1).build().await.unwrap();
        q.schedule_every("nightly", ms(100), MissedTicks::Skip, &1).await.unwrap();
        let worker = Worker::builder(q.clone()).spawn(|_job: Job<u32>| async { Outcome::discard("no") });
        eventually("a dead tick", || async { q.stats().await.unwrap().dead >= 1 }).await;
        worker.shutdown(ms(100)).await;
        let dead = q.entries(EntryState::Dead, None, 1).await.unwrap().entries.remove(0);
        assert!(dead.id.starts_with("nightly@"), "{}", dead.id);
        assert_eq!(dead.schedule.as_deref(), Some("nightly"), "{STORE}");
        let info = q.schedules().await.unwrap().remove(0);
        assert_eq!(info.last_outcome, Some(Finished::Dead), "{STORE}");
    }
}

common::stores::on_durable_stores! {
    /// The child side of the SIGKILL test: a worker that registers and
    /// waits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registered_child() {
        if child_role(STORE).is_none_or(|(role, _)| role != "worker") {
            return; // only as a child
        }
        let q: Q<u32> = Q::builder("killed-workers")
            .in_parents_store()
            .lease(ms(600))
            .build()
            .await
            .unwrap();
        let _worker = Worker::builder(q).name("doomed").spawn(|_job: Job<u32>| async { Outcome::Done });
        println!("registered");
        tokio::time::sleep(WAIT).await;
    }

    /// A worker killed with SIGKILL leaves its record, which is gone once
    /// it missed three refreshes (a third of its 600 ms lease each), not
    /// before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_workers_record_goes_after_three_missed_refreshes() {
        let store = Store::start();
        let q: Q<u32> = store.builder("killed-workers").lease(ms(600)).build().await.unwrap();
        let mut child = child_command(module_path!(), "registered_child", "worker", &store).spawn().unwrap();
        eventually("the child registers", || async { q.workers().await.unwrap().len() == 1 }).await;
        child.kill().unwrap();
        let killed = wall();
        let (_, out, _) = finish(&mut child, WAIT);
        assert!(out.contains("registered"), "{out}");
        assert_eq!(q.workers().await.unwrap()[0].name.as_deref(), Some("doomed"));
        within("the record goes", async {
            while !q.workers().await.unwrap().is_empty() {
                tokio::time::sleep(ms(20)).await;
            }
        })
        .await;
        let gone = wall().duration_since(killed).unwrap_or_default();
        // Three periods of 200 ms after its last refresh, which came at
        // most one period before the kill.
        assert!(gone >= ms(350), "{STORE}: gone {gone:?} after the kill");
        assert!(gone < ms(3000), "{STORE}: still listed {gone:?} after the kill");
    }
}
