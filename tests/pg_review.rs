//! A hostile review of the PostgreSQL store: generated ids against ids a
//! caller chose, names that need quoting, schema installs that race or
//! meet another version, far-future times.
//!
//! Each test has a schema of its own in this binary's database.

#![cfg(feature = "postgres")]

mod common;

use common::pg::PgDb;
use common::proxy::Proxy;
use punctual::MissedTicks;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use punctual::postgres::{PgQueue, PgStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const WAIT: Duration = Duration::from_secs(5);

fn schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("rv{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Far beyond any clock this test meets.
fn year_2170() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(200 * 365 * 86400)
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

/// Values of the schema's sequence soon to come, as made ids: `#<n>`.
fn next_made_ids(db: &PgDb, schema: &str, count: u64) -> Vec<String> {
    let last: u64 = db
        .psql(&format!(
            "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM \"{schema}\".seq"
        ))
        .parse()
        .unwrap();
    (1..=count).map(|k| format!("#{}", last + 50 + k)).collect()
}

#[tokio::test]
async fn insert_many_makes_ids_around_ids_a_caller_chose() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "many-ids").await;
    // A caller's own ids that look like made ones soon to come.
    let taken = next_made_ids(&db, &schema, 5);
    for (k, id) in taken.iter().enumerate() {
        assert!(
            q.insert_with_id(id, &(k as u64), Duration::from_secs(3600))
                .await
                .unwrap()
        );
    }
    let many: Vec<(u64, Duration)> = (0..100).map(|k| (k, Duration::from_secs(3600))).collect();
    let ids = q.insert_many(&many).await;
    let ids = match ids {
        Ok(ids) => ids,
        Err(error) => panic!(
            "insert_many failed where a caller took an id of the form #<n>: {error} ({error:?})"
        ),
    };
    assert_eq!(ids.len(), 100);
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), 100);
    for id in &ids {
        assert!(
            !taken.contains(id),
            "insert_many reused the caller's id {id}"
        );
    }
    // `insert` makes another id when its made one is taken; `insert_many`
    // must too (API.md: ids as `insert` returns them).
    let one = q.insert(&100, Duration::from_secs(3600)).await.unwrap();
    assert!(!taken.contains(&one), "insert made the taken id {one}");
    assert_eq!(q.stats().await.unwrap().pending, 106);
}

#[tokio::test]
async fn queue_and_schedule_names_that_need_quoting_work() {
    let db = PgDb::new();
    let schema = schema();
    let name = "it's \"quoted\"; DROP TABLE x; -- é 日本 $$";
    let q = open(&db, &schema, name).await;
    let other = open(&db, &schema, "it's").await;
    let id = q.insert(&7, Duration::ZERO).await.unwrap();
    assert!(
        q.insert_with_id("o'clock \"x\" $$ é", &8, Duration::ZERO)
            .await
            .unwrap()
    );
    let d = tokio::time::timeout(WAIT, q.take())
        .await
        .expect("a due entry is taken")
        .unwrap();
    assert_eq!(d.id(), id);
    assert!(d.ack().await.unwrap());
    let d = tokio::time::timeout(WAIT, q.take()).await.unwrap().unwrap();
    assert_eq!(d.id(), "o'clock \"x\" $$ é");
    assert!(d.ack().await.unwrap());
    assert!(
        q.schedule_every(
            "sch'ed \"é\" $$",
            Duration::from_secs(3600),
            MissedTicks::Skip,
            &1
        )
        .await
        .unwrap()
    );
    assert!(
        !q.schedule_every(
            "sch'ed \"é\" $$",
            Duration::from_secs(3600),
            MissedTicks::Skip,
            &1
        )
        .await
        .unwrap()
    );
    let schedules = q.schedules().await.unwrap();
    assert_eq!(schedules.len(), 1);
    assert_eq!(schedules[0].name, "sch'ed \"é\" $$");
    assert!(q.unschedule("sch'ed \"é\" $$").await.unwrap());
    assert_eq!(other.stats().await.unwrap(), Default::default());
    assert_eq!(q.stats().await.unwrap(), Default::default());
}

