//! How `RedisQueue::insert_many` writes its entries: the format of one
//! `insert`, with consecutive counters (`src/redis/mod.rs`, "Key layout and
//! entry format"). Its rules (ids, order, all or none) are checked on every
//! store by `tests/durable_queue.rs`.
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
async fn insert_many_writes_what_inserts_one_by_one_would() {
    let server = RedisServer::start();
    let q: RedisQueue<String> = open(&server, "lay-many").await;
    q.insert(&"before".to_owned(), HOUR).await.unwrap();
    let values = ["a", "b\"quoted\"", "c"].map(str::to_owned);
    let ids = q
        .insert_many(&values.clone().map(|v| (v, HOUR)))
        .await
        .unwrap();
    assert_eq!(ids, ["#2", "#3", "#4"]);
    let after = q.insert(&"after".to_owned(), HOUR).await.unwrap();
    assert_eq!(after, "#5", "the counter moved by one per entry");

    let schedule = zset(&server, "punctual:{lay-many}:schedule");
    let members: Vec<&str> = schedule.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        members,
        [
            "0000000000000001#1",
            "0000000000000002#2",
            "0000000000000003#3",
            "0000000000000004#4",
            "0000000000000005#5",
        ]
    );
    for (id, value) in ids.iter().zip(&values) {
        let deadline = q.deadline(id).await.unwrap().unwrap();
        let member = format!("{:016x}{id}", id[1..].parse::<u64>().unwrap());
        assert!(schedule.contains(&(member.clone(), epoch_ms(deadline))));
        assert_eq!(
            field(&server, "lay-many", &format!("m:{id}")),
            format!("0,,,,,{member}")
        );
        assert_eq!(
            field(&server, "lay-many", &format!("v:{id}")),
            serde_json::to_string(value).unwrap()
        );
    }
    assert_eq!(server.cli(&["GET", "punctual:{lay-many}:seq"]), "5");
}
