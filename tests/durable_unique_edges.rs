//! Unique windows and replace (debounce), one body per behaviour
//! on every store: what starts a window (ack, remove, cancel, clear_dead,
//! retention, a requeued dead letter's later finish), windows and delays of
//! any length, replace racing claims, replace of what is not pending,
//! replace inside one `insert_many_with`, windows across a restart.

mod common;

use common::wait::{HOUR, WAIT, eventually, ms, wall, within};
use punctual::durable::{EntryState, InsertOptions, KeyLimit};
use std::time::Duration;
use tokio::time::Instant;

const WINDOW: Duration = Duration::from_millis(700);

fn unique(id: &str) -> InsertOptions {
    InsertOptions::new().id(id).unique_for(WINDOW)
}

fn replace(id: &str) -> InsertOptions {
    InsertOptions::new().id(id).replace(true)
}

common::stores::on_every_store! {
    /// A window starts when a pending or leased entry is removed and when
    /// dead letters are cleared; the id is free again once it passed.
    /// (`cancel` answers `Unsupported("not yet")` on Redis and PostgreSQL:
    /// not covered here.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn windows_start_at_remove_and_clear_dead() {
        let store = Store::start();
        let q: Q<u32> = store.builder("windows").lease(HOUR).max_attempts(1).build().await.unwrap();
        let ids = ["removed", "removed-leased", "cleared"];
        for id in ids {
            let delay = if id == "removed-leased" { Duration::ZERO } else { HOUR };
            assert!(q.insert_with(&1, &unique(id).key("k").delay(delay)).await.unwrap().is_some());
        }
        let leased = q.take().await.unwrap();
        assert_eq!(leased.id(), "removed-leased");
        assert!(q.remove("removed").await.unwrap());
        assert!(q.remove("removed-leased").await.unwrap());
        assert!(!leased.ack().await.unwrap(), "{STORE}: the removed lease still held");
        // A dead letter: the id stays taken while it is kept.
        q.reset("cleared", Duration::ZERO).await.unwrap();
        let dying = q.take().await.unwrap();
        assert!(dying.retry(Duration::ZERO).await.unwrap());
        assert!(q.try_take().await.unwrap().is_none());
        eventually("dead", || async { q.stats().await.unwrap().dead == 1 }).await;
        assert_eq!(q.clear_dead().await.unwrap(), 1);
        let started = Instant::now();
        for id in ids {
            assert_eq!(q.insert_with(&2, &unique(id)).await.unwrap(), None, "{STORE}: {id} within its window");
            assert!(!q.insert_with_id(id, &2, HOUR).await.unwrap(), "{STORE}: {id} within its window");
        }
        assert!(started.elapsed() < WINDOW, "too slow to check the windows");
        tokio::time::sleep(WINDOW + ms(100)).await;
        for id in ids {
            assert!(q.insert_with(&3, &unique(id).delay(HOUR)).await.unwrap().is_some(), "{STORE}: {id} after its window");
        }
        // The key's place freed by the removal of the leased entry.
        q.set_key_limit("k", KeyLimit { concurrency: Some(1), rate: None }).await.unwrap();
        q.insert_with(&4, &InsertOptions::new().key("k")).await.unwrap();
        assert!(q.try_take().await.unwrap().is_some(), "{STORE}: the removed lease kept its key's place");
    }

    /// An entry with a window beyond any clock acked by a worker beside
    /// plain ones: the worker's acks go to the store together, and every
    /// entry runs once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_acks_an_endless_window_beside_other_entries() {
        let store = Store::start();
        let q: Q<u32> = store.builder("endless-beside").lease(ms(600)).build().await.unwrap();
        let mut batch: Vec<(u32, InsertOptions)> = (0..8).map(|n| (n, InsertOptions::new())).collect();
        batch.push((100, InsertOptions::new().id("once-ever").unique_for(Duration::MAX)));
        q.insert_many_with(&batch).await.unwrap();
        let runs: std::sync::Arc<std::sync::Mutex<Vec<u32>>> = Default::default();
        let worker = punctual::durable::Worker::builder(q.clone()).concurrency(9).spawn({
            let runs = runs.clone();
            move |job: punctual::durable::Job<u32>| {
                runs.lock().unwrap().push(*job.value());
                async { tokio::time::sleep(ms(50)).await; punctual::durable::Outcome::Done }
            }
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        worker.shutdown(ms(200)).await;
        let mut runs = runs.lock().unwrap().clone();
        runs.sort_unstable();
        assert_eq!(runs, [0, 1, 2, 3, 4, 5, 6, 7, 100], "{STORE}: runs");
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.pending + stats.due + stats.leased, 0, "{STORE}: left after each ran: {stats:?}");
    }

    /// A dead letter that retention deletes (count) starts its window
    /// then; a requeued dead letter is an entry again (no window), and its
    /// later ack starts one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retention_and_requeue_of_dead_letters_with_windows() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("dead-windows")
            .lease(HOUR)
            .max_attempts(1)
            .dead_max_count(1)
            .build()
            .await
            .unwrap();
        for id in ["first", "second"] {
            q.insert_with(&1, &unique(id)).await.unwrap();
            let d = q.take().await.unwrap();
            assert_eq!(d.id(), id);
            assert!(d.retry(Duration::ZERO).await.unwrap());
            assert!(q.try_take().await.unwrap().is_none());
        }
        // "first" was trimmed when "second" died: its window is open.
        assert!(q.entry("first").await.unwrap().is_none(), "{STORE}: kept past the count");
        assert_eq!(q.insert_with(&2, &unique("first")).await.unwrap(), None, "{STORE}: trimmed just now");
        // "second" is requeued: an entry again, not a window.
        assert!(q.requeue_dead("second", Duration::ZERO).await.unwrap());
        assert_eq!(q.insert_with(&2, &unique("second")).await.unwrap(), None, "{STORE}: an entry has it");
        let d = q.take().await.unwrap();
        assert_eq!((d.id(), d.attempt()), ("second", 1), "{STORE}");
        assert!(d.ack().await.unwrap());
        assert_eq!(q.insert_with(&3, &unique("second")).await.unwrap(), None, "{STORE}: acked just now");
        tokio::time::sleep(WINDOW + ms(100)).await;
        assert!(q.insert_with(&4, &unique("first")).await.unwrap().is_some(), "{STORE}");
        assert!(q.insert_with(&4, &unique("second")).await.unwrap().is_some(), "{STORE}");
    }

    /// A window as long as `Duration::MAX` ("never again") is kept: the ack
    /// works and the id stays taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_window_of_any_length_is_kept() {
        let store = Store::start();
        let q: Q<u32> = store.builder("forever").lease(HOUR).build().await.unwrap();
        let once = InsertOptions::new().id("welcome-mail").unique_for(Duration::MAX);
        assert!(q.insert_with(&1, &once).await.unwrap().is_some());
        let d = q.take().await.unwrap();
        assert!(d.ack().await.unwrap(), "{STORE}");
        assert_eq!(q.insert_with(&2, &once).await.unwrap(), None, "{STORE}");
        let long = InsertOptions::new().id("yearly").unique_for(Duration::from_secs(400 * 365 * 86_400));
        q.insert_with(&1, &long).await.unwrap();
        assert!(q.take().await.unwrap().ack().await.unwrap(), "{STORE}");
        assert_eq!(q.insert_with(&2, &long).await.unwrap(), None, "{STORE}");
    }

    /// A delay beyond any clock with options (as `insert` takes one) leaves
    /// the entry pending.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delay_beyond_any_clock_with_options_stays_pending() {
        let store = Store::start();
        let q: Q<u32> = store.open("far-delay").await;
        let id = q.insert_with(&1, &InsertOptions::new().key("k").delay(Duration::MAX)).await;
        assert!(matches!(id, Ok(Some(_))), "{STORE}: {id:?}");
        let id = q.insert_with(&2, &InsertOptions::new().priority(1).id("far").delay(Duration::MAX)).await;
        assert!(matches!(id, Ok(Some(_))), "{STORE}: {id:?}");
        assert!(q.try_take().await.unwrap().is_none());
        assert_eq!(q.stats().await.unwrap().pending, 2, "{STORE}");
    }

    /// A plain `insert` with a delay beyond any clock (the same input
    /// without options) stays pending.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_insert_with_a_delay_beyond_any_clock_stays_pending() {
        let store = Store::start();
        let q: Q<u32> = store.open("far-plain").await;
        let id = q.insert(&1, Duration::MAX).await;
        assert!(id.is_ok(), "{STORE}: {id:?}");
        assert_eq!(q.stats().await.unwrap().pending, 1, "{STORE}");
    }

    /// `replace` never touches what is not pending: a dead letter, a
    /// schedule's tick, or an entry whose lease ran out and that no claim
    /// took since (its holder may still ack it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replace_leaves_dead_letters_ticks_and_expired_leases_alone() {
        let store = Store::start();
        let q: Q<u32> = store.builder("replace-others").lease(ms(200)).max_attempts(1).build().await.unwrap();
        q.insert_with(&1, &InsertOptions::new().id("dead").key("k")).await.unwrap();
        let d = q.take().await.unwrap();
        assert!(d.retry(Duration::ZERO).await.unwrap());
        assert!(q.try_take().await.unwrap().is_none());
        eventually("dead", || async { q.stats().await.unwrap().dead == 1 }).await;
        assert_eq!(q.insert_with(&9, &replace("dead")).await.unwrap(), None, "{STORE}: a dead letter replaced");
        assert_eq!(q.entry("dead").await.unwrap().unwrap().state, EntryState::Dead);
        q.schedule_every("tick", HOUR, punctual::MissedTicks::Skip, &5).await.unwrap();
        assert_eq!(q.insert_with(&9, &replace("tick")).await.unwrap(), None, "{STORE}: a tick replaced");
        assert_eq!(q.schedules().await.unwrap()[0].value, 5);
        // A lease that ran out: the old holder's ack still counts, so the
        // entry is not replaced under it.
        q.insert_with(&1, &InsertOptions::new().id("slow").key("k2")).await.unwrap();
        let slow = q.take().await.unwrap();
        tokio::time::sleep(ms(300)).await;
        let answer = q.insert_with(&9, &replace("slow")).await.unwrap();
        let acked = slow.ack().await.unwrap();
        assert!(
            answer.is_none() || !acked,
            "{STORE}: replaced with 9, then the old holder's ack of 1 deleted the new value"
        );
    }

    /// Within one `insert_many_with`: the first of an id inserts, a second
    /// without `replace` is refused, one with `replace` takes its place
    /// (its key and priority too), and a pending entry of another key moves
    /// to a key with room; one entry results, with the last value.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replace_inside_one_batch_and_across_keys() {
        let store = Store::start();
        let q: Q<u32> = store.builder("batch-replace").lease(HOUR).build().await.unwrap();
        q.set_key_limit("full", KeyLimit { concurrency: Some(0), rate: None }).await.unwrap();
        let answers = q
            .insert_many_with(&[
                (1, InsertOptions::new().id("a").key("full")),
                (2, InsertOptions::new().id("a")),
                (3, replace("a").key("full").priority(4)),
                (4, replace("a").priority(-3)),
                (5, InsertOptions::new().id("b").key("full")),
            ])
            .await
            .unwrap();
        assert_eq!(
            answers,
            [Some("a".into()), None, Some("a".into()), Some("a".into()), Some("b".into())],
            "{STORE}"
        );
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.due, 2, "{STORE}: {stats:?}");
        let a = q.entry("a").await.unwrap().unwrap();
        assert_eq!((a.value, a.key, a.priority), (Some(4), None, -3), "{STORE}");
        // "b" waits on its key; a replace moves it to no key: it runs.
        assert!(q.insert_with(&6, &replace("b")).await.unwrap().is_some());
        let got = q.take_many(5).await.unwrap();
        let mut values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
        values.sort_unstable();
        assert_eq!(values, [4, 6], "{STORE}");
        assert!(got.iter().all(|d| d.key().is_none()), "{STORE}");
        // And back: a pending keyless entry replaced into the full key waits.
        q.insert_with(&7, &InsertOptions::new().id("c").delay(HOUR)).await.unwrap();
        q.insert_with(&8, &replace("c").key("full")).await.unwrap();
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: ran in a key with no place");
        let page = q.entries(EntryState::Due, None, 10).await.unwrap();
        assert_eq!(page.entries.len(), 1, "{STORE}: {:?}", page.entries);
        assert_eq!(page.entries[0].key.as_deref(), Some("full"));
    }

    /// Replace racing claims, 60 times: a replace that answers `Some`
    /// never loses its value (it is delivered, or pending), and one that
    /// answers `None` met a leased entry; every delivery's ack holds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn replace_racing_claims_never_loses_a_value_nor_replaces_a_leased_entry() {
        let store = Store::start();
        let q: Q<u32> = store.builder("replace-race").lease(HOUR).build().await.unwrap();
        for round in 0..60_u32 {
            let id = format!("debounce-{round}");
            let options = if round % 2 == 0 { InsertOptions::new().id(&id).key("k") } else { InsertOptions::new().id(&id) };
            q.insert_with(&(round * 10), &options).await.unwrap();
            let (claimer, replacer) = (q.clone(), q.clone());
            let rid = id.clone();
            let claim = tokio::spawn(async move { claimer.take_many(3).await.unwrap() });
            let swap = tokio::spawn(async move {
                let options = if round % 3 == 0 { replace(&rid).key("k2").priority(2) } else { replace(&rid) };
                replacer.insert_with(&(round * 10 + 1), &options).await.unwrap()
            });
            let (got, answer) = (claim.await.unwrap(), swap.await.unwrap());
            let values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
            let left = q.entry(&id).await.unwrap();
            match answer {
                Some(_) => {
                    let pending = left.as_ref().is_some_and(|e| e.state != EntryState::Leased && e.value == Some(round * 10 + 1));
                    assert!(
                        values == [round * 10 + 1] || (values.is_empty() && pending),
                        "{STORE}: round {round}: replaced, but delivered {values:?}, left {left:?}"
                    );
                }
                None => assert_eq!(values, [round * 10], "{STORE}: round {round}: refused, yet not leased"),
            }
            for d in got {
                assert!(d.ack().await.unwrap(), "{STORE}: round {round}: the lease was replaced under its holder");
            }
            if let Some(e) = left {
                if e.state != EntryState::Leased {
                    assert!(q.remove(&id).await.unwrap());
                }
            }
        }
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.due, stats.leased), (0, 0, 0), "{STORE}: {stats:?}");
        let _ = (wall(), WAIT);
        let _ = within("", async {}).await;
    }
}

