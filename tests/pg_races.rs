//! Races of the PostgreSQL store found by a hostile review, each once a
//! bug: lock order between entries and schedules, a tick placed over a
//! caller's entry committed meanwhile, the head a recovered claim reports,
//! a give-back overtaken by its claim, insert_many's order around taken ids.
//!
//! Each test has a schema of its own in this binary's database.

#![cfg(feature = "postgres")]

mod common;

use common::pg::PgDb;
use common::proxy::{Direction, Proxy};
use punctual::MissedTicks;
use punctual::postgres::PgQueue;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use punctual::postgres::sqlx::{self, Connection, PgConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

fn schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("rw{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn open(db: &PgDb, schema: &str, name: &str) -> PgQueue<u64> {
    PgQueue::builder(name)
        .url(&db.url())
        .schema(schema)
        .lease(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(100))
        .build()
        .await
        .expect("build")
}

/// Waits until `n` sessions of the database wait on a lock.
async fn lock_waiters(conn: &mut PgConnection, n: i64) {
    for _ in 0..500 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} sessions never waited on a lock");
}

/// `remove(name)` of a schedule's tick and `purge` lock the schedule's
/// row before the tick's entry, as `schedule_*` and `unschedule` do. When
/// both queue up behind whatever holds the tick's row for a moment (a
/// heartbeat's extend, an ack, a caller's `remove_in`), neither fails.
/// (They once locked in opposite orders, and PostgreSQL killed one of
/// them with "deadlock detected", 40P01.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_of_a_tick_racing_a_schedule_upsert_does_not_deadlock() {
    let db = PgDb::new();
    let schema = schema();
    let mut failures = Vec::new();
    let cases = [
        ("remove", "schedule_every"),
        ("remove", "unschedule"),
        ("purge", "schedule_every"),
    ];
    for (k, (first, second)) in cases.into_iter().enumerate() {
        let queue = format!("lock-order-{k}");
        let q = open(&db, &schema, &queue).await;
        let name = "s".to_owned();
        assert!(
            q.schedule_every(&name, HOUR, MissedTicks::Skip, &1)
                .await
                .unwrap()
        );
        // Something holds the tick's row for a moment.
        let mut holder = PgConnection::connect(&db.url()).await.unwrap();
        let mut tx = holder.begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT 1 FROM \"{schema}\".entries WHERE queue = $1 AND id = $2 FOR UPDATE"
        ))
        .bind(&queue)
        .bind(&name)
        .execute(&mut *tx)
        .await
        .unwrap();
        let mut watch = PgConnection::connect(&db.url()).await.unwrap();
        let remover = {
            let (q, name) = (q.clone(), name.clone());
            tokio::spawn(async move {
                match first {
                    "remove" => q.remove(&name).await.map(|_| ()),
                    _ => q.purge().await,
                }
            })
        };
        lock_waiters(&mut watch, 1).await;
        let upserter = {
            let (q, name) = (q.clone(), name.clone());
            tokio::spawn(async move {
                match second {
                    "unschedule" => q.unschedule(&name).await,
                    _ => {
                        q.schedule_every(&name, 2 * HOUR, MissedTicks::Skip, &2)
                            .await
                    }
                }
            })
        };
        lock_waiters(&mut watch, 2).await;
        tx.commit().await.unwrap();
        let removed = remover.await.unwrap();
        let upserted = upserter.await.unwrap();
        if removed.is_err() || upserted.is_err() {
            let error = format!("{:?}", removed.err().or(upserted.err()));
            let code = if error.contains("40P01") {
                "40P01 deadlock detected"
            } else {
                &error
            };
            failures.push(format!("{first} racing {second}: {code}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `schedule_every` of a new name cannot see an entry of that name that a
/// caller's transaction is inserting; placing its tick waits for that
/// transaction. Once it commits, the caller's entry stays as it is and the
/// upsert fails as a name taken by an entry that is not a tick. (It once
/// turned the caller's committed entry into the tick.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_never_overwrites_an_entry_committed_under_its_name() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "taken-name").await;
    let mut caller = PgConnection::connect(&db.url()).await.unwrap();
    let mut tx = caller.begin().await.unwrap();
    assert!(
        q.insert_with_id_in(&mut tx, "report", &7, HOUR)
            .await
            .unwrap()
    );
    let mut watch = PgConnection::connect(&db.url()).await.unwrap();
    let upsert = {
        let q = q.clone();
        tokio::spawn(async move {
            q.schedule_every("report", HOUR, MissedTicks::Skip, &99)
                .await
        })
    };
    lock_waiters(&mut watch, 1).await;
    tx.commit().await.unwrap();
    let upserted = upsert.await.unwrap();
    let row = db.psql(&format!(
        "SELECT value || ',' || (tick IS NOT NULL) FROM \"{schema}\".entries \
         WHERE queue = 'taken-name' AND id = 'report'"
    ));
    assert_eq!(
        row, "7,false",
        "the caller's committed entry was replaced (schedule_every: {upserted:?})"
    );
    assert!(upserted.is_err(), "the name was taken: {upserted:?}");
}

/// A claim whose reply was lost is sent again and recovers what it leased;
/// that resend reports the queue's real head, so the next `take` does not
/// nap over entries due now. (It once reported the first entry not yet
/// due, and the next `take` waited up to a `poll_interval`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_recovered_claim_the_next_take_does_not_nap_over_due_entries() {
    let db = PgDb::new();
    let schema = schema();
    let direct = open(&db, &schema, "recovered-head").await;
    let proxy = Proxy::start(common::pg::admin_port());
    let via: PgQueue<u64> = PgQueue::builder("recovered-head")
        .url(&common::pg::proxied_url(proxy.port(), db.name()))
        .schema(&schema)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(20))
        .build()
        .await
        .unwrap();
    // Reads the clock and starts the handle's listener (an idle take naps).
    assert!(
        via.take_timeout(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    for (id, v) in [("a", 1), ("b", 2), ("c", 3)] {
        assert!(direct.insert_with_id(id, &v, Duration::ZERO).await.unwrap());
    }
    // Let the insert's notification reach the listener first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut_after_next_request(Some(b"recovered-head"));
    let first = tokio::time::timeout(Duration::from_secs(5), via.take())
        .await
        .expect("recovered")
        .unwrap();
    assert!(!proxy.armed(), "the cut did not fire");
    assert_eq!((first.id(), first.attempt()), ("a", 1));
    let start = tokio::time::Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(3), via.take()).await;
    assert!(
        second.is_ok(),
        "`b` and `c` were due, yet the take after the recovered claim waited {:?} \
         (stats: {:?})",
        start.elapsed(),
        direct.stats().await.unwrap()
    );
}

/// A `take_timeout` gives up its claim a second past its timeout and the
/// handle's next request gives back what that claim leased (`'G'`, by
/// token), on another connection of the pool. A claim still on its way
/// (here held 3 s on a slow connection) that lands after the give-back
/// leases nothing. (It once leased an entry nobody would receive or give
/// back, until its lease ran out, with an attempt counted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_up_claim_that_lands_after_its_give_back_leases_nothing() {
    let db = PgDb::new();
    let schema = schema();
    let direct = open(&db, &schema, "late-claim").await;
    let proxy = Proxy::start(common::pg::admin_port());
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .min_connections(3)
        .test_before_acquire(false)
        .connect(&common::pg::proxied_url(proxy.port(), db.name()))
        .await
        .unwrap();
    let via: PgQueue<u64> = PgQueue::builder("late-claim")
        .pool(pool)
        .schema(&schema)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    // Reads the clock; the pool's connections have the claim prepared (a
    // claim is then one request).
    let (a, b, c) = tokio::join!(via.try_take(), via.try_take(), via.try_take());
    assert!(a.unwrap().is_none() && b.unwrap().is_none() && c.unwrap().is_none());
    for (id, v) in [("x", 1), ("y", 2)] {
        assert!(direct.insert_with_id(id, &v, Duration::ZERO).await.unwrap());
    }
    proxy.set_latency_in(Direction::Requests, Duration::from_secs(3));
    let gave_up = via.take_timeout(Duration::from_millis(100)).await.unwrap();
    assert!(gave_up.is_none(), "the claim is still on its way");
    proxy.set_latency_in(Direction::Requests, Duration::ZERO);
    // The next claim carries the give-back (on another connection of the
    // pool), and takes `x`.
    let x = via.try_take().await.unwrap().expect("x is due");
    assert_eq!((x.id(), x.attempt()), ("x", 1));
    assert!(x.ack().await.unwrap());
    // The given-up claim lands now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = direct.stats().await.unwrap();
    let y = via.try_take().await.unwrap();
    assert!(
        y.as_ref().map(|y| (y.id(), y.attempt())) == Some(("y", 1)),
        "`y` should be takeable (attempt 1); the given-up claim holds it for its \
         whole lease instead: {stats:?}, took {y:?}"
    );
}

