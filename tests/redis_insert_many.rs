//! `RedisQueue::insert_many`: ids in order, FIFO among equal deadlines, all
//! or none, the empty slice, and a batch of 10,000 in one call.
//!
//! Every test starts its own `redis-server`; the server's clock decides what
//! is due, so waits are bounded by `WAIT` (never reached when green).

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{HOUR, WAIT, assert_between, builder, ms, next, open, wall, within};
use common::redis_server::{RedisServer, Reply};
use punctual::redis::{Error, RedisQueue, RedisStats};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::HashSet;
use std::time::Duration;

/// Every key on the server, sorted: what a call wrote.
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys = match server.command(&["KEYS", "*"]) {
        Reply::Array(Some(items)) => items.iter().map(Reply::render).collect::<Vec<_>>(),
        other => panic!("KEYS: {other:?}"),
    };
    keys.sort();
    keys
}

#[tokio::test]
async fn ids_come_back_in_the_order_given_and_name_their_entries() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "order").await;
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
        assert_eq!(
            d.id(),
            ids[*d.value() as usize],
            "the id of value {}",
            d.value()
        );
        assert!(d.ack().await.unwrap());
    }
    for (id, value) in later.iter().zip([50, 51]) {
        assert!(q.remove(id).await.unwrap(), "{id} holds {value}");
    }
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test]
async fn each_entry_is_due_its_own_delay_from_the_call() {
    let server = RedisServer::start();
    let q: RedisQueue<String> = open(&server, "delays").await;
    let before = wall();
    let entries = [("c", ms(300)), ("a", Duration::ZERO), ("b", ms(150))]
        .map(|(value, delay)| (value.to_owned(), delay));
    let ids = q.insert_many(&entries).await.unwrap();
    let after = wall();
    for (i, (value, delay)) in [(1, ("a", 0)), (2, ("b", 150)), (0, ("c", 300))] {
        let d = within("take", q.take()).await.unwrap();
        assert_eq!((d.id(), d.value().as_str()), (ids[i].as_str(), value));
        assert_between(d.deadline(), before + ms(delay), after + ms(delay), value);
        assert!(wall() + ms(5) >= d.deadline(), "{value} came early");
        assert!(d.ack().await.unwrap());
    }
}

#[tokio::test]
async fn equal_deadlines_come_out_in_the_order_given() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "fifo").await;
    // Values out of their own order, so only the slice's order can explain
    // the delivery order.
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

#[tokio::test]
async fn one_value_that_does_not_serialize_writes_nothing() {
    let server = RedisServer::start();
    let q: RedisQueue<Flaky> = open(&server, "all-or-none").await;
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
    assert_eq!(keys(&server), Vec::<String>::new(), "nothing was written");
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    assert!(q.try_take().await.unwrap().is_none());
}

#[tokio::test]
async fn an_empty_slice_is_ok_and_writes_nothing() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "empty").await;
    assert_eq!(q.insert_many(&[]).await.unwrap(), Vec::<String>::new());
    assert_eq!(keys(&server), Vec::<String>::new());
    // The sequence did not move either: the next generated id is the first.
    let first = q.insert(&1, HOUR).await.unwrap();
    assert_eq!(first, "#1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_entries_in_one_call_all_arrive_in_order() {
    const N: u64 = 10_000;
    let server = RedisServer::start();
    // A lease longer than the whole test: taking 10,000 entries in a
    // debug build on a loaded machine can take longer than the helpers'
    // 300 ms, and an expired lease would deliver its entries again.
    let q: RedisQueue<u64> = builder(&server, "big")
        .lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let entries: Vec<(u64, Duration)> = (0..N).map(|i| (i, Duration::ZERO)).collect();
    let ids = within("insert_many", q.insert_many(&entries))
        .await
        .unwrap();
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
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "all, once, FIFO");
    assert!(q.try_take().await.unwrap().is_none());
}
