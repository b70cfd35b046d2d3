//! Keys, priorities and unique windows on PostgreSQL alone: what the
//! shared bodies of `durable_options.rs` cannot reach. Claims run in
//! parallel transactions on several connections (held open together, so
//! each decides while the others' leases are not yet committed) and never
//! exceed a key's concurrency or rate, and never wait on each other; many
//! consumers on their own pools agree; a schema at VERSION 6 (its tables
//! as the previous release made them, its rows as it wrote them) migrates
//! to VERSION 7 with every entry intact; a plain queue's claim takes the
//! plain path.
//!
//! Each test has a schema of its own in this binary's database.

#![cfg(feature = "postgres")]

mod common;

use common::pg::PgDb;
use punctual::durable::{InsertOptions, KeyLimit, Rate};
use punctual::postgres::PgQueue;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use punctual::postgres::sqlx::{self, Connection, PgConnection, Row};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

fn schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("ky{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn open(db: &PgDb, schema: &str, name: &str) -> PgQueue<u32> {
    PgQueue::builder(name)
        .url(&db.url())
        .schema(schema)
        .lease(HOUR)
        .poll_interval(Duration::from_millis(100))
        .build()
        .await
        .expect("build")
}

fn concurrency(n: u32) -> KeyLimit {
    KeyLimit {
        concurrency: Some(n),
        rate: None,
    }
}

fn key(k: &str) -> InsertOptions {
    InsertOptions::new().key(k)
}

/// The claim function as another language's client calls it: leases up
/// to `max` entries for an hour, in the transaction open on `conn`; the
/// ids it leased.
async fn claim_in(
    conn: &mut PgConnection,
    schema: &str,
    queue: &str,
    token: &str,
    max: i32,
) -> Vec<String> {
    let row = sqlx::query(&format!(
        "SELECT ids FROM \"{schema}\".claim($1, 'unheard', $2, 3600000, 0, $3, NULL, \
         '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '')"
    ))
    .bind(queue)
    .bind(max)
    .bind(token)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    row.try_get("ids").unwrap()
}

/// The keys of entries `ids`, read back.
fn keys_of(db: &PgDb, schema: &str, queue: &str, ids: &[String]) -> Vec<String> {
    if ids.is_empty() {
        return Vec::new();
    }
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(",");
    db.psql(&format!(
        "SELECT coalesce(key, '-') FROM \"{schema}\".entries WHERE queue = '{queue}' AND id IN ({list})"
    ))
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Eight claims in eight transactions open at once, each committed only
/// after all eight have claimed: the first to reach a limited key takes
/// what its concurrency allows, the others skip the key (another claim
/// holds it) rather than wait or count leases not yet committed; after
/// the commits, a second wave sees the leases and takes nothing more of
/// the full keys. A key without a limit is shared out freely.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_claims_in_open_transactions_never_exceed_a_keys_concurrency() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "parallel").await;
    q.set_key_limit("two", concurrency(2)).await.unwrap();
    q.set_key_limit("three", concurrency(3)).await.unwrap();
    let mut batch = Vec::new();
    for n in 0..40 {
        batch.push((n, key("two")));
        batch.push((100 + n, key("three")));
        batch.push((200 + n, key("free")));
    }
    q.insert_many_with(&batch).await.unwrap();

    let wave = |name: &'static str| {
        let (url, schema) = (db.url(), schema.clone());
        async move {
            let barrier = Arc::new(tokio::sync::Barrier::new(8));
            let tasks: Vec<_> = (0..8)
                .map(|c| {
                    let (url, schema, barrier) = (url.clone(), schema.clone(), barrier.clone());
                    tokio::spawn(async move {
                        let mut conn = PgConnection::connect(&url).await.unwrap();
                        let mut tx = conn.begin().await.unwrap();
                        let token = format!("{name}-{c}");
                        let ids = claim_in(&mut tx, &schema, "parallel", &token, 10).await;
                        // Every claim has run before any commits (a claim
                        // that waited on another would never get here).
                        tokio::time::timeout(Duration::from_secs(20), barrier.wait())
                            .await
                            .expect("a claim waited on another");
                        tx.commit().await.unwrap();
                        ids
                    })
                })
                .collect();
            let mut all = Vec::new();
            for task in tasks {
                all.extend(task.await.unwrap());
            }
            all
        }
    };
    let first = wave("first").await;
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for k in keys_of(&db, &schema, "parallel", &first) {
        *per_key.entry(k).or_default() += 1;
    }
    assert_eq!(per_key.get("two").copied(), Some(2), "{per_key:?}");
    assert_eq!(per_key.get("three").copied(), Some(3), "{per_key:?}");
    assert!(
        per_key["free"] > 3,
        "the unlimited key was shared out: {per_key:?}"
    );

    let second = wave("second").await;
    let second_keys = keys_of(&db, &schema, "parallel", &second);
    assert!(
        second_keys.iter().all(|k| k == "free"),
        "a full key gave entries to a later claim: {second_keys:?}"
    );
    let leased = db.psql(&format!(
        "SELECT key || '=' || count(*) FROM \"{schema}\".entries \
         WHERE queue = 'parallel' AND token IS NOT NULL AND key <> 'free' GROUP BY key ORDER BY key"
    ));
    assert_eq!(leased, "three=3\ntwo=2");
}

