//! `PgQueue` as a [`Durable`] queue: the worker's seam, each call one
//! statement.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::error::Error;
use super::inner::call;
use super::inner::{Attempt, Claimed, Held, Op};
use super::queue::PgQueue;
use super::wait::Listener;
use crate::durable::health::Record;
use crate::durable::store::{Applied, Batch, Extended, Finish, Sealed, Taken, record_delivered};
use crate::durable::wait::Waiter;

crate::durable::durable_by_inherent_methods!(PgQueue);

impl<T> PgQueue<T> {
    /// Starts the handle's `LISTEN` task, once: kicks for its consumers,
    /// finishes for `wait`, cancels for its workers.
    pub(crate) fn listen(&self) {
        let inner = self.inner();
        inner.waiter.listen(|kicks, stop| {
            Listener {
                pool: inner.pool.clone(),
                channel: inner.channel.clone(),
                queue: inner.name.clone(),
                ping_after: inner
                    .poll_interval
                    .saturating_mul(10)
                    .clamp(Duration::from_millis(500), Duration::from_secs(30)),
                finishes: inner.finishes.clone(),
                pushes: std::sync::Arc::clone(&inner.pushes),
                cancels: std::sync::Arc::clone(&inner.cancels),
            }
            .run(kicks, stop)
        });
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Sealed for PgQueue<T> {
    type Value = T;
    type Lease = Held;
    type Attempt = Attempt;
    type Failure = Error;

    fn queue_name(&self) -> &str {
        &self.inner().name
    }

    fn store_kind(&self) -> &'static str {
        "postgres"
    }

    fn lease_duration(&self) -> Duration {
        self.inner().lease
    }

    /// A claim and the finishes of the runs that ended meanwhile go as two
    /// transactions side by side: a claim carrying them would make the
    /// places it fills wait for their writes too.
    fn finishes_apart(&self) -> bool {
        true
    }

    /// A lease, at least a second: a worker with a short lease stops
    /// waiting before the response timeout (what the claim leased runs out
    /// by then anyway).
    fn give_up_claim_after(&self) -> Option<Duration> {
        Some(self.inner().lease.max(Duration::from_secs(1)))
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
        self.listen();
        self.inner().waiter.kicks()
    }

    async fn extend_marked(
        &self,
        leases: &[Held],
        lease: Duration,
    ) -> Result<Vec<Extended>, Error> {
        self.inner().beat(leases, lease, None).await
    }

    fn cancels(&self) -> Option<watch::Receiver<u64>> {
        self.listen();
        Some(self.inner().cancels.subscribe())
    }

    async fn beat(
        &self,
        leases: &[Held],
        lease: Duration,
        record: &str,
    ) -> Result<Vec<Extended>, Error> {
        match Record::from_json(record) {
            Some(parsed) => {
                self.inner()
                    .beat(leases, lease, Some((&parsed.id, record, parsed.every_ms)))
                    .await
            }
            None if leases.is_empty() => Ok(Vec::new()),
            None => self.inner().beat(leases, lease, None).await,
        }
    }

    async fn leave(&self, worker: &str) -> Result<(), Error> {
        let inner = self.inner();
        call!(inner, |conn| {
            sqlx::query(&inner.sql.leave)
                .bind(&inner.name)
                .bind(worker)
                .execute(conn)
        })?;
        Ok(())
    }

    async fn claim_for(
        &self,
        attempt: &mut Attempt,
        max: usize,
        finished: &[Finish<Held>],
        worker: &str,
    ) -> Result<Batch<T, Held>, Error> {
        attempt.name_worker(worker);
        self.claim(attempt, max, finished).await
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
        let mut taken = Vec::with_capacity(claim.items.len());
        let mut buried = Vec::new();
        for item in claim.items {
            let Claimed {
                held,
                json,
                attempt,
                deadline,
                lease_until,
                bury,
                key,
                priority,
                trace,
            } = item;
            match crate::durable::ops::decode::<T>(bury, Some(json.as_bytes())) {
                Ok(value) => taken.push(Taken {
                    id: held.id.clone(),
                    schedule: held.tick.is_some().then(|| held.id.clone()),
                    value,
                    attempt,
                    deadline,
                    lease_until,
                    key,
                    priority,
                    trace,
                    lease: held,
                }),
                Err(refused) => {
                    tracing::warn!(queue = %self.inner().name, id = held.id, attempt,
                        reason = refused.reason(), "not handed out");
                    buried.push(refused.op(&held, attempt));
                }
            }
        }
        if !buried.is_empty() {
            if let Err(error) = self.inner().finish(&buried).await {
                // Their leases run out and the next claim tries again.
                tracing::warn!(queue = %self.inner().name, %error,
                    "could not move entries to the dead letters");
            }
        }
        let batch = Batch {
            done: claim.done,
            taken,
            more_due: claim.more_due,
            next_due: claim.next_due,
            now: super::inner::system_time(claim.now),
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
}
