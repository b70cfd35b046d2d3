#![cfg(feature = "redis")]
//! Fault injection for `punctual::redis::RedisQueue`: a real `redis-server`
//! (append-only file, fsync on every write) that is SIGKILLed and
//! restarted, or frozen (SIGSTOP), connections killed by the server, and a
//! consumer process that aborts while it holds a lease.
//!
//! Real time throughout: Redis decides what is due and when a lease ends.
//! Every wait is bounded by [`PATIENCE`] or a multiple of it, far above what
//! a healthy run needs. The only time limits asserted are the ones API.md
//! states: `take_timeout` gives up after its timeout, and a waiting consumer
//! asks Redis at least every `poll_interval` (checked with a bound 100 times
//! longer).
//!
//! The consumer process is this same test binary, re-run on one test with
//! `PUNCTUAL_TEST_CHILD` set (as `tests/scheduler_double_panics.rs` does).

mod common;

use common::redis_queue::{HOUR, finish};
use common::redis_server::RedisServer;
use punctual::redis::{Delivery, Error, RedisQueue, RedisStats};
use std::collections::BTreeSet;
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::task::block_in_place;
use tokio::time::{Instant, sleep, timeout};

/// Bound on any single wait that should take milliseconds.
const PATIENCE: Duration = Duration::from_secs(10);
/// Bound on a call made while the server is down; see [`timed_down`].
const DOWN_PATIENCE: Duration = Duration::from_secs(20);
/// Short leases, so a lost one comes back quickly.
const LEASE: Duration = Duration::from_millis(300);
const POLL: Duration = Duration::from_millis(100);

const CHILD: &str = "PUNCTUAL_TEST_CHILD";
const CHILD_URL: &str = "PUNCTUAL_TEST_REDIS_URL";
const CHILD_QUEUE: &str = "PUNCTUAL_TEST_QUEUE";

async fn queue(server: &RedisServer, name: &str, lease: Duration) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(&server.url())
        .lease(lease)
        .poll_interval(POLL)
        .build()
        .await
        .expect("connect to the test server")
}

/// `call`, once more if it fails: the first request on a connection that the
/// server dropped may report the loss (API.md: producer calls return `Err`
/// when Redis cannot be reached); the second must go through.
async fn second_try<R, F, Fut>(what: &str, mut call: F) -> R
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R, Error>>,
{
    match timeout(PATIENCE, call()).await {
        Ok(Ok(value)) => return value,
        Ok(Err(error)) => eprintln!("{what}: first call after the fault failed: {error}"),
        Err(_) => panic!("{what}: no answer within {PATIENCE:?}"),
    }
    timeout(PATIENCE, call())
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PATIENCE:?} on the second try"))
        .unwrap_or_else(|error| panic!("{what}: still failing on the second try: {error}"))
}

