//! `RedisQueue` as a [`Durable`] queue: the worker's seam, each call one
//! script.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::error::Error;
use super::inner::{Attempt, Held, Op};
use super::queue::RedisQueue;
use crate::durable::store::{Applied, Batch, Extended, Finish, Sealed, record_delivered};
use crate::durable::wait::Waiter;

crate::durable::durable_by_inherent_methods!(RedisQueue);

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Sealed for RedisQueue<T> {
    type Value = T;
    type Lease = Held;
    type Attempt = Attempt;
    type Failure = Error;

    fn queue_name(&self) -> &str {
        &self.inner().name
    }

    fn store_kind(&self) -> &'static str {
        "redis"
    }

    fn lease_duration(&self) -> Duration {
        self.inner().lease
    }

    fn poll_interval(&self) -> Duration {
        self.inner().poll_interval
    }

    fn new_attempt(&self) -> Attempt {
        Attempt::new()
    }

    fn waiter(&self) -> &Waiter {
        &self.inner().waiter
    }

    fn abandon(&self, attempt: &Attempt) -> bool {
        self.inner().abandon(attempt)
    }

    fn kicks(&self) -> watch::Receiver<u64> {
        self.inner().listen();
        self.inner().waiter.kicks()
    }

    fn is_transient(error: &Error) -> bool {
        error.is_transient()
    }

    fn is_in_doubt(error: &Error) -> bool {
        error.is_in_doubt()
    }

    async fn claim(
        &self,
        attempt: &mut Attempt,
        max: usize,
        finished: &[Finish<Held>],
    ) -> Result<Batch<T, Held>, Error> {
        let ops: Vec<Op> = finished.iter().map(Op::of).collect();
        let claim = self.inner().claim(attempt, max, &ops).await?;
        let next_due = self.inner().next_due(&claim);
        let done = claim.done.clone();
        let more_due = claim.head.is_some_and(|head| head <= claim.now);
        let now = super::inner::system_time(claim.now);
        let taken = self.decoded(claim).await;
        let batch = Batch {
            done,
            taken,
            more_due,
            next_due,
            now,
        };
        record_delivered(self, &batch);
        Ok(batch)
    }

    async fn finish(&self, finished: &[Finish<Held>]) -> Result<Vec<Applied>, Error> {
        let ops: Vec<Op> = finished.iter().map(Op::of).collect();
        self.inner().finish(&ops).await
    }

    async fn extend(&self, leases: &[Held], lease: Duration) -> Result<Vec<bool>, Error> {
        let held: Vec<&Held> = leases.iter().collect();
        let ends = self.inner().extend(&held, lease).await?;
        Ok(ends.into_iter().map(|end| end.is_some()).collect())
    }

    async fn extend_marked(
        &self,
        leases: &[Held],
        lease: Duration,
    ) -> Result<Vec<Extended>, Error> {
        let held: Vec<&Held> = leases.iter().collect();
        self.inner().extend_marked(&held, lease, None).await
    }

    fn cancels(&self) -> Option<watch::Receiver<u64>> {
        self.inner().listen();
        Some(self.inner().cancels.subscribe())
    }

    async fn beat(
        &self,
        leases: &[Held],
        lease: Duration,
        record: &str,
    ) -> Result<Vec<Extended>, Error> {
        let held: Vec<&Held> = leases.iter().collect();
        let id = crate::durable::health::Record::from_json(record).map(|r| r.id);
        let worker = id.as_deref().map(|id| (id, record));
        self.inner().extend_marked(&held, lease, worker).await
    }

    async fn leave(&self, worker: &str) -> Result<(), Error> {
        let mut invocation = self.inner().script(&super::scripts::SCRIPTS.leave);
        invocation.arg(worker);
        let _: i64 = self.inner().run(&invocation).await?;
        Ok(())
    }

    async fn claim_for(
        &self,
        attempt: &mut Attempt,
        max: usize,
        finished: &[Finish<Held>],
        worker: &str,
    ) -> Result<Batch<T, Held>, Error> {
        attempt.for_worker(worker);
        self.claim(attempt, max, finished).await
    }
}