/// `insert_many` gives its entries increasing sequence numbers, so equal
/// due times are taken in the batch's order; an entry whose made id a
/// caller had taken gets a new id and keeps its place. (It once got a new
/// sequence number too, and was taken after the rest of the batch.)
#[tokio::test]
async fn insert_many_keeps_its_order_around_an_id_a_caller_took() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "many-order").await;
    let last: u64 = db
        .psql(&format!(
            "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM \"{schema}\".seq"
        ))
        .parse()
        .unwrap();
    // `insert_with_id` draws `last + 1`; the batch draws `last + 2 ..= last + 4`.
    let second = format!("#{}", last + 3);
    assert!(q.insert_with_id(&second, &99, HOUR).await.unwrap());
    let ids = q
        .insert_many(&[
            (0, Duration::ZERO),
            (1, Duration::ZERO),
            (2, Duration::ZERO),
        ])
        .await
        .unwrap();
    assert!(!ids.contains(&second), "{ids:?}");
    let taken = q.take_many(3).await.unwrap();
    let order: Vec<u64> = taken.iter().map(|d| *d.value()).collect();
    assert_eq!(order, [0, 1, 2], "ids {ids:?}");
}

/// A claim's values are bounded in bytes: a consumer with many free places
/// and large values asked for them all in one claim, whose `text[]` of
/// values passed PostgreSQL's 1 GB limit ("array size exceeds the maximum
/// allowed", 110 values of 10 MB): the claim failed, and a worker asked for
/// the same batch forever. Here 6 values of 4 MB: one claim returns at most
/// 16 MiB of them, the rest come with the next claims, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_large_values_is_bounded_in_bytes() {
    const MB: usize = 1 << 20;
    let db = PgDb::new();
    let schema = schema();
    let q: PgQueue<String> = PgQueue::builder("big")
        .url(&db.url())
        .schema(&schema)
        .lease(Duration::from_secs(60))
        .build()
        .await
        .expect("build");
    let value = "x".repeat(4 * MB);
    for i in 0..6 {
        let id = format!("e{i}");
        assert!(q.insert_with_id(&id, &value, Duration::ZERO).await.unwrap());
    }
    let mut batches = Vec::new();
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let batch = q.take_many(128).await.expect("a claim of large values");
        let bytes: usize = batch.iter().map(|d| d.value().len() + 2).sum();
        assert!(
            bytes <= 16 * MB,
            "one claim returned {bytes} bytes of values ({} entries)",
            batch.len()
        );
        batches.push(batch.len());
        for d in batch {
            seen.push(d.id().to_owned());
            assert!(d.ack().await.unwrap());
        }
    }
    let want: Vec<String> = (0..6).map(|i| format!("e{i}")).collect();
    assert_eq!(seen, want, "batches of {batches:?}");
    assert!(batches.len() >= 2, "batches of {batches:?}");
}

