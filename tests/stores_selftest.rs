//! The store-neutral harness runs one body on every store.

mod common;

use std::time::Duration;

common::stores::on_every_store! {
    #[tokio::test]
    async fn one_body_runs_on_each_store() {
        let store = Store::start();
        let q: Q<u64> = store.open("selftest").await;
        let id = q.insert(&1, Duration::ZERO).await.unwrap();
        let d = q.take().await.unwrap();
        assert_eq!(d.id(), id, "on {STORE}");
        assert!(d.ack().await.unwrap());
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }
}
