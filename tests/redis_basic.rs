//! One test at least for each rule of `RedisQueue` in API.md: ids, order,
//! producers, consumers, inspection, names and handles.
//!
//! Every test starts its own `redis-server`. Times are real: the server's
//! clock decides what is due, so waits are bounded by a generous `WAIT` and
//! time checks have a few milliseconds of slack (the server keeps ms).

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{
    HOUR, SLACK, WAIT, assert_between, builder, eventually, ms, open, wall, within,
};
use common::redis_server::RedisServer;
use futures::StreamExt;
use punctual::redis::{RedisQueue, RedisStats};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::pin::pin;
use std::time::Duration;

/// Moves `id`, which must be the only due entry of queue `name`, to the dead
/// letters: one delivery without ack through a handle with `max_attempts(1)`,
/// then claims until the server has buried it.
async fn make_dead<T>(server: &RedisServer, name: &str, id: &str)
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let q: RedisQueue<T> = builder(server, name)
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

// ---------------------------------------------------------------- ids

#[tokio::test]
async fn generated_ids_are_unique_and_of_the_form_hash_number() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "ids").await;
    let other: RedisQueue<u64> = open(&server, "ids").await;
    // A caller's id that looks like a generated one is never generated again.
    assert!(q.insert_with_id("#3", &333, HOUR).await.unwrap());
    let mut ids = std::collections::HashSet::new();
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "idem-pending").await;
    assert!(q.insert_with_id("order-1", &1, HOUR).await.unwrap());
    let deadline = q.deadline("order-1").await.unwrap().unwrap();
    assert!(!q.insert_with_id("order-1", &2, ms(0)).await.unwrap());
    assert_eq!(q.deadline("order-1").await.unwrap(), Some(deadline));
    assert_eq!(
        q.stats().await.unwrap(),
        RedisStats {
            pending: 1,
            ..RedisStats::default()
        }
    );
    assert!(q.try_take().await.unwrap().is_none(), "not made due");
    assert!(q.reset("order-1", ms(0)).await.unwrap());
    let d = within("take", q.take()).await.unwrap();
    assert_eq!((d.id(), *d.value()), ("order-1", 1));
}

#[tokio::test]
async fn insert_with_id_is_idempotent_for_a_leased_entry() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "idem-leased")
        .lease(HOUR)
        .build()
        .await
        .unwrap();
    assert!(q.insert_with_id("order-1", &1, ms(0)).await.unwrap());
    let d = within("take", q.take()).await.unwrap();
    assert!(!q.insert_with_id("order-1", &2, ms(0)).await.unwrap());
    assert_eq!(q.deadline("order-1").await.unwrap(), Some(d.lease_until()));
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.due, stats.leased), (0, 0, 1));
    assert!(q.try_take().await.unwrap().is_none(), "no second copy");
    assert!(d.ack().await.unwrap(), "the lease is still held");
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test]
async fn insert_with_id_is_idempotent_for_a_dead_entry() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "idem-dead").await;
    assert!(q.insert_with_id("order-1", &1, ms(0)).await.unwrap());
    make_dead::<u64>(&server, "idem-dead", "order-1").await;
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

// ---------------------------------------------------------------- order

#[tokio::test]
async fn equal_deadlines_come_out_fifo_across_two_handles() {
    let server = RedisServer::start();
    let a: RedisQueue<u32> = open(&server, "fifo").await;
    let b: RedisQueue<u32> = open(&server, "fifo").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<String> = open(&server, "deadline-order").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "delay-order").await;
    let mut expected = Vec::new();
    for delay in [400u64, 100, 250] {
        let before = wall();
        let id = q.insert(&delay, ms(delay)).await.unwrap();
        let after = wall();
        let deadline = q.deadline(&id).await.unwrap().unwrap();
        assert_between(deadline, before + ms(delay), after + ms(delay), "deadline");
        expected.push((deadline, delay));
    }
    // Deterministic whatever the pauses between inserts: by the deadlines
    // the server gave (insertion order on ties).
    expected.sort_by_key(|&(deadline, _)| deadline);
    for (deadline, delay) in expected {
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(*d.value(), delay);
        assert_eq!(d.deadline(), deadline);
        assert!(wall() + SLACK >= deadline, "delivered before its deadline");
        assert!(d.ack().await.unwrap());
    }
}