/// Eight claims in open transactions against a key limited to 3 starts an
/// hour: 3 deliveries in all, whichever claims made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_claims_never_exceed_a_keys_rate() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "rated").await;
    let limit = KeyLimit {
        concurrency: None,
        rate: Some(Rate { max: 3, per: HOUR }),
    };
    q.set_key_limit("api", limit).await.unwrap();
    let batch: Vec<(u32, InsertOptions)> = (0..30).map(|n| (n, key("api"))).collect();
    q.insert_many_with(&batch).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|c| {
            let (url, schema, barrier) = (db.url(), schema.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut conn = PgConnection::connect(&url).await.unwrap();
                let mut tx = conn.begin().await.unwrap();
                let ids = claim_in(&mut tx, &schema, "rated", &format!("r{c}"), 5).await;
                tokio::time::timeout(Duration::from_secs(20), barrier.wait())
                    .await
                    .expect("a claim waited on another");
                tx.commit().await.unwrap();
                ids.len()
            })
        })
        .collect();
    let mut taken = 0;
    for task in tasks {
        taken += task.await.unwrap();
    }
    assert_eq!(taken, 3);
    // The window is spent: later claims take nothing, whoever asks.
    assert!(q.try_take().await.unwrap().is_none());
    assert_eq!(q.stats().await.unwrap().leased, 3);
}

