//! `PgQueue`'s transactional twins (API.md, "PgQueue", "Transactions"):
//! an entry inserted with `insert_in` exists if and only if the caller's
//! transaction commits, waiting consumers are woken at the commit and not
//! before, a rollback leaves nothing behind; `insert_with_id_in` and
//! `remove_in` likewise.
//!
//! Each test has a schema of its own in this binary's database. Consumers
//! that must be woken by the commit poll every 30 s, so only the
//! notification can wake them within the test's bounds.

#![cfg(feature = "postgres")]

mod common;
#[path = "common/store_extra.rs"]
mod store_extra;

use common::stores::pg::{Error, Q, Stats, Store};
use punctual::postgres::sqlx::{self, PgPool};
use serde::{Serialize, Serializer};
use std::time::Duration;
use store_extra::{Backdoor, HOUR, WAIT, ms, within};

/// Longer than any test: a consumer woken sooner was woken by a
/// notification.
const POLL: Duration = Duration::from_secs(30);

/// A pool of the test's database and queue `name` on it, in the test's
/// schema, polling every [`POLL`].
async fn queue<T>(store: &Store, name: &str) -> (PgPool, Q<T>)
where
    T: Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let pool = PgPool::connect(&store.url()).await.unwrap();
    let q = Q::builder(name)
        .pool(pool.clone())
        .schema(&store.schema)
        .poll_interval(POLL)
        .build()
        .await
        .unwrap();
    (pool, q)
}

/// Another handle on queue `name`, with a pool of its own (so what reaches
/// it comes through the database), polling every [`POLL`].
async fn consumer(store: &Store, name: &str) -> Q<u64> {
    store
        .builder(name)
        .poll_interval(POLL)
        .build()
        .await
        .unwrap()
}

/// A table of the caller's business, next to the queue's in the test's
/// schema.
fn create_orders(store: &Store) -> String {
    let table = format!("{}.orders", store.schema);
    store.db.psql(&format!(
        "CREATE TABLE {table} (id bigserial PRIMARY KEY, state text NOT NULL UNIQUE)"
    ));
    table
}

// ---------------------------------------------------------------- insert_in

#[tokio::test]
async fn insert_in_is_invisible_until_the_commit() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-invisible").await;
    let mut tx = pool.begin().await.unwrap();
    let id = q.insert_in(&mut tx, &7, Duration::ZERO).await.unwrap();
    let named = q
        .insert_with_id_in(&mut tx, "order-1", &8, Duration::ZERO)
        .await
        .unwrap();
    assert!(named);

    // The caller's transaction sees its rows; nobody else does.
    let inside: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.entries WHERE queue = 'tx-invisible'",
        store.schema
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(inside, 2);
    assert_eq!(q.stats().await.unwrap(), Stats::default());
    assert!(q.try_take().await.unwrap().is_none());
    assert_eq!(q.deadline(&id).await.unwrap(), None);
    assert_eq!(q.deadline("order-1").await.unwrap(), None);
    assert_eq!(store.footprint("tx-invisible"), Vec::<String>::new());

    tx.commit().await.unwrap();
    assert_eq!(
        q.stats().await.unwrap(),
        Stats {
            due: 2,
            ..Stats::default()
        }
    );
    assert!(q.deadline(&id).await.unwrap().is_some());
    let taken = q.take_many(10).await.unwrap();
    let got: Vec<_> = taken.iter().map(|d| (d.id(), *d.value())).collect();
    assert_eq!(got, [(id.as_str(), 7), ("order-1", 8)]);
}

#[tokio::test]
async fn a_waiting_consumer_is_woken_at_the_commit_and_not_before() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-wake").await;
    let waiting = consumer(&store, "tx-wake").await;
    let taker = tokio::spawn(async move { waiting.take_timeout(WAIT).await });
    tokio::time::sleep(ms(200)).await; // let it go to sleep on the empty queue

    let mut tx = pool.begin().await.unwrap();
    let id = q.insert_in(&mut tx, &7, Duration::ZERO).await.unwrap();
    // Time enough for an early notification to arrive and be acted on.
    tokio::time::sleep(ms(500)).await;
    assert!(!taker.is_finished(), "woken before the commit");
    tx.commit().await.unwrap();

    let d = within("the consumer", taker)
        .await
        .unwrap()
        .unwrap()
        .expect("woken by the commit, well before its 30 s poll");
    assert_eq!((d.id(), *d.value(), d.attempt()), (id.as_str(), 7, 1));
    assert!(d.ack().await.unwrap());
}

