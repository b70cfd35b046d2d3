#![cfg(feature = "redis")]
//! The Redis queue as a hostile operator runs it: a server paused for a
//! failover, a user who may not publish, a purge between a take and its
//! ack, a password refused for a moment, a lease cut short; and, through
//! the fault proxy of `tests/common/proxy.rs`, slow links, half-open
//! connections and replies lost after the request ran.
//!
//! Each test is a regression test: it failed before claims carried a
//! token, calls waited up to `response_timeout`, connections were replaced
//! and notifications were best effort. Real time throughout (the server
//! decides what is due), with waits of hundreds of milliseconds.

mod common;

use common::proxy::Proxy;
use common::redis_queue::{HOUR, WAIT, eventually, ms, within};
use common::redis_server::RedisServer;
use punctual::redis::client as redis;
use punctual::redis::{RedisQueue, RedisStats};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// A queue on `url` with a short poll, the given lease and max attempts.
async fn queue(url: &str, name: &str, lease: Duration, max_attempts: u32) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(url)
        .lease(lease)
        .max_attempts(max_attempts)
        .poll_interval(ms(50))
        .build()
        .await
        .expect("connect")
}

/// An authenticated admin connection (the test helper's `cli` cannot log in).
async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_held_up_by_client_pause_costs_no_attempt() {
    let server = RedisServer::start();
    // One delivery allowed: a claim that leased to nobody would dead-letter.
    let q = queue(&server.url(), "paused", ms(500), 1).await;
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    // What FAILOVER does: writes (and scripts that may write) wait 1.5 s.
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "1500", "WRITE"]), "OK");
    let start = Instant::now();
    let d = within("take", q.take()).await.unwrap();
    assert!(
        start.elapsed() >= ms(1000),
        "the claim waited for the pause"
    );
    assert_eq!((d.id(), d.attempt()), ("a", 1));
    assert!(d.ack().await.unwrap(), "the lease is held");
    let stats = q.stats().await.unwrap();
    assert_eq!(stats, RedisStats::default(), "nothing dead-lettered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_held_up_by_client_pause_returns_ok_once() {
    let server = RedisServer::start();
    let q = queue(&server.url(), "paused-insert", ms(500), 10).await;
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "1500", "WRITE"]), "OK");
    let id = within("insert", q.insert(&7, HOUR))
        .await
        .expect("insert waits");
    assert_eq!(q.stats().await.unwrap().pending, 1, "exactly one entry");
    assert!(q.deadline(&id).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_later_than_the_response_timeout_is_an_error_and_the_queue_recovers() {
    let server = RedisServer::start();
    let q: RedisQueue<u64> = RedisQueue::builder("late")
        .url(&server.url())
        .response_timeout(ms(300))
        .poll_interval(ms(50))
        .build()
        .await
        .unwrap();
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "1000", "WRITE"]), "OK");
    let start = Instant::now();
    let late = q.insert_with_id("a", &1, HOUR).await;
    assert!(late.is_err(), "no reply within 300 ms: {late:?}");
    assert!(start.elapsed() < ms(900), "it did not wait for the pause");
    sleep(ms(900)).await; // the pause ends
    // The failed insert may or may not have run (here the server dropped it
    // with the connection the queue gave up); a retry with its id makes
    // sure of one entry, on a new connection.
    q.insert_with_id("a", &1, HOUR)
        .await
        .expect("a new connection");
    assert_eq!(q.stats().await.unwrap().pending, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_publish_still_writes_and_consumers_poll() {
    let server = RedisServer::start();
    // Redis 7's default for a new user: no channels.
    let acl = server.cli(&[
        "ACL",
        "SETUSER",
        "worker",
        "on",
        ">pw",
        "resetchannels",
        "~punctual:*",
        "+@all",
    ]);
    assert_eq!(acl, "OK");
    let url = format!("redis://worker:pw@127.0.0.1:{}/", server.port());
    let q = queue(&url, "muted", HOUR, 10).await;
    // Each of these announces a new head, which this user may not do.
    assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
    let d = within("take", q.take()).await.unwrap();
    assert!(d.retry(Duration::ZERO).await.unwrap(), "retry applied, Ok");
    let d = within("take", q.take()).await.unwrap();
    assert_eq!((d.id(), d.attempt()), ("a", 2));
    assert!(d.retry(HOUR).await.unwrap());
    assert!(q.reset("a", ms(100)).await.unwrap(), "reset applied, Ok");
    // A waiting consumer finds it by polling.
    let d = within("take after reset", q.take()).await.unwrap();
    assert_eq!(d.id(), "a");
    assert!(d.ack().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_taken_before_a_purge_cannot_touch_an_entry_inserted_after() {
    let server = RedisServer::start();
    let q = queue(&server.url(), "purge-race", HOUR, 10).await;
    let old = q.insert(&1, Duration::ZERO).await.unwrap();
    let d = within("take", q.take()).await.unwrap();
    q.purge().await.unwrap();
    // The id sequence restarts: the new entry gets the old one's id.
    let new = q.insert(&2, Duration::ZERO).await.unwrap();
    assert_eq!(new, old);
    // Taken at its first attempt, as the old one was: only the claim's token
    // tells the two deliveries apart.
    let again = within("take", q.take()).await.unwrap();
    assert_eq!((*again.value(), again.attempt()), (2, 1));
    assert!(!d.ack().await.unwrap(), "the old lease went with the purge");
    assert_eq!(
        q.stats().await.unwrap().leased,
        1,
        "the new entry is intact"
    );
    assert!(again.ack().await.unwrap(), "its holder acks it");
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_refused_for_a_moment_does_not_break_the_handle() {
    let server = RedisServer::start();
    assert_eq!(server.cli(&["CONFIG", "SET", "requirepass", "old"]), "OK");
    let url = format!("redis://:old@127.0.0.1:{}/", server.port());
    let q = queue(&url, "rollout", HOUR, 10).await;
    q.insert_with_id("before", &1, HOUR).await.unwrap();
    let mut admin = admin(&url).await;
    // A restart during a password rollout: the server refuses the queue's
    // password, and its connections are gone.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "new"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let refused = q.insert_with_id("during", &2, HOUR).await;
    assert!(refused.is_err(), "the password is refused: {refused:?}");
    sleep(ms(1500)).await;
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "old"])
        .query_async(&mut admin)
        .await
        .unwrap();
    // Accepted again: the handle logs in on a new connection.
    let start = Instant::now();
    loop {
        match q.insert_with_id("after", &3, HOUR).await {
            Ok(inserted) => {
                assert!(inserted);
                break;
            }
            Err(error) => assert!(
                start.elapsed() < ms(3000),
                "still failing 3 s after the password was accepted: {error}"
            ),
        }
        sleep(ms(50)).await;
    }
    assert_eq!(q.stats().await.unwrap().pending, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_that_shortens_a_lease_wakes_a_waiting_consumer() {
    let server = RedisServer::start();
    // Polling too slow to matter: only the announcement can serve.
    let q: RedisQueue<u64> = RedisQueue::builder("shortened")
        .url(&server.url())
        .lease(HOUR)
        .poll_interval(WAIT)
        .build()
        .await
        .unwrap();
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    let mut d = within("take", q.take()).await.unwrap();
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take().await.map(|d| (d.id().to_owned(), d.attempt())) }
    });
    sleep(ms(200)).await; // the waiter naps until the lease's end (or WAIT)
    assert!(d.extend(ms(50)).await.unwrap());
    let got = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the shortened lease was announced")
        .unwrap()
        .unwrap();
    assert_eq!(got, ("a".to_owned(), 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refuses_writes_whole_and_consumers_wait_for_memory() {
    let server = RedisServer::start();
    let q = queue(&server.url(), "full", HOUR, 10).await;
    q.insert_with_id("due", &1, Duration::ZERO).await.unwrap();
    let before = q.stats().await.unwrap();
    // Any write that could grow memory is refused (`noeviction`, the default).
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    let refused = q.insert_with_id("new", &2, Duration::ZERO).await;
    let error = refused.expect_err("no memory for an insert").to_string();
    assert!(error.contains("OOM"), "{error}");
    let taken = q.take_timeout(ms(300)).await.unwrap();
    assert!(taken.is_none(), "a claim writes, so none can happen");
    assert_eq!(q.stats().await.unwrap(), before, "nothing half written");
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    let d = within("take", q.take()).await.unwrap();
    assert_eq!((d.id(), d.attempt()), ("due", 1));
}

// ------------------------------------------------- through the fault proxy

/// The claim script's `recover` argument on a first sending (`-1`): a
/// pattern that matches claims and nothing else the queue sends.
const CLAIM: &[u8] = b"$2\r\n-1\r\n";

async fn through(
    proxy: &Proxy,
    name: &str,
    timeout: Duration,
    max_attempts: u32,
) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(&proxy.url())
        .lease(Duration::from_secs(3))
        .max_attempts(max_attempts)
        .poll_interval(ms(50))
        .response_timeout(timeout)
        .build()
        .await
        .expect("connect through the proxy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_slower_than_half_a_second_loses_nothing() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "slow", Duration::from_secs(10), 1).await;
    proxy.set_latency(ms(300)); // a 600 ms round trip
    let id = within("insert", q.insert(&1, Duration::ZERO))
        .await
        .expect("a slow reply is waited for");
    let d = within("take", q.take()).await.unwrap();
    assert_eq!((d.id(), d.attempt()), (id.as_str(), 1));
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_is_cut_is_recovered_without_an_attempt() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // One delivery allowed: an entry leased to nobody would dead-letter.
    let q = through(&proxy, "cut", Duration::from_secs(10), 1).await;
    assert!(q.try_take().await.unwrap().is_none()); // loads the claim script
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    proxy.cut_after_next_request(Some(CLAIM));
    let start = Instant::now();
    let d = within("take", q.take()).await.unwrap();
    assert!(!proxy.armed(), "the claim was cut");
    assert_eq!((d.id(), d.attempt()), ("a", 1));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "not after the lease"
    );
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_never_comes_is_recovered_after_the_response_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "swallowed", ms(300), 1).await;
    assert!(q.try_take().await.unwrap().is_none());
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    proxy.swallow_replies_after_next_request(Some(CLAIM));
    let d = within("take", q.take()).await.unwrap();
    assert!(!proxy.armed(), "the claim's reply was swallowed");
    assert_eq!((d.id(), d.attempt()), ("a", 1));
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_take_whose_reply_is_cut_leaves_the_entry_to_the_next_claim() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "cut-try", Duration::from_secs(10), 1).await;
    assert!(q.try_take().await.unwrap().is_none());
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    proxy.cut_after_next_request(Some(CLAIM));
    assert!(q.try_take().await.is_err(), "the reply was lost");
    assert!(!proxy.armed());
    // The entry was leased to nobody; the next claim gives it back, with
    // no attempt spent, and takes it.
    let start = Instant::now();
    let d = within("take", q.take()).await.unwrap();
    assert_eq!((d.id(), d.attempt()), ("a", 1));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "not after the lease"
    );
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap().dead, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_are_replaced_and_nothing_waits_for_ever() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let q = through(&proxy, "half-open", ms(300), 10).await;
    q.insert_with_id("a", &1, ms(500)).await.unwrap();
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take().await.map(|d| (d.id().to_owned(), d.attempt())) }
    });
    sleep(ms(200)).await; // the consumer waits; the listener is subscribed
    let accepted = proxy.accepted();
    // A NAT dropped its state: open connections swallow everything.
    proxy.black_hole_open();
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the entry due in 500 ms came through a new connection")
        .unwrap()
        .unwrap();
    assert_eq!(got, ("a".to_owned(), 1));
    // Producers: at most one call lost to the dead connection.
    let mut errors = 0;
    let inserted = loop {
        match q.insert_with_id("b", &2, HOUR).await {
            Ok(inserted) => break inserted,
            Err(_) => errors += 1,
        }
        assert!(errors <= 1, "insert kept failing on a dead connection");
    };
    assert!(inserted);
    assert!(proxy.accepted() > accepted, "new connections were made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_pub_sub_connection_is_pinged_and_replaced() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // Polls every 100 ms: the listener PINGs after 1 s of silence.
    let q: RedisQueue<u64> = RedisQueue::builder("deaf")
        .url(&proxy.url())
        .poll_interval(ms(100))
        .response_timeout(ms(300))
        .build()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take().await.map(|d| d.into_value()) }
    });
    // The ids of the server's subscribed connections.
    let subscribers = || {
        server
            .cli(&["CLIENT", "LIST", "TYPE", "pubsub"])
            .lines()
            .filter_map(|line| {
                line.split(' ')
                    .next()?
                    .strip_prefix("id=")
                    .map(str::to_owned)
            })
            .collect::<Vec<_>>()
    };
    sleep(ms(300)).await; // build()'s own probe subscription is gone
    eventually("the listener subscribed", || {
        let n = subscribers().len();
        async move { n == 1 }
    })
    .await;
    let first = subscribers();
    proxy.black_hole_open();
    // Its connection says nothing, not even its end: only a PING tells.
    eventually("the listener subscribed on a new connection", || {
        let now = subscribers();
        let renewed = now.iter().any(|id| !first.contains(id));
        async move { renewed }
    })
    .await;
    q.insert(&5, Duration::ZERO).await.ok(); // may be lost with a dead connection
    if q.stats().await.map(|s| s.due + s.leased).unwrap_or(0) == 0 {
        q.insert(&5, Duration::ZERO).await.unwrap();
    }
    let got = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(got.unwrap(), 5);
}