// ---------------------------------------------------------------- remove, reset, deadline

#[tokio::test]
async fn remove_deletes_a_pending_entry() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "remove-pending").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "remove-leased")
        .lease(HOUR)
        .build()
        .await
        .unwrap();
    let id = q.insert(&1, ms(0)).await.unwrap();
    let d = within("take", q.take()).await.unwrap();
    assert!(q.remove(&id).await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert!(!d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test]
async fn remove_deletes_a_dead_letter() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "remove-dead").await;
    q.insert_with_id("x", &1, ms(0)).await.unwrap();
    make_dead::<u64>(&server, "remove-dead", "x").await;
    assert!(q.remove("x").await.unwrap());
    assert!(q.dead_letters(10).await.unwrap().is_empty());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert!(!q.requeue_dead("x", ms(0)).await.unwrap());
    // The id is free again.
    assert!(q.insert_with_id("x", &2, ms(0)).await.unwrap());
}

#[tokio::test]
async fn remove_of_an_absent_id_is_false() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "remove-absent").await;
    assert!(!q.remove("never-inserted").await.unwrap());
    q.insert_with_id("x", &1, HOUR).await.unwrap();
    assert!(!q.remove("y").await.unwrap());
    assert_eq!(q.stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn reset_moves_a_pending_entry_as_if_inserted_now() {
    let server = RedisServer::start();
    let q: RedisQueue<String> = open(&server, "reset").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "reset-false")
        .lease(HOUR)
        .build()
        .await
        .unwrap();
    assert!(!q.reset("absent", ms(0)).await.unwrap());

    q.insert_with_id("dead", &1, ms(0)).await.unwrap();
    make_dead::<u64>(&server, "reset-false", "dead").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "deadline")
        .lease(HOUR)
        .build()
        .await
        .unwrap();
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

// ---------------------------------------------------------------- consumers

#[tokio::test]
async fn take_waits_until_the_entry_is_due() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "take").await;
    let id = q.insert(&7, ms(200)).await.unwrap();
    let deadline = q.deadline(&id).await.unwrap().unwrap();
    let d = within("take", q.take()).await.unwrap();
    assert!(wall() + SLACK >= deadline, "delivered before its deadline");
    assert_eq!((d.id(), *d.value()), (id.as_str(), 7));
    assert!(d.ack().await.unwrap());
}

#[tokio::test]
async fn take_timeout_returns_none_when_nothing_becomes_due() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "take-timeout-none").await;
    q.insert(&1, HOUR).await.unwrap();
    let start = tokio::time::Instant::now();
    let got = within("take_timeout", q.take_timeout(ms(300)))
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(start.elapsed() >= ms(300), "gave up early");
    // Empty queue too.
    let empty: RedisQueue<u64> = open(&server, "take-timeout-empty").await;
    let got = within("take_timeout", empty.take_timeout(ms(200))).await;
    assert!(got.unwrap().is_none());
}

#[tokio::test]
async fn take_timeout_returns_an_entry_that_becomes_due_in_time() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "take-timeout-some").await;
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
    let server = RedisServer::start();
    // Polling alone would take 60 s: the insert's notification must wake it.
    let q: RedisQueue<u64> = builder(&server, "wake")
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let producer: RedisQueue<u64> = open(&server, "wake").await;
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
    let server = RedisServer::start();
    // With a long poll interval, any waiting would outlast the bound.
    let q: RedisQueue<u64> = builder(&server, "try-take")
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "take-many").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "take-many-zero")
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "take-many-wait").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "stream").await;
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
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

// ---------------------------------------------------------------- inspection

