#![cfg(feature = "postgres")]
//! Fault injection for `punctual::postgres::PgQueue` on real servers:
//! backends terminated under the queue (`pg_terminate_backend`) on the
//! shared test server, a private server (`tests/common/pg_server.rs`)
//! SIGKILLed and restarted, and consumer and worker processes SIGKILLed
//! while they hold a lease.
//!
//! Real time throughout: the database's clock decides what is due and when
//! a lease ends. Every wait is bounded by [`PATIENCE`] (or a small multiple),
//! far above what a healthy run needs; no speed is asserted.
//!
//! Terminations pick the queue's backends by database *and*
//! `application_name` (set in the queue's URL), so the tests of this binary,
//! which share one database, never terminate each other's connections.
//!
//! The child processes are this same test binary, re-run on
//! [`child_process`] with `PUNCTUAL_TEST_CHILD` set (as
//! `tests/durable_worker.rs` does).

mod common;
#[path = "common/pg_server.rs"]
mod pg_server;

use common::Rng;
use common::ledger::Ledger;
use common::pg::{PgDb, admin_url, psql};
use common::redis_queue::{finish, wall};
use pg_server::PgServer;
use punctual::durable::{Job, Worker};
use punctual::postgres::sqlx::{self, Connection, PgConnection};
use punctual::postgres::{Error, PgQueue, PgStats};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::task::block_in_place;
use tokio::time::{Instant, sleep, timeout};

/// Bound on any single wait that should take milliseconds.
const PATIENCE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);
/// A delay no test reaches: the entry stays pending.
const HOUR: Duration = Duration::from_secs(3600);
/// Slack on comparisons of database times taken by different statements.
const SLACK_MS: i64 = 10;

const CHILD: &str = "PUNCTUAL_TEST_CHILD";
const CHILD_URL: &str = "PUNCTUAL_TEST_PG_URL";
const CHILD_QUEUE: &str = "PUNCTUAL_TEST_QUEUE";
const CHILD_LEASE_MS: &str = "PUNCTUAL_TEST_LEASE_MS";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `url` with `application_name=<app>` added, so its backends can be told
/// apart in `pg_stat_activity`.
fn with_app(url: &str, app: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={app}")
}

async fn queue(url: &str, name: &str, lease: Duration) -> PgQueue<u64> {
    PgQueue::builder(name)
        .url(url)
        .lease(lease)
        .max_attempts(0)
        .poll_interval(POLL)
        .build()
        .await
        .expect("connect to the test server")
}

/// An admin connection to the server's `postgres` database (never one of
/// the test database's backends).
async fn admin() -> PgConnection {
    PgConnection::connect(&admin_url()).await.unwrap()
}

/// Terminates every backend of database `db` whose `application_name` is
/// `app`; how many were terminated.
async fn terminate(admin: &mut PgConnection, db: &str, app: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = $1 AND application_name = $2 AND pid <> pg_backend_pid()",
    )
    .bind(db)
    .bind(app)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// How many backends of database `db` with `application_name` `app` have
/// sent `LISTEN` (the listener's connection).
async fn listening(admin: &mut PgConnection, db: &str, app: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = $1 AND application_name = $2 AND query ILIKE 'LISTEN%'",
    )
    .bind(db)
    .bind(app)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// The database's clock, in ms since the epoch.