/// 16 consumers, each on a pool of its own (its own connections), take
/// up to 4 entries at a time and hold each a few milliseconds: counted
/// from what each holds, no key ever has more entries out at once than its
/// concurrency (its own, or the default), while keyless entries and an
/// unlimited key run beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_consumers_on_their_own_pools_never_exceed_a_keys_concurrency() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "many").await;
    let limits = [("one", 1_usize), ("two", 2), ("three", 3)];
    for (k, n) in limits {
        q.set_key_limit(k, concurrency(n as u32)).await.unwrap();
    }
    q.set_default_key_limit(concurrency(2)).await.unwrap();
    let mut batch = Vec::new();
    for n in 0..60 {
        for (k, _) in limits {
            batch.push((n, key(k)));
        }
        batch.push((n, key("defaulted")));
        batch.push((n, InsertOptions::new()));
    }
    let total = batch.len() as u64;
    q.insert_many_with(&batch).await.unwrap();

    let out: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let most: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let done = Arc::new(AtomicU64::new(0));
    let mut consumers = Vec::new();
    for c in 0..16_u64 {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect(&db.url())
            .await
            .unwrap();
        let mine: PgQueue<u32> = PgQueue::builder("many")
            .pool(pool)
            .schema(&schema)
            .lease(HOUR)
            .poll_interval(Duration::from_millis(20))
            .build()
            .await
            .unwrap();
        let (out, most, done) = (out.clone(), most.clone(), done.clone());
        consumers.push(tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < total {
                let Ok(Some(first)) = mine.take_timeout(Duration::from_millis(200)).await else {
                    continue;
                };
                let mut taken = vec![first];
                while taken.len() < 4 {
                    match mine.try_take().await.unwrap() {
                        Some(d) => taken.push(d),
                        None => break,
                    }
                }
                let keys: Vec<String> = taken
                    .iter()
                    .map(|d| d.key().unwrap_or("-").to_owned())
                    .collect();
                {
                    let mut out = out.lock().unwrap();
                    let mut most = most.lock().unwrap();
                    for k in &keys {
                        let now = out.entry(k.clone()).or_default();
                        *now += 1;
                        let top = most.entry(k.clone()).or_default();
                        *top = (*top).max(*now);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2 + c % 5)).await;
                // Counted as returned before the ack: an ack's place may be
                // taken by another consumer the moment it commits.
                {
                    let mut out = out.lock().unwrap();
                    for k in &keys {
                        *out.get_mut(k).unwrap() -= 1;
                    }
                }
                for d in taken {
                    assert!(d.ack().await.unwrap());
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(120), async {
        for consumer in consumers {
            consumer.await.unwrap();
        }
    })
    .await
    .expect("every entry ran within 2 minutes");
    let most = most.lock().unwrap().clone();
    for (k, n) in limits {
        assert!(most[k] <= n, "{k} had {} out at once: {most:?}", most[k]);
    }
    assert!(most["defaulted"] <= 2, "{most:?}");
    assert_eq!(q.stats().await.unwrap().leased, 0);
}

/// The tables of a schema at VERSION 6, as the release before keys
/// created them (`sql/schema.sql` at that version, its functions left
/// out: every install drops the schema's functions first), and one of its
/// functions whose signature VERSION 7 changed.
const VERSION_6_TABLES: &str = r#"
CREATE SCHEMA IF NOT EXISTS __SCHEMA__;
CREATE TABLE IF NOT EXISTS __SCHEMA__.meta (version integer NOT NULL);
CREATE SEQUENCE IF NOT EXISTS __SCHEMA__.seq;
CREATE TABLE IF NOT EXISTS __SCHEMA__.entries (
    queue    text    COLLATE "C" NOT NULL,
    id       text    COLLATE "C" NOT NULL,
    seq      bigint  NOT NULL,
    run_at   bigint,
    value    text    NOT NULL,
    attempt  integer NOT NULL DEFAULT 0,
    token    text    COLLATE "C",
    since    bigint,
    deadline bigint,
    tick     bigint,
    reason   text,
    died_at  bigint,
    PRIMARY KEY (queue, id)
);
CREATE INDEX IF NOT EXISTS entries_due ON __SCHEMA__.entries (queue, run_at, seq)
    WHERE run_at IS NOT NULL;
DROP INDEX IF EXISTS __SCHEMA__.entries_token;
CREATE INDEX IF NOT EXISTS entries_dead ON __SCHEMA__.entries (queue, died_at, seq)
    WHERE run_at IS NULL;
CREATE INDEX IF NOT EXISTS entries_leased ON __SCHEMA__.entries (queue, run_at, seq)
    WHERE token IS NOT NULL;
CREATE TABLE IF NOT EXISTS __SCHEMA__.given_up (
    token text COLLATE "C" PRIMARY KEY,
    at    bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS __SCHEMA__.queues (
    queue     text COLLATE "C" PRIMARY KEY,
    paused_at bigint
);
CREATE TABLE IF NOT EXISTS __SCHEMA__.schedules (
    queue text COLLATE "C" NOT NULL,
    name  text COLLATE "C" NOT NULL,
    rec   text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (queue, name)
);
CREATE OR REPLACE FUNCTION __SCHEMA__.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;
CREATE OR REPLACE FUNCTION __SCHEMA__.remove(p_queue text, p_id text, p_tick_only boolean)
RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
DELETE FROM __SCHEMA__.meta;
INSERT INTO __SCHEMA__.meta VALUES (6);
"#;

/// A schema at VERSION 6 holding what that version wrote (a pending entry,
/// a due one, one leased by a claim, a dead letter, a schedule and its
/// tick) is upgraded by `build()`: every row kept, plain (no key, priority
/// 0), the old due index gone and the new ones made, and the queue works
/// on: the due entry is taken, the leased one's holder may still ack, the
/// dead letter comes back, the tick is due at its instant.
#[tokio::test]
async fn a_schema_at_version_6_migrates_to_7_with_its_entries() {
    let db = PgDb::new();
    let schema = schema();
    let s = format!("\"{schema}\"");
    db.psql(&VERSION_6_TABLES.replace("__SCHEMA__", &s));
    let now: i64 = db.psql(&format!("SELECT {s}.now_ms()")).parse().unwrap();
    let hour = 3_600_000_i64;
    db.psql(&format!(
        "INSERT INTO {s}.entries (queue, id, seq, run_at, value, attempt, token, since, deadline, tick, reason, died_at) VALUES \
         ('old', 'pending', nextval('{s}.seq'), {later}, '1', 0, NULL, NULL, NULL, NULL, NULL, NULL), \
         ('old', 'due', nextval('{s}.seq'), {earlier}, '2', 0, NULL, NULL, NULL, NULL, NULL, NULL), \
         ('old', 'leased', nextval('{s}.seq'), {later}, '3', 1, 'v6-token', {now}, {earlier}, NULL, NULL, NULL), \
         ('old', 'dead', nextval('{s}.seq'), NULL, '4', 3, NULL, NULL, {earlier}, NULL, 'boom', {now}), \
         ('old', 'tick', nextval('{s}.seq'), {later}, '5', 0, NULL, NULL, NULL, {later}, NULL, NULL); \
         INSERT INTO {s}.schedules VALUES ('old', 'tick', 'e,3600000,skip', '5')",
        later = now + hour,
        earlier = now - 1000,
    ));

    let q = open(&db, &schema, "old").await;
    assert_eq!(db.psql(&format!("SELECT max(version) FROM {s}.meta")), "8");
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.due, stats.leased, stats.dead),
        (2, 1, 1, 1),
        "{stats:?}"
    );
    let rows = db.psql(&format!(
        "SELECT id || ':' || value || ':' || attempt || ':' || priority || ':' || coalesce(key, '-') \
         || ':' || coalesce(max_attempts::text, '-') || ':' || coalesce(unique_ms::text, '-') \
         FROM {s}.entries ORDER BY id"
    ));
    assert_eq!(
        rows,
        "dead:4:3:0:-:-:-\ndue:2:0:0:-:-:-\nleased:3:1:0:-:-:-\npending:1:0:0:-:-:-\ntick:5:0:0:-:-:-"
    );
    let indexes = db.psql(&format!(
        "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = '{schema}' \
         AND tablename = 'entries'"
    ));
    assert_eq!(
        indexes,
        "entries_dead,entries_held,entries_keys,entries_leased,entries_level,entries_pkey,entries_plain,entries_special"
    );
    let info = q.entry("leased").await.unwrap().unwrap();
    assert_eq!((info.key, info.priority, info.attempt), (None, 0, 1));

    // The queue works on.
    let due = q.try_take().await.unwrap().expect("the due entry");
    assert_eq!(
        (due.id(), *due.value(), due.key(), due.priority()),
        ("due", 2, None, 0)
    );
    assert!(due.ack().await.unwrap());
    let acked: bool = {
        let mut conn = PgConnection::connect(&db.url()).await.unwrap();
        let row = sqlx::query(&format!(
            "SELECT results FROM {s}.finish('old', 'unheard', 0, 3600000, ARRAY['a'], ARRAY['leased'], \
             ARRAY['v6-token'], ARRAY[0::bigint], ARRAY[''], ARRAY[''], '')"
        ))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        row.try_get::<Vec<i32>, _>("results").unwrap() == [1]
    };
    assert!(
        acked,
        "the lease a VERSION 6 claim granted is still its holder's"
    );
    assert!(q.requeue_dead("dead", Duration::ZERO).await.unwrap());
    let back = q
        .try_take()
        .await
        .unwrap()
        .expect("the requeued dead letter");
    assert_eq!((back.id(), back.attempt()), ("dead", 1));
    let schedules = q.schedules().await.unwrap();
    assert_eq!(schedules.len(), 1);
    assert_eq!(
        schedules[0]
            .next
            .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64),
        Some(now + hour)
    );
    // New options on the migrated table.
    let urgent = InsertOptions::new().id("urgent").priority(5).key("k");
    assert_eq!(
        q.insert_with(&6, &urgent).await.unwrap().as_deref(),
        Some("urgent")
    );
    let next = q.try_take().await.unwrap().unwrap();
    assert_eq!(
        (next.id(), next.key(), next.priority()),
        ("urgent", Some("k"), 5)
    );
}