#[tokio::test]
async fn schemas_that_need_quoting_install_and_work() {
    let db = PgDb::new();
    for schema in ["Mixed_Case", "user", "select", "_x9"] {
        let q = open(&db, schema, "q").await;
        q.insert(&1, Duration::ZERO).await.unwrap();
        assert!(
            q.schedule_every("s", Duration::from_secs(3600), MissedTicks::Burst, &2)
                .await
                .unwrap()
        );
        let d = tokio::time::timeout(WAIT, q.take()).await.unwrap().unwrap();
        assert!(d.ack().await.unwrap(), "schema {schema}");
        // A second build finds the schema current.
        let again = open(&db, schema, "q").await;
        assert_eq!(again.stats().await.unwrap().pending, 1, "schema {schema}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_builds_at_once_on_a_fresh_schema_all_succeed_and_install_once() {
    let db = PgDb::new();
    let url = db.url();
    // Several rounds: the second install of a race came 1 time in 3.
    for _ in 0..6 {
        let schema = schema();
        // Each build on a pool of its own with one connection (so that the
        // session that waits for the lock is the one that first looked),
        // all polled at once (a `tokio::spawn` of `build()` does not
        // compile: see bugs.md).
        let mut pools = Vec::new();
        for _ in 0..8 {
            pools.push(
                PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await
                    .unwrap(),
            );
        }
        let builds = pools.iter().enumerate().map(|(k, pool)| {
            PgQueue::<u64>::builder(&format!("q{}", k % 2))
                .pool(pool.clone())
                .schema(&schema)
                .build()
        });
        for q in futures::future::join_all(builds).await {
            let q = q.expect("a concurrent build succeeds");
            q.insert(&1, Duration::from_secs(60)).await.unwrap();
        }
        assert_eq!(
            db.psql(&format!("SELECT count(*) FROM \"{schema}\".entries")),
            "8"
        );
        assert_eq!(
            db.psql(&format!("SELECT count(*) FROM \"{schema}\".meta")),
            "1"
        );
        // Installed once: a second install rewrites `meta` (and drops the
        // functions sessions already run) in a later transaction than the
        // one that created the tables.
        assert_eq!(
            db.psql(&format!(
                "SELECT (SELECT xmin::text FROM \"{schema}\".meta) = \
                 (SELECT xmin::text FROM pg_class WHERE oid = '\"{schema}\".entries'::regclass)"
            )),
            "t",
            "schema {schema} was installed more than once"
        );
    }
}

#[tokio::test]
async fn build_upgrades_an_older_schema_and_leaves_a_newer_one_alone() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "q").await;
    q.insert(&1, Duration::from_secs(60)).await.unwrap();
    // An older version: its functions may be missing or different.
    db.psql(&format!(
        "UPDATE \"{schema}\".meta SET version = 0; DROP FUNCTION \"{schema}\".stats(text)"
    ));
    let q = open(&db, &schema, "q").await;
    assert_eq!(
        q.stats().await.unwrap().pending,
        1,
        "upgraded, entries kept"
    );
    assert_eq!(
        db.psql(&format!("SELECT max(version) FROM \"{schema}\".meta")),
        "8"
    );
    // A newer version: this process leaves it as it is.
    db.psql(&format!(
        "UPDATE \"{schema}\".meta SET version = 99; \
         CREATE OR REPLACE FUNCTION \"{schema}\".newer() RETURNS int LANGUAGE sql AS 'SELECT 1'"
    ));
    let q = open(&db, &schema, "q").await;
    assert_eq!(q.stats().await.unwrap().pending, 1);
    assert_eq!(
        db.psql(&format!("SELECT \"{schema}\".newer()")),
        "1",
        "a newer schema's functions are left alone"
    );
}

/// As on Redis, a zero poll interval is taken as 1 ms: no panic, and a
/// waiting consumer still gets what is inserted.
#[tokio::test]
async fn a_zero_poll_interval_is_taken_as_one_millisecond() {
    let db = PgDb::new();
    let schema = schema();
    let q: PgQueue<u64> = PgQueue::builder("zero-poll")
        .url(&db.url())
        .schema(&schema)
        .poll_interval(Duration::ZERO)
        .build()
        .await
        .expect("build");
    let taker = tokio::spawn({
        let q = q.clone();
        async move { q.take_timeout(WAIT).await }
    });
    q.insert(&7, Duration::from_millis(20)).await.unwrap();
    let got = taker
        .await
        .unwrap()
        .unwrap()
        .expect("taken before the timeout");
    assert_eq!(*got.value(), 7);
    assert!(got.ack().await.unwrap());
}