async fn db_now_ms(url: &str) -> i64 {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar::<_, i64>("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// `(run_at, since, attempt)` of entry `id` of queue `name`: while leased,
/// the end of its lease and when the claim was made (ms, database clock).
async fn lease_row(url: &str, name: &str, id: &str) -> (Option<i64>, Option<i64>, i32) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::query_as::<_, (Option<i64>, Option<i64>, i32)>(
        "SELECT run_at, since, attempt FROM punctual.entries WHERE queue = $1 AND id = $2",
    )
    .bind(name)
    .bind(id)
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

fn epoch_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `fut`, or a panic naming `what` after `limit`.
async fn within<F: Future>(what: &str, limit: Duration, fut: F) -> F::Output {
    timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {limit:?}"))
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after
/// [`PATIENCE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = Instant::now() + PATIENCE;
    while !check().await {
        assert!(
            Instant::now() < give_up,
            "{what}: not true after {PATIENCE:?}"
        );
        sleep(ms(20)).await;
    }
}

/// `call`, once more if it fails: the first request on a pooled connection
/// that the server dropped may report the loss (API.md: producer calls
/// return `Err` when the database cannot be reached); the second must go
/// through.
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

// ---------------------------------------------------------------------
// Backends terminated under the queue (shared server, this binary's db).
// ---------------------------------------------------------------------

/// A consumer waiting in `take()` while every connection of its handle
/// (its `LISTEN` connection and its pool's) is terminated, five times over,
/// keeps waiting (no `Err`) and gets the entry inserted afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_take_rides_through_terminated_backends() {
    const APP: &str = "punctual_faults_ride";
    let db = PgDb::new();
    let q = queue(&with_app(&db.url(), APP), "ride", ms(500)).await;
    let producer = queue(&db.url(), "ride", ms(500)).await;
    let mut admin = admin().await;

    let taker = tokio::spawn({
        let q = q.clone();
        async move { q.take().await }
    });
    // Waiting: its LISTEN connection is open (besides its pool's).
    let start = Instant::now();
    while listening(&mut admin, db.name(), APP).await < 1 {
        assert!(start.elapsed() < PATIENCE, "the take never started waiting");
        sleep(ms(10)).await;
    }
    let mut terminated = Vec::new();
    for _ in 0..5 {
        terminated.push(terminate(&mut admin, db.name(), APP).await);
        sleep(ms(150)).await;
        assert!(!taker.is_finished(), "take returned with nothing due");
    }
    eprintln!("terminated per round: {terminated:?}");
    assert!(terminated[0] >= 2, "nothing terminated: {terminated:?}");
    // Its claims go on (every `POLL`) on new connections.
    sleep(ms(300)).await;
    assert!(!taker.is_finished(), "take returned with nothing due");

    assert!(
        producer
            .insert_with_id("after", &7, Duration::ZERO)
            .await
            .unwrap()
    );
    let d = within("the waiting take", PATIENCE, taker)
        .await
        .unwrap()
        .expect("take rides through terminated backends");
    assert_eq!((d.id(), *d.value(), d.attempt()), ("after", 7, 1));
    assert!(d.ack().await.unwrap());
    assert_eq!(producer.stats().await.unwrap(), PgStats::default());
}

/// What one producer call returned.
#[derive(Debug)]
enum Outcome {
    Inserted,
    AlreadyThere,
    Failed,
}

/// Producers calling `insert_with_id` (and `insert_many`) in a loop while
/// the queue's backends are terminated every 50 ms: each call
/// either returns `Err` or its entry is there, exactly once, whole (value,
/// due time, never leased); an `Err` leaves the entry there at most once;
/// a batch is all there or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_during_terminations_get_err_or_their_entry_exactly_once() {
    const APP: &str = "punctual_faults_producers";
    const NAME: &str = "producers";
    const PRODUCERS: u64 = 4;
    const PER_PRODUCER: u64 = 100;
    const BATCHES: u64 = 40;
    const BATCH: u64 = 10;
    /// Values of batch entries: `MANY + batch * BATCH + i`.
    const MANY: u64 = 1_000_000;
    let db = PgDb::new();
    let q = queue(&with_app(&db.url(), APP), NAME, ms(500)).await;
    let mut admin = admin().await;

    let singles = Arc::new(Mutex::new(BTreeMap::<String, Outcome>::new()));
    let batches = Arc::new(Mutex::new(BTreeMap::<u64, Option<Vec<String>>>::new()));
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (q, singles) = (q.clone(), Arc::clone(&singles));
        producers.push(tokio::spawn(async move {
            for n in 0..PER_PRODUCER {
                let id = format!("p{p}-{n}");
                let outcome = match q.insert_with_id(&id, &(p * PER_PRODUCER + n), HOUR).await {
                    Ok(true) => Outcome::Inserted,
                    Ok(false) => Outcome::AlreadyThere,
                    Err(_) => Outcome::Failed,
                };
                singles.lock().unwrap().insert(id, outcome);
            }
        }));
    }
    {
        let (q, batches) = (q.clone(), Arc::clone(&batches));
        producers.push(tokio::spawn(async move {
            for b in 0..BATCHES {
                let entries: Vec<(u64, Duration)> =
                    (0..BATCH).map(|i| (MANY + b * BATCH + i, HOUR)).collect();
                let ids = q.insert_many(&entries).await.ok();
                batches.lock().unwrap().insert(b, ids);
            }
        }));
    }
    let done = Arc::new(AtomicBool::new(false));
    let terminator = tokio::spawn({
        let (done, db) = (Arc::clone(&done), db.name().to_owned());
        async move {
            let mut total = 0;
            let mut rounds = 0;
            while !done.load(Ordering::SeqCst) {
                total += terminate(&mut admin, &db, APP).await;
                rounds += 1;
                sleep(ms(50)).await;
            }
            (total, rounds)
        }
    });
    for producer in producers {
        within("the producers", 3 * PATIENCE, producer)
            .await
            .unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let (terminated, rounds) = terminator.await.unwrap();

    // Every row of the queue, checked against what the calls returned.
    let rows = psql(
        &db.url(),
        &format!(
            "SELECT id, value, run_at - (extract(epoch FROM clock_timestamp()) * 1000)::bigint, \
             attempt, token IS NULL FROM punctual.entries WHERE queue = '{NAME}'"
        ),
    );
    let mut present = BTreeMap::<String, u64>::new();
    let mut failures = Vec::new();
    for row in rows.lines() {
        let f: Vec<&str> = row.split('|').collect();
        let (id, value, left, attempt, free) = (f[0], f[1], f[2], f[3], f[4]);
        let left: i64 = left.parse().unwrap();
        if !(left > HOUR.as_millis() as i64 - 60_000
            && left <= HOUR.as_millis() as i64
            && attempt == "0"
            && free == "t")
        {
            failures.push(format!("{row}: not a whole pending entry"));
        }
        if present
            .insert(id.to_owned(), value.parse().unwrap())
            .is_some()
        {
            failures.push(format!("{id}: twice"));
        }
    }
    let singles = std::mem::take(&mut *singles.lock().unwrap());
    let mut count = BTreeMap::<&str, usize>::new();
    for (id, outcome) in singles.iter() {
        let (p, n) = id[1..].split_once('-').unwrap();
        let want = p.parse::<u64>().unwrap() * PER_PRODUCER + n.parse::<u64>().unwrap();
        let got = present.get(id);
        match outcome {
            Outcome::Inserted if got != Some(&want) => {
                failures.push(format!("{id}: Ok(true) but {got:?}, not {want}"));
            }
            Outcome::AlreadyThere => failures.push(format!("{id}: Ok(false) for a new id")),
            Outcome::Failed if got.is_some_and(|v| *v != want) => {
                failures.push(format!("{id}: Err, there with value {got:?}, not {want}"));
            }
            _ => {}
        }
        let kind = match outcome {
            Outcome::Inserted => "Ok(true)",
            Outcome::AlreadyThere => "Ok(false)",
            Outcome::Failed if got.is_some() => "Err, applied",
            Outcome::Failed => "Err, not applied",
        };
        *count.entry(kind).or_default() += 1;
    }
    assert_eq!(singles.len() as u64, PRODUCERS * PER_PRODUCER);

    // Batches: all there or none, with generated ids.
    let mut by_batch = BTreeMap::<u64, BTreeMap<u64, String>>::new();
    for (id, value) in &present {
        if *value >= MANY {
            let b = (value - MANY) / BATCH;
            by_batch.entry(b).or_default().insert(*value, id.clone());
        } else if !singles.contains_key(id) {
            failures.push(format!("{id}: never inserted"));
        }
    }
    let batches = std::mem::take(&mut *batches.lock().unwrap());
    let (mut batch_ok, mut batch_err_applied, mut batch_err_not) = (0, 0, 0);
    for b in 0..BATCHES {
        let there = by_batch.remove(&b).unwrap_or_default();
        if !there.is_empty() && there.len() as u64 != BATCH {
            failures.push(format!("batch {b}: half there: {there:?}"));
        }
        match &batches[&b] {
            Some(ids) => {
                batch_ok += 1;
                let want: Vec<&String> = ids.iter().collect();
                let got: Vec<&String> = there.values().collect();
                if want != got {
                    failures.push(format!("batch {b}: Ok({want:?}) but {got:?} there"));
                }
            }
            None if there.is_empty() => batch_err_not += 1,
            None => batch_err_applied += 1,
        }
    }
    if !by_batch.is_empty() {
        failures.push(format!("batches never inserted: {by_batch:?}"));
    }
    eprintln!(
        "{terminated} backends terminated in {rounds} rounds; single inserts: {count:?}; \
         batches: {batch_ok} Ok, {batch_err_applied} Err applied, {batch_err_not} Err not applied"
    );
    assert!(terminated > 0, "no backend was terminated");
    assert!(
        failures.is_empty(),
        "{} broken promises:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let stats = second_try("stats", || q.stats()).await;
    assert_eq!(stats.pending as usize, present.len());
}

/// A worker whose connections are terminated every 100 ms while it works
/// through 300 entries runs each handler to completion exactly once (no
/// entry is run twice: acks that failed are sent again while the lease
/// still holds) and acks them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_acks_every_entry_exactly_once_through_repeated_terminations() {
    const APP: &str = "punctual_faults_worker";
    const NAME: &str = "worker";
    const ENTRIES: u64 = 300;
    let db = PgDb::new();
    let lease = Duration::from_secs(2);
    let q = queue(&with_app(&db.url(), APP), NAME, lease).await;
    let producer = queue(&db.url(), NAME, lease).await;
    let mut admin = admin().await;

    let ledger = Arc::new(Ledger::new(ENTRIES as usize));
    let rng = Arc::new(Mutex::new(Rng(0x5EED_0001)));
    let worker = Worker::builder(q.clone()).concurrency(8).spawn({
        let (ledger, rng) = (Arc::clone(&ledger), Arc::clone(&rng));
        move |job: Job<u64>| {
            let ledger = Arc::clone(&ledger);
            let pause = ms(rng.lock().unwrap().below(30));
            async move {
                sleep(pause).await;
                ledger.delivered(*job.value() as usize);
                Ok::<(), String>(())
            }
        }
    });
    let mut rng = Rng(0x5EED_0002);
    let entries: Vec<(u64, Duration)> = (0..ENTRIES).map(|v| (v, ms(rng.below(1500)))).collect();
    producer.insert_many(&entries).await.unwrap();

    let mut terminated = 0;
    let mut rounds = 0;
    let start = Instant::now();
    while ledger.settled() < ENTRIES as usize {
        assert!(
            start.elapsed() < 2 * PATIENCE,
            "{} of {ENTRIES} run after {:?}: {:?}",
            ledger.settled(),
            2 * PATIENCE,
            worker.stats()
        );
        terminated += terminate(&mut admin, db.name(), APP).await;
        rounds += 1;
        sleep(ms(100)).await;
    }
    // The last acks land (with the worker's next request, on a new
    // connection if its last one was terminated).
    eventually("every entry acked", || {
        let producer = producer.clone();
        async move { producer.stats().await.unwrap() == PgStats::default() }
    })
    .await;
    let stats = worker.shutdown(ms(500)).await;
    eprintln!("{terminated} backends terminated in {rounds} rounds; worker: {stats:?}");
    assert!(terminated > 0, "no backend was terminated");
    assert_eq!(ledger.assert_exactly_once(), ENTRIES as usize);
    assert_eq!(
        (
            stats.completed,
            stats.failed,
            stats.dead,
            stats.lost,
            stats.running
        ),
        (ENTRIES, 0, 0, 0, 0)
    );
    assert_eq!(producer.stats().await.unwrap(), PgStats::default());
}