/// A claim leases the due head while a producer inserts an entry due after
/// that head but before the next one. The insert runs beside the
/// claim: it sees the head still due (the claim has not committed), and the
/// claim reports as its next head the first entry not yet due (the insert
/// has not committed), so its consumer sleeps toward that one. The insert
/// must announce itself all the same: it compares its due time with the
/// first entry not yet due, not with a due head that a claim may be taking
/// away. (It compared with the head, and sent nothing: the consumer slept
/// past the new entry until its poll interval.) Here a transaction of the
/// test stands for the claim, leasing the head as a claim does, and a
/// `LISTEN` for the consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_beside_a_claim_of_the_due_head_announces_itself() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "beside").await;
    assert!(q.insert_with_id("due", &1, Duration::ZERO).await.unwrap());
    assert!(q.insert_with_id("later", &2, HOUR).await.unwrap());
    let channel: String = db.psql(&format!("SELECT 'punctual_' || md5('{schema}.beside')"));
    let mut listener = sqlx::postgres::PgListener::connect(&db.url())
        .await
        .unwrap();
    listener.listen(&channel).await.unwrap();
    // The claim, under way: the due head leased, not yet committed.
    let mut claim = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql(&format!(
        "BEGIN; UPDATE \"{schema}\".entries SET run_at = run_at + 300000, token = 'claim', \
         attempt = 1 WHERE queue = 'beside' AND id = 'due'"
    ))
    .execute(&mut claim)
    .await
    .unwrap();
    // Due in a minute: after the due head, before "later".
    let before = q.now().await.unwrap();
    q.insert(&3, Duration::from_secs(60)).await.unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut claim).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("an announcement of the new entry")
        .unwrap();
    let at: u64 = heard.payload().parse().unwrap();
    let want = before
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 60_000;
    assert!(
        (want..want + 5_000).contains(&at),
        "announced {at}, wanted about {want}"
    );
}