/// Awaits `call`, made while the server is down, and returns its result and
/// how long it took. Bounded by [`DOWN_PATIENCE`], well above the time
/// redis-rs's `ConnectionManager` spends on its reconnect attempts before a
/// request waiting on them fails (about 1.2 s as `src/redis/builder.rs`
/// configures it; 9.5 s with the client's defaults).
async fn timed_down<R>(what: &str, call: impl Future<Output = R>) -> (R, Duration) {
    let start = Instant::now();
    let result = timeout(DOWN_PATIENCE, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {DOWN_PATIENCE:?}"));
    (result, start.elapsed())
}

fn ms(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis()
}

/// Inserts are acknowledged only once fsynced (`appendfsync always`), so
/// every insert that returned `Ok` before the server was SIGKILLed is there
/// after the restart, and so is every one that returned `Ok` after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_insert_that_returned_ok_survives_a_kill_9_of_the_server() {
    const WORKERS: u64 = 10;
    const PER_WORKER: u64 = 50;
    let mut server = RedisServer::start();
    let q = queue(&server, "survivors", LEASE).await;

    let ok = Arc::new(Mutex::new(Vec::<String>::new()));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (q, ok, failed) = (q.clone(), Arc::clone(&ok), Arc::clone(&failed));
        workers.push(tokio::spawn(async move {
            for n in 0..PER_WORKER {
                match q.insert(&(w * PER_WORKER + n), HOUR).await {
                    Ok(id) => ok.lock().unwrap().push(id),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    // Kill in the middle: some inserts done, some in flight, some to come.
    let start = Instant::now();
    while ok.lock().unwrap().len() < 150 {
        assert!(start.elapsed() < PATIENCE, "150 inserts did not complete");
        tokio::task::yield_now().await;
    }
    block_in_place(|| server.kill());
    let ok_at_kill = ok.lock().unwrap().len();
    sleep(Duration::from_millis(300)).await;
    block_in_place(|| server.restart());

    for worker in workers {
        timeout(6 * PATIENCE, worker)
            .await
            .expect("inserts finish after the restart")
            .unwrap();
    }
    let ok = ok.lock().unwrap().clone();
    let failed = failed.load(Ordering::Relaxed);
    eprintln!(
        "{} inserts Ok ({ok_at_kill} when killed), {failed} Err",
        ok.len()
    );
    assert_eq!(ok.len() + failed, (WORKERS * PER_WORKER) as usize);
    assert!(
        ok_at_kill < ok.len() + failed,
        "the kill came after the end"
    );

    let mut lost = Vec::new();
    for id in &ok {
        let deadline = second_try("deadline", || q.deadline(id)).await;
        if deadline.is_none() {
            lost.push(id.clone());
        }
    }
    assert!(
        lost.is_empty(),
        "inserts that returned Ok are gone: {lost:?}"
    );
    let stats = q.stats().await.unwrap();
    // An insert that returned Err may or may not have been applied.
    assert!(
        stats.pending as usize >= ok.len() && stats.pending <= WORKERS * PER_WORKER,
        "{stats:?} for {} Ok inserts",
        ok.len()
    );
    assert_eq!((stats.due, stats.leased, stats.dead), (0, 0, 0));
    let distinct: BTreeSet<_> = ok.iter().collect();
    assert_eq!(
        distinct.len(),
        ok.len(),
        "a generated id was handed out twice"
    );
}

/// Consumers waiting in `take()` and on `stream()` while the server is
/// SIGKILLed and restarted keep waiting (no `Err`) and get an entry that was
/// inserted before the kill and due after the restart, and one inserted
/// after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_consumers_ride_through_a_kill_9_and_restart() {
    ride_through(Duration::from_millis(500)).await;
}

/// As above, with the server down longer than the client's own reconnect
/// attempts last (about 1.2 s, see [`timed_down`]), so the queue has to
/// start reconnecting again itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_consumers_ride_through_an_outage_longer_than_the_client_retries() {
    ride_through(Duration::from_secs(4)).await;
}

async fn ride_through(down: Duration) {
    use futures::StreamExt;

    let mut server = RedisServer::start();
    let q = queue(&server, "ride", LEASE).await;
    // Due after the restart: the outage plus a margin.
    assert!(
        q.insert_with_id("before", &1, down + Duration::from_secs(1))
            .await
            .unwrap()
    );

    // Each acks at once, so no lease runs out while the test looks at the
    // other consumer.
    let taker = {
        let q = q.clone();
        tokio::spawn(async move { ack_at_once(q.take().await).await })
    };
    let streamer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut stream = Box::pin(q.stream());
            ack_at_once(stream.next().await.expect("the stream never ends")).await
        })
    };
    sleep(Duration::from_millis(200)).await; // both are waiting
    assert!(!taker.is_finished() && !streamer.is_finished());

    block_in_place(|| server.kill());
    sleep(down).await;
    assert!(
        !taker.is_finished(),
        "take returned while the server was down"
    );
    assert!(
        !streamer.is_finished(),
        "the stream yielded while the server was down"
    );
    block_in_place(|| server.restart());
    let restarted = Instant::now();

    let after = || q.insert_with_id("after", &2, Duration::ZERO);
    assert!(second_try("insert after restart", after).await);

    let mut got = BTreeSet::new();
    for (what, task) in [("take", taker), ("stream", streamer)] {
        let (id, attempt, acked, taken_at) = timeout(PATIENCE + down, task)
            .await
            .unwrap_or_else(|_| panic!("{what} got nothing after the restart"))
            .unwrap()
            .unwrap_or_else(|error| panic!("{what} returned Err across the restart: {error}"));
        eprintln!(
            "{what} got {id} {:?} after the restart",
            taken_at.duration_since(restarted)
        );
        assert_eq!(attempt, 1, "{what}: {id} delivered again");
        assert!(acked, "{what}: ack after restart");
        got.insert(id);
    }
    assert_eq!(
        got,
        BTreeSet::from(["after".to_owned(), "before".to_owned()])
    );
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

/// The id, attempt and ack result of a delivery, acked as soon as it
/// arrives, and when it arrived.
async fn ack_at_once(
    taken: Result<Delivery<u64>, Error>,
) -> Result<(String, u32, bool, Instant), Error> {
    let taken_at = Instant::now();
    let delivery = taken?;
    let (id, attempt) = (delivery.id().to_owned(), delivery.attempt());
    let acked = delivery.ack().await?;
    Ok((id, attempt, acked, taken_at))
}

/// A consumer process that dies (`abort`) while it holds a lease loses
/// nothing: after the lease the entry goes to another consumer with
/// attempt 2, who acks it.
#[test]
fn an_entry_leased_to_a_process_that_aborts_is_delivered_again() {
    const TEST: &str = "an_entry_leased_to_a_process_that_aborts_is_delivered_again";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    if std::env::var(CHILD).as_deref() == Ok("abort-holding-lease") {
        rt.block_on(async {
            let url = std::env::var(CHILD_URL).unwrap();
            let name = std::env::var(CHILD_QUEUE).unwrap();
            let q: RedisQueue<u64> = RedisQueue::builder(&name)
                .url(&url)
                .lease(LEASE)
                .poll_interval(POLL)
                .build()
                .await
                .unwrap();
            let delivery = q.take_timeout(PATIENCE).await.unwrap().expect("an entry");
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "TAKEN {} {} {}",
                delivery.id(),
                delivery.attempt(),
                ms(delivery.lease_until())
            )
            .unwrap();
            out.flush().unwrap();
            std::process::abort(); // the ack below never runs
            #[allow(unreachable_code)]
            {
                delivery.ack().await.unwrap();
                println!("ACKED");
            }
        });
        return;
    }

    let server = RedisServer::start();
    let q = rt.block_on(async {
        let q = queue(&server, "abort", LEASE).await;
        assert!(q.insert_with_id("job", &7, Duration::ZERO).await.unwrap());
        q
    });

    let mut child = spawn_child(
        TEST,
        "abort-holding-lease",
        &[(CHILD_URL, server.url()), (CHILD_QUEUE, "abort".to_owned())],
    );
    let (status, stdout, stderr) = finish(&mut child, 3 * PATIENCE);
    assert!(
        !status.success(),
        "the child should have aborted: {status:?}\n{stderr}"
    );
    // The harness may have printed `test <name> ... ` on the same line.
    let taken = stdout
        .lines()
        .find_map(|line| line.split_once("TAKEN ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child took nothing ({status:?}):\n{stdout}\n{stderr}"));
    assert!(!stdout.contains("ACKED"));
    let fields: Vec<&str> = taken.split(' ').collect();
    assert_eq!(fields[..2], ["job", "1"], "{taken}");
    let child_lease_until: u128 = fields[2].parse().unwrap();

    rt.block_on(async {
        // Still leased to the dead child, or due again if its lease ran out.
        let stats = q.stats().await.unwrap();
        assert_eq!(stats.leased + stats.due, 1, "{stats:?}");

        let again = q
            .take_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("the entry comes back after the lease");
        assert_eq!((again.id(), *again.value(), again.attempt()), ("job", 7, 2));
        // Due again exactly when the child's lease ran out (server clock),
        // and taken no earlier.
        assert_eq!(ms(again.deadline()), child_lease_until);
        assert!(ms(again.lease_until()) >= child_lease_until + LEASE.as_millis());
        assert!(again.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
        assert_eq!(q.deadline("job").await.unwrap(), None);
    });
}

/// With the server gone, every producer and inspection call returns `Err`
/// (in bounded time) and `try_take` too, while `take_timeout` keeps waiting
/// and returns `Ok`; after the restart the queue is exactly as before:
/// nothing was half written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_server_down_calls_fail_cleanly_and_change_nothing() {
    let mut server = RedisServer::start();
    // Long leases: nothing changes state on its own during the test.
    let q = queue(&server, "down", Duration::from_secs(120)).await;
    let other = queue(&server, "down-other", LEASE).await;

    // One entry in each state: pending, due, leased (twice), dead.
    let strings: RedisQueue<String> = RedisQueue::builder("down")
        .url(&server.url())
        .build()
        .await
        .unwrap();
    assert!(
        strings
            .insert_with_id("bad", &"not a number".to_owned(), Duration::ZERO)
            .await
            .unwrap()
    );
    // One attempt allowed: its first failed one (it does not decode as
    // u64) buries it.
    let strict: RedisQueue<u64> = RedisQueue::builder("down")
        .url(&server.url())
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    assert!(
        strict.try_take().await.unwrap().is_none(),
        "`bad` is buried"
    );
    assert!(
        q.insert_with_id("leased1", &1, Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(
        q.insert_with_id("leased2", &2, Duration::ZERO)
            .await
            .unwrap()
    );
    let mut leased1 = q.try_take().await.unwrap().unwrap();
    let leased2 = q.try_take().await.unwrap().unwrap();
    assert_eq!((leased1.id(), leased2.id()), ("leased1", "leased2"));
    assert!(q.insert_with_id("due", &3, Duration::ZERO).await.unwrap());
    assert!(q.insert_with_id("pending1", &4, HOUR).await.unwrap());
    assert!(q.insert_with_id("pending2", &5, HOUR).await.unwrap());

    let ids = [
        "bad", "leased1", "leased2", "due", "pending1", "pending2", "new",
    ];
    let snapshot = |q: RedisQueue<u64>| async move {
        let stats = q.stats().await.unwrap();
        let mut deadlines = Vec::new();
        for id in ids {
            deadlines.push((id, q.deadline(id).await.unwrap()));
        }
        let dead: Vec<_> = q
            .dead_letters(10)
            .await
            .unwrap()
            .into_iter()
            .map(|d| (d.id, d.value, d.attempts, d.reason))
            .collect();
        (stats, deadlines, dead)
    };
    let before = snapshot(q.clone()).await;
    assert_eq!(
        before.0,
        RedisStats {
            pending: 2,
            due: 1,
            leased: 2,
            dead: 1
        }
    );
    assert_eq!(before.2.len(), 1);

    block_in_place(|| server.kill());

    // The first call finds the connection broken and fails at once; the
    // others wait for the client's reconnect attempts to give up.
    // Consumers wait instead.
    let (ack, took) = timed_down("ack", leased2.ack()).await;
    eprintln!("server down: ack -> {ack:?} after {took:?}");
    assert!(matches!(ack, Err(Error::Redis(_))), "ack: {ack:?}");
    let (calls, (take, took)) = tokio::join!(
        calls_with_the_server_down(&q, &mut leased1),
        timed_down("take_timeout", q.take_timeout(Duration::from_secs(2))),
    );
    for (what, outcome, took) in calls {
        eprintln!("server down: {what} -> {outcome:?} after {took:?}");
        assert!(
            matches!(outcome, Err(Error::Redis(_))),
            "{what} with the server down: {outcome:?}"
        );
    }
    eprintln!("server down: take_timeout(2 s) -> {take:?} after {took:?}");
    assert!(
        matches!(take, Ok(None)),
        "take_timeout with the server down: {take:?}"
    );
    // One that is waiting when the server comes back gets an entry.
    let waiting = {
        let other = other.clone();
        tokio::spawn(async move { other.take_timeout(3 * PATIENCE).await })
    };
    sleep(Duration::from_millis(200)).await;
    block_in_place(|| server.restart());

    // The first call may still report the outage; then the queue is as it was.
    second_try("stats after restart", || q.stats()).await;
    let after = snapshot(q.clone()).await;
    assert_eq!(after, before, "the failed calls changed the queue");

    // The delivery handles work again.
    assert!(leased1.extend(HOUR).await.unwrap());
    assert!(
        second_try("insert on the other queue", || other.insert_with_id(
            "x",
            &1,
            Duration::ZERO
        ))
        .await
    );
    let delivery = timeout(4 * PATIENCE, waiting)
        .await
        .expect("the waiting take_timeout returns")
        .unwrap()
        .expect("take_timeout does not fail across a restart")
        .expect("and gets the entry inserted after the restart");
    assert_eq!(delivery.id(), "x");
    assert!(delivery.ack().await.unwrap());
}

/// `take_timeout(t)` gives up after `t` with `Ok(None)` ("as `take`, giving
/// up after `timeout`"), also while the server is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_timeout_with_the_server_down_returns_at_its_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    // Room for one claim and one back-off pause past the timeout.
    const SLACK: Duration = Duration::from_secs(2);
    let mut server = RedisServer::start();
    let q = queue(&server, "timeout", LEASE).await;
    assert!(q.try_take().await.unwrap().is_none());

    block_in_place(|| server.kill());
    let mut late = Vec::new();
    for round in 0..2 {
        let (taken, took) = timed_down("take_timeout", q.take_timeout(TIMEOUT)).await;
        eprintln!("round {round}: take_timeout({TIMEOUT:?}) -> {taken:?} after {took:?}");
        assert!(matches!(taken, Ok(None)), "round {round}: {taken:?}");
        if took > TIMEOUT + SLACK {
            late.push(took);
        }
    }
    assert!(
        late.is_empty(),
        "take_timeout({TIMEOUT:?}) with the server down returned after {late:?}"
    );
}

/// The server process freezes (SIGSTOP: connections stay open, nothing is
/// answered) and resumes (SIGCONT). While it is frozen, producer calls return
/// `Err` in bounded time and a waiting consumer keeps waiting; once it
/// resumes, the consumer gets entries, and an insert that returned `Ok` is
/// there. An insert that returned `Err` may have been applied anyway, when
/// the server read it after resuming: `Err` means "unknown", which is why
/// `insert_with_id` exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_fails_calls_in_bounded_time_and_consumers_wait() {
    let server = RedisServer::start();
    let q = queue(&server, "frozen", LEASE).await;
    let consumer = {
        let q = q.clone();
        tokio::spawn(async move { ack_at_once(q.take().await).await })
    };
    sleep(Duration::from_millis(200)).await; // waiting

    let frozen = Frozen::stop(&server);
    let ((insert, t_insert), (stats, t_stats), (take, t_take)) = tokio::join!(
        timed_down(
            "insert_with_id",
            q.insert_with_id("frozen", &1, Duration::ZERO)
        ),
        timed_down("stats", q.stats()),
        timed_down("take_timeout", q.take_timeout(Duration::from_secs(1))),
    );
    eprintln!("frozen: insert_with_id -> {insert:?} after {t_insert:?}");
    eprintln!("frozen: stats -> {stats:?} after {t_stats:?}");
    eprintln!("frozen: take_timeout(1 s) -> {take:?} after {t_take:?}");
    assert!(matches!(insert, Err(Error::Redis(_))), "{insert:?}");
    assert!(matches!(stats, Err(Error::Redis(_))), "{stats:?}");
    assert!(
        matches!(take, Ok(None)),
        "take_timeout while frozen: {take:?}"
    );
    assert!(
        !consumer.is_finished(),
        "take returned while the server was frozen"
    );
    drop(frozen);

    let late = second_try("deadline after SIGCONT", || q.deadline("frozen")).await;
    eprintln!(
        "the insert that returned Err was applied: {}",
        late.is_some()
    );
    let thawed = || q.insert_with_id("thawed", &2, Duration::ZERO);
    assert!(second_try("insert after SIGCONT", thawed).await);

    let mut expected = BTreeSet::from(["thawed".to_owned()]);
    if late.is_some() {
        expected.insert("frozen".to_owned());
    }
    let (id, _, acked, _) = timeout(PATIENCE, consumer)
        .await
        .expect("the waiting consumer gets an entry after SIGCONT")
        .unwrap()
        .expect("take does not fail across a freeze");
    assert!(acked);
    let mut got = BTreeSet::from([id]);
    while got.len() < expected.len() {
        let delivery = q
            .take_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("every entry is delivered");
        got.insert(delivery.id().to_owned());
        assert!(delivery.ack().await.unwrap());
    }
    assert_eq!(got, expected);
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

/// The server process stopped with SIGSTOP; continued (SIGCONT) on drop.
struct Frozen(String);

impl Frozen {
    fn stop(server: &RedisServer) -> Frozen {
        let info = server.cli(&["INFO", "server"]);
        let pid = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("process_id:"))
            .expect("INFO names the process")
            .to_owned();
        signal("-STOP", &pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("-CONT", &self.0);
    }
}

fn signal(signal: &str, pid: &str) {
    let status = Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}: {status:?}");
}

