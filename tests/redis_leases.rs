//! Leases, acks, retries, extensions and dead letters of `RedisQueue`
//! (API.md: "Leases" and "Dead letters").
//!
//! Every test starts its own `redis-server`. Leases are short and real: the
//! server's clock decides when one runs out, so the tests wait for what the
//! server reports (bounded by a generous `WAIT`), never for a tight sleep.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{
    HOUR, LEASE, SLACK, WAIT, assert_between, builder, eventually, ms, next, open, wall,
};
use common::redis_server::RedisServer;
use punctual::redis::{RedisQueue, RedisStats};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::{Duration, SystemTime};

/// Waits until `until` has passed and the server counts the (only) leased
/// entry of `q` as due again, without taking it.
async fn until_lease_runs_out<T>(q: &RedisQueue<T>, until: SystemTime)
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let left = until.duration_since(wall()).unwrap_or_default();
    tokio::time::sleep(left + ms(10)).await;
    eventually("the server sees the lease run out", || async {
        let stats = q.stats().await.unwrap();
        stats.leased == 0 && stats.due == 1
    })
    .await;
}

// ---------------------------------------------------------------- ack

#[tokio::test]
async fn ack_deletes_the_entry() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "ack").await;
    let id = q.insert(&1, ms(0)).await.unwrap();
    let d = next(&q).await;
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert_eq!(q.deadline(&id).await.unwrap(), None);
    // Well past the lease: nothing comes back.
    assert!(q.take_timeout(LEASE * 3).await.unwrap().is_none());
    assert!(!q.remove(&id).await.unwrap());
}

#[tokio::test]
async fn a_dropped_delivery_is_delivered_again_after_its_lease() {
    let server = RedisServer::start();
    let q: RedisQueue<String> = open(&server, "redeliver").await;
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
    // Crate docs: a re-delivery's deadline is when the previous lease ran out.
    assert_eq!(second.deadline(), lease_until);
    assert!(second.ack().await.unwrap());
}

#[tokio::test]
async fn into_value_leaves_the_entry_leased_until_the_lease_runs_out() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "into-value").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "expired-due").await;
    q.insert(&1, ms(0)).await.unwrap();
    let d = next(&q).await;
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.leased + stats.due, 1);
    until_lease_runs_out(&q, d.lease_until()).await;
    assert_eq!(
        q.stats().await.unwrap(),
        RedisStats {
            due: 1,
            ..RedisStats::default()
        }
    );
}

#[tokio::test]
async fn ack_after_the_lease_ran_out_but_before_a_new_delivery_succeeds() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "late-ack").await;
    let id = q.insert(&1, ms(0)).await.unwrap();
    let d = next(&q).await;
    until_lease_runs_out(&q, d.lease_until()).await;
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert_eq!(q.deadline(&id).await.unwrap(), None);
    assert!(q.try_take().await.unwrap().is_none());
}

#[tokio::test]
async fn ack_after_a_new_delivery_is_false_and_the_new_holders_ack_wins() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "lost-ack").await;
    q.insert(&1, ms(0)).await.unwrap();
    let old = next(&q).await;
    let new = next(&q).await;
    assert_eq!((old.id(), new.attempt()), (new.id(), 2));
    assert!(!old.ack().await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.leased + stats.due, 1, "the stale ack changed nothing");
    assert!(new.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

// ---------------------------------------------------------------- retry

#[tokio::test]
async fn retry_makes_the_entry_due_later_and_keeps_its_attempt_count() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "retry").await;
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
        RedisStats {
            pending: 1,
            ..RedisStats::default()
        }
    );
    assert!(q.try_take().await.unwrap().is_none());
    assert!(
        q.reset(&id, ms(0)).await.unwrap(),
        "a retried entry is pending"
    );
    let third = next(&q).await;
    assert_eq!(third.attempt(), 3);
    assert!(third.ack().await.unwrap());
}

#[tokio::test]
async fn retry_after_the_lease_ran_out_but_before_a_new_delivery_succeeds() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "late-retry").await;
    q.insert(&1, ms(0)).await.unwrap();
    let d = next(&q).await;
    until_lease_runs_out(&q, d.lease_until()).await;
    assert!(d.retry(ms(0)).await.unwrap());
    let again = next(&q).await;
    assert_eq!(again.attempt(), 2);
}