#[tokio::test]
async fn far_future_times_and_huge_leases_do_not_overflow() {
    let db = PgDb::new();
    let schema = schema();
    let q: PgQueue<u64> = PgQueue::builder("far")
        .url(&db.url())
        .schema(&schema)
        .lease(Duration::MAX)
        .max_attempts(u32::MAX)
        .poll_interval(Duration::MAX)
        .build()
        .await
        .unwrap();
    let far = q.insert(&1, Duration::MAX).await.unwrap();
    let at = q.deadline(&far).await.unwrap().expect("pending");
    assert!(at > year_2170());
    let far_at = q
        .insert_at(&2, UNIX_EPOCH + Duration::from_secs(u64::MAX / 4))
        .await
        .unwrap();
    assert!(q.deadline(&far_at).await.unwrap().is_some());
    // Before the epoch: due now.
    let past = q
        .insert_at(&3, UNIX_EPOCH - Duration::from_secs(10))
        .await
        .unwrap();
    let mut d = tokio::time::timeout(WAIT, q.take()).await.unwrap().unwrap();
    assert_eq!(d.id(), past);
    assert!(d.lease_until() > year_2170());
    assert!(d.extend(Duration::MAX).await.unwrap());
    assert!(d.retry(Duration::MAX).await.unwrap());
    assert!(q.reset(&far, Duration::MAX).await.unwrap());
    assert!(
        q.schedule_every(
            "huge",
            Duration::from_millis(1 << 50),
            MissedTicks::Delay,
            &4
        )
        .await
        .unwrap()
    );
    assert!(
        q.schedule_every("huge", Duration::from_millis(1), MissedTicks::Skip, &4)
            .await
            .unwrap()
    );
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.due + stats.pending, 4, "{stats:?}");
    assert!(matches!(
        q.take_timeout(Duration::ZERO).await,
        Ok(Some(_)) | Ok(None)
    ));
}

#[tokio::test]
async fn unschedule_racing_the_ack_of_its_tick_leaves_nothing_behind() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "unsched").await;
    let acker = open(&db, &schema, "unsched").await;
    for round in 0..20 {
        let name = format!("s{round}");
        assert!(
            q.schedule_every(&name, Duration::from_millis(1), MissedTicks::Burst, &round)
                .await
                .unwrap()
        );
        let d = tokio::time::timeout(WAIT, acker.take())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.id(), name);
        // The ack turns the tick into its successor while unschedule
        // deletes the schedule and its tick: either order, nothing stays.
        let (acked, removed) = tokio::join!(d.ack(), q.unschedule(&name));
        acked.unwrap();
        assert!(removed.unwrap(), "round {round}");
        assert!(q.schedules().await.unwrap().is_empty(), "round {round}");
        let stats = q.stats().await.unwrap();
        assert_eq!(stats, Default::default(), "round {round}");
    }
}

#[tokio::test]
async fn a_held_tick_removed_by_unschedule_cannot_be_acked() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "held").await;
    assert!(
        q.schedule_every("s", Duration::from_millis(1), MissedTicks::Skip, &1)
            .await
            .unwrap()
    );
    let mut d = tokio::time::timeout(WAIT, q.take()).await.unwrap().unwrap();
    assert!(q.unschedule("s").await.unwrap());
    assert!(!d.extend(Duration::from_secs(1)).await.unwrap());
    assert!(!d.ack().await.unwrap(), "the lease went with the schedule");
    assert!(q.schedules().await.unwrap().is_empty());
    assert_eq!(q.stats().await.unwrap(), Default::default());
}