// ---------------------------------------------------------------------
// A private server SIGKILLed and restarted.
// ---------------------------------------------------------------------

/// Every insert that returned `Ok` before the postmaster was SIGKILLed is
/// there after the restart (committed means durable), and so is every one
/// that returned `Ok` after it; an `Err` insert may or may not be there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_insert_that_returned_ok_survives_a_kill_9_of_the_server() {
    const WORKERS: u64 = 10;
    const PER_WORKER: u64 = 50;
    let mut server = block_in_place(PgServer::start);
    let q = queue(&server.url(), "survivors", ms(500)).await;

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
        sleep(ms(1)).await;
    }
    let ok_before_kill: Vec<String> = ok.lock().unwrap().clone();
    block_in_place(|| server.kill());
    let ok_at_kill = ok.lock().unwrap().len();
    sleep(ms(300)).await;
    block_in_place(|| server.restart());

    for worker in workers {
        within("the inserts after the restart", 2 * PATIENCE, worker)
            .await
            .unwrap();
    }
    let ok = ok.lock().unwrap().clone();
    let failed = failed.load(Ordering::Relaxed);
    eprintln!(
        "{} inserts Ok ({} before the kill, {ok_at_kill} when it was done), {failed} Err",
        ok.len(),
        ok_before_kill.len()
    );
    assert_eq!(ok.len() + failed, (WORKERS * PER_WORKER) as usize);
    assert!(
        ok_at_kill < ok.len() + failed,
        "the kill came after the end"
    );

    let there: BTreeSet<String> =
        block_in_place(|| server.psql("SELECT id FROM punctual.entries WHERE queue = 'survivors'"))
            .lines()
            .map(str::to_owned)
            .collect();
    let lost_before: Vec<&String> = ok_before_kill
        .iter()
        .filter(|id| !there.contains(*id))
        .collect();
    assert!(
        lost_before.is_empty(),
        "inserts that returned Ok before the kill are gone: {lost_before:?}"
    );
    let lost: Vec<&String> = ok.iter().filter(|id| !there.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "inserts that returned Ok are gone: {lost:?}"
    );
    let distinct: BTreeSet<&String> = ok.iter().collect();
    assert_eq!(
        distinct.len(),
        ok.len(),
        "a generated id was handed out twice"
    );
    assert!(there.len() <= (WORKERS * PER_WORKER) as usize);
    // The handle works on: its first call may still meet a dead connection.
    let stats = second_try("stats", || q.stats()).await;
    assert_eq!(
        stats,
        PgStats {
            pending: there.len() as u64,
            ..PgStats::default()
        }
    );
    let d = {
        q.insert_with_id("later", &1, Duration::ZERO).await.unwrap();
        within("take after the restart", PATIENCE, q.take())
            .await
            .unwrap()
    };
    assert_eq!(d.id(), "later");
    assert!(d.ack().await.unwrap());
}

