#![cfg(feature = "redis")]
//! Races and edge cases of the Redis store that a hostile review found,
//! each a test of a semantic that API.md and the module docs of
//! `punctual::redis` promise. Each test's comment tells the bug as it was
//! found; each passes since its fix (see CHANGELOG.md).
//!
//! Every test starts its own `redis-server` on a free port (the cluster
//! tests, a cluster of three); the ones about lost or late requests go
//! through the fault proxy of `tests/common/proxy.rs`. Real time throughout
//! (the server's clock decides what is due).

mod common;

use common::proxy::{Direction, Proxy};
use common::redis_queue::{builder, ms, within};
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

// ------------------------------------------------- cluster: requests sent twice
//
// On a cluster, redis-rs's cluster connection sends a request again by
// itself after its connection dropped, and the first sending may have run.
// Each test cuts one kind of write after it reached the queue's node and
// before its reply, checks that the node ran it twice, and that the store
// holds what one execution makes and the caller got the first's answer.

#[cfg(feature = "redis-cluster")]
mod cluster {
    use super::*;
    use common::redis_cluster::RedisCluster;
    use common::redis_queue::{HOUR, lua_sha};
    use punctual::MissedTicks;
    use punctual::redis::RedisStats;

    /// A cluster whose primary for queue `name` is reached through a proxy:
    /// that node announces the proxy's port, so the cluster client's
    /// connection to it (and the seed connection) crosses the proxy.
    async fn cluster_through_proxy(name: &str) -> (RedisCluster, Proxy, RedisQueue<u64>) {
        let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
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

    /// A request cut after it reached the queue's node, before its reply: the
    /// cluster client then sends it again by itself.
    struct Cut<'a> {
        proxy: &'a Proxy,
        node: &'a RedisServer,
        scripts_before: u64,
    }

    impl<'a> Cut<'a> {
        /// Cuts the next request whose bytes contain `pattern`. The script it
        /// runs must be loaded already (a first call loads it).
        fn arm(cluster: &'a RedisCluster, proxy: &'a Proxy, pattern: &[u8]) -> Cut<'a> {
            let node = cluster.node(proxy.upstream_port());
            let scripts_before = scripts_run(node);
            proxy.cut_after_next_request(Some(pattern));
            Cut {
                proxy,
                node,
                scripts_before,
            }
        }

        /// Panics unless the request was cut and the node ran `n` scripts
        /// since `arm`: with nothing else running, the cut request and the
        /// client's own resend make 2. Without this a test could pass because
        /// the fault did not happen.
        fn ran(self, what: &str, n: u64) {
            assert!(!self.proxy.armed(), "{what} was not cut");
            assert_eq!(
                scripts_run(self.node) - self.scripts_before,
                n,
                "{what} was not run twice by the cluster client's resend"
            );
        }