#[tokio::test]
async fn concurrent_consumers_of_several_handles_take_each_entry_once() {
    let db = PgDb::new();
    let schema = schema();
    let producer = open(&db, &schema, "once").await;
    let many: Vec<(u64, Duration)> = (0..300).map(|k| (k, Duration::ZERO)).collect();
    let ids = producer.insert_many(&many).await.unwrap();
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let q = open(&db, &schema, "once").await;
        for _ in 0..3 {
            let q = q.clone();
            consumers.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Some(batch) = q
                    .take_timeout(Duration::from_millis(300))
                    .await
                    .unwrap()
                    .map(|d| vec![d])
                {
                    for d in batch {
                        seen.push(d.id().to_owned());
                        assert!(d.ack().await.unwrap());
                    }
                }
                seen
            }));
        }
    }
    let mut all = Vec::new();
    for c in consumers {
        all.extend(c.await.unwrap());
    }
    all.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want, "every entry exactly once");
    assert_eq!(producer.stats().await.unwrap(), Default::default());
}

/// A handle of queue `name` in `schema` whose connections go through
/// `proxy`.
async fn through(proxy: &Proxy, db: &PgDb, schema: &str, name: &str) -> PgQueue<u64> {
    PgQueue::builder(name)
        .url(&common::pg::proxied_url(proxy.port(), db.name()))
        .schema(schema)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(100))
        .build()
        .await
        .expect("build through the proxy")
}

/// A claim whose reply is lost (the link closes after the request reached
/// the server, which ran it) is sent again with its token and returns what
/// it leased, found between a lower bound of the lease end and now + the
/// lease: the entry is delivered once, attempt 1, rather than stuck behind
/// a lease nobody holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_was_lost_is_sent_again_and_returns_what_it_leased() {
    let db = PgDb::new();
    let schema = schema();
    let direct = open(&db, &schema, "lost-reply").await;
    let proxy = Proxy::start(common::pg::admin_port());
    let via = through(&proxy, &db, &schema, "lost-reply").await;
    // A first claim reads the database's clock: the bound is a real one.
    assert!(via.try_take().await.unwrap().is_none());
    direct
        .insert_with_id("x", &7, Duration::ZERO)
        .await
        .unwrap();
    proxy.cut_after_next_request(Some(b"lost-reply"));
    let d = tokio::time::timeout(WAIT, via.take())
        .await
        .expect("the claim sent again returns what the first one leased")
        .unwrap();
    assert!(!proxy.armed(), "the cut did not fire");
    assert_eq!((d.id(), *d.value(), d.attempt()), ("x", 7, 1));
    assert_eq!(direct.stats().await.unwrap().leased, 1);
    assert!(d.ack().await.unwrap());
    assert_eq!(direct.stats().await.unwrap(), PgStats::default());
}

/// A `take_timeout` whose claim never hears back (the link went silent
/// after the server ran it) returns a second after its timeout, and the handle's next
/// claim first gives back what that claim leased, without counting the
/// attempt: the entry is taken again at once, attempt 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_given_up_in_doubt_is_given_back_by_the_next_claim() {
    let db = PgDb::new();
    let schema = schema();
    let direct = open(&db, &schema, "given-up").await;
    let proxy = Proxy::start(common::pg::admin_port());
    let via = through(&proxy, &db, &schema, "given-up").await;
    assert!(via.try_take().await.unwrap().is_none());
    direct
        .insert_with_id("y", &8, Duration::ZERO)
        .await
        .unwrap();
    proxy.swallow_replies_after_next_request(Some(b"given-up"));
    let gave_up = tokio::time::timeout(WAIT, via.take_timeout(Duration::from_millis(500)))
        .await
        .expect("take_timeout returns at its timeout while its claim hangs");
    assert!(gave_up.unwrap().is_none());
    assert!(!proxy.armed(), "the swallow did not fire");
    // The server ran the silenced claim: `y` is leased to it.
    let stats = direct.stats().await.unwrap();
    assert_eq!((stats.pending, stats.leased), (0, 1), "{stats:?}");
    let d = via
        .try_take()
        .await
        .unwrap()
        .expect("given back, then taken again");
    assert_eq!((d.id(), *d.value(), d.attempt()), ("y", 8, 1));
    assert!(d.ack().await.unwrap());
    assert_eq!(direct.stats().await.unwrap(), PgStats::default());
}