/// A claim is on disk before it returns: a crash of the server right after
/// it must not forget the leases (the entries would be due again at once,
/// attempt 1, and run a second time beside the handlers already running).
/// The WAL writer is made lazy, so a claim that committed without waiting
/// for its flush (as claims once did) is all but surely lost by the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_survives_a_kill_9_of_the_server_and_no_entry_is_handed_out_twice() {
    const N: usize = 20;
    let mut server = block_in_place(PgServer::start);
    block_in_place(|| {
        server.psql("ALTER SYSTEM SET wal_writer_delay = '10s'");
        server.psql("SELECT pg_reload_conf()");
    });
    let q = queue(&server.url(), "forgotten", HOUR).await;
    let ids: Vec<String> = (0..N).map(|n| format!("e{n:02}")).collect();
    for (n, id) in ids.iter().enumerate() {
        assert!(
            q.insert_with_id(id, &(n as u64), Duration::ZERO)
                .await
                .unwrap()
        );
    }
    let taken = within("the claim", PATIENCE, q.take_many(N)).await.unwrap();
    assert_eq!(taken.len(), N, "one claim takes every due entry");
    block_in_place(|| server.kill());
    block_in_place(|| server.restart());

    let rows = block_in_place(|| {
        server.psql(
            "SELECT count(*) FILTER (WHERE token IS NOT NULL AND attempt = 1), \
                    count(*) FILTER (WHERE token IS NULL AND attempt = 0) \
             FROM punctual.entries WHERE queue = 'forgotten'",
        )
    });
    assert_eq!(
        rows, "20|0",
        "after the restart (leased|pending): the claim was forgotten"
    );

    // The pool's connections died with the server: spend them first.
    let mut good = 0;
    let start = Instant::now();
    while good < 3 {
        assert!(start.elapsed() < PATIENCE, "the handle does not recover");
        good = if q.stats().await.is_ok() { good + 1 } else { 0 };
    }
    // Nothing is due: another consumer gets nothing while the leases last.
    let other = queue(&server.url(), "forgotten", HOUR).await;
    assert!(
        other.try_take().await.unwrap().is_none(),
        "an entry was handed out twice"
    );
    let mut acked: BTreeMap<String, usize> = BTreeMap::new();
    for d in taken {
        let id = d.id().to_owned();
        assert!(d.ack().await.unwrap(), "the first delivery's ack of {id}");
        *acked.entry(id).or_default() += 1;
    }
    assert_eq!(acked.len(), N);
    assert_eq!(q.stats().await.unwrap(), PgStats::default());
}

