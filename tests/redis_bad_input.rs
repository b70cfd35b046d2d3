//! Bad input to `RedisQueue` never panics, never hangs and has a documented,
//! checked result; a rejected call changes nothing in Redis.
//!
//! Every test starts its own `redis-server`.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{HOUR, WAIT, builder, ms, open, wall, within};
use common::redis_server::RedisServer;
use futures::StreamExt;
use punctual::redis::{Error, RedisQueue, RedisStats};
use std::fmt::Debug;
use std::pin::pin;
use std::time::Duration;

const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// Every key on the server, sorted.
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<_> = server
        .cli(&["KEYS", "*"])
        .lines()
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys
}

/// A dump of every key of queue `name`: each key with its full contents.
fn snapshot(server: &RedisServer, name: &str) -> Vec<String> {
    let pattern = format!("punctual:{{{name}}}:*");
    let mut keys: Vec<_> = server
        .cli(&["KEYS", &pattern])
        .lines()
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let contents = match server.cli(&["TYPE", &key]).as_str() {
                "zset" => server.cli(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
                "hash" => {
                    let mut fields: Vec<_> = server
                        .cli(&["HGETALL", &key])
                        .lines()
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                        .chunks(2)
                        .map(|pair| pair.join("="))
                        .collect();
                    fields.sort();
                    fields.join(",")
                }
                _ => server.cli(&["GET", &key]),
            };
            format!("{key} => {contents}")
        })
        .collect()
}

fn assert_wrongtype<T: Debug>(result: Result<T, Error>, what: &str) {
    match result {
        Err(e) => assert!(
            e.to_string().contains("WRONGTYPE"),
            "{what}: error does not mention WRONGTYPE: {e}"
        ),
        Ok(v) => panic!("{what}: expected a WRONGTYPE error, got Ok({v:?})"),
    }
}

// ---------------------------------------------------------------- ids

// ---------------------------------------------------------------- huge and past times

#[tokio::test]
async fn duration_max_reset_and_retry_make_the_entry_pending_far_ahead() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "max-reset").await;
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
        RedisStats {
            pending: 1,
            ..RedisStats::default()
        }
    );
    assert!(q.try_take().await.unwrap().is_none());
}

// ---------------------------------------------------------------- foreign keys

/// Runs every operation on `q`, whose key `key` holds a value of a foreign
/// type: each fails with a WRONGTYPE error.
async fn every_operation_is_wrongtype(q: &RedisQueue<u64>, key: &str) {
    let at = |op: &str| format!("{op} with {key} foreign");
    assert_wrongtype(q.insert(&1, ms(0)).await, &at("insert"));
    assert_wrongtype(q.insert_at(&1, wall()).await, &at("insert_at"));
    assert_wrongtype(
        q.insert_with_id("x", &1, ms(0)).await,
        &at("insert_with_id"),
    );
    assert_wrongtype(
        within("take_timeout", q.take_timeout(ms(500))).await,
        &at("take_timeout"),
    );
    assert_wrongtype(within("take", q.take()).await, &at("take"));
    assert_wrongtype(within("take_many", q.take_many(3)).await, &at("take_many"));
    assert_wrongtype(within("try_take", q.try_take()).await, &at("try_take"));
    let first = within("stream", pin!(q.stream()).next()).await;
    assert_wrongtype(first.expect("a stream never ends"), &at("stream"));
    every_cold_operation_is_wrongtype(q, key).await;
}

/// The operations off the hot path check every key of the queue.
async fn every_cold_operation_is_wrongtype(q: &RedisQueue<u64>, key: &str) {
    let at = |op: &str| format!("{op} with {key} foreign");
    assert_wrongtype(q.stats().await, &at("stats"));
    assert_wrongtype(q.dead_letters(10).await, &at("dead_letters"));
    assert_wrongtype(q.remove("x").await, &at("remove"));
    assert_wrongtype(q.reset("x", ms(0)).await, &at("reset"));
    assert_wrongtype(q.deadline("x").await, &at("deadline"));
    assert_wrongtype(q.requeue_dead("x", ms(0)).await, &at("requeue_dead"));
    assert_wrongtype(q.purge().await, &at("purge"));
}

