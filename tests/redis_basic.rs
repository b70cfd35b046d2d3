//! The Redis key layout and entry format of the crate docs
//! (`src/redis/mod.rs`, "Key layout and entry format"), which a service in
//! another language relies on. The queue's rules are checked on every store
//! by `tests/durable_queue.rs`.
//!
//! Every test starts its own `redis-server`.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{HOUR, open};
use common::redis_server::RedisServer;
use punctual::redis::RedisQueue;
use std::time::{SystemTime, UNIX_EPOCH};

/// `t` in ms since the Unix epoch, as the store keeps it.
fn epoch_ms(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string()
}

/// The members of sorted set `key` with their scores, in order.
fn zset(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    let flat = server.cli(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    let items: Vec<&str> = flat.lines().collect();
    items
        .chunks(2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}

/// Field `field` of the queue's `entries` hash.
fn field(server: &RedisServer, name: &str, field: &str) -> String {
    server.cli(&["HGET", &format!("punctual:{{{name}}}:entries"), field])
}

#[tokio::test]
async fn a_pending_entry_is_a_member_a_record_and_a_value_under_the_hash_tag() {
    let server = RedisServer::start();
    let q: RedisQueue<String> = open(&server, "lay-out").await;
    assert!(
        q.insert_with_id("order-1", &"one".to_owned(), HOUR)
            .await
            .unwrap()
    );
    let generated = q.insert(&"two".to_owned(), HOUR).await.unwrap();
    assert_eq!(generated, "#2", "the counter in decimal");
    let first = epoch_ms(q.deadline("order-1").await.unwrap().unwrap());
    let second = epoch_ms(q.deadline(&generated).await.unwrap().unwrap());

    // Members: 16 hex digits of the counter, then the id; score: the due time.
    assert_eq!(
        zset(&server, "punctual:{lay-out}:schedule"),
        [
            ("0000000000000001order-1".to_owned(), first),
            ("0000000000000002#2".to_owned(), second),
        ]
    );
    // attempt,token,since,deadline,tick,member
    assert_eq!(
        field(&server, "lay-out", "m:order-1"),
        "0,,,,,0000000000000001order-1"
    );
    assert_eq!(field(&server, "lay-out", "v:order-1"), "\"one\"");
    assert_eq!(field(&server, "lay-out", "v:#2"), "\"two\"");
    assert_eq!(server.cli(&["GET", "punctual:{lay-out}:seq"]), "2");
    let mut keys: Vec<String> = server
        .cli(&["KEYS", "*"])
        .lines()
        .map(str::to_owned)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "punctual:{lay-out}:entries",
            "punctual:{lay-out}:schedule",
            "punctual:{lay-out}:seq",
        ]
    );

    // A reset takes a new counter value: FIFO as if inserted now.
    assert!(q.reset("order-1", HOUR).await.unwrap());
    assert_eq!(
        field(&server, "lay-out", "m:order-1"),
        "0,,,,,0000000000000003order-1"
    );
    q.purge().await.unwrap();
    assert_eq!(server.cli(&["KEYS", "*"]), "");
}

/// `queue_names` finds every queue on the server by its keys, whatever it
/// holds (an entry, only a schedule, only a pause mark), and nothing else.
#[tokio::test]
async fn queue_names_lists_every_queue_on_the_server() {
    let server = RedisServer::start();
    assert_eq!(
        punctual::redis::queue_names(&server.url()).await.unwrap(),
        Vec::<String>::new()
    );
    let a: RedisQueue<u64> = open(&server, "a").await;
    a.insert(&1, HOUR).await.unwrap();
    let b: RedisQueue<u64> = open(&server, "b:colon").await;
    b.schedule_every("s", HOUR, punctual::MissedTicks::Skip, &1)
        .await
        .unwrap();
    let c: RedisQueue<u64> = open(&server, "c").await;
    assert!(c.pause().await.unwrap());
    let _empty: RedisQueue<u64> = open(&server, "empty").await;
    server.cli(&["SET", "unrelated", "1"]);
    assert_eq!(
        punctual::redis::queue_names(&server.url()).await.unwrap(),
        ["a", "b:colon", "c"]
    );
}
