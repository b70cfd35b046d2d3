//! `MemoryQueue` as a durable queue: the worker's seam, each call one step
//! on the queue's state.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::clock::system_time;
use super::error::Error;
use super::inner::NAP;
use super::queue::MemoryQueue;
use crate::durable::ops::{Held, Op, decode};
use crate::durable::store::{Applied, Batch, Extended, Finish, Sealed, Taken, record_delivered};
use crate::durable::wait::Waiter;

crate::durable::durable_by_inherent_methods!(MemoryQueue);

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Sealed for MemoryQueue<T> {
    type Value = T;
    type Lease = Held;
    /// A claim and its answer are one step: never in doubt.
    type Attempt = ();
    type Failure = Error;

    fn queue_name(&self) -> &str {
        &self.inner().name
    }

    fn store_kind(&self) -> &'static str {
        "memory"
    }

    fn lease_duration(&self) -> Duration {
        self.lease
    }

    fn poll_interval(&self) -> Duration {
        NAP
    }

    fn new_attempt(&self) {}

    fn waiter(&self) -> &Waiter {
        &self.inner().waiter
    }

    fn abandon(&self, _attempt: &()) -> bool {
        false
    }

    fn kicks(&self) -> watch::Receiver<u64> {
        self.inner().waiter.kicks()
    }

    fn is_transient(_error: &Error) -> bool {
        false
    }

    fn is_in_doubt(_error: &Error) -> bool {
        false
    }

    async fn claim(
        &self,
        _attempt: &mut (),
        max: usize,
        finished: &[Finish<Held>],
    ) -> Result<Batch<T, Held>, Error> {
        Ok(self.claim_as(max, finished, None))
    }

    async fn claim_for(
        &self,
        _attempt: &mut (),
        max: usize,
        finished: &[Finish<Held>],
        worker: &str,
    ) -> Result<Batch<T, Held>, Error> {
        Ok(self.claim_as(max, finished, Some(&Arc::from(worker))))
    }

    async fn finish(&self, finished: &[Finish<Held>]) -> Result<Vec<Applied>, Error> {
        let ops: Vec<Op> = finished.iter().map(Op::of).collect();
        Ok(self.inner().finish(&ops, self.rules))
    }

    async fn extend(&self, leases: &[Held], lease: Duration) -> Result<Vec<bool>, Error> {
        let held: Vec<&Held> = leases.iter().collect();
        let ends = self.inner().extend(&held, lease);
        Ok(ends.into_iter().map(|end| end.is_some()).collect())
    }

    async fn extend_marked(
        &self,
        leases: &[Held],
        lease: Duration,
    ) -> Result<Vec<Extended>, Error> {
        Ok(self.inner().extend_marked(leases, lease))
    }

    fn cancels(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner().cancels.subscribe())
    }

    async fn beat(
        &self,
        leases: &[Held],
        lease: Duration,
        record: &str,
    ) -> Result<Vec<Extended>, Error> {
        self.inner().write(|state, now, _| state.beat(record, now));
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.inner().extend_marked(leases, lease))
    }

    async fn leave(&self, worker: &str) -> Result<(), Error> {
        self.inner().write(|state, _, _| state.leave(worker));
        Ok(())
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> MemoryQueue<T> {
    /// One claim's step, on behalf of `worker` where a worker claims.
    fn claim_as(
        &self,
        max: usize,
        finished: &[Finish<Held>],
        worker: Option<&Arc<str>>,
    ) -> Batch<T, Held> {
        let ops: Vec<Op> = finished.iter().map(Op::of).collect();
        let (claim, token) = self
            .inner()
            .claim(max, self.lease, self.rules, &ops, worker);
        let mut taken = Vec::with_capacity(claim.items.len());
        let mut refused = Vec::new();
        for item in claim.items {
            let lease = Held {
                id: item.id,
                token: token.clone(),
                tick: None,
            };
            match decode::<T>(None, Some(item.value.as_bytes())) {
                Ok(value) => taken.push(Taken {
                    id: lease.id.clone(),
                    schedule: item.tick.is_some().then(|| lease.id.clone()),
                    value,
                    attempt: item.attempt,
                    deadline: system_time(item.deadline),
                    lease_until: system_time(item.lease_until),
                    key: item.group.as_deref().map(str::to_owned),
                    priority: item.priority,
                    trace: item.trace.as_deref().map(str::to_owned),
                    lease,
                }),
                Err(why) => {
                    tracing::warn!(queue = %self.inner().name, id = lease.id,
                        attempt = item.attempt, reason = why.reason(), "not handed out");
                    refused.push(why.op(&lease, item.attempt));
                }
            }
        }
        if !refused.is_empty() {
            self.inner().finish(&refused, self.rules);
        }
        let batch = Batch {
            done: claim.done,
            taken,
            more_due: claim.more,
            next_due: claim.next_due,
            now: system_time(claim.now),
        };
        record_delivered(self, &batch);
        batch
    }
}
