//! Input PostgreSQL refuses, on its own calls: a NUL character in an id
//! given to the transactional twins (`*_in`) or in a queue name, and a
//! schema name that is not a plain SQL identifier. The bad input every
//! store refuses (NUL included) is in `durable_queue.rs`.
//!
//! Each test has a schema of its own in this binary's database.

#![cfg(feature = "postgres")]

mod common;
#[path = "common/store_extra.rs"]
mod store_extra;

use common::stores::pg::{Error, Q, Stats, Store};
use punctual::MissedTicks;
use punctual::postgres::sqlx::PgPool;
use std::fmt::Debug;
use std::time::Duration;
use store_extra::{Backdoor, HOUR, ms, within};

fn assert_invalid_id<V: Debug>(result: Result<V, Error>, what: &str) {
    match result {
        Err(Error::InvalidId(why)) => assert!(!why.is_empty(), "{what}: empty reason"),
        other => panic!("{what}: expected Err(InvalidId), got {other:?}"),
    }
}

fn assert_invalid_name<V: Debug>(result: Result<V, Error>, what: &str) {
    match result {
        Err(Error::InvalidName(why)) => assert!(!why.is_empty(), "{what}: empty reason"),
        other => panic!("{what}: expected Err(InvalidName), got {other:?}"),
    }
}

#[tokio::test]
async fn an_id_holding_nul_is_invalid_everywhere_and_changes_nothing() {
    let store = Store::start();
    let pool = PgPool::connect(&store.url()).await.unwrap();
    let q: Q<u64> = Q::builder("nul-ids")
        .pool(pool.clone())
        .schema(&store.schema)
        .build()
        .await
        .unwrap();
    // The id without its NUL exists, so a call that cut the id there would
    // find it.
    assert!(q.insert_with_id("a", &1, HOUR).await.unwrap());
    let before = store.footprint_all();

    for bad in ["a\0", "\0", "a\0b"] {
        let what = |op: &str| format!("{op}({bad:?})");
        assert_invalid_id(q.insert_with_id(bad, &2, ms(0)).await, &what("insert"));
        assert_invalid_id(q.remove(bad).await, &what("remove"));
        assert_invalid_id(q.reset(bad, ms(0)).await, &what("reset"));
        assert_invalid_id(q.deadline(bad).await, &what("deadline"));
        assert_invalid_id(q.requeue_dead(bad, ms(0)).await, &what("requeue_dead"));
        let every = Duration::from_secs(60);
        let schedule = q.schedule_every(bad, every, MissedTicks::Skip, &3).await;
        assert_invalid_id(schedule, &what("schedule_every"));
        assert_invalid_id(q.unschedule(bad).await, &what("unschedule"));

        let mut tx = pool.begin().await.unwrap();
        let inserted = q.insert_with_id_in(&mut tx, bad, &4, ms(0)).await;
        assert_invalid_id(inserted, &what("insert_with_id_in"));
        assert_invalid_id(q.remove_in(&mut tx, bad).await, &what("remove_in"));
        // Refused before anything was sent: the transaction goes on.
        assert!(q.insert_with_id_in(&mut tx, "b", &5, HOUR).await.unwrap());
        tx.rollback().await.unwrap();
    }
    assert_eq!(store.footprint_all(), before, "a rejected call wrote");
    assert_eq!(
        q.stats().await.unwrap(),
        Stats {
            pending: 1,
            ..Stats::default()
        }
    );
}

#[tokio::test]
async fn a_queue_name_holding_nul_is_invalid() {
    let store = Store::start();
    let valid: Q<u64> = store.open("valid").await;
    for name in ["\0", "a\0", "a\0b"] {
        assert_invalid_name(store.builder::<u64>(name).build().await, name);
    }
    assert_eq!(store.footprint_all(), Vec::<String>::new());
    assert_eq!(valid.stats().await.unwrap(), Stats::default());
}

#[tokio::test]
async fn a_schema_that_is_not_a_plain_identifier_is_invalid_and_creates_nothing() {
    let store = Store::start();
    let too_long = "s".repeat(64);
    let bad = [
        "",
        "1abc",
        "a-b",
        "a b",
        "a.b",
        "a\"b",
        "a;drop schema public",
        "é",
        "a\0",
        too_long.as_str(),
    ];
    for schema in bad {
        let built = Q::<u64>::builder("q")
            .url(&store.url())
            .schema(schema)
            .build()
            .await;
        assert_invalid_name(built, schema);
    }
    // Nothing was created: only the schemas the server starts with, and
    // those of this binary's other tests (`t<n>`).
    let schemas = store.db.psql(
        "SELECT string_agg(nspname, ',') FROM pg_namespace \
         WHERE nspname !~ '^(pg_.*|public|information_schema|t[0-9]+)$'",
    );
    assert_eq!(schemas, "");

    // The longest plain identifier, with digits, underscores and capitals
    // (kept as written: the name is quoted), works.
    let longest = format!("S_{}", "9".repeat(61));
    assert_eq!(longest.len(), 63);
    let q: Q<u64> = Q::builder("q")
        .url(&store.url())
        .schema(&longest)
        .build()
        .await
        .unwrap();
    q.insert(&1, ms(0)).await.unwrap();
    assert_eq!(*within("take", q.take()).await.unwrap().value(), 1);
    let found = store.db.psql(&format!(
        "SELECT count(*) FROM \"{longest}\".entries WHERE queue = 'q'"
    ));
    assert_eq!(found, "1", "an entry leased in the schema as written");
}