#[tokio::test]
async fn a_commit_wakes_a_consumer_sleeping_until_a_later_head() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-head").await;
    q.insert(&1, HOUR).await.unwrap();
    let waiting = consumer(&store, "tx-head").await;
    let taker = tokio::spawn(async move { waiting.take_timeout(WAIT).await });
    tokio::time::sleep(ms(200)).await; // asleep until the hour's entry or the poll

    let mut tx = pool.begin().await.unwrap();
    q.insert_in(&mut tx, &2, Duration::ZERO).await.unwrap();
    tx.commit().await.unwrap();
    let d = within("the consumer", taker)
        .await
        .unwrap()
        .unwrap()
        .expect("woken by the commit");
    assert_eq!(*d.value(), 2);
}

#[tokio::test]
async fn a_rollback_leaves_nothing_and_delivers_nothing() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-rollback").await;
    let waiting = consumer(&store, "tx-rollback").await;
    let taker = tokio::spawn(async move { waiting.take_timeout(ms(1500)).await });
    tokio::time::sleep(ms(200)).await;

    let mut tx = pool.begin().await.unwrap();
    q.insert_in(&mut tx, &1, Duration::ZERO).await.unwrap();
    q.insert_with_id_in(&mut tx, "order-1", &2, Duration::ZERO)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    // A transaction dropped without commit rolls back too.
    {
        let mut tx = pool.begin().await.unwrap();
        q.insert_in(&mut tx, &3, Duration::ZERO).await.unwrap();
    }

    let got = within("the consumer", taker).await.unwrap().unwrap();
    assert!(got.is_none(), "delivered {got:?}");
    assert_eq!(q.stats().await.unwrap(), Stats::default());
    assert!(q.try_take().await.unwrap().is_none());
    assert_eq!(q.deadline("order-1").await.unwrap(), None);
    assert_eq!(store.footprint_all(), Vec::<String>::new());
    // The id is free.
    assert!(q.insert_with_id("order-1", &4, HOUR).await.unwrap());
}

#[tokio::test]
async fn insert_in_on_a_connection_outside_a_transaction_takes_effect_at_once() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-autocommit").await;
    let mut conn = pool.acquire().await.unwrap();
    let id = q.insert_in(&mut conn, &5, Duration::ZERO).await.unwrap();
    assert!(q.insert_with_id_in(&mut conn, "x", &6, HOUR).await.unwrap());
    drop(conn);
    let d = q.try_take().await.unwrap().expect("committed");
    assert_eq!((d.id(), *d.value()), (id.as_str(), 5));
    assert_eq!(q.stats().await.unwrap().pending, 1);
}

// ---------------------------------------------------------------- insert_with_id_in

#[tokio::test]
async fn insert_with_id_in_is_idempotent_and_its_rollback_frees_the_id() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-idem").await;

    let mut tx = pool.begin().await.unwrap();
    assert!(
        q.insert_with_id_in(&mut tx, "order-1", &1, HOUR)
            .await
            .unwrap()
    );
    // Twice in one transaction: the second sees the first.
    assert!(
        !q.insert_with_id_in(&mut tx, "order-1", &2, Duration::ZERO)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    // Committed: taken for every later transaction and plain insert.
    let mut tx = pool.begin().await.unwrap();
    assert!(
        !q.insert_with_id_in(&mut tx, "order-1", &3, Duration::ZERO)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    assert!(
        !q.insert_with_id("order-1", &4, Duration::ZERO)
            .await
            .unwrap()
    );
    assert_eq!(
        q.stats().await.unwrap(),
        Stats {
            pending: 1,
            ..Stats::default()
        }
    );
    assert!(q.reset("order-1", Duration::ZERO).await.unwrap());
    assert_eq!(*q.try_take().await.unwrap().expect("due").value(), 1);

    // Rolled back: the id was never taken.
    let mut tx = pool.begin().await.unwrap();
    assert!(
        q.insert_with_id_in(&mut tx, "order-2", &5, Duration::ZERO)
            .await
            .unwrap()
    );
    tx.rollback().await.unwrap();
    assert_eq!(q.deadline("order-2").await.unwrap(), None);
    assert!(
        q.insert_with_id("order-2", &6, Duration::ZERO)
            .await
            .unwrap()
    );
    let d = q.try_take().await.unwrap().expect("the plain insert");
    assert_eq!((d.id(), *d.value()), ("order-2", 6));
}

#[tokio::test]
async fn an_insert_racing_an_open_transaction_for_one_id_never_duplicates() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-race").await;
    for commit in [true, false] {
        let id = format!("order-{commit}");
        let mut tx = pool.begin().await.unwrap();
        assert!(q.insert_with_id_in(&mut tx, &id, &1, HOUR).await.unwrap());
        // A plain insert of the same id while the transaction is open.
        let racer = {
            let (q, id) = (q.clone(), id.clone());
            tokio::spawn(async move { q.insert_with_id(&id, &2, HOUR).await })
        };
        tokio::time::sleep(ms(200)).await;
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        let inserted = within("the racing insert", racer).await.unwrap().unwrap();
        assert_eq!(inserted, !commit, "commit {commit}");
        assert!(q.reset(&id, Duration::ZERO).await.unwrap());
        let d = q.try_take().await.unwrap().expect("one entry");
        let winner = if commit { 1 } else { 2 };
        assert_eq!((d.id(), *d.value()), (id.as_str(), winner));
        assert!(d.ack().await.unwrap());
        assert!(q.try_take().await.unwrap().is_none(), "one entry only");
    }
}

