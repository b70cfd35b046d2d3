//! Every rule of the durable queue in API.md (`RedisQueue`, and `PgQueue`
//! "with the same semantics"), one body per behaviour run on every store
//! (`on_every_store!`), so the stores cannot drift apart: ids, order,
//! producers, consumers, inspection, names and handles, leases, dead
//! letters, `insert_many` and bad input.
//!
//! Every test has a store of its own (a `redis-server`, or a PostgreSQL
//! schema). Times are real: the store's clock decides what is due, so waits
//! are bounded by a generous `WAIT` and time checks have a few milliseconds
//! of slack.

mod common;
#[path = "common/store_extra.rs"]
mod store_extra;

use common::stores::LEASE;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::pin::pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use store_extra::{Backdoor, HOUR, SLACK, WAIT, assert_between, eventually, ms, wall, within};

/// A year, for "far ahead".
const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// A value whose serialization fails when `fail` is set.
#[derive(Debug, Deserialize)]
struct Flaky {
    n: u32,
    fail: bool,
}

impl Serialize for Flaky {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.fail {
            return Err(serde::ser::Error::custom(format!("{} refuses", self.n)));
        }
        Plain {
            n: self.n,
            fail: false,
        }
        .serialize(s)
    }
}

/// What a [`Flaky`] that serializes writes.
#[derive(Serialize)]
struct Plain {
    n: u32,
    fail: bool,
}

