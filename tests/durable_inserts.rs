//! Single inserts made at the same time on one handle: on Redis
//! and PostgreSQL they go to the store together, as one script or one
//! statement, while a request of them is on its way; each caller still
//! gets its own answer, in the order of the calls, and waiting consumers
//! wake for a new head among them. One body per behaviour on every store
//! where the behaviour is the queue's; the batching itself is checked on
//! the stores that batch.
//!
//! The calls are futures polled in turn on the test's current-thread
//! runtime (`join_all` polls them in order), so which of them go together
//! does not depend on timing: the first is sent alone, and the others wait
//! for it and go as one request.

mod common;
#[path = "common/store_extra.rs"]
mod store_extra;

use std::collections::HashSet;
use std::pin::pin;
use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use store_extra::{HOUR, ms, wall, within};

common::stores::on_every_store! {
    #[tokio::test]
    async fn inserts_made_together_get_their_own_ids_and_keep_the_order_of_the_calls() {
        let store = Store::start();
        let q: Q<u64> = store.open("together-order").await;
        // One instant for all: only the order of the calls can order them.
        let at = wall() + ms(300);
        let ids: Vec<String> = join_all((0..100u64).map(|n| {
            let q = &q;
            async move { q.insert_at(&n, at).await.unwrap() }
        }))
        .await;
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 100, "{ids:?}");
        let mut got = Vec::new();
        while got.len() < 100 {
            for d in within("take_many", q.take_many(64)).await.unwrap() {
                assert_eq!(d.id(), ids[*d.value() as usize], "the id of {}", d.value());
                got.push(*d.value());
                assert!(d.ack().await.unwrap());
            }
        }
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn inserts_of_one_id_made_together_insert_it_once() {
        let store = Store::start();
        let q: Q<u64> = store.open("together-id").await;
        let inserted: Vec<bool> = join_all((0..10u64).map(|n| {
            let q = &q;
            async move { q.insert_with_id("order-17", &n, HOUR).await.unwrap() }
        }))
        .await;
        // The first call's value is the one kept.
        assert_eq!(inserted, [true].into_iter().chain([false; 9]).collect::<Vec<_>>());
        assert_eq!(q.stats().await.unwrap().pending, 1);
        q.reset("order-17", Duration::ZERO).await.unwrap();
        let d = within("take", q.take()).await.unwrap();
        assert_eq!((d.id(), *d.value()), ("order-17", 0));
    }

    #[tokio::test]
    async fn a_consumer_asleep_toward_a_later_head_wakes_for_a_new_head_inserted_with_others() {
        let store = Store::start();
        // No polling to fall back on: only the announcement can wake it.
        let q: Q<u64> = store.builder("together-wake").poll_interval(HOUR).build().await.unwrap();
        q.insert(&0, HOUR).await.unwrap();
        let mut take = pin!(q.take());
        // Asleep toward the entry an hour away.
        assert!(tokio::time::timeout(ms(300), take.as_mut()).await.is_err());
        let started = wall();
        let inserts = join_all((1..=50u64).map(|n| {
            let q = &q;
            // The 40th is due at once, the others later than the head.
            let delay = if n == 40 { Duration::ZERO } else { 2 * HOUR };
            async move { q.insert(&n, delay).await.unwrap() }
        }));
        let (_, d) = within("the new head's delivery", async { tokio::join!(inserts, take) }).await;
        let d = d.unwrap();
        assert_eq!(*d.value(), 40);
        let took = wall().duration_since(started).unwrap_or_default();
        assert!(took < Duration::from_secs(5), "woke after {took:?}");
    }
}

common::stores::on_durable_stores! {
    #[tokio::test]
    async fn inserts_made_while_one_is_on_its_way_go_as_one_request() {
        let store = Store::start();
        let q: Q<u64> = store.open("together-batch").await;
        // Scripts loaded, statements prepared.
        q.insert(&1000, HOUR).await.unwrap();
        let before = store.insert_requests("together-batch");
        let ids = join_all((0..100u64).map(|n| {
            let q = &q;
            async move { q.insert(&n, HOUR).await.unwrap() }
        }))
        .await;
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 100);
        // The first alone, the 99 that came while it was on its way together.
        assert_eq!(store.insert_requests("together-batch") - before, 2);
        // One at a time, each goes alone.
        for n in 0..3u64 {
            q.insert(&n, HOUR).await.unwrap();
        }
        assert_eq!(store.insert_requests("together-batch") - before, 5);
        assert_eq!(q.stats().await.unwrap().pending, 104);
    }

    #[tokio::test]
    async fn an_insert_dropped_while_it_waits_for_the_one_on_its_way_is_not_sent() {
        let store = Store::start();
        let q: Q<u64> = store.open("together-drop").await;
        q.insert(&0, HOUR).await.unwrap();
        let mut first = pin!(q.insert(&1, HOUR));
        // Sent: its answer cannot be here within this poll.
        assert!(first.as_mut().now_or_never().is_none());
        let mut second = Box::pin(q.insert(&2, HOUR));
        assert!(second.as_mut().now_or_never().is_none(), "waits for the first");
        drop(second);
        first.await.unwrap();
        // The room of the first request is free again for the next insert.
        within("the next insert", q.insert(&3, HOUR)).await.unwrap();
        let mut values = store.values("together-drop");
        values.sort_unstable();
        assert_eq!(values, [0, 1, 3]);
    }
}

