//! Lease extension for the engine: one request extends every lease the
//! worker holds (running handlers and prefetched entries), a third of a
//! lease apart; a holder whose lease is found lost, or may have run out
//! while the store could not be reached, is dropped.

use std::future::Future;
use std::pin::Pin;

use tokio::task::Id;
use tokio::time::Instant;

use super::{Engine, RunState, StoreError, within};
use crate::durable::health::RunRecord;
use crate::durable::job::Job;
use crate::durable::store::Extended;
use crate::durable::{Durable, Outcome};
use crate::queue::deadline_after;

/// Who holds a lease the engine extends.
pub(super) enum Holder {
    Run(Id),
    Prefetched(u64),
}

/// The extension in flight: whether each lease was still held (`None`: no
/// answer in time, where the store bounds none itself), for whom, and when
/// it was sent.
pub(super) type Extension<Q> = Pin<
    Box<
        dyn Future<
                Output = (
                    Option<Result<Vec<Extended>, StoreError<Q>>>,
                    Vec<Holder>,
                    Instant,
                ),
            > + Send,
    >,
>;

impl<Q, H, Fut> Engine<Q, H, Fut>
where
    Q: Durable,
    H: Fn(Job<Q::Item>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Into<Outcome>,
{
    /// Extends every held lease in one request; first drops the runs whose
    /// lease may have run out (the store could not be reached in time).
    pub(super) fn heartbeat(&mut self) {
        self.drop_overdue(Instant::now());
        let mut holders = Vec::new();
        let mut leases = Vec::new();
        // A stopped run is still running until its task ends (a handler
        // that blocks its thread cannot be dropped): its lease is kept.
        for (task, run) in &self.runs {
            if !matches!(run.state, RunState::Dropped | RunState::Cancelled) {
                holders.push(Holder::Run(*task));
                leases.push(run.lease.clone());
            }
        }
        for entry in &self.prefetched {
            holders.push(Holder::Prefetched(entry.seq));
            leases.push(entry.taken.lease.clone());
        }
        let record = self.record_now();
        let queue = self.queue.clone();
        let lease = self.lease;
        self.extension = Some(Box::pin(async move {
            let sent_at = Instant::now();
            let extend = queue.beat(&leases, lease, &record);
            (
                within(queue.give_up_claim_after(), extend).await,
                holders,
                sent_at,
            )
        }));
    }

    /// The worker's record as of now (JSON): its runs, and whether it is
    /// stopping.
    fn record_now(&mut self) -> String {
        self.record.running = self
            .runs
            .values()
            .filter(|run| run.state != RunState::Dropped && run.state != RunState::Cancelled)
            .map(|run| RunRecord {
                id: run.id.clone(),
                attempt: run.attempt,
                at: run.claimed,
            })
            .collect();
        self.record.stopping = self.stopping.is_some();
        self.record.to_json()
    }

    /// Drops the runs whose lease may have run out by `now` (no extension
    /// came back in time): another consumer may hold their entries.
    pub(super) fn drop_overdue(&mut self, now: Instant) {
        let overdue: Vec<Id> = self
            .runs
            .iter()
            .filter(|(_, run)| run.state == RunState::Running && run.fence.until() <= now)
            .map(|(task, _)| *task)
            .collect();
        for task in overdue {
            self.drop_run(task, "its lease may have run out");
        }
    }

    /// The earliest end of a running handler's lease, as far as it is surely
    /// held.
    pub(super) fn fence(&self) -> Option<Instant> {
        self.runs
            .values()
            .filter(|run| run.state == RunState::Running)
            .map(|run| run.fence.until())
            .min()
    }

    /// Records the extension's answer: held leases are good until a lease
    /// after it was sent; the others' holders are dropped.
    pub(super) fn extended(
        &mut self,
        result: Option<Result<Vec<Extended>, StoreError<Q>>>,
        holders: Vec<Holder>,
        sent_at: Instant,
    ) {
        // Either way the next beat tries again; the runs go on until their
        // fence.
        let held = match result {
            Some(Ok(held)) => held,
            Some(Err(error)) => {
                tracing::warn!(queue = self.name, %error,
                    "could not extend the leases of running jobs");
                return;
            }
            None => {
                tracing::warn!(
                    queue = self.name,
                    "an extension of the leases of running jobs got no answer in time"
                );
                return;
            }
        };
        let valid_until = deadline_after(sent_at, self.lease);
        for (holder, held) in holders.into_iter().zip(held) {
            match (holder, held) {
                (Holder::Run(task), Extended::Held) => {
                    if let Some(run) = self.runs.get(&task) {
                        run.fence.set(valid_until);
                    }
                }
                (Holder::Run(task), Extended::Lost) => {
                    self.drop_run(task, "an extension found it lost");
                }
                (Holder::Run(task), Extended::Cancelled) => self.cancel_run(task),
                (Holder::Prefetched(seq), Extended::Held) => {
                    if let Some(entry) = self.prefetched.iter_mut().find(|e| e.seq == seq) {
                        entry.valid_until = valid_until;
                    }
                }
                // Lost or cancelled before it started: it is simply not run.
                (Holder::Prefetched(seq), _) => self.prefetched.retain(|e| e.seq != seq),
            }
        }
    }
}
