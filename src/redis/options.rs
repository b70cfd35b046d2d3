//! What the redis store does for inserts with options and for key
//! limits (the public methods are written once for every store, in
//! `durable/front.rs`).

use super::error::Error;
use super::queue::RedisQueue;
use crate::durable::KeyLimit;
use crate::durable::options::Plan;

crate::durable::front::jobs_front!(
    RedisQueue,
    "no_run",
    "# use punctual::redis::RedisQueue;
# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), punctual::redis::Error> {
let queue: RedisQueue<String> = RedisQueue::connect(\"redis://127.0.0.1/\", \"jobs\").await?;"
);

impl<T> RedisQueue<T> {
    /// Inserts `plans` in one step, each answered in order: its id, or
    /// `None` where it was refused.
    pub(crate) async fn insert_plans(
        &self,
        _plans: Vec<Plan>,
    ) -> Result<Vec<Option<String>>, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// Sets (`Some`) or removes the limit of `key`; whether that changed it.
    pub(crate) async fn put_limit(
        &self,
        _key: &str,
        _limit: Option<KeyLimit>,
    ) -> Result<bool, Error> {
        Err(Error::Unsupported("not yet".into()))
    }

    /// Every key limit, by key (the default under `*`).
    pub(crate) async fn read_limits(&self) -> Result<Vec<(String, KeyLimit)>, Error> {
        Err(Error::Unsupported("not yet".into()))
    }
}