/// Consumers waiting in `take()` while the postmaster is SIGKILLed and
/// restarted keep waiting (no `Err`) and get an entry inserted before the
/// kill and due after it, and one inserted after the restart; the handles
/// made before the kill (the consumers' and a producer's) keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_takes_and_handles_ride_through_a_kill_9_and_restart() {
    let mut server = block_in_place(PgServer::start);
    // A lease longer than the test: the takers' entries are acked one after
    // the other at the end, and an entry whose lease ran out meanwhile could
    // be taken again by the other taker.
    let q = queue(&server.url(), "ride", ms(10_000)).await;
    let producer = queue(&server.url(), "ride", ms(10_000)).await;
    assert!(
        producer
            .insert_with_id("before", &1, ms(1500))
            .await
            .unwrap()
    );
    let takers: Vec<_> = (0..2)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.take().await })
        })
        .collect();
    sleep(ms(200)).await; // both waiting
    block_in_place(|| server.kill());
    sleep(ms(300)).await;
    block_in_place(|| server.restart());
    assert!(
        takers.iter().filter(|t| t.is_finished()).count() <= 1,
        "take returned while the server was down"
    );
    // Applied or not by a first try that failed: the id makes it one entry.
    second_try("insert after the restart", || {
        producer.insert_with_id("after", &2, Duration::ZERO)
    })
    .await;

    let mut got = BTreeMap::new();
    for taker in takers {
        let d = within("a waiting take", PATIENCE, taker)
            .await
            .unwrap()
            .expect("take rides through the restart");
        got.insert(d.id().to_owned(), (*d.value(), d.attempt()));
        // The consumer's handle acks on the restarted server.
        assert!(d.ack().await.unwrap(), "ack of {}", got.len());
    }
    assert_eq!(
        got,
        BTreeMap::from([("after".to_owned(), (2, 1)), ("before".to_owned(), (1, 1))])
    );
    // Both handles keep working.
    let id = q.insert(&3, Duration::ZERO).await.unwrap();
    let d = within("take", PATIENCE, producer.take()).await.unwrap();
    assert_eq!(d.id(), id);
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), PgStats::default());
    assert_eq!(producer.stats().await.unwrap(), PgStats::default());
}

