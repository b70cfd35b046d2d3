//! What the postgres store does for inserts with options and for key
//! limits (the public methods are written once for every store, in
//! `durable/front.rs`).

use super::error::Error;
use super::queue::PgQueue;
use crate::durable::KeyLimit;
use crate::durable::options::Plan;

crate::durable::front::jobs_front!(
    PgQueue,
    "no_run",
    "# use punctual::postgres::PgQueue;
# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), punctual::postgres::Error> {
let queue: PgQueue<String> = PgQueue::connect(\"postgres://localhost/shop\", \"jobs\").await?;"
);

impl<T> PgQueue<T> {
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