common::stores::on_every_store! {
    /// Moves `id`, which must be the only due entry of queue `name`, to the
    /// dead letters: one delivery without ack through a handle with
    /// `max_attempts(1)`, then claims until the store has buried it.
    async fn make_dead<T>(store: &Store, name: &str, id: &str)
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let q: Q<T> = store
            .builder(name)
            .lease(ms(200))
            .max_attempts(1)
            .build()
            .await
            .unwrap();
        let d = q
            .take_timeout(WAIT)
            .await
            .unwrap()
            .expect("the entry is due");
        assert_eq!(d.id(), id);
        drop(d);
        let q = &q;
        eventually("the entry goes to the dead letters", || async move {
            assert!(q.try_take().await.unwrap().is_none(), "delivered twice");
            q.dead_letters(10).await.unwrap().iter().any(|l| l.id == id)
        })
        .await;
    }

    /// The next delivery, or a panic if none comes within `WAIT`.
    async fn next<T>(q: &Q<T>) -> Delivery<T>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        q.take_timeout(WAIT)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no delivery within {WAIT:?} on {STORE}"))
    }

    /// Waits until `until` has passed and the store counts the (only)
    /// leased entry of `q` as due again, without taking it.
    async fn until_lease_runs_out<T>(q: &Q<T>, until: SystemTime)
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let left = until.duration_since(wall()).unwrap_or_default();
        tokio::time::sleep(left + ms(10)).await;
        eventually("the store sees the lease run out", || async {
            let stats = q.stats().await.unwrap();
            stats.leased == 0 && stats.due == 1
        })
        .await;
    }

    fn assert_invalid_id<V: Debug>(result: Result<V, Error>, what: &str) {
        match result {
            Err(Error::InvalidId(why)) => assert!(!why.is_empty(), "{what}: empty reason"),
            other => panic!("{what}: expected Err(InvalidId) on {STORE}, got {other:?}"),
        }
    }

    // ------------------------------------------------------------ ids

    #[tokio::test]
    async fn generated_ids_are_unique_and_of_the_form_hash_number() {
        let store = Store::start();
        let q: Q<u64> = store.open("ids").await;
        let other: Q<u64> = store.open("ids").await;
        // A caller's id that looks like a generated one is never generated
        // again.
        assert!(q.insert_with_id("#3", &333, HOUR).await.unwrap());
        let mut ids = HashSet::new();
        for i in 0..50 {
            let handle = if i % 2 == 0 { &q } else { &other };
            let id = handle.insert(&i, HOUR).await.unwrap();
            let digits = id.strip_prefix('#').unwrap_or_else(|| panic!("{id:?}"));
            assert!(
                !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
                "{id:?} is not #<n>"
            );
            assert!(ids.insert(id.clone()), "{id:?} generated twice");
        }
        assert!(!ids.contains("#3"), "a generated id took the caller's id");
        assert_eq!(q.stats().await.unwrap().pending, 51);
        // The caller's entry is untouched.
        assert!(q.remove("#3").await.unwrap());
    }

    #[tokio::test]
    async fn insert_with_id_is_idempotent_for_a_pending_entry() {
        let store = Store::start();
        let q: Q<u64> = store.open("idem-pending").await;
        assert!(q.insert_with_id("order-1", &1, HOUR).await.unwrap());
        let deadline = q.deadline("order-1").await.unwrap().unwrap();
        assert!(!q.insert_with_id("order-1", &2, ms(0)).await.unwrap());
        assert_eq!(q.deadline("order-1").await.unwrap(), Some(deadline));
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 1,
                ..Stats::default()
            }
        );
        assert!(q.try_take().await.unwrap().is_none(), "not made due");
        assert!(q.reset("order-1", ms(0)).await.unwrap());
        let d = within("take", q.take()).await.unwrap();
        assert_eq!((d.id(), *d.value()), ("order-1", 1));
    }

    #[tokio::test]
    async fn insert_with_id_is_idempotent_for_a_leased_entry() {
        let store = Store::start();
        let q: Q<u64> = store.builder("idem-leased").lease(HOUR).build().await.unwrap();
        assert!(q.insert_with_id("order-1", &1, ms(0)).await.unwrap());
        let d = within("take", q.take()).await.unwrap();
        assert!(!q.insert_with_id("order-1", &2, ms(0)).await.unwrap());
        assert_eq!(q.deadline("order-1").await.unwrap(), Some(d.lease_until()));
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.due, stats.leased), (0, 0, 1));
        assert!(q.try_take().await.unwrap().is_none(), "no second copy");
        assert!(d.ack().await.unwrap(), "the lease is still held");
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    #[tokio::test]
    async fn insert_with_id_is_idempotent_for_a_dead_entry() {
        let store = Store::start();
        let q: Q<u64> = store.open("idem-dead").await;
        assert!(q.insert_with_id("order-1", &1, ms(0)).await.unwrap());
        make_dead::<u64>(&store, "idem-dead", "order-1").await;
        assert!(!q.insert_with_id("order-1", &2, ms(0)).await.unwrap());
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].id.as_str(), dead[0].value), ("order-1", Some(1)));
        let stats = q.stats().await.unwrap();
        assert_eq!(
            (stats.pending, stats.due, stats.leased, stats.dead),
            (0, 0, 0, 1)
        );
        assert!(q.try_take().await.unwrap().is_none());
    }

    // ------------------------------------------------------------ order

    #[tokio::test]
    async fn equal_deadlines_come_out_fifo_across_two_handles() {
        let store = Store::start();
        let a: Q<u32> = store.open("fifo").await;
        let b: Q<u32> = store.open("fifo").await;
        let at = wall() + ms(100);
        let mut ids = Vec::new();
        for i in 0..100u32 {
            // Producers interleave irregularly.
            let producer = if i % 3 == 0 { &a } else { &b };
            ids.push(producer.insert_at(&i, at).await.unwrap());
        }
        let mut seen = Vec::new();
        let mut round = 0;
        while seen.len() < 100 {
            let consumer = if round % 2 == 0 { &b } else { &a };
            round += 1;
            let batch = within("take_many", consumer.take_many(7)).await.unwrap();
            assert!((1..=7).contains(&batch.len()));
            for d in batch {
                seen.push((d.id().to_owned(), *d.value()));
                assert!(d.ack().await.unwrap());
            }
        }
        let expected: Vec<_> = ids.into_iter().zip(0..100u32).collect();
        assert_eq!(seen, expected);
    }

    #[tokio::test]
    async fn due_entries_come_out_in_deadline_order() {
        let store = Store::start();
        let q: Q<String> = store.open("deadline-order").await;
        let base = wall() - Duration::from_secs(5);
        for (name, offset) in [("c", 3000), ("a", 1000), ("d", 4000), ("b", 2000)] {
            q.insert_at(&name.to_owned(), base + ms(offset))
                .await
                .unwrap();
        }
        let taken = within("take_many", q.take_many(10)).await.unwrap();
        let names: Vec<_> = taken.iter().map(|d| d.value().as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        for (d, offset) in taken.iter().zip([1000, 2000, 3000, 4000]) {
            assert_between(
                d.deadline(),
                base + ms(offset),
                base + ms(offset),
                "deadline",
            );
        }
    }

    #[tokio::test]
    async fn delays_set_deadlines_and_the_earliest_comes_out_first() {
        let store = Store::start();
        let q: Q<u64> = store.open("delay-order").await;
        let mut expected = Vec::new();
        for delay in [400u64, 100, 250] {
            let before = wall();
            let id = q.insert(&delay, ms(delay)).await.unwrap();
            let after = wall();
            let deadline = q.deadline(&id).await.unwrap().unwrap();
            assert_between(deadline, before + ms(delay), after + ms(delay), "deadline");
            expected.push((deadline, delay));
        }
        // Deterministic whatever the pauses between inserts: by the
        // deadlines the store gave (insertion order on ties).
        expected.sort_by_key(|&(deadline, _)| deadline);
        for (deadline, delay) in expected {
            let d = within("take", q.take()).await.unwrap();
            assert_eq!(*d.value(), delay);
            assert_eq!(d.deadline(), deadline);
            assert!(wall() + SLACK >= deadline, "delivered before its deadline");
            assert!(d.ack().await.unwrap());
        }
    }

    // ------------------------------------------------------------ remove, reset, deadline

    #[tokio::test]
    async fn remove_deletes_a_pending_entry() {
        let store = Store::start();
        let q: Q<u64> = store.open("remove-pending").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let keep = q.insert(&2, ms(0)).await.unwrap();
        assert!(q.remove(&id).await.unwrap());
        assert!(!q.remove(&id).await.unwrap(), "already gone");
        assert_eq!(q.deadline(&id).await.unwrap(), None);
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(d.id(), keep);
        assert!(q.try_take().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn remove_deletes_a_leased_entry_and_the_holders_ack_is_false() {
        let store = Store::start();
        let q: Q<u64> = store.builder("remove-leased").lease(HOUR).build().await.unwrap();
        let id = q.insert(&1, ms(0)).await.unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert!(q.remove(&id).await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert!(!d.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    #[tokio::test]
    async fn remove_deletes_a_dead_letter() {
        let store = Store::start();
        let q: Q<u64> = store.open("remove-dead").await;
        q.insert_with_id("x", &1, ms(0)).await.unwrap();
        make_dead::<u64>(&store, "remove-dead", "x").await;
        assert!(q.remove("x").await.unwrap());
        assert!(q.dead_letters(10).await.unwrap().is_empty());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert!(!q.requeue_dead("x", ms(0)).await.unwrap());
        // The id is free again.
        assert!(q.insert_with_id("x", &2, ms(0)).await.unwrap());
    }

    #[tokio::test]
    async fn remove_of_an_absent_id_is_false() {
        let store = Store::start();
        let q: Q<u64> = store.open("remove-absent").await;
        assert!(!q.remove("never-inserted").await.unwrap());
        q.insert_with_id("x", &1, HOUR).await.unwrap();
        assert!(!q.remove("y").await.unwrap());
        assert_eq!(q.stats().await.unwrap().pending, 1);
    }

    #[tokio::test]
    async fn reset_moves_a_pending_entry_as_if_inserted_now() {
        let store = Store::start();
        let q: Q<String> = store.open("reset").await;
        let s = |v: &str| v.to_owned();
        // A far entry made due at once.
        q.insert_with_id("far", &s("far"), HOUR).await.unwrap();
        let before = wall();
        assert!(q.reset("far", ms(0)).await.unwrap());
        let after = wall();
        let deadline = q.deadline("far").await.unwrap().unwrap();
        assert_between(deadline, before, after, "reset deadline");
        let d = q.try_take().await.unwrap().expect("due after reset");
        assert_eq!(d.id(), "far");
        assert!(d.ack().await.unwrap());

        // Ordering as if inserted now: behind an entry inserted earlier.
        q.insert_with_id("first", &s("first"), ms(0)).await.unwrap();
        q.insert_with_id("second", &s("second"), ms(0))
            .await
            .unwrap();
        assert!(q.reset("first", ms(0)).await.unwrap());
        let taken = within("take_many", q.take_many(5)).await.unwrap();
        let names: Vec<_> = taken.iter().map(|d| d.value().as_str()).collect();
        assert_eq!(names, ["second", "first"]);

        // A due entry can be pushed back.
        q.insert_with_id("later", &s("later"), ms(0)).await.unwrap();
        let before = wall();
        assert!(q.reset("later", HOUR).await.unwrap());
        let deadline = q.deadline("later").await.unwrap().unwrap();
        assert_between(deadline, before + HOUR, wall() + HOUR, "pushed back");
        assert!(q.try_take().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn reset_is_false_for_leased_dead_and_absent_entries() {
        let store = Store::start();
        let q: Q<u64> = store.builder("reset-false").lease(HOUR).build().await.unwrap();
        assert!(!q.reset("absent", ms(0)).await.unwrap());

        q.insert_with_id("dead", &1, ms(0)).await.unwrap();
        make_dead::<u64>(&store, "reset-false", "dead").await;
        assert!(!q.reset("dead", ms(0)).await.unwrap());
        assert_eq!(q.stats().await.unwrap().dead, 1);
        assert!(q.try_take().await.unwrap().is_none(), "still dead");

        q.insert_with_id("leased", &2, ms(0)).await.unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert!(!q.reset("leased", ms(0)).await.unwrap());
        assert_eq!(q.deadline("leased").await.unwrap(), Some(d.lease_until()));
        assert!(q.try_take().await.unwrap().is_none(), "not delivered twice");
        assert!(d.ack().await.unwrap(), "the lease is still held");
    }

    #[tokio::test]
    async fn deadline_reports_due_time_lease_end_or_none() {
        let store = Store::start();
        let q: Q<u64> = store.builder("deadline").lease(HOUR).build().await.unwrap();
        let before = wall();
        let id = q.insert(&1, Duration::from_secs(60)).await.unwrap();
        let after = wall();
        let pending = q.deadline(&id).await.unwrap().unwrap();
        let minute = Duration::from_secs(60);
        assert_between(pending, before + minute, after + minute, "pending");

        q.reset(&id, ms(0)).await.unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(q.deadline(&id).await.unwrap(), Some(d.lease_until()));

        assert_eq!(q.deadline("absent").await.unwrap(), None);
        assert!(q.remove(&id).await.unwrap());
        assert_eq!(q.deadline(&id).await.unwrap(), None);
    }

    // ------------------------------------------------------------ consumers

    #[tokio::test]
    async fn take_waits_until_the_entry_is_due() {
        let store = Store::start();
        let q: Q<u64> = store.open("take").await;
        let id = q.insert(&7, ms(200)).await.unwrap();
        let deadline = q.deadline(&id).await.unwrap().unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert!(wall() + SLACK >= deadline, "delivered before its deadline");
        assert_eq!((d.id(), *d.value()), (id.as_str(), 7));
        assert!(d.ack().await.unwrap());
    }

    #[tokio::test]
    async fn take_timeout_returns_none_when_nothing_becomes_due() {
        let store = Store::start();
        let q: Q<u64> = store.open("take-timeout-none").await;
        q.insert(&1, HOUR).await.unwrap();
        let start = tokio::time::Instant::now();
        let got = within("take_timeout", q.take_timeout(ms(300)))
            .await
            .unwrap();
        assert!(got.is_none());
        assert!(start.elapsed() >= ms(300), "gave up early");
        // Empty queue too.
        let empty: Q<u64> = store.open("take-timeout-empty").await;
        let got = within("take_timeout", empty.take_timeout(ms(200))).await;
        assert!(got.unwrap().is_none());
    }

    /// A timeout shorter than a round trip still takes what is due: the
    /// claim on its way is not cut at the timeout.
    #[tokio::test]
    async fn take_timeout_of_zero_takes_what_is_due() {
        let store = Store::start();
        let q: Q<u64> = store.open("take-timeout-zero").await;
        for n in 0..3u64 {
            q.insert_with_id(&format!("z{n}"), &n, Duration::ZERO)
                .await
                .unwrap();
        }
        for n in 0..3u64 {
            let d = q
                .take_timeout(Duration::ZERO)
                .await
                .unwrap()
                .expect("a due entry, whatever the timeout");
            assert_eq!((d.id(), *d.value(), d.attempt()), (format!("z{n}").as_str(), n, 1));
            assert!(d.ack().await.unwrap());
        }
        assert!(q.take_timeout(Duration::ZERO).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn take_timeout_returns_an_entry_that_becomes_due_in_time() {
        let store = Store::start();
        let q: Q<u64> = store.open("take-timeout-some").await;
        let id = q.insert(&5, ms(200)).await.unwrap();
        let deadline = q.deadline(&id).await.unwrap().unwrap();
        let d = q
            .take_timeout(WAIT)
            .await
            .unwrap()
            .expect("due within timeout");
        assert!(wall() + SLACK >= deadline, "delivered before its deadline");
        assert_eq!((d.id(), *d.value(), d.attempt()), (id.as_str(), 5, 1));
    }

    #[tokio::test]
    async fn a_waiting_consumer_is_woken_by_an_insert_not_only_by_polling() {
        let store = Store::start();
        // Polling alone would take 60 s: the insert's notification must
        // wake it.
        let q: Q<u64> = store
            .builder("wake")
            .poll_interval(Duration::from_secs(60))
            .build()
            .await
            .unwrap();
        let producer: Q<u64> = store.open("wake").await;
        let consumer = tokio::spawn(async move { q.take_timeout(WAIT).await });
        tokio::time::sleep(ms(200)).await; // let it go to sleep on the empty queue
        let id = producer.insert(&9, ms(0)).await.unwrap();
        let d = consumer
            .await
            .unwrap()
            .unwrap()
            .expect("woken by the insert");
        assert_eq!(d.id(), id);
    }

    #[tokio::test]
    async fn try_take_returns_none_without_waiting_when_nothing_is_due() {
        let store = Store::start();
        // With a long poll interval, any waiting would outlast the bound.
        let q: Q<u64> = store
            .builder("try-take")
            .poll_interval(Duration::from_secs(60))
            .build()
            .await
            .unwrap();
        assert!(within("try_take", q.try_take()).await.unwrap().is_none());
        q.insert(&1, HOUR).await.unwrap();
        assert!(within("try_take", q.try_take()).await.unwrap().is_none());
        let id = q.insert(&2, ms(0)).await.unwrap();
        let d = within("try_take", q.try_take())
            .await
            .unwrap()
            .expect("due");
        assert_eq!((d.id(), *d.value()), (id.as_str(), 2));
        assert!(within("try_take", q.try_take()).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn take_many_returns_one_to_max_due_entries_in_order() {
        let store = Store::start();
        let q: Q<u64> = store.open("take-many").await;
        let base = wall() - Duration::from_secs(1);
        for i in 0..5u64 {
            q.insert_at(&i, base + ms(i * 10)).await.unwrap();
        }
        q.insert(&99, HOUR).await.unwrap();
        let first = within("take_many", q.take_many(3)).await.unwrap();
        assert_eq!(
            first.iter().map(|d| *d.value()).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let rest = within("take_many", q.take_many(10)).await.unwrap();
        assert_eq!(rest.iter().map(|d| *d.value()).collect::<Vec<_>>(), [3, 4]);
        for d in first.iter().chain(&rest) {
            assert_eq!(d.attempt(), 1);
        }
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.due, stats.leased), (1, 0, 5));
    }

    #[tokio::test]
    async fn take_many_zero_returns_empty_at_once() {
        let store = Store::start();
        let q: Q<u64> = store
            .builder("take-many-zero")
            .poll_interval(Duration::from_secs(60))
            .build()
            .await
            .unwrap();
        assert!(
            within("take_many(0)", q.take_many(0))
                .await
                .unwrap()
                .is_empty()
        );
        q.insert(&1, ms(0)).await.unwrap();
        assert!(
            within("take_many(0)", q.take_many(0))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(q.stats().await.unwrap().due, 1, "took nothing");
    }

    #[tokio::test]
    async fn take_many_waits_until_one_is_due() {
        let store = Store::start();
        let q: Q<u64> = store.open("take-many-wait").await;
        let id = q.insert(&1, ms(250)).await.unwrap();
        q.insert(&2, HOUR).await.unwrap();
        let deadline = q.deadline(&id).await.unwrap().unwrap();
        let taken = within("take_many", q.take_many(5)).await.unwrap();
        assert!(
            wall() + SLACK >= deadline,
            "returned before anything was due"
        );
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].id(), id);
    }

    #[tokio::test]
    async fn stream_yields_due_entries_in_order() {
        let store = Store::start();
        let q: Q<u64> = store.open("stream").await;
        let base = wall();
        for i in [3u64, 0, 4, 1, 2] {
            q.insert_at(&i, base + ms(i * 40)).await.unwrap();
        }
        let mut stream = pin!(q.stream());
        for expected in 0..5u64 {
            let d = within("stream", stream.next())
                .await
                .expect("a stream never ends")
                .unwrap();
            assert_eq!(*d.value(), expected);
            assert!(d.ack().await.unwrap());
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    // ------------------------------------------------------------ inspection

    #[tokio::test]
    async fn stats_count_every_state() {
        let store = Store::start();
        let q: Q<u64> = store.builder("stats").lease(HOUR).build().await.unwrap();
        assert_eq!(q.stats().await.unwrap(), Stats::default());

        q.insert_with_id("dead", &1, ms(0)).await.unwrap();
        make_dead::<u64>(&store, "stats", "dead").await;
        q.insert_with_id("leased", &2, ms(0)).await.unwrap();
        let held = within("take", q.take()).await.unwrap();
        assert_eq!(held.id(), "leased");
        q.insert_with_id("pending", &3, HOUR).await.unwrap();
        q.insert_with_id("due", &4, ms(0)).await.unwrap();
        q.insert_with_id("due-long-ago", &5, ms(0)).await.unwrap();
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 1,
                due: 2,
                leased: 1,
                dead: 1,
            }
        );
        assert!(held.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap().leased, 0);
    }

    #[tokio::test]
    async fn purge_deletes_everything_of_the_queue_and_only_that() {
        let store = Store::start();
        let q: Q<u64> = store.builder("purged").lease(HOUR).build().await.unwrap();
        let other: Q<u64> = store.open("purged-not").await;
        let kept = other.insert(&42, ms(0)).await.unwrap();
        other.insert(&43, HOUR).await.unwrap();
        let other_stats = other.stats().await.unwrap();
        let other_stored = store.footprint("purged-not");
        assert!(!other_stored.is_empty());

        // Entries in every state, so that everything a queue stores exists.
        q.insert_with_id("dead", &1, ms(0)).await.unwrap();
        make_dead::<u64>(&store, "purged", "dead").await;
        q.insert_with_id("leased", &2, ms(0)).await.unwrap();
        let held = within("take", q.take()).await.unwrap();
        q.insert(&3, HOUR).await.unwrap();
        q.insert(&4, ms(0)).await.unwrap();
        let stored = store.footprint("purged");
        assert_eq!(stored.len(), Store::FOUR_STATES, "all stored: {stored:?}");

        q.purge().await.unwrap();
        assert_eq!(store.footprint("purged"), Vec::<String>::new());
        assert_eq!(store.footprint_all(), other_stored, "only the other queue's are left");
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert!(q.dead_letters(10).await.unwrap().is_empty());
        assert!(!held.ack().await.unwrap(), "the lease went with the entry");

        assert_eq!(other.stats().await.unwrap(), other_stats);
        let d = other
            .try_take()
            .await
            .unwrap()
            .expect("the other queue's entry");
        assert_eq!(d.id(), kept);

        // The purged queue is usable again.
        q.insert(&5, ms(0)).await.unwrap();
        assert_eq!(*within("take", q.take()).await.unwrap().value(), 5);
    }

    #[tokio::test]
    async fn a_delivery_taken_before_a_purge_cannot_touch_an_entry_inserted_after_it() {
        let store = Store::start();
        let q: Q<u64> = store.builder("purge-lease").lease(HOUR).build().await.unwrap();
        q.insert_with_id("x", &1, ms(0)).await.unwrap();
        let mut old = within("take", q.take()).await.unwrap();
        q.purge().await.unwrap();
        // The same id, leased again after the purge.
        q.insert_with_id("x", &2, ms(0)).await.unwrap();
        let new = within("take", q.take()).await.unwrap();
        assert_eq!((new.id(), *new.value(), new.attempt()), ("x", 2, 1));
        assert!(!old.extend(HOUR).await.unwrap());
        assert!(!old.ack().await.unwrap());
        assert_eq!(q.deadline("x").await.unwrap(), Some(new.lease_until()));
        assert!(new.retry(HOUR).await.unwrap());
        assert_eq!(q.stats().await.unwrap().pending, 1);
    }

    #[tokio::test]
    async fn queues_with_different_names_never_see_each_others_entries() {
        let store = Store::start();
        let a: Q<u64> = store.open("orders").await;
        let b: Q<u64> = store.open("orders2").await;
        let c: Q<u64> = store.open("Orders").await;
        a.insert(&1, ms(0)).await.unwrap();
        assert!(a.insert_with_id("same", &10, ms(0)).await.unwrap());
        assert!(b.insert_with_id("same", &20, ms(0)).await.unwrap());
        assert_eq!(c.stats().await.unwrap(), Stats::default());
        assert!(c.try_take().await.unwrap().is_none());
        assert_eq!(b.stats().await.unwrap().due, 1);

        let from_b = b.take_many(10).await.unwrap();
        assert_eq!(from_b.len(), 1);
        assert_eq!((from_b[0].id(), *from_b[0].value()), ("same", 20));
        let from_a = a.take_many(10).await.unwrap();
        let values: Vec<_> = from_a.iter().map(|d| *d.value()).collect();
        assert_eq!(values, [1, 10]);

        assert!(b.remove("same").await.unwrap());
        assert_eq!(a.stats().await.unwrap().leased, 2, "b's remove left a alone");
        assert!(!b.remove("same").await.unwrap());
        b.purge().await.unwrap();
        assert_eq!(a.stats().await.unwrap().leased, 2, "b's purge left a alone");
    }

    #[tokio::test]
    async fn a_clone_shares_the_queue() {
        let store = Store::start();
        let q: Q<u64> = store.open("clone").await;
        let clone = q.clone();
        let id = clone.insert(&1, ms(0)).await.unwrap();
        assert_eq!(q.stats().await.unwrap(), clone.stats().await.unwrap());
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(d.id(), id);
        assert!(clone.try_take().await.unwrap().is_none());
        assert_eq!(clone.stats().await.unwrap().leased, 1);
        drop(q);
        assert!(d.ack().await.unwrap(), "a delivery outlives its handle");
        assert_eq!(clone.stats().await.unwrap(), Stats::default());
    }

    #[tokio::test]
    async fn delivery_accessors_describe_the_entry_and_its_lease() {
        let store = Store::start();
        let lease = Duration::from_secs(20);
        let q: Q<String> = store.builder("accessors").lease(lease).build().await.unwrap();
        let before_insert = wall();
        let id = q.insert(&"payload".to_owned(), ms(100)).await.unwrap();
        let after_insert = wall();
        let d = within("take", q.take()).await.unwrap();
        let after_take = wall();
        assert_eq!(d.id(), id);
        assert_eq!(d.value(), "payload");
        assert_eq!(d.attempt(), 1);
        assert_between(
            d.deadline(),
            before_insert + ms(100),
            after_insert + ms(100),
            "deadline",
        );
        // Claimed at or after the deadline, before `after_take`.
        assert_between(
            d.lease_until(),
            d.deadline() + lease,
            after_take + lease,
            "lease_until",
        );
        assert!(format!("{d:?}").contains("payload"));

        // into_value gives up the handle; the entry stays leased.
        assert_eq!(d.into_value(), "payload");
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.leased, stats.due, stats.pending), (1, 0, 0));
    }

    // ------------------------------------------------------------ leases: ack

    #[tokio::test]
    async fn ack_deletes_the_entry() {
        let store = Store::start();
        let q: Q<u64> = store.open("ack").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let d = next(&q).await;
        assert!(d.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert_eq!(q.deadline(&id).await.unwrap(), None);
        // Well past the lease: nothing comes back.
        assert!(q.take_timeout(LEASE * 3).await.unwrap().is_none());
        assert!(!q.remove(&id).await.unwrap());
    }

    #[tokio::test]
    async fn a_dropped_delivery_is_delivered_again_after_its_lease() {
        let store = Store::start();
        let q: Q<String> = store.open("redeliver").await;
        let id = q.insert(&"job".to_owned(), ms(0)).await.unwrap();
        let first = next(&q).await;
        assert_eq!(first.attempt(), 1);
        let lease_until = first.lease_until();
        drop(first);
        let second = next(&q).await;
        assert!(
            wall() + SLACK >= lease_until,
            "delivered again before the lease ran out"
        );
        assert_eq!(second.id(), id);
        assert_eq!(second.value(), "job");
        assert_eq!(second.attempt(), 2);
        // Crate docs: a re-delivery's deadline is when the previous lease
        // ran out.
        assert_eq!(second.deadline(), lease_until);
        assert!(second.ack().await.unwrap());
    }

    #[tokio::test]
    async fn into_value_leaves_the_entry_leased_until_the_lease_runs_out() {
        let store = Store::start();
        let q: Q<u64> = store.open("into-value").await;
        q.insert(&3, ms(0)).await.unwrap();
        let first = next(&q).await;
        let lease_until = first.lease_until();
        assert_eq!(first.into_value(), 3);
        let second = next(&q).await;
        assert!(wall() + SLACK >= lease_until);
        assert_eq!((*second.value(), second.attempt()), (3, 2));
    }

    #[tokio::test]
    async fn an_expired_lease_counts_as_due() {
        let store = Store::start();
        let q: Q<u64> = store.open("expired-due").await;
        q.insert(&1, ms(0)).await.unwrap();
        let d = next(&q).await;
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.leased + stats.due, 1);
        until_lease_runs_out(&q, d.lease_until()).await;
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                due: 1,
                ..Stats::default()
            }
        );
    }

    #[tokio::test]
    async fn ack_after_the_lease_ran_out_but_before_a_new_delivery_succeeds() {
        let store = Store::start();
        let q: Q<u64> = store.open("late-ack").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let d = next(&q).await;
        until_lease_runs_out(&q, d.lease_until()).await;
        assert!(d.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert_eq!(q.deadline(&id).await.unwrap(), None);
        assert!(q.try_take().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn ack_after_a_new_delivery_is_false_and_the_new_holders_ack_wins() {
        let store = Store::start();
        let q: Q<u64> = store.open("lost-ack").await;
        q.insert(&1, ms(0)).await.unwrap();
        let old = next(&q).await;
        let new = next(&q).await;
        assert_eq!((old.id(), new.attempt()), (new.id(), 2));
        assert!(!old.ack().await.unwrap());
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.leased + stats.due, 1, "the stale ack changed nothing");
        assert!(new.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    // ------------------------------------------------------------ leases: retry

    #[tokio::test]
    async fn retry_makes_the_entry_due_later_and_keeps_its_attempt_count() {
        let store = Store::start();
        let q: Q<u64> = store.open("retry").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let first = next(&q).await;
        assert_eq!(first.attempt(), 1);
        let before = wall();
        assert!(first.retry(ms(300)).await.unwrap());
        let after = wall();
        let due = q.deadline(&id).await.unwrap().unwrap();
        assert_between(due, before + ms(300), after + ms(300), "retry deadline");

        let second = next(&q).await;
        assert!(wall() + SLACK >= due, "retried entry delivered early");
        assert_eq!((second.id(), second.attempt()), (id.as_str(), 2));
        assert_eq!(second.deadline(), due);

        // Retried far away: pending, not leased.
        assert!(second.retry(HOUR).await.unwrap());
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 1,
                ..Stats::default()
            }
        );
        assert!(q.try_take().await.unwrap().is_none());
        assert!(q.reset(&id, ms(0)).await.unwrap(), "a retried entry is pending");
        let third = next(&q).await;
        assert_eq!(third.attempt(), 3);
        assert!(third.ack().await.unwrap());
    }

    #[tokio::test]
    async fn retry_after_the_lease_ran_out_but_before_a_new_delivery_succeeds() {
        let store = Store::start();
        let q: Q<u64> = store.open("late-retry").await;
        q.insert(&1, ms(0)).await.unwrap();
        let d = next(&q).await;
        until_lease_runs_out(&q, d.lease_until()).await;
        assert!(d.retry(ms(0)).await.unwrap());
        let again = next(&q).await;
        assert_eq!(again.attempt(), 2);
    }

    #[tokio::test]
    async fn retry_after_a_lost_lease_is_false_and_changes_nothing() {
        let store = Store::start();
        let q: Q<u64> = store.open("lost-retry").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let old = next(&q).await;
        let new = next(&q).await;
        assert!(!old.retry(ms(0)).await.unwrap());
        assert_eq!(q.deadline(&id).await.unwrap(), Some(new.lease_until()));
        assert!(new.ack().await.unwrap());

        // Lost by removal.
        let id = q.insert(&2, ms(0)).await.unwrap();
        let d = next(&q).await;
        assert!(q.remove(&id).await.unwrap());
        assert!(!d.retry(ms(0)).await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert_eq!(q.deadline(&id).await.unwrap(), None);
    }

    // ------------------------------------------------------------ leases: extend

    #[tokio::test]
    async fn extend_pushes_the_lease_and_prevents_a_second_delivery() {
        let store = Store::start();
        let q: Q<u64> = store.open("extend").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let mut d = next(&q).await;
        let old_until = d.lease_until();
        let longer = Duration::from_secs(30);
        let before = wall();
        assert!(d.extend(longer).await.unwrap());
        let after = wall();
        assert_between(
            d.lease_until(),
            before + longer,
            after + longer,
            "lease_until",
        );
        assert!(d.lease_until() > old_until);
        assert_eq!(q.deadline(&id).await.unwrap(), Some(d.lease_until()));

        // Past the old lease: still held, not delivered again.
        let left = old_until.duration_since(wall()).unwrap_or_default();
        tokio::time::sleep(left + ms(100)).await;
        assert!(q.try_take().await.unwrap().is_none());
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.leased, stats.due), (1, 0));
        assert!(q.take_timeout(LEASE).await.unwrap().is_none());
        assert!(d.ack().await.unwrap());
    }

    #[tokio::test]
    async fn extend_after_the_lease_ran_out_but_before_a_new_delivery_succeeds() {
        let store = Store::start();
        let q: Q<u64> = store.open("late-extend").await;
        q.insert(&1, ms(0)).await.unwrap();
        let mut d = next(&q).await;
        until_lease_runs_out(&q, d.lease_until()).await;
        assert!(d.extend(HOUR).await.unwrap());
        assert_eq!(q.stats().await.unwrap().leased, 1);
        assert!(q.try_take().await.unwrap().is_none());
        assert!(d.ack().await.unwrap());
    }

    #[tokio::test]
    async fn extend_after_a_lost_lease_is_false_and_changes_nothing() {
        let store = Store::start();
        let q: Q<u64> = store.open("lost-extend").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let mut old = next(&q).await;
        let old_until = old.lease_until();
        let new = next(&q).await;
        assert!(!old.extend(HOUR).await.unwrap());
        assert_eq!(old.lease_until(), old_until, "a failed extend keeps lease_until");
        assert_eq!(q.deadline(&id).await.unwrap(), Some(new.lease_until()));
        assert!(new.ack().await.unwrap());
        assert!(!old.ack().await.unwrap());
    }

    // ------------------------------------------------------------ dead letters

    #[tokio::test]
    async fn max_attempts_moves_an_entry_to_the_dead_letters() {
        let store = Store::start();
        let q: Q<String> = store.builder("dead").max_attempts(2).build().await.unwrap();
        let id = q.insert(&"poison".to_owned(), ms(0)).await.unwrap();
        let first = next(&q).await;
        assert_eq!(first.attempt(), 1);
        drop(first);
        let second = next(&q).await;
        assert_eq!(second.attempt(), 2);
        drop(second);
        let q = &q;
        eventually("the entry goes to the dead letters", || async move {
            if let Some(d) = q.try_take().await.unwrap() {
                panic!("delivered a third time: attempt {}", d.attempt());
            }
            q.stats().await.unwrap().dead == 1
        })
        .await;
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                dead: 1,
                ..Stats::default()
            }
        );
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].id, id);
        assert_eq!(dead[0].value.as_deref(), Some("poison"));
        assert_eq!(dead[0].attempts, 2);
        assert!(!dead[0].reason.is_empty());
        assert!(q.take_timeout(LEASE * 2).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn max_attempts_zero_never_dead_letters() {
        let store = Store::start();
        let q: Q<u64> = store
            .builder("never-dead")
            .lease(ms(200))
            .max_attempts(0)
            .build()
            .await
            .unwrap();
        let id = q.insert(&1, ms(0)).await.unwrap();
        for attempt in 1..=4 {
            let d = next(&q).await;
            assert_eq!((d.id(), d.attempt()), (id.as_str(), attempt));
            if attempt == 4 {
                assert!(d.ack().await.unwrap());
            }
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert!(q.dead_letters(10).await.unwrap().is_empty());
    }

    /// Rolling deploys: an entry whose value does not decode (a replica
    /// running older code met a newer variant) is a failed attempt, due
    /// again after `min(2^(attempt-1) s, 1 h)`, and goes to the dead letters
    /// only once its attempts reach `max_attempts`; it never reaches a
    /// consumer and never stops one.
    #[tokio::test]
    async fn an_undecodable_entry_is_retried_with_backoff_and_never_stops_a_consumer() {
        let store = Store::start();
        let strings: Q<String> = store.open("mixed").await;
        let numbers: Q<u64> = store
            .builder("mixed")
            .lease(HOUR)
            .max_attempts(2)
            .build()
            .await
            .unwrap();

        // A consumer waits; the first entry does not decode as u64.
        let consumer = numbers.clone();
        let waiting = tokio::spawn(async move { consumer.take_timeout(WAIT).await });
        let bad = strings
            .insert(&"not a number".to_owned(), ms(0))
            .await
            .unwrap();
        let numbers_ref = &numbers;
        let bad_ref = &bad;
        // While leased its deadline is its lease's end, an hour ahead; once
        // the attempt has failed it is due again about a second ahead.
        eventually("the bad entry's first attempt fails", || async move {
            let due = numbers_ref.deadline(bad_ref).await.unwrap();
            due.is_some_and(|at| at > wall() + ms(500) && at < wall() + ms(1500))
        })
        .await;
        let first_failed = wall();
        let good = numbers.insert(&7, ms(0)).await.unwrap();
        let d = waiting.await.unwrap().unwrap().expect("the good entry");
        assert_eq!((d.id(), *d.value(), d.attempt()), (good.as_str(), 7, 1));
        assert!(d.ack().await.unwrap());
        // Not dead yet: pending, due about a second after its first attempt.
        assert_eq!(
            numbers.stats().await.unwrap(),
            Stats {
                pending: 1,
                ..Stats::default()
            }
        );
        let due = numbers.deadline(&bad).await.unwrap().expect("pending");
        assert_between(due, first_failed, first_failed + ms(1000) + SLACK, "the retry");
        // Its second attempt (the limit) sends it to the dead letters.
        assert!(numbers.take_timeout(ms(1500)).await.unwrap().is_none());
        eventually("the bad entry goes to the dead letters", || async move {
            numbers_ref.stats().await.unwrap().dead == 1
        })
        .await;
        let dead = numbers.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].id, bad);
        assert_eq!(dead[0].value, None);
        assert_eq!(dead[0].attempts, 2);
        assert!(
            dead[0].reason.starts_with("value does not decode"),
            "{}",
            dead[0].reason
        );
        // A handle that can decode it reads it.
        let dead = strings.dead_letters(10).await.unwrap();
        assert_eq!(dead[0].value.as_deref(), Some("not a number"));
        assert_eq!(
            numbers.stats().await.unwrap(),
            Stats {
                dead: 1,
                ..Stats::default()
            }
        );
    }

    #[tokio::test]
    async fn undecodable_entries_among_good_ones_are_skipped_in_order() {
        let store = Store::start();
        let strings: Q<String> = store.open("mixed-batch").await;
        let numbers: Q<u64> = store.builder("mixed-batch").max_attempts(1).build().await.unwrap();
        let base = wall() - Duration::from_secs(1);
        strings.insert_at(&"bad-1".to_owned(), base).await.unwrap();
        numbers.insert_at(&1, base + ms(1)).await.unwrap();
        strings
            .insert_at(&"bad-2".to_owned(), base + ms(2))
            .await
            .unwrap();
        numbers.insert_at(&2, base + ms(3)).await.unwrap();

        let first = next(&numbers).await;
        assert_eq!(*first.value(), 1);
        let rest = numbers.take_many(10).await.unwrap();
        assert_eq!(rest.iter().map(|d| *d.value()).collect::<Vec<_>>(), [2]);
        assert!(numbers.try_take().await.unwrap().is_none());
        assert_eq!(numbers.stats().await.unwrap().dead, 2);
        let dead: Vec<_> = strings
            .dead_letters(10)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.value.unwrap())
            .collect();
        assert_eq!(dead, ["bad-1", "bad-2"]);
    }

    #[tokio::test]
    async fn dead_letters_are_listed_oldest_first() {
        let store = Store::start();
        let strings: Q<String> = store.open("dead-order").await;
        let numbers: Q<u64> = store.builder("dead-order").max_attempts(1).build().await.unwrap();
        // Ids that sort the other way round from their deaths.
        for id in ["zzz", "mmm", "aaa"] {
            strings
                .insert_with_id(id, &id.to_owned(), ms(0))
                .await
                .unwrap();
            assert!(numbers.try_take().await.unwrap().is_none());
            // Deaths in distinct milliseconds.
            tokio::time::sleep(ms(5)).await;
        }
        let ids: Vec<_> = numbers
            .dead_letters(10)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids, ["zzz", "mmm", "aaa"]);
        let two = numbers.dead_letters(2).await.unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].id, "zzz");
        assert!(numbers.dead_letters(0).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn requeue_dead_puts_the_entry_back_with_attempts_reset() {
        let store = Store::start();
        let q: Q<u64> = store.builder("requeue").max_attempts(1).build().await.unwrap();
        let id = q.insert(&5, ms(0)).await.unwrap();
        drop(next(&q).await);
        let qr = &q;
        eventually("the entry goes to the dead letters", || async move {
            assert!(qr.try_take().await.unwrap().is_none(), "delivered twice");
            qr.stats().await.unwrap().dead == 1
        })
        .await;

        let before = wall();
        assert!(q.requeue_dead(&id, ms(200)).await.unwrap());
        let after = wall();
        let due = q.deadline(&id).await.unwrap().unwrap();
        assert_between(due, before + ms(200), after + ms(200), "requeued deadline");
        assert!(q.dead_letters(10).await.unwrap().is_empty());
        let stats = q.stats().await.unwrap();
        assert_eq!(
            (stats.dead, stats.leased, stats.pending + stats.due),
            (0, 0, 1)
        );
        assert!(!q.requeue_dead(&id, ms(0)).await.unwrap(), "no longer dead");

        let d = next(&q).await;
        assert!(wall() + SLACK >= due);
        assert_eq!((d.id(), *d.value(), d.attempt()), (id.as_str(), 5, 1));
        assert!(!q.requeue_dead(&id, ms(0)).await.unwrap(), "leased, not dead");
        assert!(d.ack().await.unwrap());
    }

    #[tokio::test]
    async fn requeue_dead_of_an_entry_that_is_not_dead_is_false() {
        let store = Store::start();
        let q: Q<u64> = store.builder("requeue-false").lease(HOUR).build().await.unwrap();
        assert!(!q.requeue_dead("absent", ms(0)).await.unwrap());
        q.insert_with_id("pending", &1, HOUR).await.unwrap();
        let deadline = q.deadline("pending").await.unwrap();
        assert!(!q.requeue_dead("pending", ms(0)).await.unwrap());
        assert_eq!(q.deadline("pending").await.unwrap(), deadline);
        q.insert_with_id("leased", &2, ms(0)).await.unwrap();
        let d = next(&q).await;
        assert!(!q.requeue_dead("leased", ms(0)).await.unwrap());
        assert_eq!(q.deadline("leased").await.unwrap(), Some(d.lease_until()));
        assert!(d.ack().await.unwrap(), "the lease is still held");
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 1,
                ..Stats::default()
            }
        );
    }

    // ------------------------------------------------------------ insert_many

    #[tokio::test]
    async fn insert_many_ids_come_back_in_the_order_given_and_name_their_entries() {
        let store = Store::start();
        let q: Q<u64> = store.open("many-order").await;
        // Deadlines out of the order given: ids still follow the slice.
        let entries: Vec<(u64, Duration)> = (0..50).map(|i| (i, ms((50 - i) * 2))).collect();
        let ids = q.insert_many(&entries).await.unwrap();
        assert_eq!(ids.len(), 50);
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 50, "{ids:?}");
        let later = q.insert_many(&[(50, HOUR), (51, HOUR)]).await.unwrap();
        assert!(
            later.iter().all(|id| !ids.contains(id)),
            "ids never repeat across calls: {ids:?} {later:?}"
        );
        for _ in 0..50 {
            let d = next(&q).await;
            assert_eq!(d.id(), ids[*d.value() as usize], "the id of value {}", d.value());
            assert!(d.ack().await.unwrap());
        }
        for (id, value) in later.iter().zip([50, 51]) {
            assert!(q.remove(id).await.unwrap(), "{id} holds {value}");
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    #[tokio::test]
    async fn insert_many_makes_each_entry_due_its_own_delay_from_the_call() {
        let store = Store::start();
        let q: Q<String> = store.open("many-delays").await;
        let before = wall();
        let entries = [("c", ms(300)), ("a", Duration::ZERO), ("b", ms(150))]
            .map(|(value, delay)| (value.to_owned(), delay));
        let ids = q.insert_many(&entries).await.unwrap();
        let after = wall();
        for (i, (value, delay)) in [(1, ("a", 0)), (2, ("b", 150)), (0, ("c", 300))] {
            let d = within("take", q.take()).await.unwrap();
            assert_eq!((d.id(), d.value().as_str()), (ids[i].as_str(), value));
            assert_between(d.deadline(), before + ms(delay), after + ms(delay), value);
            assert!(wall() + SLACK >= d.deadline(), "{value} came early");
            assert!(d.ack().await.unwrap());
        }
    }

    #[tokio::test]
    async fn insert_many_equal_deadlines_come_out_in_the_order_given() {
        let store = Store::start();
        let q: Q<u64> = store.open("many-fifo").await;
        // Values out of their own order, so only the slice's order can
        // explain the delivery order.
        let values: Vec<u64> = (0..40).map(|i| (i * 17) % 40).collect();
        let entries: Vec<(u64, Duration)> = values.iter().map(|&v| (v, ms(100))).collect();
        q.insert_many(&entries).await.unwrap();
        // A second batch due at the same instant or later follows the first.
        q.insert_many(&[(100, ms(100)), (101, ms(100))])
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.len() < 42 {
            for d in within("take_many", q.take_many(7)).await.unwrap() {
                got.push(*d.value());
            }
        }
        let mut want = values.clone();
        want.extend([100, 101]);
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn insert_many_with_one_value_that_does_not_serialize_writes_nothing() {
        let store = Store::start();
        let q: Q<Flaky> = store.open("all-or-none").await;
        let ok = |n| (Flaky { n, fail: false }, Duration::ZERO);
        let entries = vec![
            ok(1),
            ok(2),
            (Flaky { n: 3, fail: true }, Duration::ZERO),
            ok(4),
        ];
        match q.insert_many(&entries).await {
            Err(Error::Encode(e)) => assert!(e.to_string().contains("3 refuses"), "{e}"),
            other => panic!("expected Error::Encode, got {other:?}"),
        }
        assert_eq!(store.footprint_all(), Vec::<String>::new(), "nothing was written");
        assert_eq!(q.stats().await.unwrap(), Stats::default());
        assert!(q.try_take().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn insert_many_of_an_empty_slice_is_ok_and_writes_nothing() {
        let store = Store::start();
        let q: Q<u64> = store.open("many-empty").await;
        assert_eq!(q.insert_many(&[]).await.unwrap(), Vec::<String>::new());
        assert_eq!(store.footprint_all(), Vec::<String>::new());
        // The sequence did not move either: the next generated id is the
        // first.
        let first = q.insert(&1, HOUR).await.unwrap();
        assert_eq!(first, "#1");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn insert_many_of_ten_thousand_entries_in_one_call_all_arrive_in_order() {
        const N: u64 = 10_000;
        let store = Store::start();
        // Taking them all may outlast a short lease: none may come back.
        let q: Q<u64> = store.builder("many-big").lease(HOUR).build().await.unwrap();
        let entries: Vec<(u64, Duration)> = (0..N).map(|i| (i, Duration::ZERO)).collect();
        let ids = within("insert_many", q.insert_many(&entries)).await.unwrap();
        assert_eq!(ids.len() as u64, N);
        assert_eq!(ids.iter().collect::<HashSet<_>>().len() as u64, N);
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.pending + stats.due, N, "{stats:?}");
        let give_up = tokio::time::Instant::now() + WAIT;
        let mut got = Vec::with_capacity(N as usize);
        while (got.len() as u64) < N {
            assert!(tokio::time::Instant::now() < give_up, "{} taken", got.len());
            for d in within("take_many", q.take_many(1024)).await.unwrap() {
                assert_eq!(d.id(), ids[*d.value() as usize]);
                got.push(*d.value());
            }
        }
        let first_wrong = (0..N).zip(&got).find(|&(i, &v)| i != v);
        assert_eq!(first_wrong, None, "not FIFO");
        assert_eq!(got.len() as u64, N, "not all, or not once");
        assert!(q.try_take().await.unwrap().is_none());
    }

    // ------------------------------------------------------------ huge and past times

    #[tokio::test]
    async fn duration_max_delay_is_pending_with_a_far_deadline() {
        let store = Store::start();
        let q: Q<u64> = store.open("max-delay").await;
        let id = q.insert(&1, Duration::MAX).await.unwrap();
        assert!(q.insert_with_id("mine", &2, Duration::MAX).await.unwrap());
        for id in [id.as_str(), "mine"] {
            let deadline = q.deadline(id).await.unwrap().unwrap();
            assert!(deadline > wall() + YEAR * 1000, "{deadline:?} is not far");
        }
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 2,
                ..Stats::default()
            }
        );
        assert!(q.try_take().await.unwrap().is_none());
        assert!(q.take_timeout(ms(200)).await.unwrap().is_none());
        // An ordinary entry behind them is not held up.
        q.insert(&3, ms(0)).await.unwrap();
        assert_eq!(*within("take", q.take()).await.unwrap().value(), 3);
    }

    #[tokio::test]
    async fn insert_many_with_duration_max_delays_is_pending_with_far_deadlines() {
        let store = Store::start();
        let q: Q<u64> = store.open("max-many").await;
        let ids = q
            .insert_many(&[(1, Duration::MAX), (2, ms(0))])
            .await
            .unwrap();
        let deadline = q.deadline(&ids[0]).await.unwrap().unwrap();
        assert!(deadline > wall() + YEAR * 1000, "{deadline:?} is not far");
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(d.id(), ids[1]);
        assert_eq!(q.stats().await.unwrap().pending, 1);
    }

    #[tokio::test]
    async fn far_future_insert_at_is_pending_with_a_far_deadline() {
        let store = Store::start();
        let q: Q<u64> = store.open("far-at").await;
        let far = [u64::MAX, i64::MAX as u64, 1 << 40]
            .into_iter()
            .find_map(|secs| UNIX_EPOCH.checked_add(Duration::from_secs(secs)))
            .expect("some far time is representable");
        let id = q.insert_at(&1, far).await.unwrap();
        let deadline = q.deadline(&id).await.unwrap().unwrap();
        assert!(deadline > wall() + YEAR * 1000);
        assert_eq!(q.stats().await.unwrap().pending, 1);
        assert!(q.try_take().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn duration_max_reset_requeue_and_retry_make_the_entry_pending_far_ahead() {
        let store = Store::start();
        let q: Q<u64> = store.open("max-reset").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        assert!(q.reset(&id, Duration::MAX).await.unwrap());
        assert!(q.deadline(&id).await.unwrap().unwrap() > wall() + YEAR * 1000);
        assert!(q.try_take().await.unwrap().is_none());
        assert!(q.reset(&id, ms(0)).await.unwrap());
        let d = within("take", q.take()).await.unwrap();
        assert!(d.retry(Duration::MAX).await.unwrap());
        assert!(q.deadline(&id).await.unwrap().unwrap() > wall() + YEAR * 1000);
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 1,
                ..Stats::default()
            }
        );
        assert!(q.try_take().await.unwrap().is_none());

        q.insert_with_id("dead", &2, ms(0)).await.unwrap();
        make_dead::<u64>(&store, "max-reset", "dead").await;
        assert!(q.requeue_dead("dead", Duration::MAX).await.unwrap());
        assert!(q.deadline("dead").await.unwrap().unwrap() > wall() + YEAR * 1000);
        assert_eq!(q.stats().await.unwrap().pending, 2);
    }

    #[tokio::test]
    async fn duration_max_extend_holds_the_lease_far_ahead() {
        let store = Store::start();
        let q: Q<u64> = store.open("max-extend").await;
        let id = q.insert(&1, ms(0)).await.unwrap();
        let mut d = within("take", q.take()).await.unwrap();
        let old_until = d.lease_until();
        assert!(d.extend(Duration::MAX).await.unwrap());
        assert!(d.lease_until() > wall() + YEAR * 1000);
        assert_eq!(q.deadline(&id).await.unwrap(), Some(d.lease_until()));
        // Past the old lease, still held.
        let left = old_until.duration_since(wall()).unwrap_or_default();
        tokio::time::sleep(left + ms(100)).await;
        assert!(q.try_take().await.unwrap().is_none());
        assert_eq!(q.stats().await.unwrap().leased, 1);
        assert!(d.ack().await.unwrap());
    }

    #[tokio::test]
    async fn duration_max_lease_holds_the_entry_far_ahead() {
        let store = Store::start();
        let q: Q<u64> = store.builder("max-lease").lease(Duration::MAX).build().await.unwrap();
        q.insert(&1, ms(0)).await.unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert!(d.lease_until() > wall() + YEAR * 1000);
        assert_eq!(q.stats().await.unwrap().leased, 1);
        assert!(d.ack().await.unwrap());
    }

    #[tokio::test]
    async fn duration_max_take_timeout_waits_without_panicking() {
        let store = Store::start();
        let q: Q<u64> = store.open("max-timeout").await;
        let producer = q.clone();
        let waiting = tokio::spawn(async move { q.take_timeout(Duration::MAX).await });
        tokio::time::sleep(ms(200)).await;
        producer.insert(&1, ms(0)).await.unwrap();
        let d = within("take_timeout(MAX)", waiting).await.unwrap().unwrap();
        assert_eq!(*d.expect("delivered").value(), 1);
    }

    #[tokio::test]
    async fn duration_max_poll_interval_waits_without_panicking() {
        let store = Store::start();
        let q: Q<u64> = store
            .builder("max-poll")
            .poll_interval(Duration::MAX)
            .build()
            .await
            .unwrap();
        let producer: Q<u64> = store.open("max-poll").await;
        // An empty queue: the leader sleeps "poll_interval" at most.
        let waiting = tokio::spawn(async move { q.take_timeout(WAIT).await });
        tokio::time::sleep(ms(200)).await;
        producer.insert(&1, ms(0)).await.unwrap();
        let d = within("take_timeout", waiting)
            .await
            .expect("the consumer panicked")
            .unwrap();
        assert_eq!(*d.expect("woken by the insert").value(), 1);
    }

    #[tokio::test]
    async fn times_in_the_past_are_due_at_once_in_deadline_order() {
        let store = Store::start();
        let q: Q<String> = store.open("past").await;
        let before_epoch = UNIX_EPOCH.checked_sub(Duration::from_secs(1));
        if let Some(before_epoch) = before_epoch {
            q.insert_at(&"before-epoch".to_owned(), before_epoch)
                .await
                .unwrap();
        }
        q.insert_at(&"yesterday".to_owned(), wall() - Duration::from_secs(86_400))
            .await
            .unwrap();
        q.insert_at(&"epoch".to_owned(), UNIX_EPOCH).await.unwrap();
        q.insert_at(&"just-now".to_owned(), wall() - ms(1))
            .await
            .unwrap();
        let stats = q.stats().await.unwrap();
        assert_eq!(
            (stats.pending, stats.due),
            (0, 3 + before_epoch.iter().len() as u64)
        );
        let taken = within("take_many", q.take_many(10)).await.unwrap();
        let names: Vec<_> = taken.iter().map(|d| d.value().as_str()).collect();
        let mut expected = Vec::new();
        if before_epoch.is_some() {
            expected.push("before-epoch");
        }
        expected.extend(["epoch", "yesterday", "just-now"]);
        assert_eq!(names, expected);
        assert!(taken[0].deadline() <= UNIX_EPOCH + ms(1));
    }

    // ------------------------------------------------------------ values

    #[tokio::test]
    async fn a_value_that_does_not_serialize_is_an_encode_error_and_writes_nothing() {
        let store = Store::start();
        let q: Q<Flaky> = store.open("encode").await;
        let bad = Flaky { n: 1, fail: true };
        let results = [
            q.insert(&bad, ms(0)).await.map(drop),
            q.insert_at(&bad, wall()).await.map(drop),
            q.insert_with_id("x", &bad, ms(0)).await.map(drop),
        ];
        for result in results {
            match result {
                Err(Error::Encode(e)) => assert!(e.to_string().contains("refuses")),
                other => panic!("expected Err(Encode), got {other:?}"),
            }
        }
        assert_eq!(store.footprint_all(), Vec::<String>::new());

        // serde_json refuses maps with non-string keys.
        let maps: Q<HashMap<(u8, u8), u8>> = store.open("encode-map").await;
        let value = HashMap::from([((1, 2), 3)]);
        assert!(matches!(maps.insert(&value, ms(0)).await, Err(Error::Encode(_))));
        assert!(matches!(
            maps.insert_with_id("m", &value, ms(0)).await,
            Err(Error::Encode(_))
        ));
        assert_eq!(store.footprint_all(), Vec::<String>::new());
        assert_eq!(maps.stats().await.unwrap(), Stats::default());
    }

    #[tokio::test]
    async fn values_with_nul_quotes_and_unicode_round_trip() {
        let store = Store::start();
        let q: Q<String> = store.open("odd-values").await;
        let values = [
            "nul\0byte",
            "quote ' \" \\ $1 %s",
            "ключ 🦀",
            "",
            "line\r\nbreak",
        ]
        .map(str::to_owned);
        let ids = q
            .insert_many(&values.clone().map(|v| (v, Duration::ZERO)))
            .await
            .unwrap();
        let taken = within("take_many", q.take_many(10)).await.unwrap();
        let got: Vec<_> = taken.iter().map(|d| d.value().clone()).collect();
        assert_eq!(got, values);
        for d in taken {
            assert!(d.retry(HOUR).await.unwrap());
        }
        // And as dead letters.
        for id in &ids {
            assert!(q.reset(id, ms(0)).await.unwrap());
        }
        let numbers: Q<u64> = store.builder("odd-values").max_attempts(1).build().await.unwrap();
        assert!(numbers.try_take().await.unwrap().is_none());
        let dead: Vec<_> = q
            .dead_letters(10)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.value.unwrap())
            .collect();
        assert_eq!(dead, values);
    }

    // ------------------------------------------------------------ bad input

    #[tokio::test]
    async fn empty_and_overlong_ids_are_invalid_and_change_nothing() {
        let store = Store::start();
        let q: Q<u64> = store.open("bad-ids").await;
        let longest = "a".repeat(512);
        assert!(q.insert_with_id(&longest, &1, HOUR).await.unwrap());
        q.insert(&2, ms(0)).await.unwrap();
        let before = store.footprint_all();

        let too_long = "a".repeat(513);
        let too_long_multibyte = format!("a{}", "é".repeat(256)); // 513 bytes
        // (No store takes a NUL: PostgreSQL text cannot hold one, and one
        // rule keeps an id valid on every store.)
        for bad in ["", too_long.as_str(), too_long_multibyte.as_str(), "a\0", "\0", "a\0b"] {
            let what = |op: &str| format!("{op}({bad:?}, {} bytes)", bad.len());
            assert_invalid_id(q.insert_with_id(bad, &3, ms(0)).await, &what("insert"));
            assert_invalid_id(q.remove(bad).await, &what("remove"));
            assert_invalid_id(q.reset(bad, ms(0)).await, &what("reset"));
            assert_invalid_id(q.deadline(bad).await, &what("deadline"));
            assert_invalid_id(q.requeue_dead(bad, ms(0)).await, &what("requeue_dead"));
            let every = q.schedule_every(bad, HOUR, punctual::MissedTicks::Skip, &4).await;
            assert_invalid_id(every, &what("schedule_every"));
            assert_invalid_id(q.unschedule(bad).await, &what("unschedule"));
        }
        assert_eq!(store.footprint_all(), before, "a rejected call wrote");
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                pending: 1,
                due: 1,
                ..Stats::default()
            }
        );
    }

    #[tokio::test]
    async fn ids_of_512_bytes_work_everywhere() {
        let store = Store::start();
        let q: Q<u64> = store.open("long-ids").await;
        let ascii = "a".repeat(512);
        let multibyte = "é".repeat(256);
        for id in [ascii.as_str(), multibyte.as_str()] {
            assert_eq!(id.len(), 512);
            assert!(q.insert_with_id(id, &1, HOUR).await.unwrap());
            assert!(!q.insert_with_id(id, &2, HOUR).await.unwrap());
            assert!(q.deadline(id).await.unwrap().is_some());
            assert!(!q.requeue_dead(id, ms(0)).await.unwrap());
            assert!(q.reset(id, ms(0)).await.unwrap());
            let d = within("take", q.take()).await.unwrap();
            assert_eq!((d.id(), *d.value()), (id, 1));
            assert!(q.remove(id).await.unwrap());
            assert!(!d.ack().await.unwrap());
        }
    }

    #[tokio::test]
    async fn ids_with_unusual_characters_round_trip() {
        let store = Store::start();
        let q: Q<u64> = store.open("odd-ids").await;
        // NUL is left out: PostgreSQL text cannot hold it (see
        // pg_bad_input.rs).
        let ids = [
            "{braces}",
            "a b",
            "line\r\nbreak",
            "quote ' \" \\ $1 %s",
            "ключ",
            "#1",
            "0000000000000001",
            "punctual:{odd-ids}:schedule",
            "*",
        ];
        for (i, id) in (0u64..).zip(ids) {
            assert!(q.insert_with_id(id, &i, ms(0)).await.unwrap(), "{id:?}");
        }
        let taken = within("take_many", q.take_many(ids.len())).await.unwrap();
        let got: Vec<_> = taken.iter().map(|d| (d.id(), *d.value())).collect();
        let expected: Vec<_> = ids.iter().copied().zip(0u64..).collect();
        assert_eq!(got, expected);
        for d in taken {
            assert!(d.ack().await.unwrap());
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }
}