        fn ran_twice(self, what: &str) {
            self.ran(what, 2);
        }
    }

    /// Scripts (`EVALSHA`) that `node` has run.
    fn scripts_run(node: &RedisServer) -> u64 {
        node.cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    /// The queue's sequence counter: each placement of an entry (insert,
    /// reset, retry, requeue) takes one value.
    fn seq(cluster: &RedisCluster, proxy: &Proxy, name: &str) -> u64 {
        let node = cluster.node(proxy.upstream_port());
        node.cli(&["GET", &format!("punctual:{{{name}}}:seq")])
            .parse()
            .unwrap()
    }

    /// Takes and acks an entry, which loads the claim and finish scripts.
    async fn warm_up(q: &RedisQueue<u64>) {
        assert!(q.insert_with_id("warm", &0, Duration::ZERO).await.unwrap());
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(d.id(), "warm");
        assert!(d.ack().await.unwrap());
    }

    /// On a cluster, redis-rs's cluster connection sends a request again by
    /// itself when its connection drops: a claim whose connection breaks after
    /// it reached the server runs twice, as two first sendings under one
    /// token. The second leased the next due entries; what the first leased
    /// was held by nobody, and dead-lettered (max 1 attempt) without a
    /// delivery. A second execution of a claim now returns what the first
    /// leased, and leases nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_claim_cut_after_it_ran_strands_nothing() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-claim").await;
        assert!(q.try_take().await.unwrap().is_none()); // loads the claim script
        assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
        assert!(q.insert_with_id("b", &2, Duration::ZERO).await.unwrap());
        let cut = Cut::arm(&cluster, &proxy, CLAIM);
        let first = within("take", q.take()).await.unwrap();
        cut.ran_twice("the claim");
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
    /// twice. Its second execution now returns the first's answer (the id it
    /// made) and inserts nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_insert_cut_after_it_ran_inserts_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-insert").await;
        assert!(q.insert(&1, HOUR).await.is_ok()); // loads the insert script
        let cut = Cut::arm(&cluster, &proxy, b"4242424242");
        let inserted = within("insert", q.insert(&4_242_424_242, HOUR)).await;
        cut.ran_twice("the insert");
        let stats = q.stats().await.unwrap();
        let id = inserted.expect("the resend's reply");
        assert_eq!(
            stats.pending, 2,
            "an insert that returned Ok({id:?}) inserted its value twice"
        );
        assert!(q.deadline(&id).await.unwrap().is_some(), "{id:?} is absent");
    }

    /// `insert_many` sent twice: one set of entries, under the ids the first
    /// execution returned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_insert_many_cut_after_it_ran_inserts_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-many").await;
        assert!(q.insert(&1, HOUR).await.is_ok()); // loads the insert script
        let cut = Cut::arm(&cluster, &proxy, b"4242424242");
        let ids = within(
            "insert_many",
            q.insert_many(&[(4_242_424_242, HOUR), (5, HOUR), (6, HOUR)]),
        )
        .await
        .unwrap();
        cut.ran_twice("insert_many");
        assert_eq!(
            q.stats().await.unwrap().pending,
            4,
            "insert_many inserted its entries twice"
        );
        assert_eq!(ids.len(), 3);
        for id in &ids {
            assert!(q.deadline(id).await.unwrap().is_some(), "{id:?} is absent");
        }
    }

    /// `insert_with_id` sent twice: the second execution found the entry the
    /// first inserted and answered `false`, so a call that inserted reported
    /// that the id was taken. It now answers as the first did.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_insert_with_id_cut_after_it_ran_answers_inserted() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-with-id").await;
        assert!(q.insert(&1, HOUR).await.is_ok()); // loads the insert script
        let cut = Cut::arm(&cluster, &proxy, b"order-17");
        let inserted = within("insert_with_id", q.insert_with_id("order-17", &17, HOUR))
            .await
            .unwrap();
        cut.ran_twice("insert_with_id");
        assert!(
            inserted,
            "an insert_with_id that inserted answered false (its second execution's answer)"
        );
        assert_eq!(q.stats().await.unwrap().pending, 2);
    }

    /// An ack sent twice: the second execution found no lease and answered
    /// "lost", so an ack that applied reported the lease lost (the caller
    /// then believes another consumer has the entry).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_ack_cut_after_it_ran_answers_acked() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-ack").await;
        warm_up(&q).await;
        assert!(
            q.insert_with_id("ack-me", &1, Duration::ZERO)
                .await
                .unwrap()
        );
        let d = within("take", q.take()).await.unwrap();
        let cut = Cut::arm(&cluster, &proxy, b"ack-me");
        let acked = within("ack", d.ack()).await.unwrap();
        cut.ran_twice("the ack");
        assert!(acked, "an ack that applied reported its lease lost");
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    }

    /// A retry sent twice: as for an ack, the second execution answered
    /// "lost"; the entry is back once, with its attempt kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_retry_cut_after_it_ran_gives_back_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-retry").await;
        warm_up(&q).await;
        assert!(
            q.insert_with_id("retry-me", &1, Duration::ZERO)
                .await
                .unwrap()
        );
        let d = within("take", q.take()).await.unwrap();
        let before = seq(&cluster, &proxy, "cut-retry");
        let cut = Cut::arm(&cluster, &proxy, b"retry-me");
        let retried = within("retry", d.retry(HOUR)).await.unwrap();
        cut.ran_twice("the retry");
        assert!(retried, "a retry that applied reported its lease lost");
        assert_eq!(
            seq(&cluster, &proxy, "cut-retry") - before,
            1,
            "the entry was placed twice"
        );
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.leased), (1, 0), "{stats:?}");
    }

    /// An extension sent twice pushes the lease end a second time, to its own
    /// now + lease: what one extension a moment later makes, and what the
    /// caller is told.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_extend_cut_after_it_ran_reports_the_lease_end_kept() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-extend").await;
        warm_up(&q).await;
        assert!(
            q.insert_with_id("extend-me", &1, Duration::ZERO)
                .await
                .unwrap()
        );
        let mut d = within("take", q.take()).await.unwrap();
        assert!(d.extend(HOUR).await.unwrap()); // loads the extend script
        let cut = Cut::arm(&cluster, &proxy, b"extend-me");
        let held = within("extend", d.extend(2 * HOUR)).await.unwrap();
        cut.ran_twice("the extension");
        assert!(held);
        assert_eq!(
            q.deadline("extend-me").await.unwrap(),
            Some(d.lease_until()),
            "the store's lease end is not the one the delivery was told"
        );
        assert!(d.ack().await.unwrap());
    }

    /// A remove sent twice: the second execution found nothing and answered
    /// `false`, so a remove that removed reported the entry absent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_remove_cut_after_it_ran_answers_removed() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-remove").await;
        assert!(!q.remove("absent").await.unwrap()); // loads the remove script
        assert!(q.insert_with_id("remove-me", &1, HOUR).await.unwrap());
        assert!(q.insert_with_id("kept", &2, HOUR).await.unwrap());
        let cut = Cut::arm(&cluster, &proxy, b"remove-me");
        let removed = within("remove", q.remove("remove-me")).await.unwrap();
        cut.ran_twice("the remove");
        assert!(removed, "a remove that removed answered false");
        assert_eq!(q.stats().await.unwrap().pending, 1);
        assert!(q.deadline("kept").await.unwrap().is_some());
    }

    /// A reset sent twice moved the entry twice (a second sequence value, a
    /// later deadline than the one the caller's call made).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_reset_cut_after_it_ran_moves_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-reset").await;
        assert!(!q.reset("absent", HOUR).await.unwrap()); // loads the reset script
        assert!(q.insert_with_id("reset-me", &1, HOUR).await.unwrap());
        let before = seq(&cluster, &proxy, "cut-reset");
        let cut = Cut::arm(&cluster, &proxy, b"reset-me");
        let moved = within("reset", q.reset("reset-me", 2 * HOUR))
            .await
            .unwrap();
        cut.ran_twice("the reset");
        assert!(moved);
        assert_eq!(
            seq(&cluster, &proxy, "cut-reset") - before,
            1,
            "the entry was moved twice"
        );
        assert_eq!(q.stats().await.unwrap().pending, 1);
    }

    /// `schedule_every` sent twice: the second execution found the schedule
    /// the first created and answered `false` ("the same call was made
    /// before"), so the call that created it reported that it did not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_schedule_every_cut_after_it_ran_answers_created() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-every").await;
        // Loads the schedule script.
        assert!(
            q.schedule_every("warm", HOUR, MissedTicks::Skip, &0)
                .await
                .unwrap()
        );
        let cut = Cut::arm(&cluster, &proxy, b"every-minute");
        let created = within(
            "schedule_every",
            q.schedule_every("every-minute", ms(60_000), MissedTicks::Skip, &1),
        )
        .await
        .unwrap();
        cut.ran_twice("schedule_every");
        assert!(
            created,
            "a schedule_every that created its schedule answered false"
        );
        assert_eq!(q.schedules().await.unwrap().len(), 2);
        assert_eq!(q.stats().await.unwrap().pending, 2, "one tick per schedule");
    }

    /// The same for `schedule_cron`. Its first sending asks for cron instants
    /// (it changes nothing); the second, with them, creates the schedule: that
    /// one is cut.
    #[cfg(feature = "cron")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_schedule_cron_cut_after_it_ran_answers_created() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-cron").await;
        assert!(q.schedule_cron("warm", "0 4 * * *", &0).await.unwrap());
        // The cron instants follow the record and a newline.
        let cut = Cut::arm(&cluster, &proxy, b"c,0 3 * * *\n");
        let created = within("schedule_cron", q.schedule_cron("nightly", "0 3 * * *", &1))
            .await
            .unwrap();
        cut.ran(
            "schedule_cron (a sending without instants, then the cut one)",
            3,
        );
        assert!(
            created,
            "a schedule_cron that created its schedule answered false"
        );
        assert_eq!(q.schedules().await.unwrap().len(), 2);
        assert_eq!(q.stats().await.unwrap().pending, 2, "one tick per schedule");
    }

    /// `unschedule` sent twice: the second execution found no schedule and
    /// answered `false`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_unschedule_cut_after_it_ran_answers_removed() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-unschedule").await;
        assert!(!q.unschedule("absent").await.unwrap()); // loads the remove script
        assert!(
            q.schedule_every("sweep", HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        let cut = Cut::arm(&cluster, &proxy, b"sweep");
        let removed = within("unschedule", q.unschedule("sweep")).await.unwrap();
        cut.ran_twice("unschedule");
        assert!(
            removed,
            "an unschedule that removed its schedule answered false"
        );
        assert!(q.schedules().await.unwrap().is_empty());
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    }

    /// `requeue_dead` sent twice: the second execution found no dead letter
    /// and answered `false`; the entry is back once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_requeue_dead_cut_after_it_ran_puts_back_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-requeue").await;
        assert!(!q.requeue_dead("absent", HOUR).await.unwrap()); // loads the script
        dead_letters(&q, &["dead-one"]).await;
        let before = seq(&cluster, &proxy, "cut-requeue");
        let cut = Cut::arm(&cluster, &proxy, b"dead-one");
        let back = within("requeue_dead", q.requeue_dead("dead-one", HOUR))
            .await
            .unwrap();
        cut.ran_twice("requeue_dead");
        assert!(
            back,
            "a requeue_dead that put the entry back answered false"
        );
        assert_eq!(
            seq(&cluster, &proxy, "cut-requeue") - before,
            1,
            "the entry was placed twice"
        );
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.dead), (1, 0), "{stats:?}");
    }

    /// `pause` and `resume` sent twice: each second execution found the
    /// state the first set and answered `false` ("it was so already").
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_pause_and_a_resume_cut_after_they_ran_answer_changed() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-pause").await;
        assert!(!q.resume().await.unwrap()); // loads the pause script
        let sha = lua_sha("pause", &["check_all", "now_ms", "requests"]);
        let cut = Cut::arm(&cluster, &proxy, sha.as_bytes());
        let paused = within("pause", q.pause()).await.unwrap();
        cut.ran_twice("the pause");
        assert!(paused, "a pause that paused answered false");
        assert!(q.is_paused().await.unwrap());
        let cut = Cut::arm(&cluster, &proxy, sha.as_bytes());
        let resumed = within("resume", q.resume()).await.unwrap();
        cut.ran_twice("the resume");
        assert!(resumed, "a resume that resumed answered false");
        assert!(!q.is_paused().await.unwrap());
    }

    /// `run_now` sent twice moved the tick twice (a second sequence value);
    /// the caller is told it ran.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_run_now_cut_after_it_ran_moves_the_tick_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-run-now").await;
        assert!(!q.run_now("absent").await.unwrap()); // loads the reset script
        assert!(
            q.schedule_every("sweep", HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        let before = seq(&cluster, &proxy, "cut-run-now");
        let cut = Cut::arm(&cluster, &proxy, b"sweep");
        let ran = within("run_now", q.run_now("sweep")).await.unwrap();
        cut.ran_twice("run_now");
        assert!(ran, "a run_now that moved the tick answered false");
        assert_eq!(
            seq(&cluster, &proxy, "cut-run-now") - before,
            1,
            "the tick was moved twice"
        );
        let d = within("take", q.take()).await.unwrap();
        assert_eq!(d.id(), "sweep", "the tick is due now");
    }

    /// `insert_with` sent twice: without its request identity the second
    /// execution found the entry the first inserted and answered `None`
    /// (refused), and a replace replaced twice (two sequence values). Each
    /// now applies once and answers as the first did; `insert_many_with`
    /// inserts its entries once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_an_insert_with_cut_after_it_ran_applies_once() {
        use punctual::durable::InsertOptions;
        let name = "cut-insert-with";
        let (cluster, proxy, q) = cluster_through_proxy(name).await;
        let keyed = InsertOptions::new().key("tenant").priority(3).delay(HOUR);
        assert!(q.insert_with(&1, &keyed).await.unwrap().is_some()); // loads the insert script
        let once = InsertOptions::new().id("once").key("tenant").delay(HOUR);
        let cut = Cut::arm(&cluster, &proxy, b"4242424242");
        let id = within("insert_with", q.insert_with(&4_242_424_242, &once))
            .await
            .unwrap();
        cut.ran_twice("insert_with");
        assert_eq!(
            id.as_deref(),
            Some("once"),
            "an insert that inserted answered refused"
        );

        let debounce = InsertOptions::new()
            .id("once")
            .replace(true)
            .key("other")
            .delay(HOUR);
        let before = seq(&cluster, &proxy, name);
        let cut = Cut::arm(&cluster, &proxy, b"4343434343");
        let id = within("a replace", q.insert_with(&4_343_434_343, &debounce))
            .await
            .unwrap();
        cut.ran_twice("the replace");
        assert_eq!(id.as_deref(), Some("once"));
        assert_eq!(
            seq(&cluster, &proxy, name) - before,
            1,
            "the entry was replaced twice"
        );
        let info = q.entry("once").await.unwrap().unwrap();
        assert_eq!(
            (info.value, info.key.as_deref()),
            (Some(4_343_434_343), Some("other"))
        );

        let cut = Cut::arm(&cluster, &proxy, b"4444444444");
        let many = [
            (4_444_444_444, keyed.clone()),
            (5, keyed.clone()),
            (6, InsertOptions::new().delay(HOUR)),
        ];
        let ids = within("insert_many_with", q.insert_many_with(&many))
            .await
            .unwrap();
        cut.ran_twice("insert_many_with");
        assert!(ids.iter().all(Option::is_some), "{ids:?}");
        assert_eq!(
            q.stats().await.unwrap().pending,
            5,
            "insert_many_with inserted twice"
        );
        for id in ids.iter().flatten() {
            assert!(q.deadline(id).await.unwrap().is_some(), "{id:?} is absent");
        }
    }

    /// `set_key_limit` and `remove_key_limit` sent twice: the second
    /// execution found the limit the first wrote (or removed) and answered
    /// `false` ("no change"). Each now answers as the first did.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_key_limit_cut_after_it_ran_answers_changed() {
        use punctual::durable::KeyLimit;
        let (cluster, proxy, q) = cluster_through_proxy("cut-limit").await;
        assert!(q.key_limits().await.unwrap().is_empty());
        let warm = KeyLimit {
            concurrency: Some(1),
            rate: None,
        };
        assert!(q.set_key_limit("warm", warm).await.unwrap()); // loads the limit script
        let limit = KeyLimit {
            concurrency: Some(4242),
            rate: None,
        };
        let cut = Cut::arm(&cluster, &proxy, b"4242,,");
        let changed = within("set_key_limit", q.set_key_limit("tenant", limit))
            .await
            .unwrap();
        cut.ran_twice("set_key_limit");
        assert!(changed, "a set_key_limit that set the limit answered false");
        let cut = Cut::arm(&cluster, &proxy, b"tenant");
        let removed = within("remove_key_limit", q.remove_key_limit("tenant"))
            .await
            .unwrap();
        cut.ran_twice("remove_key_limit");
        assert!(
            removed,
            "a remove_key_limit that removed the limit answered false"
        );
        assert_eq!(q.key_limits().await.unwrap(), [("warm".to_owned(), warm)]);
    }

    /// Makes `ids` dead letters of `q` (max_attempts 1: one failed run).
    async fn dead_letters(q: &RedisQueue<u64>, ids: &[&str]) {
        for id in ids {
            assert!(q.insert_with_id(id, &1, Duration::ZERO).await.unwrap());
        }
        let worker = Worker::builder(q.clone())
            .concurrency(1)
            .spawn(|_job: Job<u64>| async { Err::<(), _>("fails") });
        let give_up = Instant::now() + ms(10_000);
        while q.stats().await.unwrap().dead < ids.len() as u64 {
            assert!(Instant::now() < give_up, "no dead letters");
            sleep(ms(20)).await;
        }
        worker.shutdown(ms(1000)).await;
    }

    /// `requeue_all_dead` sent twice: the second execution found no dead
    /// letter and answered 0; each entry is back once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_requeue_all_dead_cut_after_it_ran_puts_back_once() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-requeue-all").await;
        assert_eq!(q.requeue_all_dead(HOUR).await.unwrap(), 0); // loads the script
        dead_letters(&q, &["d1", "d2"]).await;
        let before = seq(&cluster, &proxy, "cut-requeue-all");
        let sha = lua_sha(
            "dead_all",
            &["check_all", "now_ms", "index", "place", "requests"],
        );
        let cut = Cut::arm(&cluster, &proxy, sha.as_bytes());
        let back = within("requeue_all_dead", q.requeue_all_dead(HOUR))
            .await
            .unwrap();
        cut.ran_twice("requeue_all_dead");
        assert_eq!(back, 2, "a requeue_all_dead that put two back answered");
        assert_eq!(
            seq(&cluster, &proxy, "cut-requeue-all") - before,
            2,
            "the entries were placed twice"
        );
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.dead), (2, 0), "{stats:?}");
    }

    /// `clear_dead` sent twice: the second execution found nothing to
    /// delete and answered 0.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_clear_dead_cut_after_it_ran_answers_the_count() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-clear-dead").await;
        assert_eq!(q.clear_dead().await.unwrap(), 0); // loads the script
        dead_letters(&q, &["d1", "d2", "d3"]).await;
        let sha = lua_sha(
            "dead_all",
            &["check_all", "now_ms", "index", "place", "requests"],
        );
        let cut = Cut::arm(&cluster, &proxy, sha.as_bytes());
        let cleared = within("clear_dead", q.clear_dead()).await.unwrap();
        cut.ran_twice("clear_dead");
        assert_eq!(cleared, 3, "a clear_dead that deleted three answered");
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    }

    /// A purge sent twice deletes what was written between its two
    /// executions too, as one purge at the later moment would (the call had
    /// not returned); afterwards the queue has no key left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_purge_cut_after_it_ran_leaves_nothing() {
        let (cluster, proxy, q) = cluster_through_proxy("cut-purge").await;
        q.purge().await.unwrap(); // loads the purge script
        q.insert_many(&[(1, HOUR), (2, Duration::ZERO)])
            .await
            .unwrap();
        assert!(q.remove("absent").await.is_ok());
        let sha = lua_sha("purge", &["check_all"]);
        let cut = Cut::arm(&cluster, &proxy, sha.as_bytes());
        within("purge", q.purge()).await.unwrap();
        cut.ran_twice("the purge");
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
        let slot = cluster.slot("punctual:{cut-purge}:schedule").to_string();
        let node = cluster.node(proxy.upstream_port());
        assert_eq!(node.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), "0");
    }

    /// The answers a cluster queue keeps are forgotten once no second
    /// sending can come (twice the response timeout, then at most a second
    /// more: they are forgotten in batches); a write that changed nothing
    /// keeps nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_kept_answers_are_forgotten_after_twice_the_response_timeout() {
        let (cluster, proxy, _) = cluster_through_proxy("forget").await;
        // Answers kept 1 s.
        let q: RedisQueue<u64> = RedisQueue::builder("forget")
            .cluster(&[&proxy.url()])
            .response_timeout(ms(500))
            .build()
            .await
            .unwrap();
        let node = cluster.node(proxy.upstream_port());
        let key = "punctual:{forget}:requests";
        for i in 0..50 {
            q.insert(&i, HOUR).await.unwrap();
        }
        assert_eq!(node.cli(&["ZCARD", key]), "100", "two members per insert");
        assert!(!q.remove("absent").await.unwrap());
        assert_eq!(
            node.cli(&["ZCARD", key]),
            "100",
            "a remove that removed nothing kept its answer"
        );
        sleep(ms(2200)).await;
        q.insert(&50, HOUR).await.unwrap();
        assert_eq!(
            node.cli(&["ZCARD", key]),
            "2",
            "answers kept past twice the response timeout and a second"
        );
    }

    /// On a cluster a write reads `requests` (its identity) before it
    /// writes anything: a key of a foreign type there fails it whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_foreign_requests_key_fails_writes_before_they_write() {
        let (cluster, proxy, q) = cluster_through_proxy("foreign-requests").await;
        assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
        let d = within("take", q.take()).await.unwrap();
        assert!(q.insert_with_id("b", &2, Duration::ZERO).await.unwrap());
        let node = cluster.node(proxy.upstream_port());
        let key = "punctual:{foreign-requests}:requests";
        node.cli(&["DEL", key]);
        assert_eq!(node.cli(&["SET", key, "oops"]), "OK");
        let contents = || {
            [
                node.cli(&[
                    "ZRANGE",
                    "punctual:{foreign-requests}:schedule",
                    "0",
                    "-1",
                    "WITHSCORES",
                ]),
                node.cli(&[
                    "ZRANGE",
                    "punctual:{foreign-requests}:leases",
                    "0",
                    "-1",
                    "WITHSCORES",
                ]),
                node.cli(&["HGETALL", "punctual:{foreign-requests}:entries"]),
                node.cli(&["GET", "punctual:{foreign-requests}:seq"]),
                node.cli(&["GET", key]),
            ]
        };
        let before = contents();
        let errors = [
            ("insert", q.insert(&3, HOUR).await.err()),
            ("claim", q.try_take().await.err()),
            ("remove", q.remove("b").await.err()),
            ("reset", q.reset("b", HOUR).await.err()),
            ("ack", d.ack().await.err()),
        ];
        for (what, error) in errors {
            let error = error.unwrap_or_else(|| panic!("{what} worked on a foreign key"));
            assert!(error.to_string().contains("WRONGTYPE"), "{what}: {error}");
        }
        assert_eq!(contents(), before, "a write that failed wrote");
    }

    /// A worker's acks ride with its next claim. That claim sent twice: the
    /// second execution found the acked entry gone and answered "lost", and
    /// the worker counted a run that succeeded as lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_worker_claim_cut_after_it_ran_counts_its_ack_once() {
        let (_cluster, proxy, q) = cluster_through_proxy("cut-worker").await;
        warm_up(&q).await;
        assert!(q.insert_with_id("w1", &1, Duration::ZERO).await.unwrap());
        let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
        let (finish, finish_rx) = tokio::sync::oneshot::channel::<()>();
        let hooks = std::sync::Mutex::new(Some((started_tx, finish_rx)));
        let worker = Worker::builder(q.clone())
            .concurrency(1)
            .spawn(move |_job: Job<u64>| {
                let hook = hooks.lock().unwrap().take();
                async move {
                    if let Some((started, finish)) = hook {
                        let _ = started.send(());
                        let _ = finish.await;
                    }
                    Ok::<(), String>(())
                }
            });
        within("the run starts", started).await.unwrap();
        // The claim that carries the ack of "w1": its op is (a, w1, ...).
        proxy.cut_after_next_request(Some(b"$1\r\na\r\n$2\r\nw1\r\n"));
        finish.send(()).unwrap();
        let give_up = Instant::now() + ms(10_000);
        while worker.stats().completed + worker.stats().lost == 0 {
            assert!(Instant::now() < give_up, "the ack was not settled");
            sleep(ms(20)).await;
        }
        assert!(!proxy.armed(), "the claim was not cut");
        let stats = worker.shutdown(ms(1000)).await;
        assert_eq!(
            (stats.completed, stats.lost),
            (1, 0),
            "an ack carried by a claim sent twice was counted as lost"
        );
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
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
