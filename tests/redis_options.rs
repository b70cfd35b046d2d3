//! What the Redis store does for entries with options (`insert_with`,
//! `insert_many_with`) and key limits beyond the shared test bodies of
//! `tests/durable_options.rs`: where the entries live (`src/redis/mod.rs`,
//! "Key layout and entry format"), that a record written before options
//! existed still reads and runs, and that a consumer does not spin on due
//! entries that wait on their key's limits.
//!
//! Every test starts its own `redis-server`.

#![cfg(feature = "redis")]

mod common;

use common::redis_queue::{HOUR, builder, ms, open, within};
use common::redis_server::RedisServer;
use punctual::durable::{EntryState, InsertOptions, KeyLimit};
use punctual::redis::{RedisQueue, RedisStats};
use std::time::Duration;

fn key(name: &str, suffix: &str) -> String {
    format!("punctual:{{{name}}}:{suffix}")
}

/// The members of sorted set `key`, in order.
fn members(server: &RedisServer, key: &str) -> Vec<String> {
    let all = server.cli(&["ZRANGE", key, "0", "-1"]);
    all.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn one(limit: u32) -> KeyLimit {
    KeyLimit {
        concurrency: Some(limit),
        rate: None,
    }
}

/// Entries as a version before options wrote them (the record
/// `attempt,token,since,deadline,tick,member`, an id with commas, a lease
/// that ran out, a dead letter) read, run, requeue and finish as before,
/// beside entries with a key and a priority; the records of entries
/// without options keep that format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_before_options_still_read_and_run() {
    let server = RedisServer::start();
    let name = "old";
    let entries = key(name, "entries");
    let schedule = key(name, "schedule");
    let set = |args: &[&str]| assert_ne!(server.cli(args), "", "{args:?}");
    // A due entry whose id holds commas; a lease that ran out long ago
    // (its holder is gone); a dead letter.
    set(&[
        "HSET",
        &entries,
        "m:old,1,x",
        "0,,,,,0000000000000001old,1,x",
        "v:old,1,x",
        "1",
    ]);
    set(&["ZADD", &schedule, "5", "0000000000000001old,1,x"]);
    set(&[
        "HSET",
        &entries,
        "m:gone",
        "1,f00d,10,5,,0000000000000002gone",
        "v:gone",
        "2",
    ]);
    set(&["ZADD", &schedule, "10", "0000000000000002gone"]);
    set(&["ZADD", &key(name, "leases"), "10", "gone"]);
    set(&[
        "HSET", &entries, "m:died", "3,,,,,", "v:died", "3", "r:died", "boom",
    ]);
    set(&["ZADD", &key(name, "dead"), "7", "died"]);
    set(&["SET", &key(name, "seq"), "2"]);
    let q: RedisQueue<u64> = builder(&server, name).lease(HOUR).build().await.unwrap();

    let info = q.entry("old,1,x").await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempt, info.key, info.priority),
        (EntryState::Due, 0, None, 0)
    );
    assert_eq!(info.value, Some(1));
    assert_eq!(
        q.stats().await.unwrap(),
        RedisStats {
            pending: 0,
            due: 2,
            leased: 0,
            dead: 1
        }
    );
    // Entries with options beside them: the claim walks its index and
    // SCHEDULE together.
    let urgent = InsertOptions::new().id("urgent").priority(5).key("k");
    assert!(q.insert_with(&4, &urgent).await.unwrap().is_some());
    q.insert_with(&5, &InsertOptions::new().id("later").key("k"))
        .await
        .unwrap();
    assert_eq!(server.cli(&["HEXISTS", &entries, "options"]), "1");

    let taken = q.take_many(10).await.unwrap();
    let got: Vec<(&str, u32, i16)> = taken
        .iter()
        .map(|d| (d.id(), d.attempt(), d.priority()))
        .collect();
    assert_eq!(
        got,
        [
            ("urgent", 1, 5),
            ("old,1,x", 1, 0),
            ("gone", 2, 0),
            ("later", 1, 0)
        ]
    );
    let record = server.cli(&["HGET", &entries, "m:old,1,x"]);
    assert!(
        record.starts_with("1,") && record.ends_with(",0000000000000001old,1,x"),
        "{record}"
    );
    assert!(
        !record.contains(",o"),
        "an entry without options got an options field: {record}"
    );
    let record = server.cli(&["HGET", &entries, "m:urgent"]);
    assert!(record.contains(",o5:::1:k,"), "{record}");
    for d in taken {
        assert!(d.ack().await.unwrap());
    }

    let dead = q.dead_letters(10).await.unwrap();
    assert_eq!(
        (
            dead[0].id.as_str(),
            dead[0].attempts,
            dead[0].reason.as_str()
        ),
        ("died", 3, "boom")
    );
    assert!(q.requeue_dead("died", Duration::ZERO).await.unwrap());
    let d = within("the requeued dead letter", q.take()).await.unwrap();
    assert_eq!((d.id(), *d.value(), d.attempt()), ("died", 3, 1));
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    // No entry with options left: a claim forgot that there were some, and
    // claims read `schedule` alone again.
    assert_eq!(server.cli(&["HEXISTS", &entries, "options"]), "0");
}