type Outcome = (&'static str, Result<(), Error>, Duration);

/// Every producer and inspection call, and `try_take` and `extend`, at once;
/// each outcome with how long it took.
async fn calls_with_the_server_down(
    q: &RedisQueue<u64>,
    leased: &mut Delivery<u64>,
) -> Vec<Outcome> {
    async fn run<R>(what: &'static str, call: impl Future<Output = Result<R, Error>>) -> Outcome {
        let (outcome, took) = timed_down(what, call).await;
        (what, outcome.map(drop), took)
    }
    let (a, b, c, d, e, f, g, h, i, j, k) = tokio::join!(
        run("insert", q.insert(&9, Duration::ZERO)),
        run(
            "insert_with_id",
            q.insert_with_id("new", &9, Duration::ZERO)
        ),
        run("remove", q.remove("pending1")),
        run("reset", q.reset("pending2", Duration::ZERO)),
        run("deadline", q.deadline("pending1")),
        run("stats", q.stats()),
        run("dead_letters", q.dead_letters(10)),
        run("requeue_dead", q.requeue_dead("bad", Duration::ZERO)),
        run("purge", q.purge()),
        run("try_take", q.try_take()),
        run("extend", leased.extend(HOUR)),
    );
    vec![a, b, c, d, e, f, g, h, i, j, k]
}

/// The server drops every client connection (`CLIENT KILL TYPE normal`,
/// then `TYPE pubsub`) while consumers wait: they reconnect and get entries
/// inserted afterwards, and producer calls work again (at the latest on
/// their second try).
///
/// One consumer per handle (each handle has its own connections), so that
/// this test does not depend on the hand-off between the waiting consumers
/// of one handle; see
/// [`consumers_waiting_on_one_handle_all_get_entries_inserted_one_by_one`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_and_producers_recover_when_the_server_drops_connections() {
    const HANDLES: usize = 4;
    let server = RedisServer::start();
    let mut handles = Vec::new();
    for _ in 0..HANDLES {
        handles.push(queue(&server, "dropped", LEASE).await);
    }
    let q = &handles[0];

    for round in 0..3 {
        let mut consumers = Vec::new();
        for handle in &handles {
            let handle = handle.clone();
            consumers.push(tokio::spawn(async move {
                ack_at_once(handle.take().await).await
            }));
        }
        sleep(Duration::from_millis(300)).await; // all waiting, listeners subscribed

        let killed_normal = server.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
        let killed_pubsub = server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        eprintln!("round {round}: killed {killed_normal} normal, {killed_pubsub} pubsub clients");
        assert_eq!(killed_normal, HANDLES.to_string());
        assert_eq!(killed_pubsub, HANDLES.to_string());

        // Producer calls, on each handle: a second try at the latest.
        for handle in &handles {
            second_try("stats after CLIENT KILL", || handle.stats()).await;
        }
        let mut inserted = BTreeSet::new();
        for n in 0..consumers.len() {
            let id = format!("r{round}-{n}");
            let value = n as u64;
            assert!(
                second_try("insert after CLIENT KILL", || {
                    q.insert_with_id(&id, &value, Duration::ZERO)
                })
                .await
            );
            inserted.insert(id);
        }
        let inserted_at = Instant::now();

        let mut got = BTreeSet::new();
        let mut last = inserted_at;
        for consumer in consumers {
            let (id, attempt, acked, taken_at) = timeout(PATIENCE, consumer)
                .await
                .expect("a waiting consumer gets an entry after CLIENT KILL")
                .unwrap()
                .unwrap_or_else(|error| {
                    panic!("take failed after the server dropped connections: {error}")
                });
            assert_eq!(attempt, 1, "{id} delivered again");
            assert!(acked, "{id}: ack");
            got.insert(id);
            last = last.max(taken_at);
        }
        eprintln!(
            "round {round}: all delivered {:?} after the inserts",
            last.duration_since(inserted_at)
        );
        assert_eq!(got, inserted);
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    }
}