// ---------------------------------------------------------------------
// Processes SIGKILLed while they hold a lease.
// ---------------------------------------------------------------------

/// The child side of the SIGKILL tests: `take` (prints what it took, then
/// sleeps) or `worker` (a worker whose handler prints the run and never
/// ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process() {
    let Ok(role) = std::env::var(CHILD) else {
        return; // only as a child
    };
    let url = std::env::var(CHILD_URL).unwrap();
    let name = std::env::var(CHILD_QUEUE).unwrap();
    let lease: u64 = std::env::var(CHILD_LEASE_MS).unwrap().parse().unwrap();
    let q = queue(&url, &name, ms(lease)).await;
    match role.as_str() {
        "take" => {
            let d = q.take().await.unwrap();
            println!("took {} attempt {}", d.id(), d.attempt());
            sleep(HOUR).await;
            drop(d);
        }
        "worker" => {
            let _worker = Worker::builder(q).spawn(|job: Job<u64>| async move {
                println!("running {} attempt {}", job.id(), job.attempt());
                sleep(HOUR).await;
                Ok::<(), String>(())
            });
            sleep(HOUR).await;
        }
        other => panic!("unknown child role {other:?}"),
    }
}

/// Kills the child when dropped (it has been killed by then, unless the
/// test failed first).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(role: &str, url: &str, name: &str, lease: Duration) -> Killed {
    Killed(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, role)
            .env(CHILD_URL, url)
            .env(CHILD_QUEUE, name)
            .env(CHILD_LEASE_MS, lease.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Waits until the child holds the one entry of `q`, SIGKILLs it, and
/// returns its stdout and the entry's row once it is dead: the end of the
/// last lease the child got (ms, database clock) and when it claimed.
async fn kill_holder(
    child: &mut Killed,
    q: &PgQueue<u64>,
    url: &str,
    name: &str,
) -> (String, i64, i64) {
    eventually("the child holds the entry", || {
        let q = q.clone();
        async move { q.stats().await.unwrap().leased == 1 }
    })
    .await;
    child.0.kill().unwrap(); // SIGKILL
    let (_, out, err) = block_in_place(|| finish(&mut child.0, PATIENCE));
    let (run_at, since, attempt) = lease_row(url, name, "a").await;
    assert_eq!(attempt, 1, "{out}\n{err}");
    (out, run_at.expect("leased"), since.expect("leased"))
}

/// A consumer process SIGKILLed while it holds a delivery: the entry is not
/// delivered again while its lease lasts (database clock), and is once the
/// lease has run out, with attempt 2 and the lease's end as its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_holding_a_lease_gets_its_entry_redelivered_after_the_lease() {
    const NAME: &str = "killed_consumer";
    // Long enough that a loaded machine still looks while it lasts.
    let lease = ms(3000);
    let db = PgDb::new();
    let url = db.url();
    let q = queue(&url, NAME, lease).await;
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    let mut child = spawn_child("take", &url, NAME, lease);
    let (out, lease_end, claimed) = kill_holder(&mut child, &q, &url, NAME).await;
    assert!(out.contains("took a attempt 1"), "{out}");
    assert_eq!(
        lease_end - claimed,
        lease.as_millis() as i64,
        "the lease granted"
    );

    // While the lease lasts, nothing to take.
    let now = db_now_ms(&url).await;
    assert!(
        now < lease_end - 200,
        "the lease ran out before the test looked"
    );
    assert!(
        q.try_take().await.unwrap().is_none(),
        "delivered again while leased"
    );

    let d = within("the redelivery", PATIENCE, q.take()).await.unwrap();
    let taken_at = db_now_ms(&url).await;
    assert_eq!((d.id(), *d.value(), d.attempt()), ("a", 1, 2));
    assert!(
        taken_at + SLACK_MS >= lease_end,
        "redelivered at {taken_at}, before the lease ended at {lease_end}"
    );
    let deadline = epoch_ms(d.deadline());
    assert!(
        (deadline - lease_end).abs() <= SLACK_MS,
        "deadline {deadline}, the lease ended at {lease_end}"
    );
    assert!(d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), PgStats::default());
}

