//! The seam between the worker and the stores: what a durable queue must
//! answer, each call one round trip. The worker never speaks Redis or SQL;
//! a store never spawns a task for the worker.
//!
//! The trait lives in a private module, so users can neither implement it
//! nor call it: [`Durable`](super::Durable) is sealed.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::wait::Waiter;

/// How the worker finishes one delivery.
#[derive(Debug, Clone)]
pub enum Ending {
    /// Done: delete the entry (a tick: and insert its successor), keeping
    /// `output` (JSON) in its result where the queue keeps results.
    Ack { output: Option<String> },
    /// A failed attempt: retried after `delay`, or to the dead letters with
    /// `reason` once the entry's attempts reached the queue's limit.
    Fail { delay: Duration, reason: String },
    /// Due again after `delay`, this delivery not counted as an attempt.
    Snooze { delay: Duration },
    /// To the dead letters now with `reason` (this attempt counted).
    Discard { reason: String },
    /// Back in the queue, due at once; `counted`: whether this delivery
    /// counts as an attempt.
    GiveBack { counted: bool },
}

/// One delivery to finish, by its store's lease handle.
#[derive(Debug, Clone)]
pub struct Finish<L> {
    pub lease: L,
    pub ending: Ending,
    /// Sent before in a request whose reply was lost: it may have applied
    /// then, so `Applied::Lost` now says nothing (the worker's business; the
    /// stores ignore it).
    pub resent: bool,
    /// The handler run it ends, for `messaging.process.duration` once the
    /// store has said what became of it (the worker's business too).
    pub run: Option<RunMetric>,
}

/// A handler run, as metrics report it.
#[derive(Debug, Clone, Copy)]
pub struct RunMetric {
    pub took: Duration,
    /// `done`, `retry`, `snooze`, `discard`, `timeout` or `panic` (`dead`
    /// and `lost` are known once applied).
    pub outcome: &'static str,
    /// A failure's type: `handler`, `timeout`, `panic`.
    pub error: Option<&'static str>,
}

/// One entry leased to the worker.
#[derive(Debug)]
pub struct Taken<T, L> {
    pub id: String,
    pub value: T,
    pub attempt: u32,
    pub deadline: SystemTime,
    /// When the lease runs out, by the store's clock.
    pub lease_until: SystemTime,
    pub schedule: Option<String>,
    pub key: Option<String>,
    pub priority: i16,
    /// The inserting span's trace context, kept with the entry (feature
    /// `opentelemetry`).
    pub trace: Option<String>,
    pub lease: L,
}

/// What became of one finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Not applied: the lease was lost (or a sending whose reply was lost
    /// applied it already).
    Lost,
    /// Applied.
    Done,
    /// Applied, and the failure sent the entry to the dead letters.
    Dead,
    /// Not applied yet (a tick's successor could not be computed): send it
    /// again.
    Pending,
}

/// The answer of a claim.
#[derive(Debug)]
pub struct Batch<T, L> {
    /// What became of each finish sent with the claim.
    pub done: Vec<Applied>,
    pub taken: Vec<Taken<T, L>>,
    /// More entries were due than the claim took.
    pub more_due: bool,
    /// When, on this process's clock, the store's next entry is due as far
    /// as the claim saw (or a poll interval on).
    pub next_due: Instant,
    /// The store's clock when the claim ran: what is left of each lease
    /// then is `lease_until - now` (a whole lease for what the claim
    /// leased; less for what a claim sent again recovered).
    pub now: SystemTime,
}

/// A token no other claim ever had: 64 random bits of this process (the
/// standard library's hasher keys come from the operating system) and a
/// counter.
pub(crate) fn new_token() -> Arc<str> {
    static PROCESS: LazyLock<u64> = LazyLock::new(|| RandomState::new().build_hasher().finish());
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    Arc::from(format!("{:016x}{n:x}", *PROCESS))
}

/// The most entries one claim takes.
pub(crate) const MAX_CLAIM: usize = 1024;

/// What every durable store answers.
pub trait Sealed {
    /// The queue's values.
    type Value: Send + Sync + 'static;
    /// What identifies one delivery's lease.
    type Lease: Clone + Send + Sync + 'static;
    /// A claim on its way: sent again after a lost reply, it returns what
    /// the first sending leased.
    type Attempt: Send + Sync + 'static;
    type Failure: std::error::Error + Send + Sync + 'static;

