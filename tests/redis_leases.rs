//! How leases and dead letters look in Redis: the entry format of the
//! crate docs (`src/redis/mod.rs`, "Key layout and entry format"), which a
//! service in another language relies on. The lease and dead-letter rules
//! are checked on every store by `tests/durable_queue.rs`.
//!
//! Every test starts its own `redis-server`.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{HOUR, builder, ms, within};
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
async fn a_leased_entry_carries_its_claim_and_a_dead_one_its_reason() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "lay-lease")
        .lease(HOUR)
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    q.insert_with_id("x", &7, ms(0)).await.unwrap();
    let d = within("take", q.take()).await.unwrap();
    let until = epoch_ms(d.lease_until());
    let member = "0000000000000001x".to_owned();
    // While leased, the schedule's score and `leases` are the lease's end.
    assert_eq!(
        zset(&server, "punctual:{lay-lease}:schedule"),
        [(member.clone(), until.clone())]
    );
    assert_eq!(
        zset(&server, "punctual:{lay-lease}:leases"),
        [("x".to_owned(), until)]
    );
    let record = field(&server, "lay-lease", "m:x");
    let parts: Vec<&str> = record.split(',').collect();
    assert_eq!(parts.len(), 6, "{record}");
    assert_eq!(parts[0], "1", "attempt: {record}");
    assert!(!parts[1].is_empty(), "the claim's token: {record}");
    assert!(parts[2].parse::<u64>().is_ok(), "since: {record}");
    assert_eq!(parts[3], epoch_ms(d.deadline()), "deadline: {record}");
    assert_eq!((parts[4], parts[5]), ("", member.as_str()), "{record}");

    // Given back: the token goes, the attempt stays.
    assert!(d.retry(HOUR).await.unwrap());
    let record = field(&server, "lay-lease", "m:x");
    assert!(record.starts_with("1,,"), "{record}");
    assert_eq!(server.cli(&["ZCARD", "punctual:{lay-lease}:leases"]), "0");

    // Dead: out of the schedule, in `dead` with when it died, and a
    // reason. Its next delivery would be attempt 2 of at most 1.
    assert!(q.reset("x", ms(0)).await.unwrap());
    assert!(q.try_take().await.unwrap().is_none());
    assert_eq!(q.stats().await.unwrap().dead, 1);
    assert_eq!(server.cli(&["ZCARD", "punctual:{lay-lease}:schedule"]), "0");
    let dead = zset(&server, "punctual:{lay-lease}:dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, "x");
    assert!(dead[0].1.parse::<u64>().is_ok(), "{dead:?}");
    assert!(!field(&server, "lay-lease", "r:x").is_empty());
    let record = field(&server, "lay-lease", "m:x");
    assert!(
        record.starts_with("1,") && record.ends_with(','),
        "{record}"
    );
    assert_eq!(field(&server, "lay-lease", "v:x"), "7");
}