/// Several consumers wait in `take()` on one handle (one leader, the others
/// followers) and entries arrive one after the other: every consumer gets
/// one, each within a bounded time. No fault is injected: this is the
/// hand-off that the test above avoids.
///
/// A follower woken to take over from a leader that left (or because a
/// claim saw more entries due) may claim and leave with an entry without
/// ever taking the lead; then the remaining followers wait untimed while
/// entries are due and nobody asks Redis (API.md: a waiting consumer "asks
/// Redis again at least every `poll_interval`"). Each round races inserts
/// against those hand-offs: inserted one after the other, then all at once
/// with deadlines a millisecond apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_waiting_on_one_handle_all_get_entries_inserted_one_by_one() {
    const CONSUMERS: usize = 6;
    let server = RedisServer::start();
    let q = queue(&server, "hand-off", LEASE).await;
    for round in 0..40 {
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { ack_at_once(q.take().await).await })
            })
            .collect();
        sleep(Duration::from_millis(30)).await; // all waiting
        let inserts = (0..CONSUMERS).map(|n| {
            let (q, id) = (q.clone(), format!("r{round}-{n}"));
            async move {
                let delay = Duration::from_millis(n as u64);
                assert!(q.insert_with_id(&id, &0, delay).await.unwrap());
            }
        });
        if round % 2 == 0 {
            for insert in inserts {
                insert.await;
            }
        } else {
            futures::future::join_all(inserts).await;
        }
        for (n, consumer) in consumers.into_iter().enumerate() {
            let Ok(taken) = timeout(PATIENCE, consumer).await else {
                panic!(
                    "round {round}: consumer {n} still waits after {PATIENCE:?} \
                     while entries are due: {:?}",
                    q.stats().await
                );
            };
            let (id, attempt, acked, _) = taken.unwrap().unwrap();
            assert_eq!(attempt, 1, "{id}");
            assert!(acked, "{id}");
        }
    }
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

/// Spawns this test binary on `test` alone, in child `mode`.
fn spawn_child(test: &str, mode: &str, env: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child test process")
}

/// A pause is kept in Redis: after a kill -9 and a restart of the server
/// (append-only file on), the queue is still paused, a consumer takes
/// nothing, and `resume` lets it take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_survives_a_restart_of_the_server() {
    let mut server = RedisServer::start();
    let q = queue(&server, "paused", LEASE).await;
    assert!(q.insert_with_id("a", &1, Duration::ZERO).await.unwrap());
    assert!(q.pause().await.unwrap());
    block_in_place(|| server.kill());
    block_in_place(|| server.restart());
    let is_paused = second_try("is_paused after the restart", || q.is_paused()).await;
    assert!(is_paused, "the pause was lost with the restart");
    assert!(
        q.try_take().await.unwrap().is_none(),
        "a paused queue handed an entry out"
    );
    assert!(q.resume().await.unwrap());
    let d = q
        .take_timeout(PATIENCE)
        .await
        .unwrap()
        .expect("taken after resume");
    assert_eq!(d.id(), "a");
    assert!(d.ack().await.unwrap());
}