// ---------------------------------------------------------------- remove_in

#[tokio::test]
async fn remove_in_takes_effect_at_the_commit_and_not_after_a_rollback() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-remove").await;
    q.insert_with_id("x", &1, HOUR).await.unwrap();
    let deadline = q.deadline("x").await.unwrap();

    // Rolled back: still there, and delivered.
    let mut tx = pool.begin().await.unwrap();
    assert!(q.remove_in(&mut tx, "x").await.unwrap());
    assert!(
        !q.remove_in(&mut tx, "x").await.unwrap(),
        "gone for the caller"
    );
    assert_eq!(q.deadline("x").await.unwrap(), deadline, "not for others");
    tx.rollback().await.unwrap();
    assert_eq!(q.deadline("x").await.unwrap(), deadline);
    assert!(q.reset("x", Duration::ZERO).await.unwrap());
    let d = q.try_take().await.unwrap().expect("still there");
    assert_eq!((d.id(), *d.value()), ("x", 1));
    assert!(d.retry(HOUR).await.unwrap());

    // Committed: gone.
    let mut tx = pool.begin().await.unwrap();
    assert!(q.remove_in(&mut tx, "x").await.unwrap());
    assert_eq!(q.stats().await.unwrap().pending, 1, "until the commit");
    tx.commit().await.unwrap();
    assert_eq!(q.deadline("x").await.unwrap(), None);
    assert_eq!(q.stats().await.unwrap(), Stats::default());
    assert!(!q.remove("x").await.unwrap());
}

#[tokio::test]
async fn remove_in_of_a_due_entry_rolled_back_leaves_it_to_be_delivered() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-remove-due").await;
    let waiting = consumer(&store, "tx-remove-due").await;
    q.insert_with_id("x", &1, Duration::ZERO).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    assert!(q.remove_in(&mut tx, "x").await.unwrap());
    tx.rollback().await.unwrap();
    let d = within("take", waiting.take()).await.unwrap();
    assert_eq!((d.id(), *d.value(), d.attempt()), ("x", 1, 1));
    assert!(d.ack().await.unwrap());

    // Committed while a consumer waits: it never gets the entry.
    q.insert_with_id("y", &2, Duration::ZERO).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    assert!(q.remove_in(&mut tx, "y").await.unwrap());
    tx.commit().await.unwrap();
    assert!(waiting.take_timeout(ms(300)).await.unwrap().is_none());
    assert_eq!(waiting.stats().await.unwrap(), Stats::default());
}

#[tokio::test]
async fn remove_in_of_a_leased_entry_makes_the_holders_ack_false_once_committed() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-remove-leased").await;
    q.insert_with_id("x", &1, Duration::ZERO).await.unwrap();
    let d = q.try_take().await.unwrap().expect("due");
    let mut tx = pool.begin().await.unwrap();
    assert!(q.remove_in(&mut tx, "x").await.unwrap());
    tx.commit().await.unwrap();
    assert!(!d.ack().await.unwrap());
    assert_eq!(q.stats().await.unwrap(), Stats::default());
}

// ---------------------------------------------------------------- with the caller's rows

#[tokio::test]
async fn an_order_and_its_expiry_commit_together_or_not_at_all() {
    let store = Store::start();
    let (pool, q) = queue::<i64>(&store, "tx-orders").await;
    let orders = create_orders(&store);
    let insert_order = format!("INSERT INTO {orders} (state) VALUES ($1) RETURNING id");

    let mut tx = pool.begin().await.unwrap();
    let kept: i64 = sqlx::query_scalar(&insert_order)
        .bind("kept")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let expiry = q.insert_in(&mut tx, &kept, Duration::ZERO).await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    let dropped: i64 = sqlx::query_scalar(&insert_order)
        .bind("dropped")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    q.insert_in(&mut tx, &dropped, Duration::ZERO)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert_eq!(
        store.db.psql(&format!("SELECT state FROM {orders}")),
        "kept"
    );
    let d = q
        .try_take()
        .await
        .unwrap()
        .expect("the kept order's expiry");
    assert_eq!((d.id(), *d.value()), (expiry.as_str(), kept));
    assert!(
        q.try_take().await.unwrap().is_none(),
        "no expiry of a rolled back order"
    );
}

