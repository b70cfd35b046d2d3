#![cfg(feature = "redis")]
//! Races and edge cases of the Redis store that a hostile review found,
//! each a test of a semantic that API.md and the module docs of
//! `punctual::redis` promise. Each test's comment tells the bug as it was
//! found; each passes since its fix (see CHANGELOG.md).
//!
//! Every test starts its own `redis-server` on a free port; the ones about
//! lost or late requests go through the fault proxy of
//! `tests/common/proxy.rs`. Real time throughout (the server's clock
//! decides what is due).

mod common;

use common::proxy::{Direction, Proxy};
use common::redis_queue::{HOUR, builder, ms, within};
use common::redis_server::RedisServer;
use punctual::durable::{Job, Worker};
use punctual::redis::RedisQueue;
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};

/// A queue through `proxy` with a 3 s lease, one delivery allowed (an entry
/// leased to nobody then dead-letters when its lease runs out) and a short
/// response timeout.
async fn through(proxy: &Proxy, name: &str, response_timeout: Duration) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(&proxy.url())
        .lease(Duration::from_secs(3))
        .max_attempts(1)
        .poll_interval(ms(50))
        .response_timeout(response_timeout)
        .build()
        .await
        .expect("connect through the proxy")
}

// ------------------------------------------------- claims that land late

/// A consumer gives up on a claim whose reply did not come (`try_take`
/// returns the error); the handle's next claim gives back what it holds,
/// on a new connection. But the claim itself was only late (a slow path,
/// a middlebox holding the bytes): it reaches the server after its
/// give-back and leases an entry to nobody. The module docs promise that a
/// claim given up on is given back without counting an attempt; here the
/// entry stays leased for a whole lease and then dead-letters (max 1
/// attempt) without ever being delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_up_claim_that_lands_after_its_give_back_strands_nothing() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "late-give-up", ms(300)).await;
    assert!(q.try_take().await.unwrap().is_none()); // loads the script, reads the clock
    assert!(q.insert_with_id("a", &1, ms(1000)).await.unwrap());
    sleep(ms(100)).await; // the last claim's idea of the head is stale
    let start = Instant::now();
    // The claim is held 1.5 s on its way; its reply is not waited for.
    proxy.set_latency_in(Direction::Requests, ms(1500));
    assert!(
        q.try_take().await.is_err(),
        "the claim's reply came in time"
    );
    proxy.set_latency_in(Direction::Requests, Duration::ZERO);
    // The next claim (a new connection) gives the lost claim's leases back:
    // none yet. "a" is not due yet either.
    assert!(within("try_take", q.try_take()).await.unwrap().is_none());
    assert!(start.elapsed() < ms(900), "too slow for this test's timing");
    // The late claim lands at ~1.5 s, after "a" became due.
    sleep_until(start + ms(2000)).await;
    let stats = q.stats().await.unwrap();
    let taken = q.take_timeout(ms(1500)).await.unwrap();
    assert!(
        taken
            .as_ref()
            .is_some_and(|d| d.id() == "a" && d.attempt() == 1),
        "\"a\" is not delivered: the claim given up on leased it after its \
         give-back (stats then: {stats:?}; taken: {taken:?})"
    );
}

/// The same late landing, for a claim that is sent again: `take` sends the
/// claim again after its reply timed out and gets an entry; the first
/// sending, only late, reaches the server afterwards and, as a first
/// sending (`recover` -1), leases the next due entry under the same token,
/// for nobody. The module docs: a claim sent again "returns what it leased
/// the first time" and a lost reply "never costs an attempt".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_sending_that_lands_after_its_resend_strands_nothing() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "late-first", ms(300)).await;
    assert!(q.try_take().await.unwrap().is_none());
    assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
    assert!(q.insert_with_id("b", &2, Duration::ZERO).await.unwrap());
    sleep(ms(100)).await;
    let start = Instant::now();
    proxy.set_latency_in(Direction::Requests, ms(1500));
    let take = tokio::spawn({
        let q = q.clone();
        async move { q.take().await }
    });
    sleep(ms(100)).await; // the first sending is on its way, held
    proxy.set_latency_in(Direction::Requests, Duration::ZERO);
    let first = within("take", take).await.unwrap().unwrap();
    assert_eq!((first.id(), first.attempt()), ("a", 1));
    assert!(
        start.elapsed() < ms(1200),
        "too slow for this test's timing"
    );
    // The first sending lands at ~1.5 s.
    sleep_until(start + ms(2000)).await;
    let stats = q.stats().await.unwrap();
    let taken = q.take_timeout(ms(1500)).await.unwrap();
    assert!(
        taken
            .as_ref()
            .is_some_and(|d| d.id() == "b" && d.attempt() == 1),
        "\"b\" is not delivered: the late first sending of the claim leased it \
         to nobody (stats then: {stats:?}; taken: {taken:?})"
    );
    assert!(first.ack().await.unwrap());
}