#[tokio::test]
async fn stats_count_every_state() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "stats").lease(HOUR).build().await.unwrap();
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());

    q.insert_with_id("dead", &1, ms(0)).await.unwrap();
    make_dead::<u64>(&server, "stats", "dead").await;
    q.insert_with_id("leased", &2, ms(0)).await.unwrap();
    let held = within("take", q.take()).await.unwrap();
    assert_eq!(held.id(), "leased");
    q.insert_with_id("pending", &3, HOUR).await.unwrap();
    q.insert_with_id("due", &4, ms(0)).await.unwrap();
    q.insert_with_id("due-long-ago", &5, ms(0)).await.unwrap();
    assert_eq!(
        q.stats().await.unwrap(),
        RedisStats {
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
async fn purge_deletes_every_key_of_the_queue_and_only_those() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "purged")
        .lease(HOUR)
        .build()
        .await
        .unwrap();
    let other: RedisQueue<u64> = open(&server, "purged-not").await;
    let kept = other.insert(&42, ms(0)).await.unwrap();
    other.insert(&43, HOUR).await.unwrap();
    let other_stats = other.stats().await.unwrap();

    // Entries in every state, so that every key of the queue exists.
    q.insert_with_id("dead", &1, ms(0)).await.unwrap();
    make_dead::<u64>(&server, "purged", "dead").await;
    q.insert_with_id("leased", &2, ms(0)).await.unwrap();
    let held = within("take", q.take()).await.unwrap();
    q.insert(&3, HOUR).await.unwrap();
    q.insert(&4, ms(0)).await.unwrap();
    let keys = server.cli(&["KEYS", "punctual:{purged}:*"]);
    // All but `schedules`, which only a schedule creates.
    assert_eq!(keys.lines().count(), 5, "every key exists: {keys}");

    q.purge().await.unwrap();
    let left = server.cli(&["KEYS", "*"]);
    assert!(!left.is_empty(), "the other queue's keys are left");
    for key in left.lines() {
        assert!(key.starts_with("punctual:{purged-not}:"), "{key} left");
    }
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
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
async fn queues_with_different_names_never_see_each_others_entries() {
    let server = RedisServer::start();
    let a: RedisQueue<u64> = open(&server, "orders").await;
    let b: RedisQueue<u64> = open(&server, "orders2").await;
    let c: RedisQueue<u64> = open(&server, "Orders").await;
    a.insert(&1, ms(0)).await.unwrap();
    assert!(a.insert_with_id("same", &10, ms(0)).await.unwrap());
    assert!(b.insert_with_id("same", &20, ms(0)).await.unwrap());
    assert_eq!(c.stats().await.unwrap(), RedisStats::default());
    assert!(c.try_take().await.unwrap().is_none());
    assert_eq!(b.stats().await.unwrap().due, 1);

    let from_b = b.take_many(10).await.unwrap();
    assert_eq!(from_b.len(), 1);
    assert_eq!((from_b[0].id(), *from_b[0].value()), ("same", 20));
    let from_a = a.take_many(10).await.unwrap();
    let values: Vec<_> = from_a.iter().map(|d| *d.value()).collect();
    assert_eq!(values, [1, 10]);

    assert!(b.remove("same").await.unwrap());
    assert_eq!(
        a.stats().await.unwrap().leased,
        2,
        "b's remove left a alone"
    );
    assert!(!b.remove("same").await.unwrap());
    b.purge().await.unwrap();
    assert_eq!(a.stats().await.unwrap().leased, 2, "b's purge left a alone");
}

#[tokio::test]
async fn a_clone_shares_the_queue() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "clone").await;
    let clone = q.clone();
    let id = clone.insert(&1, ms(0)).await.unwrap();
    assert_eq!(q.stats().await.unwrap(), clone.stats().await.unwrap());
    let d = within("take", q.take()).await.unwrap();
    assert_eq!(d.id(), id);
    assert!(clone.try_take().await.unwrap().is_none());
    assert_eq!(clone.stats().await.unwrap().leased, 1);
    drop(q);
    assert!(d.ack().await.unwrap(), "a delivery outlives its handle");
    assert_eq!(clone.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test]
async fn delivery_accessors_describe_the_entry_and_its_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(20);
    let q: RedisQueue<String> = builder(&server, "accessors")
        .lease(lease)
        .build()
        .await
        .unwrap();
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