#[tokio::test]
async fn retry_after_a_lost_lease_is_false_and_changes_nothing() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "lost-retry").await;
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
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert_eq!(q.deadline(&id).await.unwrap(), None);
}

// ---------------------------------------------------------------- extend

#[tokio::test]
async fn extend_pushes_the_lease_and_prevents_a_second_delivery() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "extend").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "late-extend").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "lost-extend").await;
    let id = q.insert(&1, ms(0)).await.unwrap();
    let mut old = next(&q).await;
    let old_until = old.lease_until();
    let new = next(&q).await;
    assert!(!old.extend(HOUR).await.unwrap());
    assert_eq!(
        old.lease_until(),
        old_until,
        "a failed extend keeps lease_until"
    );
    assert_eq!(q.deadline(&id).await.unwrap(), Some(new.lease_until()));
    assert!(new.ack().await.unwrap());
    assert!(!old.ack().await.unwrap());
}

// ---------------------------------------------------------------- dead letters

#[tokio::test]
async fn max_attempts_moves_an_entry_to_the_dead_letters() {
    let server = RedisServer::start();
    let q: RedisQueue<String> = builder(&server, "dead")
        .max_attempts(2)
        .build()
        .await
        .unwrap();
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
        RedisStats {
            dead: 1,
            ..RedisStats::default()
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "never-dead")
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
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert!(q.dead_letters(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_undecodable_entry_goes_to_the_dead_letters_and_never_stops_a_consumer() {
    let server = RedisServer::start();
    let strings: RedisQueue<String> = open(&server, "mixed").await;
    // With a long lease, only burying at once gets it to the dead letters.
    let numbers: RedisQueue<u64> = builder(&server, "mixed").lease(HOUR).build().await.unwrap();

    // A consumer waits; the first entry does not decode as u64.
    let consumer = numbers.clone();
    let waiting = tokio::spawn(async move { consumer.take_timeout(WAIT).await });
    let bad = strings
        .insert(&"not a number".to_owned(), ms(0))
        .await
        .unwrap();
    let numbers_ref = &numbers;
    eventually("the bad entry goes to the dead letters", || async move {
        numbers_ref.stats().await.unwrap().dead == 1
    })
    .await;
    let good = numbers.insert(&7, ms(0)).await.unwrap();
    let d = waiting.await.unwrap().unwrap().expect("the good entry");
    assert_eq!((d.id(), *d.value(), d.attempt()), (good.as_str(), 7, 1));
    assert!(d.ack().await.unwrap());

    let dead = numbers.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, bad);
    assert_eq!(dead[0].value, None);
    assert_eq!(
        dead[0].attempts, 0,
        "a delivery that never reached a consumer does not count"
    );
    assert!(!dead[0].reason.is_empty());
    let dead = strings.dead_letters(10).await.unwrap();
    assert_eq!(dead[0].value.as_deref(), Some("not a number"));
    assert_eq!(
        numbers.stats().await.unwrap(),
        RedisStats {
            dead: 1,
            ..RedisStats::default()
        }
    );
}

#[tokio::test]
async fn undecodable_entries_among_good_ones_are_skipped_in_order() {
    let server = RedisServer::start();
    let strings: RedisQueue<String> = open(&server, "mixed-batch").await;
    let numbers: RedisQueue<u64> = open(&server, "mixed-batch").await;
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
    let server = RedisServer::start();
    let strings: RedisQueue<String> = open(&server, "dead-order").await;
    let numbers: RedisQueue<u64> = open(&server, "dead-order").await;
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
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "requeue")
        .max_attempts(1)
        .build()
        .await
        .unwrap();
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
    assert!(
        !q.requeue_dead(&id, ms(0)).await.unwrap(),
        "leased, not dead"
    );
    assert!(d.ack().await.unwrap());
}

#[tokio::test]
async fn requeue_dead_of_an_entry_that_is_not_dead_is_false() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "requeue-false")
        .lease(HOUR)
        .build()
        .await
        .unwrap();
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
        RedisStats {
            pending: 1,
            ..RedisStats::default()
        }
    );
}