const SUFFIXES: [&str; 8] = [
    "schedule",
    "entries",
    "leases",
    "dead",
    "seq",
    "schedules",
    "given_up",
    "requests",
];

#[tokio::test]
async fn a_queue_with_a_key_of_a_foreign_type_does_not_build() {
    let server = RedisServer::start();
    for suffix in SUFFIXES {
        let name = format!("foreign-{suffix}");
        let key = format!("punctual:{{{name}}}:{suffix}");
        // A list is the wrong type for every key of a queue.
        assert_eq!(server.cli(&["RPUSH", &key, "oops"]), "1");
        let built = builder::<u64>(&server, &name).build().await;
        let error = built
            .expect_err("a foreign key must fail build")
            .to_string();
        assert!(error.contains("WRONGTYPE"), "{key}: {error}");
        assert!(error.contains(&key), "the error names the key: {error}");
        assert_eq!(server.cli(&["LRANGE", &key, "0", "-1"]), "oops");
        let pattern = format!("punctual:{{{name}}}:*");
        assert_eq!(
            server.cli(&["KEYS", &pattern]),
            key,
            "another key was created"
        );
    }
}

#[tokio::test]
async fn a_foreign_string_under_the_schedule_key_fails_every_operation() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = open(&server, "wrong").await;
    let key = "punctual:{wrong}:schedule";
    assert_eq!(server.cli(&["SET", key, "oops"]), "OK");
    every_operation_is_wrongtype(&q, key).await;
    assert_eq!(server.cli(&["GET", key]), "oops", "the foreign key changed");
    assert_eq!(keys(&server), [key], "another key was created");
}

#[tokio::test]
async fn a_foreign_value_under_any_key_fails_what_touches_it_and_writes_nothing() {
    let server = RedisServer::start();
    for suffix in SUFFIXES {
        let name = format!("wrong-{suffix}");
        let key = format!("punctual:{{{name}}}:{suffix}");
        let q: RedisQueue<u64> = builder(&server, &name).lease(HOUR).build().await.unwrap();
        // A pending entry, a leased one (held here) and a due one.
        q.insert_with_id("pending", &1, HOUR).await.unwrap();
        q.insert_with_id("leased", &2, ms(0)).await.unwrap();
        let held = within("take", q.take()).await.unwrap();
        assert_eq!(held.id(), "leased");
        q.insert_with_id("due", &4, ms(0)).await.unwrap(); // for try_take
        // A list is the wrong type for every key of a queue.
        server.cli(&["DEL", &key]);
        assert_eq!(server.cli(&["RPUSH", &key, "oops"]), "1");
        let before = snapshot(&server, &name);

        every_cold_operation_is_wrongtype(&q, &key).await;
        assert_eq!(snapshot(&server, &name), before, "{key}: a cold call wrote");
        // Hot calls check only the keys they write, before writing: each
        // either works or fails with WRONGTYPE having written nothing.
        let inserted = q.insert(&3, HOUR).await;
        if inserted.is_err() {
            assert_wrongtype(inserted, &key);
            assert_eq!(snapshot(&server, &name), before, "{key}: insert wrote");
        }
        let now = snapshot(&server, &name);
        let taken = within("try_take", q.try_take()).await;
        if taken.is_err() {
            assert_wrongtype(taken, &key);
            assert_eq!(snapshot(&server, &name), now, "{key}: try_take wrote");
        }
        let now = snapshot(&server, &name);
        let acked = held.ack().await;
        if acked.is_err() {
            assert_wrongtype(acked, &key);
            assert_eq!(snapshot(&server, &name), now, "{key}: ack wrote");
        }
        assert_eq!(server.cli(&["LRANGE", &key, "0", "-1"]), "oops");
    }
}

