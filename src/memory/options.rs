//! What the memory store does for inserts with options and for key limits:
//! each one step on the queue's state (the public methods are written once
//! for every store, in `durable/front.rs`).

use std::sync::Arc;

use super::error::Error;
use super::inner::NAP;
use super::queue::MemoryQueue;
use crate::durable::options::Plan;
use crate::durable::results::{Lookup, Results};
use crate::durable::{JobResult, KeyLimit};

crate::durable::front::jobs_front!(
    MemoryQueue,
    "",
    "# use punctual::memory::MemoryQueue;
# #[tokio::main(flavor = \"current_thread\", start_paused = true)]
# async fn main() -> Result<(), punctual::memory::Error> {
let queue: MemoryQueue<String> = MemoryQueue::new(\"jobs\");"
);

impl<T> MemoryQueue<T> {
    /// Inserts `plans` in one step, each answered in order: its id, or
    /// `None` where it was refused.
    pub(crate) async fn insert_plans(
        &self,
        plans: Vec<Plan>,
    ) -> Result<Vec<Option<String>>, Error> {
        let values: Vec<Arc<str>> = plans
            .iter()
            .map(|plan| Arc::from(plan.json.as_str()))
            .collect();
        let ids: Vec<Option<String>> = self.inner().write(|state, now, moved| {
            plans
                .iter()
                .zip(values)
                .map(|(plan, value)| state.insert_plan(plan, value, now, moved))
                .collect()
        });
        let inserted = ids.iter().filter(|id| id.is_some()).count() as u64;
        crate::durable::metrics::inserted("memory", &self.inner().name, "insert", inserted);
        Ok(ids)
    }

    /// Sets (`Some`) or removes the limit of `key`; whether that changed it.
    pub(crate) async fn put_limit(
        &self,
        key: &str,
        limit: Option<KeyLimit>,
    ) -> Result<bool, Error> {
        Ok(self
            .inner()
            .write(|state, _, moved| state.set_limit(key, limit, moved)))
    }

    /// Every key limit, by key (the default under `*`).
    pub(crate) async fn read_limits(&self) -> Result<Vec<(String, KeyLimit)>, Error> {
        Ok(self.inner().read(|state, _| {
            state
                .keys
                .limits
                .iter()
                .map(|(key, limit)| (key.clone(), *limit))
                .collect()
        }))
    }

    /// Entry `id`'s kept result.
    pub(crate) async fn read_result(&self, id: &str) -> Result<Option<JobResult>, Error> {
        Ok(self.inner().read(|state, now| {
            let (kept, _) = state.lookup(id, now);
            kept.map(|kept| result_of(id, kept))
        }))
    }

    /// Cancels entry `id`; whether there was one.
    pub(crate) async fn cancel_entry(&self, id: &str) -> Result<bool, Error> {
        Ok(self.inner().cancel(id, self.lease, self.rules))
    }
}

fn result_of(id: &str, kept: super::kept::Kept) -> JobResult {
    JobResult::kept(
        id,
        kept.state,
        kept.at,
        kept.attempts,
        kept.output.as_deref(),
        kept.reason,
    )
}

impl<T: Send + Sync> Results for MemoryQueue<T> {
    type Failure = Error;

    async fn lookup(&self, id: &str) -> Result<Lookup, Error> {
        Ok(self.inner().read(|state, now| match state.lookup(id, now) {
            (Some(kept), _) => Lookup::Finished(result_of(id, kept)),
            (None, true) => Lookup::Live,
            (None, false) => Lookup::Unknown,
        }))
    }

    fn finishes(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.inner().finishes.subscribe()
    }

    fn recheck_every(&self) -> std::time::Duration {
        // Nothing is lost in process: a push always comes.
        NAP
    }
}