/// A queue without keys or priorities claims on the plain path: with the
/// fair claim's function and the key tables gone from the schema (any
/// statement that named them would fail), it still hands out every entry
/// in due order, and acks them.
#[tokio::test]
async fn a_plain_queue_claims_on_the_plain_path() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "plain").await;
    let batch: Vec<(u32, Duration)> = (0..50).map(|n| (n, Duration::ZERO)).collect();
    q.insert_many(&batch).await.unwrap();
    let s = format!("\"{schema}\"");
    db.psql(&format!(
        "DROP FUNCTION {s}.claim_fair; DROP FUNCTION {s}.freed; \
         ALTER TABLE {s}.key_limits RENAME TO gone_limits; \
         ALTER TABLE {s}.key_starts RENAME TO gone_starts"
    ));
    let mut values = Vec::new();
    while let Some(d) = q.try_take().await.unwrap() {
        values.push(*d.value());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(values, (0..50).collect::<Vec<_>>());
    // An entry with its own attempts and a unique window is still plain.
    let own = InsertOptions::new()
        .id("own")
        .max_attempts(3)
        .unique_for(HOUR);
    q.insert_with(&50, &own).await.unwrap();
    let d = q.try_take().await.unwrap().expect("the entry with options");
    assert_eq!(d.id(), "own");
}