#[tokio::test]
async fn a_failing_statement_after_insert_in_rolls_back_both() {
    let store = Store::start();
    let (pool, q) = queue::<i64>(&store, "tx-fail").await;
    let orders = create_orders(&store);
    store
        .db
        .psql(&format!("INSERT INTO {orders} (state) VALUES ('taken')"));
    let insert_order = format!("INSERT INTO {orders} (state) VALUES ($1) RETURNING id");

    let mut tx = pool.begin().await.unwrap();
    let order: i64 = sqlx::query_scalar(&insert_order)
        .bind("new")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    q.insert_in(&mut tx, &order, Duration::ZERO).await.unwrap();
    // The caller's next statement fails (a unique violation).
    let failed = sqlx::query(&insert_order)
        .bind("taken")
        .fetch_one(&mut *tx)
        .await;
    assert!(failed.is_err());
    // The transaction is aborted: the queue's statements fail too.
    match q.insert_in(&mut tx, &order, Duration::ZERO).await {
        Err(Error::Database(_)) => {}
        other => panic!("expected Error::Database, got {other:?}"),
    }
    // A commit of an aborted transaction rolls it back.
    let _ = tx.commit().await;

    assert_eq!(
        store.db.psql(&format!("SELECT state FROM {orders}")),
        "taken"
    );
    assert_eq!(q.stats().await.unwrap(), Stats::default());
    assert!(q.try_take().await.unwrap().is_none());
    assert_eq!(store.footprint_all(), Vec::<String>::new());
}

/// A value whose serialization fails.
struct Unserializable;

impl Serialize for Unserializable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("refuses"))
    }
}

impl<'de> serde::Deserialize<'de> for Unserializable {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom("never stored"))
    }
}

#[tokio::test]
async fn a_value_that_does_not_serialize_leaves_the_callers_transaction_usable() {
    let store = Store::start();
    let pool = PgPool::connect(&store.url()).await.unwrap();
    let bad: Q<Unserializable> = Q::builder("tx-encode")
        .pool(pool.clone())
        .schema(&store.schema)
        .build()
        .await
        .unwrap();
    let good: Q<u64> = Q::builder("tx-encode")
        .pool(pool.clone())
        .schema(&store.schema)
        .build()
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    match bad
        .insert_in(&mut tx, &Unserializable, Duration::ZERO)
        .await
    {
        Err(Error::Encode(_)) => {}
        other => panic!("expected Error::Encode, got {:?}", other.map(|_| ())),
    }
    // Nothing was sent: the transaction goes on and commits.
    let id = good.insert_in(&mut tx, &1, Duration::ZERO).await.unwrap();
    tx.commit().await.unwrap();
    let d = good.try_take().await.unwrap().expect("committed");
    assert_eq!((d.id(), *d.value()), (id.as_str(), 1));
}

/// Scans of the test's `entries` table so far, as the statistics
/// collector reports them (backends report at most once a second).
fn scans(store: &Store) -> i64 {
    store
        .db
        .psql(&format!(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables \
             WHERE schemaname = '{}' AND relname = 'entries'",
            store.schema
        ))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_due_entry_locked_by_an_open_remove_in_does_not_make_consumers_spin() {
    let store = Store::start();
    let (pool, q) = queue::<u64>(&store, "tx-locked-head").await;
    let waiting = consumer(&store, "tx-locked-head").await;
    q.insert_with_id("x", &1, Duration::ZERO).await.unwrap();
    // The caller's transaction holds the due row's lock for a while.
    let mut tx = pool.begin().await.unwrap();
    assert!(q.remove_in(&mut tx, "x").await.unwrap());
    let taker = tokio::spawn(async move { waiting.take_timeout(ms(3000)).await });
    tokio::time::sleep(ms(200)).await;
    let before = scans(&store);
    tokio::time::sleep(ms(2000)).await;
    let during = scans(&store) - before;
    tx.rollback().await.unwrap();
    // "An idle queue costs at most one query per poll_interval per built
    // handle": nothing can be delivered while the row is locked, so a
    // consumer polling every 30 s has no reason to ask more than a few
    // times in 2 s (a busy loop asks hundreds of times).
    assert!(
        during <= 50,
        "{during} scans of the entries table in 2 s by one waiting consumer"
    );
    let d = within("the consumer", taker).await.unwrap().unwrap();
    assert_eq!(d.expect("delivered after the rollback").id(), "x");
}