common::stores::on_durable_stores! {
    #[tokio::test]
    async fn a_stored_value_that_is_not_json_goes_to_the_dead_letters() {
        let store = Store::start();
        // One attempt allowed: its first failed one sends it to the dead
        // letters.
        let q: Q<u64> = store
            .builder("garbage")
            .lease(HOUR)
            .max_attempts(1)
            .build()
            .await
            .unwrap();
        q.insert_with_id("bad", &1, ms(0)).await.unwrap();
        q.insert_with_id("good", &2, ms(0)).await.unwrap();
        // What another service (or a bad migration) could leave behind.
        store.corrupt("garbage", "bad", "{not json\u{1}");

        let d = q.take_timeout(WAIT).await.unwrap().expect("a delivery");
        assert_eq!((d.id(), *d.value(), d.attempt()), ("good", 2, 1));
        assert!(d.ack().await.unwrap());
        assert!(q.try_take().await.unwrap().is_none());
        assert_eq!(
            q.stats().await.unwrap(),
            Stats {
                dead: 1,
                ..Stats::default()
            }
        );
        let dead = q.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].id.as_str(), dead[0].value), ("bad", None));
        assert_eq!(dead[0].attempts, 1);
        assert!(dead[0].reason.starts_with("value does not decode"));
        // A handle of any type lists it without a value: the bytes do not
        // decode as anything.
        let strings: Q<String> = store.open("garbage").await;
        let dead = strings.dead_letters(10).await.unwrap();
        assert_eq!((dead.len(), dead[0].value.as_deref()), (1, None));
        // Requeued, its next attempt fails again, never handed out.
        assert!(q.requeue_dead("bad", ms(0)).await.unwrap());
        assert!(q.try_take().await.unwrap().is_none());
        assert_eq!(q.stats().await.unwrap().dead, 1);
    }

    #[tokio::test]
    async fn invalid_queue_names_are_rejected_by_build_and_write_nothing() {
        let store = Store::start();
        // A valid queue first, so the store exists to be looked at.
        let q: Q<u64> = store.open("valid").await;
        let too_long = "q".repeat(513);
        for name in ["", "a{b", "a}b", "{q}", too_long.as_str(), "\0", "a\0", "a\0b"] {
            match store.builder::<u64>(name).build().await {
                Err(Error::InvalidName(why)) => assert!(!why.is_empty()),
                other => panic!(
                    "name of {} bytes on {STORE}: expected InvalidName, got {other:?}",
                    name.len()
                ),
            }
            let connected = Q::<u64>::connect(&store.url(), name).await;
            assert!(matches!(connected, Err(Error::InvalidName(_))), "{name:?}");
        }
        assert_eq!(store.footprint_all(), Vec::<String>::new());
        assert_eq!(q.stats().await.unwrap(), Stats::default());

        // The longest valid name works.
        let longest = "q".repeat(512);
        let q: Q<u64> = store.open(&longest).await;
        q.insert(&1, ms(0)).await.unwrap();
        assert_eq!(*within("take", q.take()).await.unwrap().value(), 1);
    }
}
