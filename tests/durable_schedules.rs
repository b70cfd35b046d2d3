#![cfg(any(feature = "redis", feature = "postgres"))]
//! Recurring schedules on every durable store (`RedisQueue`, `PgQueue`):
//! upserts, listing and removal, the epoch grid, ticks through retries and
//! dead letters, `MissedTicks` after downtime, cron ticks, three replica
//! processes with one killed mid-tick, and a client whose clock is skewed
//! (libfaketime).
//!
//! Real time: the store server's clock decides what is due, so periods are
//! a few hundred milliseconds and waits are bounded by `WAIT` (never reached
//! when green). The servers run on this machine, so [`wall`] reads their
//! clock (to the millisecond they keep).

mod common;

use common::wait::{
    HOUR, OpenInParent, WAIT, child_command, child_role, eventually, finish, ms, wall, within,
};
use punctual::MissedTicks;
use punctual::durable::{Backoff, Job, ScheduleInfo, Worker};
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::{Instant, sleep};

/// Milliseconds since the Unix epoch.
fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn at_ms(n: u64) -> SystemTime {
    UNIX_EPOCH + ms(n)
}

/// Sleeps until the wall clock (the server's) reads `t`.
async fn sleep_until_wall(t: SystemTime) {
    if let Ok(left) = t.duration_since(wall()) {
        sleep(left).await;
    }
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

    /// The pending tick's instant of schedule `name`, in ms.
    async fn next_tick(q: &Q<u64>, name: &str) -> u64 {
        ms_of(q.deadline(name).await.unwrap().expect("a pending tick"))
    }

    /// Entries in the queue, whatever their state (dead letters aside).
    fn entries(stats: Stats) -> u64 {
        stats.pending + stats.due + stats.leased
    }

    // ------------------------------------------------------------- upserts

    #[tokio::test]
    async fn the_same_upsert_returns_true_then_false_from_any_replica() {
        let store = Store::start();
        let q = queue(&store, "upsert", HOUR, 10).await;
        let replica = queue(&store, "upsert", HOUR, 10).await;
        let every = ms(1500);
        assert!(
            q.schedule_every("s", every, MissedTicks::Burst, &1)
                .await
                .unwrap()
        );
        let tick = next_tick(&q, "s").await;
        assert!(
            !q.schedule_every("s", every, MissedTicks::Burst, &1)
                .await
                .unwrap()
        );
        assert!(
            !replica
                .schedule_every("s", every, MissedTicks::Burst, &1)
                .await
                .unwrap()
        );
        assert_eq!(next_tick(&q, "s").await, tick, "the tick did not move");
        assert_eq!(entries(q.stats().await.unwrap()), 1);

        // Replicas starting together: one creates it, the others change nothing.
        let calls = (0..8).map(|_| {
            let replica = replica.clone();
            async move {
                replica
                    .schedule_every("t", every, MissedTicks::Skip, &2)
                    .await
                    .unwrap()
            }
        });
        let created = futures::future::join_all(calls).await;
        assert_eq!(created.iter().filter(|c| **c).count(), 1, "{created:?}");
        assert_eq!(entries(q.stats().await.unwrap()), 2, "one tick each");
    }

    #[tokio::test]
    async fn a_changed_value_returns_true_and_keeps_the_tick() {
        let store = Store::start();
        let q = queue(&store, "value", HOUR, 10).await;
        assert!(
            q.schedule_every("s", HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        let tick = next_tick(&q, "s").await;
        assert!(
            q.schedule_every("s", HOUR, MissedTicks::Skip, &2)
                .await
                .unwrap()
        );
        assert!(
            !q.schedule_every("s", HOUR, MissedTicks::Skip, &2)
                .await
                .unwrap()
        );
        assert_eq!(next_tick(&q, "s").await, tick);
        let listed = q.schedules().await.unwrap();
        assert_eq!((listed.len(), listed[0].value), (1, 2));
        assert_eq!(entries(q.stats().await.unwrap()), 1);
    }

    #[tokio::test]
    async fn a_changed_spec_moves_the_pending_tick_to_the_new_specs_first_instant() {
        let store = Store::start();
        let q = queue(&store, "spec", HOUR, 10).await;
        assert!(
            q.schedule_every("s", HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        assert_eq!(next_tick(&q, "s").await % 3_600_000, 0);
        let before = ms_of(wall());
        assert!(
            q.schedule_every("s", ms(1500), MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        let after = ms_of(wall());
        let tick = next_tick(&q, "s").await;
        assert_eq!(tick % 1500, 0, "on the new grid: {tick}");
        assert!(
            tick > before && tick <= after + 1500,
            "{tick} is not the first instant after [{before}, {after}]"
        );
        // The policy is part of the spec.
        assert!(
            q.schedule_every("s", ms(1500), MissedTicks::Burst, &1)
                .await
                .unwrap()
        );
        assert_eq!(q.schedules().await.unwrap()[0].spec, "every 1500ms burst");
        assert_eq!(entries(q.stats().await.unwrap()), 1, "still one tick");
    }

    #[tokio::test]
    async fn a_spec_changed_while_the_tick_runs_applies_from_its_ack() {
        let store = Store::start();
        let q = queue(&store, "running", HOUR, 10).await;
        q.schedule_every("s", ms(200), MissedTicks::Skip, &1)
            .await
            .unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert!(
            q.schedule_every("s", HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        assert_eq!(q.stats().await.unwrap().leased, 1, "the running tick stays");
        assert!(d.ack().await.unwrap());
        let tick = next_tick(&q, "s").await;
        assert_eq!(tick % 3_600_000, 0, "the successor follows the new spec");
        assert!(tick > ms_of(wall()));
    }

    #[tokio::test]
    async fn schedules_lists_name_spec_next_and_value() {
        let store = Store::start();
        let q = queue(&store, "listed", HOUR, 10).await;
        q.schedule_every("b", ms(1500), MissedTicks::Burst, &2)
            .await
            .unwrap();
        q.schedule_every("a", ms(10_000), MissedTicks::Skip, &1)
            .await
            .unwrap();
        q.schedule_every("d", ms(100), MissedTicks::Delay, &4)
            .await
            .unwrap();
        #[cfg(feature = "cron")]
        q.schedule_cron("c", "CRON_TZ=Europe/Berlin 0 3 * * *", &3)
            .await
            .unwrap();
        let want: Vec<_> = [
            Some(("a", "every 10s skip", 1)),
            Some(("b", "every 1500ms burst", 2)),
            cfg!(feature = "cron").then_some(("c", "CRON_TZ=Europe/Berlin 0 3 * * *", 3)),
            Some(("d", "every 100ms delay", 4)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let listed = q.schedules().await.unwrap();
        let got: Vec<_> = listed
            .iter()
            .map(|s| (s.name.as_str(), s.spec.as_str(), s.value))
            .collect();
        assert_eq!(got, want);
        for s in &listed {
            assert_eq!(s.next, q.deadline(&s.name).await.unwrap(), "{}", s.name);
            assert!(s.next.unwrap() > wall() - ms(200), "{s:?}");
        }
        #[cfg(feature = "cron")]
        {
            // 03:00 in Berlin is a whole UTC hour, within a day.
            let c = ms_of(listed[2].next.unwrap());
            assert_eq!(c % 3_600_000, 0);
            assert!(c <= ms_of(wall()) + 86_400_000);
        }

        // While its tick is leased, a schedule has no next instant ("a" or "b"
        // may come first, when their grid instant is that close).
        let mut held = Vec::new();
        while held
            .last()
            .is_none_or(|d: &Delivery<u64>| d.id() != "d")
        {
            held.push(within("take", q.take()).await.unwrap());
        }
        let listed = q.schedules().await.unwrap();
        for d in &held {
            let running: &ScheduleInfo<u64> = listed.iter().find(|s| s.name == d.id()).unwrap();
            assert_eq!(running.next, None, "{}", d.id());
        }
        assert_eq!(
            listed.iter().filter(|s| s.next.is_none()).count(),
            held.len()
        );
        assert!(held.pop().unwrap().ack().await.unwrap());
        let listed = q.schedules().await.unwrap();
        let d = listed.iter().find(|s| s.name == "d").unwrap();
        assert_eq!(d.next, q.deadline("d").await.unwrap());
        assert!(d.next.is_some());
    }

    #[tokio::test]
    async fn remove_of_a_schedules_name_is_unschedule() {
        let store = Store::start();
        let q = queue(&store, "removal", HOUR, 10).await;
        for name in ["x", "y", "z"] {
            q.schedule_every(name, ms(200), MissedTicks::Skip, &0)
                .await
                .unwrap();
        }
        let held = within("take", q.take()).await.unwrap();
        let held_name = held.id().to_owned();
        let rest: Vec<String> = ["x", "y", "z"]
            .iter()
            .map(|n| n.to_string())
            .filter(|n| *n != held_name)
            .collect();
        assert!(q.remove(&rest[0]).await.unwrap());
        assert!(q.unschedule(&rest[1]).await.unwrap());
        // A leased tick goes too, and its holder's ack then changes nothing.
        assert!(q.unschedule(&held_name).await.unwrap());
        assert!(
            !held.ack().await.unwrap(),
            "the lease went with the schedule"
        );
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
        for name in ["x", "y", "z"] {
            assert_eq!(q.deadline(name).await.unwrap(), None, "{name}");
            assert!(!q.remove(name).await.unwrap());
            assert!(!q.unschedule(name).await.unwrap());
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        // Gone for good: no successor came from the ack.
        sleep(ms(300)).await;
        assert!(q.try_take().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_name_taken_by_a_plain_entry_is_an_invalid_schedule() {
        let store = Store::start();
        let q = queue(&store, "taken", HOUR, 10).await;
        assert!(q.insert_with_id("job", &7, HOUR).await.unwrap());
        let due = q.deadline("job").await.unwrap();
        match q
            .schedule_every("job", ms(200), MissedTicks::Skip, &1)
            .await
        {
            Err(Error::InvalidSchedule(why)) => assert!(why.contains("job"), "{why}"),
            other => panic!("expected InvalidSchedule, got {other:?}"),
        }
        #[cfg(feature = "cron")]
        assert!(matches!(
            q.schedule_cron("job", "* * * * * *", &1).await,
            Err(Error::InvalidSchedule(_))
        ));
        assert!(!q.unschedule("job").await.unwrap(), "not a schedule");
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
        assert_eq!(
            q.deadline("job").await.unwrap(),
            due,
            "the entry is untouched"
        );
        assert_eq!(q.stats().await.unwrap().pending, 1);
    }

    #[tokio::test]
    async fn purge_deletes_schedules_too() {
        let store = Store::start();
        let q = queue(&store, "purged", HOUR, 10).await;
        q.schedule_every("s", ms(200), MissedTicks::Skip, &1)
            .await
            .unwrap();
        q.purge().await.unwrap();
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
        assert_eq!(q.deadline("s").await.unwrap(), None);
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        sleep(ms(300)).await;
        assert!(q.try_take().await.unwrap().is_none(), "no tick survived");
        // Declared again, it is new.
        assert!(
            q.schedule_every("s", ms(200), MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
    }

    // ---------------------------------------------------------------- bad input

    #[tokio::test]
    async fn a_period_under_a_millisecond_is_an_invalid_schedule() {
        let store = Store::start();
        let q = queue(&store, "periods", HOUR, 10).await;
        for period in [
            Duration::ZERO,
            Duration::from_micros(999),
            Duration::from_nanos(1),
        ] {
            assert!(
                matches!(
                    q.schedule_every("s", period, MissedTicks::Burst, &1).await,
                    Err(Error::InvalidSchedule(_))
                ),
                "{period:?}"
            );
        }
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
        assert!(
            q.schedule_every("s", ms(1), MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        assert_eq!(q.schedules().await.unwrap()[0].spec, "every 1ms skip");
    }

    #[tokio::test]
    async fn schedule_names_follow_the_id_rules() {
        let store = Store::start();
        let q = queue(&store, "names", HOUR, 10).await;
        let long = "n".repeat(513);
        for name in ["", long.as_str()] {
            let every = q.schedule_every(name, HOUR, MissedTicks::Skip, &1).await;
            assert!(matches!(every, Err(Error::InvalidId(_))), "{every:?}");
            let gone = q.unschedule(name).await;
            assert!(matches!(gone, Err(Error::InvalidId(_))), "{gone:?}");
            #[cfg(feature = "cron")]
            {
                let cron = q.schedule_cron(name, "0 3 * * *", &1).await;
                assert!(matches!(cron, Err(Error::InvalidId(_))), "{cron:?}");
            }
        }
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
        let longest = "n".repeat(512);
        assert!(
            q.schedule_every(&longest, HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        assert!(q.unschedule(&longest).await.unwrap());
    }

    // ---------------------------------------------------------------- ticks

    #[tokio::test]
    async fn the_first_tick_is_the_first_epoch_grid_instant_after_the_call() {
        let store = Store::start();
        let q = queue(&store, "grid", HOUR, 10).await;
        // A period that divides no round number: only an epoch anchor explains
        // a multiple of it.
        let period = 370;
        let before = ms_of(wall());
        q.schedule_every("s", ms(period), MissedTicks::Skip, &5)
            .await
            .unwrap();
        let after = ms_of(wall());
        let tick = next_tick(&q, "s").await;
        assert_eq!(tick % period, 0, "{tick}");
        assert!(
            tick > before && tick <= after + period,
            "{before} {tick} {after}"
        );
        let d = within("take", q.take()).await.unwrap();
        let taken = ms_of(wall());
        assert_eq!((d.id(), *d.value(), d.attempt()), ("s", 5, 1));
        assert_eq!(ms_of(d.deadline()), tick);
        assert!(
            taken >= tick,
            "delivered at {taken}, before its instant {tick}"
        );
    }

    #[tokio::test]
    async fn a_tick_keeps_its_instant_across_retries() {
        let store = Store::start();
        let q = queue(&store, "retried", HOUR, 10).await;
        q.schedule_every("s", ms(500), MissedTicks::Skip, &1)
            .await
            .unwrap();
        let d = within("take", q.take()).await.unwrap();
        let instant = ms_of(d.deadline());
        assert!(d.retry(ms(100)).await.unwrap());
        assert_eq!(q.stats().await.unwrap().pending, 1, "the same tick, back");
        let d = within("take", q.take()).await.unwrap();
        assert_eq!((d.id(), d.attempt()), ("s", 2));
        assert_eq!(ms_of(d.deadline()), instant, "the instant, not the retry's");
        assert!(d.ack().await.unwrap());
        assert_eq!(next_tick(&q, "s").await, instant + 500);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_workers_job_names_its_schedule_and_keeps_its_instant_across_attempts() {
        let store = Store::start();
        let q = queue(&store, "jobs", HOUR, 10).await;
        q.schedule_every("s", ms(400), MissedTicks::Skip, &9)
            .await
            .unwrap();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(q.clone())
            .backoff(Backoff::fixed(ms(50)))
            .spawn({
                let runs = Arc::clone(&runs);
                move |job: Job<u64>| {
                    let runs = Arc::clone(&runs);
                    async move {
                        let attempt = job.attempt();
                        runs.lock().unwrap().push((
                            job.id().to_owned(),
                            job.schedule().map(str::to_owned),
                            *job.value(),
                            ms_of(job.deadline()),
                            attempt,
                        ));
                        if attempt == 1 {
                            Err("once more")
                        } else {
                            Ok(())
                        }
                    }
                }
            });
        eventually("two ticks ran", || {
            let done = worker.stats().completed >= 2;
            async move { done }
        })
        .await;
        worker.shutdown(ms(500)).await;
        let runs = runs.lock().unwrap().clone();
        let first = runs[0].3;
        assert_eq!(first % 400, 0);
        let s = Some("s".to_owned());
        assert_eq!(
            runs[..4],
            [
                ("s".to_owned(), s.clone(), 9, first, 1),
                ("s".to_owned(), s.clone(), 9, first, 2),
                ("s".to_owned(), s.clone(), 9, first + 400, 1),
                ("s".to_owned(), s.clone(), 9, first + 400, 2),
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_ack_inserts_the_next_tick_and_there_is_never_a_second() {
        let store = Store::start();
        let q = queue(&store, "single", ms(500), 10).await;
        let instants = Arc::new(Mutex::new(Vec::new()));
        q.schedule_every("s", ms(100), MissedTicks::Burst, &1)
            .await
            .unwrap();
        let worker = Worker::builder(q.clone()).concurrency(4).spawn({
            let instants = Arc::clone(&instants);
            move |job: Job<u64>| {
                let instants = Arc::clone(&instants);
                async move {
                    instants.lock().unwrap().push(ms_of(job.deadline()));
                    sleep(ms(10)).await;
                    Ok::<(), String>(())
                }
            }
        });
        // Another replica declares it again and again meanwhile.
        let samples_until = Instant::now() + Duration::from_millis(1500);
        let mut samples = 0;
        while Instant::now() < samples_until {
            let stats = q.stats().await.unwrap();
            assert_eq!(entries(stats), 1, "one tick at any time: {stats:?}");
            assert!(
                !q.schedule_every("s", ms(100), MissedTicks::Burst, &1)
                    .await
                    .unwrap()
            );
            samples += 1;
            sleep(ms(3)).await;
        }
        let stats = worker.shutdown(ms(500)).await;
        let instants = instants.lock().unwrap().clone();
        assert!(stats.completed >= 10, "{stats:?} after {samples} samples");
        assert_eq!(stats.completed as usize, instants.len());
        for pair in instants.windows(2) {
            assert_eq!(
                pair[1],
                pair[0] + 100,
                "each grid instant once: {instants:?}"
            );
        }
        assert_eq!(entries(q.stats().await.unwrap()), 1, "the next one waits");
    }

    // ------------------------------------------------------------- missed ticks

    /// The period of the missed-ticks tests, in ms.
    const P: u64 = 200;

    /// Declares `s` (period `P` ms, `missed`), then lets it miss its first tick
    /// and four more: returns the first tick's instant, once the wall clock is
    /// half a period past the fifth.
    async fn after_downtime(q: &Q<u64>, missed: MissedTicks) -> u64 {
        q.schedule_every("s", ms(P), missed, &1).await.unwrap();
        let first = next_tick(q, "s").await;
        sleep_until_wall(at_ms(first + 4 * P + P / 2)).await;
        first
    }

    #[tokio::test]
    async fn burst_delivers_the_missed_grid_instants_back_to_back() {
        let store = Store::start();
        let q = queue(&store, "burst", HOUR, 10).await;
        let first = after_downtime(&q, MissedTicks::Burst).await;
        let mut instants = Vec::new();
        let start = Instant::now();
        let caught_up = loop {
            let asked = ms_of(wall());
            let Some(d) = q.try_take().await.unwrap() else {
                break asked;
            };
            instants.push(ms_of(d.deadline()));
            assert!(d.ack().await.unwrap());
        };
        let took = start.elapsed();
        assert!(instants.len() >= 5, "{instants:?}");
        let want: Vec<u64> = (0..instants.len() as u64).map(|k| first + k * P).collect();
        assert_eq!(instants, want, "every missed instant, in order");
        assert!(took < ms(P * 2), "back to back, not on the grid: {took:?}");
        let last = *instants.last().unwrap();
        assert_eq!(next_tick(&q, "s").await, last + P);
        assert!(last + P > caught_up, "caught up: the next one is ahead");
    }

    #[tokio::test]
    async fn skip_runs_once_after_downtime_then_the_next_grid_instant_after_now() {
        let store = Store::start();
        let q = queue(&store, "skip", HOUR, 10).await;
        let first = after_downtime(&q, MissedTicks::Skip).await;
        let d = q.try_take().await.unwrap().expect("the missed tick is due");
        assert_eq!(
            ms_of(d.deadline()),
            first,
            "one late run, for the first instant"
        );
        let before = ms_of(wall());
        assert!(d.ack().await.unwrap());
        let after = ms_of(wall());
        let next = next_tick(&q, "s").await;
        assert_eq!(next % P, 0, "on the grid: {next}");
        assert!(
            next > before && next <= after + P,
            "{before} {next} {after}"
        );
        assert!(next >= first + 5 * P, "the missed instants are skipped");
        assert!(q.try_take().await.unwrap().is_none() || wall() >= at_ms(next));
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(ms_of(d.deadline()), next);
        assert!(d.ack().await.unwrap());
        assert_eq!(next_tick(&q, "s").await, next + P);
    }

    #[tokio::test]
    async fn delay_runs_once_after_downtime_then_every_period_from_that_runs_claim() {
        let store = Store::start();
        let q = queue(&store, "delay", HOUR, 10).await;
        let first = after_downtime(&q, MissedTicks::Delay).await;
        let claim_before = ms_of(wall());
        let d = q.try_take().await.unwrap().expect("the missed tick is due");
        let claim_after = ms_of(wall());
        assert_eq!(ms_of(d.deadline()), first);
        // Acked well after its claim: the next tick counts from the claim.
        sleep(ms(50)).await;
        assert!(d.ack().await.unwrap());
        let next = next_tick(&q, "s").await;
        assert!(
            next >= claim_before + P && next <= claim_after + P,
            "{next} is not a period after the claim in [{claim_before}, {claim_after}]"
        );
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(ms_of(d.deadline()), next);
        assert!(d.ack().await.unwrap());
        // On time now: the grid has moved to the late run's phase.
        assert_eq!(next_tick(&q, "s").await, next + P);
    }

    // ------------------------------------------------------------- dead ticks

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tick_failing_its_last_attempt_is_buried_under_name_at_instant_and_the_schedule_goes_on()
    {
        let store = Store::start();
        let q = queue(&store, "buried", HOUR, 1).await;
        q.schedule_every("s", ms(300), MissedTicks::Skip, &3)
            .await
            .unwrap();
        let instants = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(q.clone()).spawn({
            let instants = Arc::clone(&instants);
            move |job: Job<u64>| {
                let instants = Arc::clone(&instants);
                async move {
                    let instant = ms_of(job.deadline());
                    instants.lock().unwrap().push(instant);
                    Err(format!("tick {instant} failed"))
                }
            }
        });
        eventually("two ticks dead", || {
            let dead = worker.stats().dead >= 2;
            async move { dead }
        })
        .await;
        let stats = worker.shutdown(ms(500)).await;
        let instants = instants.lock().unwrap().clone();
        assert_eq!(instants[1], instants[0] + 300, "the schedule went on");
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len() as u64, stats.dead);
        for (letter, instant) in dead.iter().zip(&instants) {
            assert_eq!(letter.id, format!("s@{instant}"));
            assert_eq!(letter.value, Some(3));
            assert_eq!(letter.attempts, 1);
            assert_eq!(letter.reason, format!("tick {instant} failed"));
        }
        assert_eq!(q.schedules().await.unwrap().len(), 1);
        let next = next_tick(&q, "s").await;
        assert_eq!(next, instants.last().unwrap() + 300);
    }

    #[tokio::test]
    async fn a_tick_dropped_past_its_last_lease_is_buried_and_its_successor_inserted() {
        let store = Store::start();
        let q = queue(&store, "dropped", ms(300), 1).await;
        q.schedule_every("s", ms(1000), MissedTicks::Skip, &4)
            .await
            .unwrap();
        let d = within("take", q.take()).await.unwrap();
        let instant = ms_of(d.deadline());
        drop(d);
        sleep(ms(400)).await;
        // This claim finds the lease run out and the attempts spent.
        assert!(q.try_take().await.unwrap().is_none());
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (dead[0].id.as_str(), dead[0].value, dead[0].attempts),
            (format!("s@{instant}").as_str(), Some(4), 1)
        );
        assert_eq!(dead[0].reason, "not acked after 1 deliveries");
        assert_eq!(next_tick(&q, "s").await, instant + 1000);
        let stats = q.stats().await.unwrap();
        assert_eq!((entries(stats), stats.dead), (1, 1));
    }

    /// A dead tick's id is `<name>@<instant>`, with a name over 480 bytes
    /// cut to 480 at a character boundary: it stays a valid id (at most 512
    /// bytes), so the dead letter can be requeued and removed.
    #[tokio::test]
    async fn the_dead_tick_of_a_schedule_with_a_512_byte_name_keeps_to_the_id_rules() {
        let store = Store::start();
        let q = queue(&store, "long-name", ms(300), 1).await;
        // 'a', 170 three-byte characters, 'b': 512 bytes; byte 480 falls
        // inside a character.
        let name = format!("a{}b", "€".repeat(170));
        assert_eq!(name.len(), 512);
        q.schedule_every(&name, ms(1000), MissedTicks::Skip, &5)
            .await
            .unwrap();
        let d = within("take", q.take()).await.unwrap();
        let instant = ms_of(d.deadline());
        drop(d);
        sleep(ms(400)).await;
        assert!(q.try_take().await.unwrap().is_none());
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        let prefix = format!("a{}", "€".repeat(159));
        assert_eq!(prefix.len(), 478);
        assert_eq!(dead[0].id, format!("{prefix}@{instant}"));
        assert!(q.requeue_dead(&dead[0].id, HOUR).await.unwrap());
        assert!(q.remove(&dead[0].id).await.unwrap());
        assert_eq!(q.stats().await.unwrap().dead, 0);
        assert_eq!(next_tick(&q, &name).await, instant + 1000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requeue_dead_of_a_buried_tick_inserts_a_one_off_entry_under_its_id() {
        let store = Store::start();
        let q = queue(&store, "requeued", ms(200), 1).await;
        q.schedule_every("s", ms(300), MissedTicks::Skip, &6)
            .await
            .unwrap();
        let d = within("take", q.take()).await.unwrap();
        let instant = ms_of(d.deadline());
        drop(d);
        // Slowed down while its tick is out: the successor stays out of the way.
        q.schedule_every("s", HOUR, MissedTicks::Skip, &6)
            .await
            .unwrap();
        sleep(ms(300)).await;
        assert!(q.try_take().await.unwrap().is_none());
        let id = format!("s@{instant}");
        assert_eq!(q.dead_letters(10).await.unwrap()[0].id, id);
        let hourly = next_tick(&q, "s").await;

        assert!(q.requeue_dead(&id, Duration::ZERO).await.unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker::builder(q.clone()).spawn({
            let seen = Arc::clone(&seen);
            move |job: Job<u64>| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push((
                        job.id().to_owned(),
                        job.schedule().map(str::to_owned),
                        *job.value(),
                        job.attempt(),
                    ));
                    Ok::<(), String>(())
                }
            }
        });
        eventually("the requeued entry ran", || {
            let done = seen.lock().unwrap().iter().any(|run| run.0 == id);
            async move { done }
        })
        .await;
        worker.shutdown(ms(500)).await;
        let seen = seen.lock().unwrap().clone();
        let runs: Vec<_> = seen.iter().filter(|run| run.0 == id).collect();
        assert_eq!(
            runs,
            [&(id.clone(), None, 6, 1)],
            "a one-off entry, run once"
        );
        // Its ack inserted nothing: the schedule still has its one tick.
        assert_eq!(q.deadline(&id).await.unwrap(), None);
        if seen.len() == 1 {
            // (Unless the hour turned meanwhile and the worker ran that tick.)
            assert_eq!(next_tick(&q, "s").await, hourly);
        }
        let stats = q.stats().await.unwrap();
        assert_eq!((entries(stats), stats.dead), (1, 0), "{stats:?}");
    }

    // ------------------------------------------------------------------- cron

    #[cfg(feature = "cron")]
    #[tokio::test]
    async fn a_cron_schedule_every_second_ticks_on_whole_seconds() {
        let store = Store::start();
        let q = queue(&store, "cron", HOUR, 10).await;
        let before = ms_of(wall());
        assert!(q.schedule_cron("s", "* * * * * *", &1).await.unwrap());
        assert!(!q.schedule_cron("s", "* * * * * *", &1).await.unwrap());
        let after = ms_of(wall());
        let first = next_tick(&q, "s").await;
        assert_eq!(first % 1000, 0);
        assert!(
            first > before && first <= after + 1000,
            "{before} {first} {after}"
        );
        assert_eq!(q.schedules().await.unwrap()[0].spec, "* * * * * *");
        let mut instants = Vec::new();
        for _ in 0..2 {
            let d = within("take", q.take()).await.unwrap();
            assert!(wall() >= d.deadline());
            instants.push(ms_of(d.deadline()));
            assert!(d.ack().await.unwrap());
        }
        assert_eq!(instants, [first, first + 1000]);
        assert_eq!(next_tick(&q, "s").await, first + 2000);
    }

    #[cfg(feature = "cron")]
    #[tokio::test]
    async fn a_cron_schedule_in_an_unknown_zone_is_invalid_and_names_it() {
        let store = Store::start();
        let q = queue(&store, "mars", HOUR, 10).await;
        match q
            .schedule_cron("s", "CRON_TZ=Mars/Olympus 0 3 * * *", &1)
            .await
        {
            Err(Error::InvalidSchedule(why)) => assert!(why.contains("Mars/Olympus"), "{why}"),
            other => panic!("expected InvalidSchedule, got {other:?}"),
        }
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
    }

    #[cfg(feature = "cron")]
    #[tokio::test]
    async fn a_bad_cron_expression_is_an_invalid_schedule() {
        let store = Store::start();
        let q = queue(&store, "bad-cron", HOUR, 10).await;
        for expr in ["61 * * * *", "not cron", "", "* * *"] {
            let got = q.schedule_cron("s", expr, &1).await;
            assert!(
                matches!(got, Err(Error::InvalidSchedule(_))),
                "{expr:?}: {got:?}"
            );
        }
        assert_eq!(q.schedules().await.unwrap(), Vec::new());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    // ------------------------------------------------------- three replicas

    // ------------------------------------------------------- a skewed client
}

// ------------------------------------------------- replicas' logs, clocks

const SCHEDULES: [&str; 4] = ["s0", "s1", "s2", "s3"];
const REPLICA_LEASE: Duration = Duration::from_secs(1);
/// The folder of the replicas' logs (one file each) and of the `stop` file.
const LOG_DIR: &str = "PUNCTUAL_TEST_LOG_DIR";

/// One logged event of a replica's handler.
#[derive(Debug, Clone)]
struct Event {
    /// `start`, `end`, or `hang` (the victim, after `start`).
    kind: String,
    schedule: String,
    instant: u64,
    attempt: u32,
    replica: String,
    at: u64,
}

fn parse_event(line: &str) -> Event {
    let f: Vec<&str> = line.split(',').collect();
    assert_eq!(f.len(), 6, "{line}");
    Event {
        kind: f[0].to_owned(),
        schedule: f[1].to_owned(),
        instant: f[2].parse().unwrap(),
        attempt: f[3].parse().unwrap(),
        replica: f[4].to_owned(),
        at: f[5].parse().unwrap(),
    }
}

/// Appends `line` to the log file `path` in one write.
fn append(path: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// A fresh folder for the replicas' logs, removed when dropped.
struct LogDir(PathBuf);

impl LogDir {
    fn new(store: &str) -> LogDir {
        let dir =
            std::env::temp_dir().join(format!("punctual-replicas-{}-{store}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        LogDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// Every event logged so far, replica after replica (whole lines only).
    fn events(&self) -> Vec<Event> {
        let mut events = Vec::new();
        for entry in std::fs::read_dir(&self.0).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap();
                let whole = text.rfind('\n').map_or("", |end| &text[..end]);
                events.extend(whole.lines().map(parse_event));
            }
        }
        events
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The store server's own clock, read on a connection of its own (not
/// through the queue): the clock that decides when ticks are due.
trait ServerClock {
    type Connection;
    async fn connect_clock(url: &str) -> Self::Connection;
    /// The server's time in ms since the epoch, rounded down.
    async fn server_ms(con: &mut Self::Connection) -> u64;
}

#[cfg(feature = "redis")]
impl ServerClock for punctual::redis::RedisQueue<u64> {
    type Connection = redis::aio::MultiplexedConnection;

    async fn connect_clock(url: &str) -> Self::Connection {
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("clock connection")
    }

    async fn server_ms(con: &mut Self::Connection) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(con).await.unwrap();
        s * 1000 + us / 1000
    }
}

#[cfg(feature = "postgres")]
impl ServerClock for punctual::postgres::PgQueue<u64> {
    type Connection = punctual::postgres::sqlx::PgConnection;

    async fn connect_clock(url: &str) -> Self::Connection {
        use punctual::postgres::sqlx::Connection;
        Self::Connection::connect(url)
            .await
            .expect("clock connection")
    }

    async fn server_ms(con: &mut Self::Connection) -> u64 {
        let now: i64 = punctual::postgres::sqlx::query_scalar(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8",
        )
        .fetch_one(con)
        .await
        .unwrap();
        now as u64
    }
}

common::stores::on_durable_stores! {
    /// One replica (a child process): declares the schedules, runs a worker
    /// whose handler logs each run's start and end to its own file in the
    /// folder `LOG_DIR`, and stops when the file `stop` appears there. The
    /// victim hangs in its first run (logged as `hang`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replica_child() {
        let Some((role, _)) = child_role(STORE).filter(|(role, _)| role.starts_with("replica-")) else {
            return; // only as a child
        };
        let dir = PathBuf::from(std::env::var(LOG_DIR).expect("a log folder"));
        let q: Q<u64> = Q::builder("replicas")
            .in_parents_store()
            .lease(REPLICA_LEASE)
            .poll_interval(ms(50))
            .build()
            .await
            .unwrap();
        for (i, name) in SCHEDULES.iter().enumerate() {
            q.schedule_every(name, ms(200), MissedTicks::Burst, &(i as u64))
                .await
                .unwrap();
        }
        let log = Arc::new(dir.join(format!("{role}.log")));
        let hung = Arc::new(AtomicBool::new(false));
        let victim = role == "replica-victim";
        let worker = Worker::builder(q)
            .concurrency(4)
            .spawn(move |job: Job<u64>| {
                let (log, hung, role) = (Arc::clone(&log), Arc::clone(&hung), role.clone());
                async move {
                    let event = |kind: &str| {
                        format!(
                            "{kind},{},{},{},{role},{}",
                            job.schedule().unwrap_or("-"),
                            ms_of(job.deadline()),
                            job.attempt(),
                            ms_of(wall())
                        )
                    };
                    append(&log, &event("start"));
                    if victim && !hung.swap(true, Ordering::SeqCst) {
                        append(&log, &event("hang"));
                        std::future::pending::<()>().await;
                    }
                    sleep(ms(30)).await;
                    append(&log, &event("end"));
                    Ok::<(), String>(())
                }
            });
        let stop = dir.join("stop");
        let give_up = Instant::now() + WAIT;
        while Instant::now() < give_up && !stop.exists() {
            sleep(ms(50)).await;
        }
        let stats = worker.shutdown(Duration::from_secs(2)).await;
        println!("stats {stats:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_replicas_run_each_tick_once_and_a_killed_ones_tick_comes_back_after_its_lease() {
        let store = Store::start();
        let dir = LogDir::new(STORE);
        let spawn = |role: &str| {
            child_command(module_path!(), "replica_child", role, &store)
                .env(LOG_DIR, dir.path())
                .spawn()
                .unwrap()
        };
        let mut victim = spawn("replica-victim");
        let mut others = [spawn("replica-a"), spawn("replica-b")];

        // The victim's first run has started: it hangs there, holding its tick.
        let give_up = Instant::now() + WAIT;
        let hung = loop {
            let events = dir.events();
            if let Some(e) = events.iter().find(|e| e.kind == "hang") {
                break e.clone();
            }
            if Instant::now() >= give_up {
                victim.kill().unwrap();
                let (_, out, err) = finish(&mut victim, WAIT);
                panic!("the victim never ran: {events:?}\n{out}\n{err}");
            }
            sleep(ms(10)).await;
        };
        victim.kill().unwrap(); // SIGKILL
        let killed_at = ms_of(wall());
        let (_, out, err) = finish(&mut victim, WAIT);
        assert_eq!(
            (hung.replica.as_str(), hung.attempt),
            ("replica-victim", 1),
            "{out}\n{err}"
        );

        // Long enough for the lease to run out and the burst to catch up.
        sleep(REPLICA_LEASE + Duration::from_secs(2)).await;
        std::fs::write(dir.path().join("stop"), "").unwrap();
        for child in &mut others {
            let (status, out, err) = finish(child, WAIT);
            assert!(status.success(), "{status}\n{out}\n{err}");
            assert!(out.contains("stats"), "{out}\n{err}");
        }
        let events = dir.events();
        let q: Q<u64> = store
            .builder("replicas")
            .lease(REPLICA_LEASE)
            .poll_interval(ms(50))
            .build()
            .await
            .expect("connect");
        assert_eq!(q.schedules().await.unwrap().len(), SCHEDULES.len());

        // Completed runs: an end, with its start.
        let key = |e: &Event| (e.schedule.clone(), e.instant, e.attempt, e.replica.clone());
        let starts: BTreeMap<_, u64> = events
            .iter()
            .filter(|e| e.kind == "start")
            .map(|e| (key(e), e.at))
            .collect();
        let mut done: BTreeMap<(String, u64), (u64, u64, u32, String)> = BTreeMap::new();
        for end in events.iter().filter(|e| e.kind == "end") {
            let start = starts[&key(end)];
            let twice = done.insert(
                (end.schedule.clone(), end.instant),
                (start, end.at, end.attempt, end.replica.clone()),
            );
            assert!(twice.is_none(), "{end:?} completed twice: {twice:?}");
        }

        for name in SCHEDULES {
            let runs: Vec<(u64, (u64, u64, u32, String))> = done
                .iter()
                .filter(|((s, _), _)| s == name)
                .map(|((_, instant), run)| (*instant, run.clone()))
                .collect();
            assert!(runs.len() >= 10, "{name}: {runs:?}");
            // Every grid instant, from the first to the last, and past the kill.
            for pair in runs.windows(2) {
                assert_eq!(pair[1].0, pair[0].0 + 200, "{name}: an instant skipped");
                // Runs of one schedule never overlap.
                assert!(
                    pair[1].1.0 >= pair[0].1.1,
                    "{name}: {:?} started before {:?} ended",
                    pair[1],
                    pair[0]
                );
            }
            assert!(
                runs.last().unwrap().0 > killed_at,
                "{name} went on after the kill"
            );
        }

        // The hung tick came back, attempt 2, to another replica, once its lease
        // (extended every third of it until the kill) ran out.
        let (start, _, attempt, replica) = &done[&(hung.schedule.clone(), hung.instant)];
        assert_eq!(*attempt, 2);
        assert_ne!(replica, "replica-victim");
        let back_after = start.saturating_sub(killed_at);
        assert!(
            *start >= killed_at + 500 && *start <= killed_at + 1500,
            "back {back_after} ms after the kill, lease {REPLICA_LEASE:?}"
        );
        // Meanwhile its schedule ran nothing else.
        assert!(
            !events.iter().any(|e| e.kind == "start"
                && e.schedule == hung.schedule
                && e.at > hung.at
                && e.at < *start
                && e.instant != hung.instant),
            "{} ran while its tick was held",
            hung.schedule
        );
        // Only what the victim held ran twice: a tick delivered again had
        // its first delivery nowhere but in the victim (which may have been
        // killed between its claim and its handler's first log line), and
        // came back only once that lease had run out.
        for ((name, instant), run) in &done {
            if run.2 != 1 {
                let elsewhere_first = events.iter().any(|e| {
                    e.kind == "start"
                        && e.schedule == *name
                        && e.instant == *instant
                        && e.attempt == 1
                        && e.replica != "replica-victim"
                });
                assert!(!elsewhere_first, "{name}@{instant}: {run:?}");
                assert!(
                    run.0 >= killed_at + 500,
                    "{name}@{instant} delivered again {} ms after the kill, lease {REPLICA_LEASE:?}: {run:?}",
                    run.0.saturating_sub(killed_at)
                );
            }
        }
    }

    /// The skewed client (a child process under libfaketime): prints its own
    /// clock, declares schedules and acks three ticks of each, printing each
    /// tick's instant beside the server's clock when it was taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn skewed_child() {
        let Some((_, url)) = child_role(STORE).filter(|(role, _)| role == "skewed") else {
            return; // only as a child
        };
        let mut con = Q::<u64>::connect_clock(&url).await;
        let mut server_ms = async || -> u64 { Q::<u64>::server_ms(&mut con).await };
        println!("clock {} server {}", ms_of(wall()), server_ms().await);
        let q: Q<u64> = Q::builder("skewed")
            .in_parents_store()
            .poll_interval(ms(50))
            .build()
            .await
            .unwrap();
        let declared = server_ms().await;
        q.schedule_every("every", ms(200), MissedTicks::Skip, &1)
            .await
            .unwrap();
        #[cfg(feature = "cron")]
        q.schedule_cron("cron", "* * * * * *", &2).await.unwrap();
        for name in ["every", "cron"] {
            if let Some(at) = q.deadline(name).await.unwrap() {
                println!("first {name} {} declared {declared}", ms_of(at));
            }
        }
        let cron_ticks = if cfg!(feature = "cron") { 2 } else { 0 };
        let mut left = BTreeMap::from([("every", 3), ("cron", cron_ticks)]);
        while left.values().any(|n| *n > 0) {
            let d = q.take_timeout(WAIT).await.unwrap().expect("a tick");
            println!(
                "tick {} {} server {}",
                d.id(),
                ms_of(d.deadline()),
                server_ms().await
            );
            *left.get_mut(d.id()).unwrap() -= 1;
            assert!(d.ack().await.unwrap());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ticks_follow_the_servers_clock_not_a_skewed_clients() {
        assert!(
            std::path::Path::new(FAKETIME_LIB).exists(),
            "{FAKETIME_LIB} not found: this test runs a client under libfaketime \
             (Debian/Ubuntu: `apt-get install faketime`)"
        );
        let store = Store::start();
        let mut child = child_command(module_path!(), "skewed_child", "skewed", &store)
            // Only the client runs two hours behind; its monotonic clock (what
            // Tokio's timers use) stays true.
            .env("LD_PRELOAD", FAKETIME_LIB)
            .env("FAKETIME", "-2h")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .spawn()
            .unwrap();
        let (status, out, err) = finish(&mut child, WAIT + WAIT);
        assert!(status.success(), "{status}\n{out}\n{err}");
        // The harness prints `test skewed_child ... ` before the child's first line.
        let lines: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_once("... ").map_or(l, |(_, rest)| rest))
            .map(|l| l.split(' ').collect())
            .collect();
        let clock = lines.iter().find(|l| l[0] == "clock").expect(&out);
        let (skewed, server_now): (u64, u64) = (clock[1].parse().unwrap(), clock[3].parse().unwrap());
        let skew = server_now as i64 - skewed as i64;
        assert!(
            (skew - 7_200_000).abs() < 5_000,
            "the child's clock is not two hours behind (libfaketime did not apply): {skew} ms"
        );

        let firsts: Vec<_> = lines.iter().filter(|l| l[0] == "first").collect();
        assert_eq!(
            firsts.len(),
            if cfg!(feature = "cron") { 2 } else { 1 },
            "{out}"
        );
        for first in firsts {
            let (name, at, declared): (&str, u64, u64) = (
                first[1],
                first[2].parse().unwrap(),
                first[4].parse().unwrap(),
            );
            let period = if name == "every" { 200 } else { 1000 };
            assert_eq!(at % period, 0, "{name}: {at}");
            assert!(
                at > declared && at <= declared + period + 50,
                "{name}: first tick {at}, declared at server time {declared}"
            );
        }
        let mut ticks: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for tick in lines.iter().filter(|l| l[0] == "tick") {
            let (name, at, server_at): (&str, u64, u64) =
                (tick[1], tick[2].parse().unwrap(), tick[4].parse().unwrap());
            assert!(
                at <= server_at && server_at < at + 1000,
                "{name}: tick {at} taken at server time {server_at}"
            );
            ticks.entry(name).or_default().push(at);
        }
        // Taken and acked on time (more come while the cron ticks are awaited).
        let every = &ticks["every"];
        assert!(every.len() >= 3, "{out}");
        assert!(every.windows(2).all(|w| w[1] == w[0] + 200), "{every:?}");
        #[cfg(feature = "cron")]
        assert_eq!(ticks["cron"].len(), 2, "{out}");
    }
}