/// Entries without a key or a priority stay in `schedule` alone, others
/// go to `special` and the claim's index `ready` (heads and groups, as
/// documented); a lease of a keyed entry is counted in `limits` while it
/// holds, and a claim after it ran out takes it back into `ready`; a purge
/// leaves no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_with_options_live_in_their_own_keys() {
    let server = RedisServer::start();
    let name = "layout";
    let q: RedisQueue<u64> = builder(&server, name).lease(ms(300)).build().await.unwrap();
    q.insert_with_id("plain", &1, HOUR).await.unwrap();
    let later = |id: &str| InsertOptions::new().id(id).delay(HOUR);
    q.insert_with(&2, &later("kept").max_attempts(3))
        .await
        .unwrap();
    q.insert_with(&3, &later("a1").key("a")).await.unwrap();
    q.insert_with(&4, &later("a2").key("a")).await.unwrap();
    q.insert_with(&5, &later("p").priority(-2)).await.unwrap();
    let plain: Vec<String> = members(&server, &key(name, "schedule"));
    assert_eq!(plain.len(), 2, "{plain:?}");
    assert!(
        plain
            .iter()
            .all(|m| m.ends_with("plain") || m.ends_with("kept"))
    );
    assert_eq!(members(&server, &key(name, "special")).len(), 3);
    let ready = members(&server, &key(name, "ready"));
    // Heads first ('h' < 'g' is false: 'g' sorts first), then by place.
    assert_eq!(ready.len(), 4, "{ready:?}");
    assert!(
        ready[0].starts_with("ga\0") && ready[0].ends_with("a1"),
        "{ready:?}"
    );
    assert!(
        ready[1].starts_with("ga\0") && ready[1].ends_with("a2"),
        "{ready:?}"
    );
    assert!(
        ready[2].starts_with("h7fff") && ready[2].ends_with("+a\0a1"),
        "{ready:?}"
    );
    assert!(
        ready[3].starts_with("h8001") && ready[3].ends_with("-p"),
        "{ready:?}"
    );

    // Due now, taken: the index lets go, `limits` counts the lease.
    q.reset("a1", Duration::ZERO).await.unwrap();
    let d = within("a1", q.take()).await.unwrap();
    assert_eq!((d.id(), d.key()), ("a1", Some("a")));
    assert_eq!(server.cli(&["HGET", &key(name, "limits"), "c:a"]), "1");
    assert_eq!(members(&server, &key(name, "held")), ["a1"]);
    assert!(
        !members(&server, &key(name, "ready"))
            .iter()
            .any(|m| m.ends_with("a1"))
    );
    // Its lease runs out; the next claim reaps it (its place frees) and
    // takes it again.
    tokio::time::sleep(ms(400)).await;
    let again = within("a1 again", q.take()).await.unwrap();
    assert_eq!((again.id(), again.attempt()), ("a1", 2));
    assert_eq!(server.cli(&["HGET", &key(name, "limits"), "c:a"]), "1");
    assert!(
        !d.ack().await.unwrap(),
        "the first holder's lease was taken over"
    );
    assert!(again.ack().await.unwrap());
    assert_eq!(server.cli(&["HEXISTS", &key(name, "limits"), "c:a"]), "0");
    assert!(q.set_key_limit("a", one(1)).await.unwrap());
    assert_eq!(server.cli(&["HGET", &key(name, "limits"), "l:a"]), "1,,");

    q.purge().await.unwrap();
    assert_eq!(server.cli(&["KEYS", &format!("punctual:{{{name}}}:*")]), "");
}

/// A consumer whose due entries all wait on their key's concurrency does
/// not ask the store again and again: the claim reports the next lease
/// end, not now, and the consumer sleeps until then (or until a place
/// frees and is announced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_does_not_spin_on_entries_that_wait_on_their_key() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "no-spin")
        .lease(Duration::from_secs(5))
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    q.set_key_limit("one", one(1)).await.unwrap();
    let batch: Vec<(u64, InsertOptions)> = (0..100)
        .map(|n| (n, InsertOptions::new().key("one")))
        .collect();
    q.insert_many_with(&batch).await.unwrap();
    let first = q.take().await.unwrap();
    let calls = || -> u64 {
        server
            .cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let before = calls();
    assert!(q.take_timeout(ms(800)).await.unwrap().is_none());
    let spent = calls() - before;
    assert!(spent <= 3, "a waiting take ran {spent} scripts in 800 ms");
    // The ack frees the place and announces it: a waiting take gets the
    // next entry at once.
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take().await }
    });
    tokio::time::sleep(ms(200)).await;
    assert!(first.ack().await.unwrap());
    let next = within("the next entry of the key", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*next.value(), 1);
}

/// Unique windows: kept in `unique` after an ack, forgotten lazily once
/// closed (no sweeper); a purge forgets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_windows_are_kept_and_forgotten() {
    let server = RedisServer::start();
    let name = "windows";
    let q: RedisQueue<u64> = open(&server, name).await;
    let short = |id: &str| InsertOptions::new().id(id).unique_for(ms(200));
    q.insert_with(&1, &short("w1")).await.unwrap();
    let d = within("w1", q.take()).await.unwrap();
    assert!(d.ack().await.unwrap());
    assert_eq!(members(&server, &key(name, "unique")), ["w1"]);
    assert!(!q.insert_with_id("w1", &2, HOUR).await.unwrap());
    tokio::time::sleep(ms(300)).await;
    // w1's window closed: the next window written forgets it.
    q.insert_with(&3, &short("w2")).await.unwrap();
    assert!(q.remove("w2").await.unwrap());
    assert_eq!(members(&server, &key(name, "unique")), ["w2"]);
    assert!(q.insert_with_id("w1", &4, HOUR).await.unwrap());
    q.purge().await.unwrap();
    assert!(
        q.insert_with_id("w2", &5, HOUR).await.unwrap(),
        "a purge forgets windows"
    );
}
