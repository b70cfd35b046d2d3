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

    /// The live workers.
    pub(crate) async fn read_workers(&self) -> Result<Vec<crate::durable::WorkerInfo>, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// The minutes with events since `since` (ms).
    pub(crate) async fn read_history(
        &self,
        _since: u64,
    ) -> Result<Vec<crate::durable::Minute>, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// How long the oldest due entry has waited.
    pub(crate) async fn read_latency(&self) -> Result<Option<std::time::Duration>, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// Pauses or resumes schedule `name`; whether it changed.
    pub(crate) async fn put_schedule_paused(
        &self,
        _name: &str,
        _pause: bool,
    ) -> Result<bool, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// A page of `state`'s entries, newest first.
    pub(crate) async fn newest_page(
        &self,
        _state: crate::durable::EntryState,
        _cursor: Option<&crate::durable::Cursor>,
        _limit: usize,
    ) -> Result<crate::durable::Page<T>, Error> {
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