common::stores::on_durable_stores! {
    /// A unique window survives a restart of the server (Redis: its
    /// append-only file; PostgreSQL: a table).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_unique_window_survives_a_restart() {
        let mut store = Store::start();
        let q: Q<u32> = store.builder("restart-window").lease(HOUR).build().await.unwrap();
        let window = InsertOptions::new().id("digest").unique_for(Duration::from_secs(8));
        q.insert_with(&1, &window).await.unwrap();
        assert!(q.take().await.unwrap().ack().await.unwrap());
        store.restart();
        let answer = within("an insert after the restart", async {
            loop {
                match q.insert_with(&2, &window).await {
                    Ok(answer) => break answer,
                    Err(_) => tokio::time::sleep(ms(100)).await,
                }
            }
        })
        .await;
        assert_eq!(answer, None, "{STORE}: the window was lost in the restart");
    }
}

/// A restart of what the store keeps its data in.
trait Restart {
    fn restart(&mut self);
}

#[cfg(feature = "redis")]
impl Restart for common::stores::redis::Store {
    fn restart(&mut self) {
        // The append-only file is written every second.
        std::thread::sleep(Duration::from_millis(1500));
        self.server.restart();
    }
}

#[cfg(feature = "postgres")]
impl Restart for common::stores::pg::Store {
    fn restart(&mut self) {
        let store = &*self;
        // The shared server stays up: the backends of this test's database
        // are killed instead (a crash of their sessions; the data is in tables).
        common::pg::psql(
            &common::pg::admin_url(),
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}' AND pid <> pg_backend_pid()",
                store.db.name()
            ),
        );
    }
}