/// A unique window set by an ack in one transaction refuses an insert of
/// the id that raced it: the insert waits for the ack's row, then sees the
/// window the ack committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_racing_the_ack_that_opens_a_window_is_refused() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "racing").await;
    let once = InsertOptions::new().id("once").unique_for(HOUR);
    q.insert_with(&1, &once).await.unwrap();
    let taken = q.take().await.unwrap();
    // The ack's transaction holds the row (deleted, not yet committed)
    // while the insert is sent.
    let s = format!("\"{schema}\"");
    let mut conn = PgConnection::connect(&db.url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let token: String = sqlx::query_scalar(&format!(
        "SELECT token FROM {s}.entries WHERE queue = 'racing' AND id = 'once'"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::query(&format!(
        "SELECT * FROM {s}.finish('racing', 'unheard', 0, 3600000, ARRAY['a'], ARRAY['once'], \
         ARRAY[$1], ARRAY[0::bigint], ARRAY[''], ARRAY[''], '')"
    ))
    .bind(&token)
    .execute(&mut *tx)
    .await
    .unwrap();
    let racer = tokio::spawn({
        let q = q.clone();
        async move { q.insert_with_id("once", &2, Duration::ZERO).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !racer.is_finished(),
        "the insert did not wait for the ack's row"
    );
    tx.commit().await.unwrap();
    assert!(!racer.await.unwrap(), "an insert got in during the window");
    assert!(!taken.ack().await.unwrap(), "acked twice");
    assert!(q.insert_with(&3, &once).await.unwrap().is_none());
}

/// A claim whose window one key's backlog fills looks beyond it, in the
/// same order the memory store keeps: the backlog's key (limited to one at
/// a time) gives its first entry, then the keys whose first entries lie
/// past the window, the keyless one among them, each once; a key at its
/// limit is skipped there too; higher priorities come first, keys and all.
#[tokio::test]
async fn a_claim_looks_past_a_window_one_keys_backlog_fills() {
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db, &schema, "beyond").await;
    q.set_key_limit("big", concurrency(1)).await.unwrap();
    q.set_key_limit("full", concurrency(0)).await.unwrap();
    let backlog: Vec<(u32, InsertOptions)> = (0..200).map(|n| (n, key("big"))).collect();
    q.insert_many_with(&backlog).await.unwrap();
    q.insert_with(&1000, &key("full")).await.unwrap();
    q.insert_with(&1001, &key("x")).await.unwrap();
    q.insert_with(&1002, &InsertOptions::new()).await.unwrap();
    q.insert_with(&1003, &key("y")).await.unwrap();
    q.insert_with(&1004, &key("x")).await.unwrap();
    let urgent = InsertOptions::new().key("x").priority(3);
    q.insert_with(&2000, &urgent).await.unwrap();
    let claim = q.take_many(5).await.unwrap();
    let values: Vec<u32> = claim.iter().map(|d| *d.value()).collect();
    // The urgent one first; then round 1 of level 0 (big's first, x's
    // first, the keyless one, y's first; full held); then round 2: big is
    // at its limit, x gives its second.
    assert_eq!(values, [2000, 0, 1001, 1002, 1003], "{values:?}");
    let next = q.take_many(5).await.unwrap();
    let values: Vec<u32> = next.iter().map(|d| *d.value()).collect();
    assert_eq!(values, [1004], "big at its limit, full held: {values:?}");
    assert!(q.try_take().await.unwrap().is_none());
}