#[cfg(feature = "redis")]
mod redis_only {
    use super::*;
    use common::stores::redis::*;

    #[tokio::test]
    async fn inserts_made_together_all_fail_when_the_server_is_gone() {
        let mut store = Store::start();
        let q: Q<u64> = store
            .builder("together-gone")
            .response_timeout(ms(500))
            .build()
            .await
            .unwrap();
        q.insert(&0, HOUR).await.unwrap();
        store.server.kill();
        let results = within(
            "the inserts' answers",
            join_all((0..20u64).map(|n| {
                let q = &q;
                async move { q.insert(&n, HOUR).await }
            })),
        )
        .await;
        for (n, result) in results.into_iter().enumerate() {
            assert!(
                matches!(result, Err(Error::Redis(_))),
                "insert {n}: {result:?}"
            );
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres_only {
    use super::*;
    use common::pg::psql;
    use common::stores::pg::*;

    #[tokio::test]
    async fn an_insert_the_database_refuses_fails_alone_and_the_others_of_its_batch_apply() {
        let store = Store::start();
        let q: Q<String> = store.open("together-refused").await;
        q.insert(&"warm".to_owned(), HOUR).await.unwrap();
        let s = &store.schema;
        psql(
            &store.url(),
            &format!(
                "CREATE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.value LIKE '%refused%' THEN RAISE EXCEPTION 'no: %', NEW.value; END IF; \
                 RETURN NEW; END $$; \
                 CREATE TRIGGER refuse BEFORE INSERT ON {s}.entries \
                 FOR EACH ROW EXECUTE FUNCTION {s}.refuse();"
            ),
        );
        // The first goes alone; the three others together, and their
        // statement fails on the refused one.
        let values = ["first", "second", "refused", "third"];
        let results = join_all(values.iter().map(|v| {
            let q = &q;
            async move { q.insert(&(*v).to_owned(), HOUR).await }
        }))
        .await;
        for (v, result) in values.iter().zip(&results) {
            match (*v, result) {
                ("refused", Err(Error::Database(e))) => {
                    assert!(e.to_string().contains("no: \"refused\""), "{e}");
                }
                ("refused", other) => panic!("the refused one: {other:?}"),
                (v, result) => assert!(result.is_ok(), "{v}: {result:?}"),
            }
        }
        assert_eq!(q.stats().await.unwrap().pending, 4);
    }
}

/// What the tests above read from a store behind the queue's back.
trait Values {
    fn values(&self, name: &str) -> Vec<u64>;
    /// Insert requests so far: Redis: scripts run (`INFO commandstats`,
    /// every queue of the server); PostgreSQL: the transactions that wrote
    /// the queue's live entries (their `xmin`).
    fn insert_requests(&self, name: &str) -> usize;
}

#[cfg(feature = "redis")]
impl Values for common::stores::redis::Store {
    fn values(&self, name: &str) -> Vec<u64> {
        let key = format!("punctual:{{{name}}}:entries");
        let fields = self.server.cli(&["HKEYS", &key]);
        fields
            .lines()
            .filter_map(|f| f.strip_prefix("v:"))
            .map(|id| {
                self.server
                    .cli(&["HGET", &key, &format!("v:{id}")])
                    .trim()
                    .parse()
                    .expect("a number")
            })
            .collect()
    }

    fn insert_requests(&self, _name: &str) -> usize {
        let stats = self.server.cli(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().expect("calls"))
    }
}

#[cfg(feature = "postgres")]
impl Values for common::stores::pg::Store {
    fn values(&self, name: &str) -> Vec<u64> {
        common::pg::psql(
            &self.url(),
            &format!(
                "SELECT value FROM {}.entries WHERE queue = '{name}' AND run_at IS NOT NULL",
                self.schema
            ),
        )
        .lines()
        .map(|v| v.trim().parse().expect("a number"))
        .collect()
    }

    fn insert_requests(&self, name: &str) -> usize {
        common::pg::psql(
            &self.url(),
            &format!(
                "SELECT count(DISTINCT xmin::text) FROM {}.entries WHERE queue = '{name}'",
                self.schema
            ),
        )
        .parse()
        .expect("a count")
    }
}
