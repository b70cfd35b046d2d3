//! What became of a durable job ([`JobResult`], [`Finished`]), kept by the
//! store for `keep_results` after the job finishes, and `wait`, which
//! every store answers with the same loop over its own lookups and pushes.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::queue::deadline_after;

/// How a durable job finished, in its [`JobResult`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Finished {
    /// Acked: its handler said [`Outcome::Done`](super::Outcome::Done) (or
    /// [`done_with`](super::Outcome::done_with) an output), or a consumer
    /// acked its delivery.
    Done,
    /// Sent to the dead letters: out of attempts, or discarded.
    Dead,
    /// Cancelled with `cancel`, pending or running.
    Cancelled,
}

impl Finished {
    /// The state's name in lower case: `done`, `dead`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finished::Done => "done",
            Finished::Dead => "dead",
            Finished::Cancelled => "cancelled",
        }
    }

    /// The state of a store's code (`d`, `x`, `c`), as every store keeps it.
    #[allow(dead_code)] // (for the stores across a network)
    pub(crate) fn of_code(code: &str) -> Option<Finished> {
        match code {
            "d" => Some(Finished::Done),
            "x" => Some(Finished::Dead),
            "c" => Some(Finished::Cancelled),
            _ => None,
        }
    }

    /// The code every store keeps for the state.
    #[allow(dead_code)] // (for the stores across a network)
    pub(crate) fn code(self) -> &'static str {
        match self {
            Finished::Done => "d",
            Finished::Dead => "x",
            Finished::Cancelled => "c",
        }
    }
}

impl std::fmt::Display for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of a durable job: kept by the store for the queue's
/// `keep_results` after it finished (acked, dead-lettered, cancelled), and
/// read with `result(id)` or awaited with `wait(id, timeout)` on every
/// store.
///
/// # Examples
///
/// ```
/// use punctual::durable::{Finished, Outcome, Worker};
/// use punctual::memory::MemoryQueue;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), punctual::memory::Error> {
/// let invoices: MemoryQueue<u64> = MemoryQueue::builder("invoices")
///     .keep_results(Duration::from_secs(3600))
///     .build();
/// let worker = Worker::builder(invoices.clone())
///     .spawn(|job| async move { Outcome::done_with(&format!("INV-{}", job.value())) });
/// let id = invoices.insert(&42, Duration::ZERO).await?;
/// let result = invoices.wait(&id, Duration::from_secs(10)).await?.expect("finished");
/// assert_eq!(result.state, Finished::Done);
/// assert_eq!(result.output_as::<String>().unwrap().as_deref(), Some("INV-42"));
/// # worker.shutdown(Duration::ZERO).await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct JobResult {
    /// The entry's id.
    pub id: String,
    /// How it finished.
    pub state: Finished,
    /// When, by the store's clock.
    pub finished_at: SystemTime,
    /// Deliveries it had, as `EntryInfo::attempt` counts them.
    pub attempts: u32,
    /// What its handler gave [`Outcome::done_with`](super::Outcome::done_with)
    /// (`None` otherwise).
    pub output: Option<serde_json::Value>,
    /// Dead: why; otherwise `None`.
    pub reason: Option<String>,
}

impl JobResult {
    /// The output read as `O`; `Ok(None)` when there is none.
    ///
    /// # Errors
    ///
    /// The output does not decode as `O`.
    pub fn output_as<O: DeserializeOwned>(&self) -> Result<Option<O>, serde_json::Error> {
        self.output.clone().map(serde_json::from_value).transpose()
    }
}

impl JobResult {
    /// A result as a store keeps it: `at` in ms since the epoch, `output`
    /// as JSON (kept as a string if it no longer parses).
    pub(crate) fn kept(
        id: &str,
        state: Finished,
        at: u64,
        attempts: u32,
        output: Option<&str>,
        reason: Option<String>,
    ) -> JobResult {
        JobResult {
            id: id.to_owned(),
            state,
            finished_at: std::time::UNIX_EPOCH + Duration::from_millis(at),
            attempts,
            output: output.map(|json| {
                serde_json::from_str(json)
                    .unwrap_or_else(|_| serde_json::Value::String(json.to_owned()))
            }),
            reason,
        }
    }
}

/// What a store knows of an id, for `wait`.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// Finished, its result kept.
    Finished(JobResult),
    /// A live entry has the id (pending, due or leased): it has not
    /// finished yet.
    Live,
    /// Neither a live entry nor a kept result (a dead letter without one
    /// has finished).
    Unknown,
}

/// What a store gives `wait`: a lookup (one round trip), the pushes that
/// name each finished id, and how long a lost push may cost.
pub(crate) trait Results {
    type Failure;

    fn lookup(&self, id: &str) -> impl Future<Output = Result<Lookup, Self::Failure>> + Send;

    /// The ids of entries that finished, pushed by the store (a subscription
    /// of this handle, shared by every waiter).
    fn finishes(&self) -> broadcast::Receiver<Arc<str>>;

    /// The longest a waiter goes without looking again.
    fn recheck_every(&self) -> Duration;
}

/// `wait(id, timeout)`: the result at once if it is kept; `None` at once
/// for an id with neither an entry nor a result; else the result as soon
/// as the entry finishes (a push names it; a lost push costs at most
/// `recheck_every`), or `None` at `timeout` (or once the entry is gone
/// without a kept result).
///
/// Cancel safety: dropping it loses nothing (it only reads).
pub(crate) async fn wait<S: Results>(
    store: &S,
    id: &str,
    timeout: Duration,
) -> Result<Option<JobResult>, S::Failure> {
    let until = deadline_after(Instant::now(), timeout);
    // Subscribed before the first look: a finish between the look and the
    // wait is pushed to this receiver, not lost.
    let mut pushes = store.finishes();
    loop {
        match store.lookup(id).await? {
            Lookup::Finished(result) => return Ok(Some(result)),
            Lookup::Unknown => return Ok(None),
            Lookup::Live => {}
        }
        let recheck = deadline_after(Instant::now(), store.recheck_every()).min(until);
        loop {
            let pushed = tokio::time::timeout_at(recheck, pushes.recv()).await;
            match pushed {
                Ok(Ok(finished)) if &*finished == id => break,
                Ok(Ok(_)) => continue,
                // Pushes were missed: look.
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                    pushes = pushes.resubscribe();
                    break;
                }
                // No more pushes: look again at `recheck`.
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    tokio::time::sleep_until(recheck).await;
                    break;
                }
                Err(_) => break,
            }
        }
        if Instant::now() >= until {
            return match store.lookup(id).await? {
                Lookup::Finished(result) => Ok(Some(result)),
                _ => Ok(None),
            };
        }
    }
}