// ------------------------------------------------- half-written scripts

/// A worker's ack rides with its next claim. That claim must dead-letter
/// an entry (past max attempts) while the queue's `dead` key holds a
/// foreign type: the claim fails with WRONGTYPE, but only after it applied
/// the ack (plain acks check only the schedule's type before writing, and
/// the claim checks `dead` after them). "A script either writes whole or
/// not at all": here it wrote half, and the worker, told the request
/// failed, sends the ack again once the key is fixed, gets "lease lost",
/// and counts a run that succeeded as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_fails_on_a_foreign_key_does_not_apply_the_acks_it_carries() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "half")
        .lease(ms(300))
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    assert!(q.insert_with_id("b", &2, Duration::ZERO).await.unwrap());
    drop(within("take b", q.take()).await.unwrap()); // attempt 1, never acked
    assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
    let dead_key = "punctual:{half}:dead";
    assert_eq!(server.cli(&["SET", dead_key, "oops"]), "OK");
    // One run at a time: the worker claims "a" ("b" is still leased), runs
    // it past the end of b's lease, and acks it with its next claim, which
    // must dead-letter "b".
    let worker = Worker::builder(q.clone())
        .concurrency(1)
        .spawn(|_job: Job<u64>| async move {
            sleep(ms(600)).await;
            Ok::<(), String>(())
        });
    sleep(ms(2000)).await;
    let entry_a = server.cli(&["HEXISTS", "punctual:{half}:entries", "m:a"]);
    let stats = worker.stats();
    assert_eq!(
        (entry_a.as_str(), stats.completed),
        ("1", 0),
        "the claim failed (WRONGTYPE) yet deleted \"a\": its ack was applied \
         by a script that returned an error (worker stats: {stats:?})"
    );
    assert_eq!(server.cli(&["DEL", dead_key]), "1");
    let give_up = Instant::now() + ms(5000);
    while worker.stats().completed + worker.stats().lost == 0 && Instant::now() < give_up {
        sleep(ms(20)).await;
    }
    let stats = worker.shutdown(ms(1000)).await;
    assert_eq!(
        (stats.completed, stats.lost),
        (1, 0),
        "a run that returned Ok is counted as lost"
    );
}

// ------------------------------------------------- recovered claims

/// The claim script's `recover` argument on a first sending (`-1`): a
/// pattern that matches claims and nothing else the queue sends.
const CLAIM: &[u8] = b"$2\r\n-1\r\n";

/// `take_many` returns due entries "in order", equal deadlines FIFO. When
/// the claim's reply is lost and the claim is sent again, the recovered
/// entries come back sorted by deadline alone, from a range of the leases
/// set (ordered by id as a string, `#10` before `#2`) and an unstable
/// `table.sort`: entries inserted in one `insert_many`, all due at the same
/// millisecond, come back out of insertion order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_take_many_keeps_fifo_order() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "recovered-order", Duration::from_secs(10)).await;
    assert!(q.try_take().await.unwrap().is_none()); // loads the claim script
    let entries: Vec<(u64, Duration)> = (0..12).map(|n| (n, Duration::ZERO)).collect();
    let ids = q.insert_many(&entries).await.unwrap();
    // Without a fault, one claim takes them in insertion order.
    proxy.cut_after_next_request(Some(CLAIM));
    let taken = within("take_many", q.take_many(12)).await.unwrap();
    assert!(!proxy.armed(), "the claim was cut");
    let got: Vec<&str> = taken.iter().map(|d| d.id()).collect();
    let want: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(
        got, want,
        "a claim recovered after a lost reply returns equal deadlines out of FIFO order"
    );
}

// ------------------------------------------------- cluster