#[tokio::test]
async fn a_foreign_key_that_appears_later_fails_operations_without_touching_the_entries() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "later").lease(HOUR).build().await.unwrap();
    q.insert_with_id("a", &1, ms(0)).await.unwrap();
    let d = within("take", q.take()).await.unwrap();
    q.insert_with_id("b", &2, HOUR).await.unwrap();
    let dead_key = "punctual:{later}:dead";
    assert_eq!(server.cli(&["SET", dead_key, "oops"]), "OK");
    let before = snapshot(&server, "later");
    every_cold_operation_is_wrongtype(&q, dead_key).await;
    assert_eq!(snapshot(&server, "later"), before, "a failed call wrote");
    assert_eq!(server.cli(&["DEL", dead_key]), "1");
    // With the foreign key gone, the queue works on.
    assert!(d.ack().await.unwrap());
    assert!(q.remove("b").await.unwrap());
}

#[tokio::test]
async fn a_claim_that_must_dead_letter_fails_on_a_foreign_dead_key_without_writing() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "bury")
        .lease(ms(200))
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    q.insert_with_id("a", &1, ms(0)).await.unwrap();
    drop(within("take", q.take()).await.unwrap()); // attempt 1, never acked
    tokio::time::sleep(ms(300)).await; // the lease runs out (Redis's clock)
    let dead_key = "punctual:{bury}:dead";
    assert_eq!(server.cli(&["SET", dead_key, "oops"]), "OK");
    let before = snapshot(&server, "bury");
    assert_wrongtype(within("try_take", q.try_take()).await, "try_take");
    assert_eq!(snapshot(&server, "bury"), before, "the failed claim wrote");
    assert_eq!(server.cli(&["DEL", dead_key]), "1");
    assert!(within("try_take", q.try_take()).await.unwrap().is_none());
    assert_eq!(q.stats().await.unwrap().dead, 1);
}

// ---------------------------------------------------------------- names and connections

#[tokio::test]
async fn invalid_queue_names_are_rejected_by_build() {
    let server = RedisServer::start();
    let too_long = "q".repeat(513);
    for name in ["", "a{b", "a}b", "{q}", too_long.as_str()] {
        let built = RedisQueue::<u64>::builder(name)
            .url(&server.url())
            .build()
            .await;
        match built {
            Err(Error::InvalidName(why)) => assert!(!why.is_empty()),
            other => panic!(
                "name of {} bytes: expected InvalidName, got {other:?}",
                name.len()
            ),
        }
        let connected = RedisQueue::<u64>::connect(&server.url(), name).await;
        assert!(matches!(connected, Err(Error::InvalidName(_))));
    }
    assert_eq!(keys(&server), Vec::<String>::new());

    // The longest valid name works.
    let longest = "q".repeat(512);
    let q: RedisQueue<u64> = open(&server, &longest).await;
    q.insert(&1, ms(0)).await.unwrap();
    assert_eq!(*within("take", q.take()).await.unwrap().value(), 1);
}

#[tokio::test]
async fn a_bad_url_is_an_error() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1:1/",
        "redis://127.0.0.1:99999/",
    ] {
        let built = within(url, RedisQueue::<u64>::connect(url, "q")).await;
        assert!(built.is_err(), "{url:?} connected");
    }
}

#[tokio::test]
async fn connecting_where_nothing_listens_is_an_error_not_a_hang() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill(); // the port is free now, and not 6379
    let result = tokio::time::timeout(WAIT, RedisQueue::<u64>::connect(&url, "q")).await;
    let result = result.unwrap_or_else(|_| panic!("connect still waiting after {WAIT:?}"));
    let error = result.expect_err("connected to nothing");
    assert!(!error.to_string().is_empty());
}