    fn queue_name(&self) -> &str;
    /// The store's name in metrics: `memory`, `redis`, `postgres`.
    fn store_kind(&self) -> &'static str;
    fn lease_duration(&self) -> Duration;
    fn poll_interval(&self) -> Duration;
    fn new_attempt(&self) -> Self::Attempt;
    /// The waiter shared by the handle's consumers.
    fn waiter(&self) -> &Waiter;
    /// Gives up on `attempt`: whatever it may have leased goes back with the
    /// next claim or finish of the queue's handle. `true` if it was in doubt.
    fn abandon(&self, attempt: &Self::Attempt) -> bool;
    /// The count of the store's announcements of an earlier head (starting
    /// the listener if need be).
    fn kicks(&self) -> watch::Receiver<u64>;
    /// Whether waiting and trying again can fix `error`.
    fn is_transient(error: &Self::Failure) -> bool;
    /// Whether the request may have run although `error` came back (its
    /// reply was lost).
    fn is_in_doubt(error: &Self::Failure) -> bool;
    /// Whether a worker sends its finishes apart from its claims, each
    /// beside the other in flight (where a claim that carries finishes
    /// would wait for their writes: on PostgreSQL, one transaction), rather
    /// than riding with the next claim.
    fn finishes_apart(&self) -> bool {
        false
    }
    /// How long a worker waits for a claim's reply before it gives the
    /// claim up and claims anew (and for the reply to an extension or to a
    /// request of finishes, before it sends them again); `None` where the
    /// store's own response timeout is the only bound (Redis).
    fn give_up_claim_after(&self) -> Option<Duration> {
        None
    }

    /// Applies `finished`, then leases up to `max` due entries.
    fn claim(
        &self,
        attempt: &mut Self::Attempt,
        max: usize,
        finished: &[Finish<Self::Lease>],
    ) -> impl Future<Output = Result<Batch<Self::Value, Self::Lease>, Self::Failure>> + Send;

    /// Applies `finished` without claiming.
    fn finish(
        &self,
        finished: &[Finish<Self::Lease>],
    ) -> impl Future<Output = Result<Vec<Applied>, Self::Failure>> + Send;

    /// Pushes every lease to now + `lease`; whether each was still held.
    fn extend(
        &self,
        leases: &[Self::Lease],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<bool>, Self::Failure>> + Send;

    /// As `extend`, telling a lease lost to `cancel` from one lost
    /// otherwise (where the store keeps cancel marks).
    fn extend_marked(
        &self,
        leases: &[Self::Lease],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Extended>, Self::Failure>> + Send
    where
        Self: Sync,
    {
        async move {
            let held = self.extend(leases, lease).await?;
            Ok(held
                .into_iter()
                .map(|held| if held { Extended::Held } else { Extended::Lost })
                .collect())
        }
    }

    /// Announcements that an entry this handle's workers may hold was
    /// cancelled (their next extension says which), where the store pushes
    /// them.
    fn cancels(&self) -> Option<watch::Receiver<u64>> {
        None
    }

    /// A worker's heartbeat: extends `leases` as `extend_marked` does and
    /// refreshes the worker's `record` (JSON, see `health::Record`) in the
    /// same request; with no leases, the record alone.
    fn beat(
        &self,
        leases: &[Self::Lease],
        lease: Duration,
        record: &str,
    ) -> impl Future<Output = Result<Vec<Extended>, Self::Failure>> + Send
    where
        Self: Sync,
    {
        let _ = record;
        async move {
            if leases.is_empty() {
                return Ok(Vec::new());
            }
            self.extend_marked(leases, lease).await
        }
    }

    /// Worker `worker` shut down: its record goes.
    fn leave(&self, worker: &str) -> impl Future<Output = Result<(), Self::Failure>> + Send {
        let _ = worker;
        async { Ok(()) }
    }

    /// `claim`, on behalf of worker `worker` (whom the leases it grants
    /// name, where the store keeps that).
    fn claim_for(
        &self,
        attempt: &mut Self::Attempt,
        max: usize,
        finished: &[Finish<Self::Lease>],
        worker: &str,
    ) -> impl Future<Output = Result<Batch<Self::Value, Self::Lease>, Self::Failure>> + Send {
        let _ = worker;
        self.claim(attempt, max, finished)
    }
}

/// What an extension found of one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extended {
    /// Still held: pushed on.
    Held,
    /// Lost: removed, or delivered again.
    Lost,
    /// Its entry was cancelled: the run stops, as for a lost lease, after
    /// `Job::cancelled` resolved.
    Cancelled,
}

/// Reports what `batch` delivered (`messaging.client.consumed.messages`,
/// `punctual.delivery.lateness`).
pub(crate) fn record_delivered<Q: Sealed + ?Sized>(queue: &Q, batch: &Batch<Q::Value, Q::Lease>) {
    super::metrics::delivered(
        queue.store_kind(),
        queue.queue_name(),
        batch.now,
        batch
            .taken
            .iter()
            .map(|t| (t.attempt, t.deadline, t.schedule.is_some())),
    );
}