/// A cluster whose primary for queue `name` is reached through a proxy:
/// that node announces the proxy's port, so the cluster client's
/// connection to it (and the seed connection) crosses the proxy.
#[cfg(feature = "redis-cluster")]
async fn cluster_through_proxy(
    name: &str,
) -> (common::redis_cluster::RedisCluster, Proxy, RedisQueue<u64>) {
    let cluster = tokio::task::spawn_blocking(|| common::redis_cluster::RedisCluster::start(3, 0))
        .await
        .unwrap();
    let slot = cluster.slot(&format!("punctual:{{{name}}}:schedule"));
    let owner = cluster.owner(slot);
    let node = cluster.node(owner.port);
    let proxy = Proxy::start(owner.port);
    let bus = (owner.port + 10000).to_string();
    assert_eq!(
        node.cli(&["CONFIG", "SET", "cluster-announce-bus-port", &bus]),
        "OK"
    );
    let announced = proxy.port().to_string();
    assert_eq!(
        node.cli(&["CONFIG", "SET", "cluster-announce-port", &announced]),
        "OK"
    );
    let want = format!(":{announced}@");
    let mut waited = 0;
    while !node.cli(&["CLUSTER", "NODES"]).contains(&want) {
        assert!(waited < 100, "the node does not announce the proxy's port");
        sleep(ms(50)).await;
        waited += 1;
    }
    let q = RedisQueue::builder(name)
        .cluster(&[&proxy.url()])
        .lease(Duration::from_secs(3))
        .max_attempts(1)
        .poll_interval(ms(50))
        .build()
        .await
        .expect("build on the cluster");
    (cluster, proxy, q)
}

/// On a cluster, redis-rs's cluster connection sends a request again by
/// itself when its connection drops: a claim whose connection breaks after
/// it reached the server runs twice, as two first sendings under one
/// token. The second leases the next due entries; what the first leased is
/// held by nobody, and dead-letters (max 1 attempt) without a delivery.
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_claim_cut_after_it_ran_strands_nothing() {
    let (_cluster, proxy, q) = cluster_through_proxy("cut-claim").await;
    assert!(q.try_take().await.unwrap().is_none()); // loads the claim script
    assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
    assert!(q.insert_with_id("b", &2, Duration::ZERO).await.unwrap());
    proxy.cut_after_next_request(Some(CLAIM));
    let first = within("take", q.take()).await.unwrap();
    assert!(!proxy.armed(), "the claim was cut");
    let stats = q.stats().await.unwrap();
    let second = q.take_timeout(ms(1500)).await.unwrap();
    let mut got: Vec<(String, u32)> = vec![(first.id().to_owned(), first.attempt())];
    got.extend(second.iter().map(|d| (d.id().to_owned(), d.attempt())));
    got.sort();
    assert_eq!(
        got,
        vec![("a".to_owned(), 1), ("b".to_owned(), 1)],
        "an entry was leased to nobody by a claim that ran twice (stats after \
         the first take: {stats:?})"
    );
}

/// The same for an insert: an `insert` that returns `Ok` once inserted
/// twice.
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_an_insert_cut_after_it_ran_inserts_once() {
    let (_cluster, proxy, q) = cluster_through_proxy("cut-insert").await;
    assert!(q.insert(&1, HOUR).await.is_ok()); // loads the insert script
    proxy.cut_after_next_request(Some(b"4242424242"));
    let inserted = within("insert", q.insert(&4_242_424_242, HOUR)).await;
    assert!(!proxy.armed(), "the insert was cut");
    let stats = q.stats().await.unwrap();
    if inserted.is_ok() {
        assert_eq!(
            stats.pending, 2,
            "an insert that returned {inserted:?} inserted its value twice"
        );
    }
}

// ------------------------------------------------- the sequence

/// `check_seq` vouches for the sequence with Lua's `tonumber`, which takes
/// strings that Redis's `INCR` refuses (`1e3`, `0x10`, ` 7`, `7.5`). A
/// retry then removes the entry's lease and its place in the schedule,
/// and only then fails on `INCR`: the script returns an error after half
/// its writes, and the entry is in no set any more: never due, never
/// delivered, not counted, yet its record says it is leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_fails_on_a_sequence_incr_refuses_writes_nothing() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = builder(&server, "seq-text")
        .lease(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let id = q.insert(&1, Duration::ZERO).await.unwrap();
    let d = within("take", q.take()).await.unwrap();
    let lease_until = q.deadline(&id).await.unwrap();
    assert_eq!(server.cli(&["SET", "punctual:{seq-text}:seq", "1e3"]), "OK");
    let retried = d.retry(Duration::ZERO).await;
    assert!(retried.is_err(), "INCR refuses 1e3: {retried:?}");
    assert_eq!(
        q.deadline(&id).await.unwrap(),
        lease_until,
        "the failed retry took the entry out of the schedule (stats: {:?})",
        q.stats().await.unwrap()
    );
}
