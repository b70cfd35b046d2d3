//! What the redis store keeps of finished entries and how it cancels
//! (the public methods are written once for every store, in
//! `durable/front.rs`).

use super::error::Error;
use super::queue::RedisQueue;
use crate::durable::JobResult;
use crate::durable::results::{Lookup, Results};

impl<T> RedisQueue<T> {
    /// Entry `id`'s kept result.
    pub(crate) async fn read_result(&self, _id: &str) -> Result<Option<JobResult>, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// Cancels entry `id`; whether there was one.
    pub(crate) async fn cancel_entry(&self, _id: &str) -> Result<bool, Error> {
        Err(Error::Unsupported("not yet".into()))
    }
}

impl<T: Send + Sync> Results for RedisQueue<T> {
    type Failure = Error;

    async fn lookup(&self, _id: &str) -> Result<Lookup, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    fn finishes(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        tokio::sync::broadcast::channel(1).1
    }

    fn recheck_every(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
}
