//! Operations on a durable queue, one body per behaviour on every store:
//! entries by state a page at a time (walked while others insert and
//! remove), each state's `EntryInfo`, the failure history, pause and
//! resume across handles with waiting consumers and a worker, running a
//! schedule now, dead-letter retention, and the dead letters all at once.

mod common;

use common::wait::{HOUR, WAIT, eventually, ms, wall};
use punctual::MissedTicks;
use punctual::durable::{Cursor, EntryInfo, EntryState, Job, Outcome, Worker};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

common::stores::on_every_store! {
    /// Every entry of `state`, page by page (pages of `size`).
    async fn walk(q: &Q<u64>, state: EntryState, size: usize) -> Vec<EntryInfo<u64>> {
        let mut all = Vec::new();
        let mut cursor: Option<Cursor> = None;
        loop {
            let page = q.entries(state, cursor.as_ref(), size).await.unwrap();
            let last = page.next.is_none();
            if !last {
                assert_eq!(page.entries.len(), size, "{STORE}: a page short of its limit before the last");
            }
            all.extend(page.entries);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        all
    }

    /// 5,000 pending entries walked in pages of 100 while another task
    /// inserts new ones (before and after the walk's position) and removes
    /// some of the first: every entry that stayed pending is seen exactly
    /// once, in delivery order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pages_visit_every_entry_that_stays_exactly_once_in_order() {
        let store = Store::start();
        let q: Q<u64> = store.open("paged").await;
        // Due an hour on, 1 ms apart, several on each instant (FIFO ties).
        let entries: Vec<(u64, Duration)> =
            (0..5000u64).map(|n| (n, HOUR + ms(n / 3))).collect();
        let mut ids = Vec::new();
        for chunk in entries.chunks(500) {
            ids.extend(q.insert_many(chunk).await.unwrap());
        }
        let removed: HashSet<String> = ids.iter().step_by(7).cloned().collect();
        let churning = Arc::new(AtomicBool::new(true));
        let churn = tokio::spawn({
            let q = q.clone();
            let removed = removed.clone();
            let churning = Arc::clone(&churning);
            async move {
                for (n, id) in (0u64..).zip(removed) {
                    assert!(q.remove(&id).await.unwrap());
                    // New entries all over the walk's range.
                    q.insert(&(100_000 + n), HOUR + ms(n * 37 % 1700)).await.unwrap();
                }
                churning.store(false, Ordering::SeqCst);
            }
        });
        let seen = walk(&q, EntryState::Pending, 100).await;
        churn.await.unwrap();
        assert!(!churning.load(Ordering::SeqCst));
        let mut count: HashMap<&str, usize> = HashMap::new();
        for e in &seen {
            *count.entry(e.id.as_str()).or_default() += 1;
            assert_eq!(e.state, EntryState::Pending);
        }
        assert!(count.values().all(|&n| n == 1), "{STORE}: an entry seen twice");
        for id in ids.iter().filter(|id| !removed.contains(*id)) {
            assert_eq!(count.get(id.as_str()), Some(&1), "{STORE}: {id} stayed pending, not seen");
        }
        for pair in seen.windows(2) {
            assert!(pair[0].due <= pair[1].due, "{STORE}: out of order: {} then {}", pair[0].id, pair[1].id);
        }
        // Among the first entries, ties keep insertion order.
        let kept: Vec<u64> = seen.iter().filter_map(|e| e.value).filter(|v| *v < 5000).collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "{STORE}: FIFO on ties");
    }

    /// A cursor belongs to one state of one queue; `limit == 0` gives an
    /// empty page with the cursor given.
    #[tokio::test]
    async fn cursors_of_another_queue_or_state_are_invalid() {
        let store = Store::start();
        let q: Q<u64> = store.open("cursors").await;
        let other: Q<u64> = store.open("cursors-other").await;
        for n in 0..3 {
            q.insert(&n, HOUR).await.unwrap();
            other.insert(&n, HOUR).await.unwrap();
        }
        let page = q.entries(EntryState::Pending, None, 2).await.unwrap();
        assert_eq!(page.entries.len(), 2);
        let cursor = page.next.expect("a next page");
        let text = cursor.to_string();
        assert_eq!(text.parse::<Cursor>().unwrap(), cursor, "reads back");
        assert!(matches!(
            other.entries(EntryState::Pending, Some(&cursor), 2).await,
            Err(Error::InvalidId(_))
        ));
        assert!(matches!(
            q.entries(EntryState::Dead, Some(&cursor), 2).await,
            Err(Error::InvalidId(_))
        ));
        assert!("not a cursor".parse::<Cursor>().is_err());
        let empty = q.entries(EntryState::Pending, Some(&cursor), 0).await.unwrap();
        assert_eq!((empty.entries.len(), empty.next.as_ref()), (0, Some(&cursor)));
        let rest = q.entries(EntryState::Pending, Some(&cursor), 10).await.unwrap();
        assert_eq!((rest.entries.len(), rest.next), (1, None));
        assert!(q.entries(EntryState::Leased, None, 10).await.unwrap().entries.is_empty());
    }

    /// A cursor of a queue of the same name elsewhere (another memory
    /// queue, another Redis server, another PostgreSQL schema) is refused,
    /// not read as a place in this queue (which would skip entries), and
    /// so is one of a queue whose name differs.
    #[tokio::test]
    async fn a_cursor_of_a_queue_of_the_same_name_elsewhere_is_invalid() {
        let (here, there) = (Store::start(), Store::start());
        let a: Q<u64> = here.open("same").await;
        let b: Q<u64> = there.open("same").await;
        for n in 0..6 {
            a.insert(&n, HOUR + ms(n)).await.unwrap();
            b.insert(&n, HOUR + ms(n)).await.unwrap();
        }
        let cursor = a.entries(EntryState::Pending, None, 2).await.unwrap().next.unwrap();
        assert!(
            matches!(b.entries(EntryState::Pending, Some(&cursor), 2).await, Err(Error::InvalidId(_))),
            "{STORE}: another store's queue of the same name took the cursor"
        );
        let rest = a.entries(EntryState::Pending, Some(&cursor), 10).await.unwrap();
        assert_eq!(rest.entries.len(), 4, "{STORE}: its own queue reads on");
        // Names tried one after another never share a cursor.
        for n in 0..20 {
            let other: Q<u64> = here.open(&format!("q{n}")).await;
            other.insert(&0, HOUR).await.unwrap();
            assert!(
                matches!(other.entries(EntryState::Pending, Some(&cursor), 2).await, Err(Error::InvalidId(_))),
                "{STORE}: queue q{n} took the cursor of queue \"same\""
            );
        }
    }

    /// What `entry` and `entries` say of an entry in each state, and of a
    /// value that does not decode.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_state_shows_its_fields() {
        let store = Store::start();
        let q: Q<u64> = store.builder("states").lease(HOUR).max_attempts(1).build().await.unwrap();
        // (Stores keep milliseconds.)
        let before = UNIX_EPOCH + ms(ms_of(wall()));
        q.insert_with_id("pending", &1, HOUR).await.unwrap();
        q.insert_with_id("leased", &3, ms(0)).await.unwrap();
        let d = q.take_timeout(WAIT).await.unwrap().unwrap();
        assert_eq!(d.id(), "leased");
        q.insert_with_id("due", &2, ms(0)).await.unwrap();
        q.insert_with_id("dead", &4, ms(0)).await.unwrap();
        let strings: Q<String> = store.open("states").await;
        strings.insert_with_id("odd", &"not a number".to_owned(), HOUR).await.unwrap();
        q.schedule_every("tick", HOUR, MissedTicks::Skip, &5).await.unwrap();

        let pending = q.entry("pending").await.unwrap().unwrap();
        assert_eq!((pending.state, pending.attempt, pending.value), (EntryState::Pending, 0, Some(1)));
        assert!(pending.due >= before + HOUR - ms(1000) && pending.due <= wall() + HOUR);
        assert_eq!((pending.lease_until, pending.died_at), (None, None));
        assert_eq!((pending.schedule.as_deref(), pending.last_error.as_deref()), (None, None));

        let leased = q.entry("leased").await.unwrap().unwrap();
        assert_eq!((leased.state, leased.attempt, leased.value), (EntryState::Leased, 1, Some(3)), "{STORE}");
        let until = leased.lease_until.expect("a lease end");
        assert!(until >= wall() + HOUR - ms(5000), "{STORE}: {until:?}");
        assert!(leased.due <= wall(), "{STORE}: when it was due");

        let due = q.entry("due").await.unwrap().unwrap();
        assert_eq!((due.state, due.attempt), (EntryState::Due, 0), "{STORE}");
        assert!(due.due <= wall());

        // Dead: one attempt allowed, and it fails.
        let worker = Worker::builder(q.clone()).spawn(|job: Job<u64>| async move {
            if job.id() == "dead" { Outcome::retry("it broke") } else { Outcome::Snooze(HOUR) }
        });
        eventually("the entry dies", || async { q.stats().await.unwrap().dead == 1 }).await;
        worker.shutdown(ms(100)).await;
        let dead = q.entry("dead").await.unwrap().unwrap();
        assert_eq!((dead.state, dead.attempt), (EntryState::Dead, 1), "{STORE}");
        assert_eq!(dead.last_error.as_deref(), Some("it broke"));
        let died = dead.died_at.expect("a time of death");
        assert!(died >= before && died <= wall(), "{STORE}");
        assert_eq!(dead.lease_until, None);
        let listed = q.entries(EntryState::Dead, None, 10).await.unwrap();
        assert_eq!(listed.entries, vec![dead], "{STORE}: entries and entry agree");

        let odd = q.entry("odd").await.unwrap().unwrap();
        assert_eq!((odd.state, odd.value), (EntryState::Pending, None), "{STORE}");
        let tick = q.entry("tick").await.unwrap().unwrap();
        assert_eq!((tick.schedule.as_deref(), tick.value), (Some("tick"), Some(5)), "{STORE}");
        assert_eq!(q.entry("absent").await.unwrap(), None);
        assert!(d.ack().await.unwrap());
    }

    /// A failed attempt's reason stays on the entry while it waits for its
    /// retry (the last one wins), and goes with it when it is acked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_last_error_is_kept_across_retries() {
        let store = Store::start();
        let q: Q<u64> = store.builder("history").lease(HOUR).build().await.unwrap();
        q.insert_with_id("a", &1, ms(0)).await.unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(q.clone()).spawn({
            let runs = Arc::clone(&runs);
            move |job: Job<u64>| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    match job.attempt() {
                        1 => Outcome::retry_after("first failure", ms(200)),
                        2 => Outcome::retry_after("second failure", HOUR),
                        _ => Outcome::Done,
                    }
                }
            }
        });
        eventually("two attempts failed", || {
            let n = runs.load(Ordering::SeqCst);
            async move { n == 2 }
        })
        .await;
        let shown = |q: Q<u64>| async move { q.entry("a").await.unwrap().unwrap() };
        eventually("the second reason is kept", || {
            let q = q.clone();
            async move { shown(q).await.last_error.as_deref() == Some("second failure") }
        })
        .await;
        let e = shown(q.clone()).await;
        assert_eq!((e.state, e.attempt), (EntryState::Pending, 2), "{STORE}");
        worker.shutdown(ms(100)).await;
        assert!(q.reset("a", ms(0)).await.unwrap());
        let d = q.take_timeout(WAIT).await.unwrap().unwrap();
        assert!(d.ack().await.unwrap());
        assert_eq!(q.entry("a").await.unwrap(), None);
    }

    /// Paused through one handle: another handle's waiting consumer and
    /// worker take nothing, inserts go on, what was leased before may be
    /// acked; resumed, they take at once (not after a poll interval).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pause_stops_every_consumer_and_resume_wakes_them_at_once() {
        let store = Store::start();
        let admin: Q<u64> = store.open("paused").await;
        let consumers: Q<u64> = store
            .builder("paused")
            .lease(HOUR)
            .poll_interval(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        admin.insert_with_id("held", &0, ms(0)).await.unwrap();
        let held = consumers.take().await.unwrap();
        assert!(admin.pause().await.unwrap());
        assert!(!admin.pause().await.unwrap(), "already paused");
        assert!(consumers.is_paused().await.unwrap(), "{STORE}: seen by every handle");
        let waiting = tokio::spawn({
            let consumers = consumers.clone();
            async move { consumers.take().await.map(|d| (d.id().to_owned(), Instant::now())) }
        });
        let ran = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(consumers.clone()).spawn({
            let ran = Arc::clone(&ran);
            move |_job: Job<u64>| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Outcome::Done }
            }
        });
        for n in 1..=5 {
            admin.insert_with_id(&format!("e{n}"), &n, ms(0)).await.unwrap();
        }
        tokio::time::sleep(ms(700)).await;
        assert!(!waiting.is_finished(), "{STORE}: a paused queue handed an entry out");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "{STORE}: a worker ran while paused");
        assert!(consumers.try_take().await.unwrap().is_none());
        assert_eq!(admin.stats().await.unwrap().due, 5);
        assert!(held.ack().await.unwrap(), "{STORE}: what was leased may be acked");

        let resumed = Instant::now();
        assert!(admin.resume().await.unwrap());
        assert!(!admin.resume().await.unwrap(), "already running");
        // The waiting consumer and the worker share the five (which gets
        // which is theirs to race for); all are taken well before a poll
        // interval (30 s) would have asked again.
        let done = loop {
            let taken = usize::from(waiting.is_finished()) + ran.load(Ordering::SeqCst);
            if taken == 5 {
                break Instant::now();
            }
            assert!(resumed.elapsed() < WAIT, "{STORE}: {taken} of 5 taken after resume");
            tokio::time::sleep(ms(10)).await;
        };
        assert!(done - resumed < ms(5000), "{STORE}: taken {:?} after resume", done - resumed);
        if waiting.is_finished() {
            let (_, at) = waiting.await.unwrap().unwrap();
            assert!(at >= resumed);
        } else {
            waiting.abort();
        }
        worker.shutdown(ms(100)).await;
        assert!(!admin.is_paused().await.unwrap());
    }

    /// A tick that came due while paused follows its missed-tick rule after
    /// resume, as after downtime: with `Skip`, one late run, then the next
    /// grid instant after now.
    #[tokio::test]
    async fn a_tick_due_during_a_pause_follows_its_rule_after_resume() {
        let store = Store::start();
        let q: Q<u64> = store.builder("paused-tick").lease(HOUR).build().await.unwrap();
        let period = ms(200);
        q.schedule_every("t", period, MissedTicks::Skip, &1).await.unwrap();
        assert!(q.pause().await.unwrap());
        let first = q.deadline("t").await.unwrap().unwrap();
        tokio::time::sleep(ms(1000)).await;
        assert!(q.try_take().await.unwrap().is_none());
        assert!(q.resume().await.unwrap());
        let d = q.take_timeout(WAIT).await.unwrap().expect("the missed tick");
        assert_eq!(d.deadline(), first, "{STORE}: one late run, for the first instant");
        let acked_at = ms_of(wall());
        assert!(d.ack().await.unwrap());
        let next = ms_of(q.deadline("t").await.unwrap().unwrap());
        assert_eq!(next % 200, 0);
        assert!(next > acked_at - 5, "{STORE}: the missed instants are skipped");
    }

    /// `run_now` makes a pending tick due now (its instant becomes now),
    /// and the run after it follows the rule from that instant; a leased
    /// tick, an unknown name and a plain entry's id are `false`.
    #[tokio::test]
    async fn run_now_runs_a_pending_tick_now_and_nothing_else() {
        let store = Store::start();
        let q: Q<u64> = store.builder("run-now").lease(HOUR).build().await.unwrap();
        q.schedule_every("nightly", Duration::from_secs(86_400), MissedTicks::Skip, &7).await.unwrap();
        q.insert_with_id("plain", &1, HOUR).await.unwrap();
        assert!(!q.run_now("nope").await.unwrap());
        assert!(!q.run_now("plain").await.unwrap(), "{STORE}: not a schedule");
        let before = wall();
        assert!(q.run_now("nightly").await.unwrap());
        let d = q.take_timeout(WAIT).await.unwrap().expect("due now");
        assert_eq!(d.id(), "nightly");
        let instant = d.deadline();
        assert!(instant >= before - ms(1000) && instant <= wall(), "{STORE}: its instant is now");
        assert!(!q.run_now("nightly").await.unwrap(), "{STORE}: leased");
        assert!(d.ack().await.unwrap());
        // The next: the first grid instant (a day's) after the run's instant.
        let next = ms_of(q.deadline("nightly").await.unwrap().unwrap());
        assert_eq!(next % 86_400_000, 0);
        assert!(next > ms_of(instant) && next <= ms_of(instant) + 86_400_000);
    }

    /// Right after a death, dead letters past the handle's age and beyond
    /// its count are gone, the oldest first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dead_letters_are_trimmed_by_count_and_by_age_after_each_death() {
        let store = Store::start();
        let q: Q<u64> = store.builder("retained").lease(HOUR).max_attempts(1).build().await.unwrap();
        // Five deaths through a handle without retention.
        let worker = Worker::builder(q.clone()).spawn(|_job: Job<u64>| async {
            Outcome::discard("no")
        });
        for n in 0..5 {
            q.insert_with_id(&format!("old{n}"), &n, ms(0)).await.unwrap();
            let q = &q;
            eventually("it dies", || async move { q.stats().await.unwrap().dead == n + 1 }).await;
            tokio::time::sleep(ms(5)).await;
        }
        worker.shutdown(ms(100)).await;
        tokio::time::sleep(ms(300)).await;
        // One more death through a handle that keeps 3.
        let counted: Q<u64> = store
            .builder("retained")
            .lease(HOUR)
            .max_attempts(1)
            .dead_max_count(3)
            .build()
            .await
            .unwrap();
        let worker = Worker::builder(counted.clone()).spawn(|_job: Job<u64>| async {
            Outcome::discard("no")
        });
        counted.insert_with_id("new", &9, ms(0)).await.unwrap();
        eventually("the new one dies", || async {
            counted.dead_letters(10).await.unwrap().iter().any(|d| d.id == "new")
        })
        .await;
        worker.shutdown(ms(100)).await;
        let ids: Vec<String> = q.dead_letters(10).await.unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["old3", "old4", "new"], "{STORE}: the oldest went first");
        // A handle that keeps nothing older than 100 ms.
        let aged: Q<u64> = store
            .builder("retained")
            .lease(HOUR)
            .max_attempts(1)
            .dead_max_age(ms(100))
            .build()
            .await
            .unwrap();
        tokio::time::sleep(ms(200)).await;
        aged.insert_with_id("newest", &10, ms(0)).await.unwrap();
        let worker = Worker::builder(aged.clone()).spawn(|_job: Job<u64>| async {
            Outcome::discard("no")
        });
        eventually("the newest dies", || async {
            aged.dead_letters(10).await.unwrap().iter().any(|d| d.id == "newest")
        })
        .await;
        worker.shutdown(ms(100)).await;
        let ids: Vec<String> = q.dead_letters(10).await.unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["newest"], "{STORE}: those older than the age are gone");
    }

    /// Every dead letter back at once (attempts reset, in order of death),
    /// or every one deleted; each reports how many.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requeue_all_dead_and_clear_dead_act_on_every_dead_letter() {
        let store = Store::start();
        let q: Q<u64> = store.builder("all-dead").lease(HOUR).max_attempts(1).build().await.unwrap();
        let worker = Worker::builder(q.clone()).spawn(|_job: Job<u64>| async {
            Outcome::discard("no")
        });
        for n in 0..4u64 {
            q.insert_with_id(&format!("d{n}"), &n, ms(0)).await.unwrap();
            let q = &q;
            eventually("it dies", || async move { q.stats().await.unwrap().dead == n + 1 }).await;
        }
        worker.shutdown(ms(100)).await;
        assert_eq!(q.requeue_all_dead(HOUR).await.unwrap(), 4);
        assert_eq!(q.stats().await.unwrap().dead, 0);
        let back = walk(&q, EntryState::Pending, 2).await;
        let ids: Vec<&str> = back.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["d0", "d1", "d2", "d3"], "{STORE}: in their order of death");
        assert!(back.iter().all(|e| e.attempt == 0 && e.last_error.is_none()));
        assert_eq!(q.requeue_all_dead(HOUR).await.unwrap(), 0);
        // Dead again, then deleted.
        for id in ["d0", "d1"] {
            assert!(q.reset(id, ms(0)).await.unwrap());
        }
        let worker = Worker::builder(q.clone()).spawn(|_job: Job<u64>| async {
            Outcome::discard("no")
        });
        eventually("two die", || async { q.stats().await.unwrap().dead == 2 }).await;
        worker.shutdown(ms(100)).await;
        assert_eq!(q.clear_dead().await.unwrap(), 2);
        assert_eq!(q.clear_dead().await.unwrap(), 0);
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.dead, stats.pending), (0, 2), "{STORE}");
    }

    /// The store's clock reads within a second of this machine's (one
    /// machine: the server shares the clock).
    #[tokio::test]
    async fn now_reads_the_stores_clock() {
        let store = Store::start();
        let q: Q<u64> = store.open("clock").await;
        let before = wall();
        let now = q.now().await.unwrap();
        assert!(now + ms(1000) >= before && now <= wall() + ms(1000), "{STORE}: {now:?}");
    }
}