/// A worker process SIGKILLed mid-handler (its worker kept the lease
/// alive): the entry comes back once the last lease it got has run out, and
/// another worker runs it to completion (attempt 2) and acks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_handler_leaves_the_entry_to_another_worker_after_its_lease() {
    const NAME: &str = "killed_worker";
    let lease = ms(800);
    let db = PgDb::new();
    let url = db.url();
    let q = queue(&url, NAME, lease).await;
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    let mut child = spawn_child("worker", &url, NAME, lease);
    // Let the child's worker extend the lease at least once.
    eventually("the child holds the entry", || {
        let q = q.clone();
        async move { q.stats().await.unwrap().leased == 1 }
    })
    .await;
    sleep(lease + ms(200)).await;
    let (out, lease_end, _) = kill_holder(&mut child, &q, &url, NAME).await;
    assert!(out.contains("running a attempt 1"), "{out}");
    let killed_at = epoch_ms(wall());

    let runs = Arc::new(Mutex::new(Vec::new()));
    let worker = Worker::builder(q.clone()).spawn({
        let runs = Arc::clone(&runs);
        move |job: Job<u64>| {
            let runs = Arc::clone(&runs);
            async move {
                // The local server shares this machine's clock.
                let started = epoch_ms(wall());
                sleep(ms(100)).await;
                runs.lock()
                    .unwrap()
                    .push((job.id().to_owned(), job.attempt(), started));
                Ok::<(), String>(())
            }
        }
    });
    eventually("acked by the second worker", || {
        let done = worker.stats().completed == 1;
        async move { done }
    })
    .await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (id, attempt, started) = runs[0].clone();
    assert_eq!((id.as_str(), attempt), ("a", 2));
    assert!(
        started + SLACK_MS >= lease_end,
        "run again at {started}, before the lease ended at {lease_end} (killed at {killed_at})"
    );
    let stats = worker.shutdown(ms(500)).await;
    assert_eq!((stats.completed, stats.failed, stats.lost), (1, 0, 0));
    assert_eq!(q.stats().await.unwrap(), PgStats::default());
}

/// A pause is kept in the database: after a kill -9 and a restart of the
/// server, the queue is still paused, a consumer takes nothing, and
/// `resume` lets it take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_survives_a_restart_of_the_server() {
    let mut server = block_in_place(PgServer::start);
    let q = queue(&server.url(), "paused", HOUR).await;
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
    let d = within("take after resume", PATIENCE, q.take())
        .await
        .unwrap();
    assert_eq!(d.id(), "a");
    assert!(d.ack().await.unwrap());
}
