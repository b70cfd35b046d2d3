//! The task behind a [`Worker`](super::Worker): claims, runs, heartbeats,
//! finishes and shutdown, for any durable store.
//!
//! Ground rules. The engine owns everything: the handlers it spawned (a
//! `JoinSet`, keyed by task id), the entries claimed and not started yet
//! (*prefetched*: a claim takes as many as there are free places, and a
//! place may be taken back by a lost lease's run still ending),
//! the finishes not yet sent, the requests to the store in flight (one
//! claim, with finishes riding along, or finishes alone; or, where the
//! store finishes apart, one claim beside one request of finishes) and one
//! lease extension. A request in flight is never
//! dropped while the engine waits for other events: it is a boxed future
//! polled to its end, so the worker never loses a reply itself. Counters
//! shared with `Worker::stats` are atomics written only here.
//!
//! Fencing. Every run and prefetched entry knows until when its lease is
//! surely held (`valid_until`, a run's [`Fence`]: when the request that
//! granted or extended it was sent, plus the lease; the store's clock
//! started later). A run past it is not polled again (its task checks its
//! fence on every poll, so a late engine cannot let it run on; see
//! `run.rs`) and is dropped at its next await; a prefetched entry past it
//! is not started: when the store cannot be reached, no handler runs on
//! after its lease may have gone to another consumer. A run keeps its place
//! until its task has ended, so two runs of one entry never overlap here and
//! `concurrency` is never exceeded.
//!
//! Lateness under load. A worker starts at most `concurrency`
//! jobs per claim and keeps one claim in flight, so it starts at most
//! `concurrency` jobs per claim round trip (Little's law: a job spends at
//! least that round trip claimed and not yet started; splitting the places
//! over several claims in flight changes nothing). When jobs come due
//! faster than that, a backlog builds and every job behind it is late by
//! the time the backlog takes to drain; nothing else makes the tail. This
//! was measured with timestamps of each delivery (insert, announcement
//! received, claim sent, claim answered, handler start) on the bench's
//! workload 11 (`benches/redis/late.rs`: 20,000 jobs due 0-2 s after their
//! insert, one producer with 256 inserts in flight on the worker's handle,
//! `concurrency(8)`, Redis on the bench machine), before single inserts
//! went together (`batch.rs`): p99 269 ms against the poller's 12.6 ms.
//! For the slowest 2% of the jobs, 252-280 ms (p10-p90) passed between
//! their due time and the sending of the claim that took them, 0.3 ms in
//! the claim's round trip (p50) and 0.02 ms from its answer to the handler:
//! the worker had not asked. It had not been asleep either: 6 announcements
//! came for 20,000 inserts (new heads are rare when inserts land among
//! thousands of entries), no wakeup was missed, no linger waited, and every
//! claim of the 617 ms the producer ran took 8 entries with more due. Those
//! claims' round trips were 2-11 ms (mean per 50 ms) instead of 0.25: on
//! the store's clock, 4.3 ms (p50) from the sending to the script's run and
//! 1.6 ms from the run to the reply being read, behind the producer's
//! inserts on the handle's one connection and a server busy 93% of the time
//! running 20,000 insert scripts (17 µs each). So the worker started 800 to
//! 3,500 jobs a second while up to 9,000 came due; the backlog reached
//! 2,049 jobs when the inserts ended and was gone 200 ms later, which is
//! both the tail and the "after insert" tail. The fix is on the producer's
//! side: inserts made while one is on its way go as one request
//! (`batch.rs`): 148 scripts instead of 20,000, 7 µs of server time per
//! insert instead of 17, inserts over in 198 ms instead of 617, claims of
//! about 1 ms meanwhile: p99 18.6 ms and 3.8 ms after the inserts in the
//! same traced run. A connection of the worker's own gave claims 2.2 ms
//! round trips instead of 6 before that fix and nothing measurable after
//! it, so it was not kept. On PostgreSQL the same bound holds with claims
//! of about 1 ms or more (a pool connection, the claim's statement, a
//! durable commit): workload 4 of `benches/postgres.rs` comes due at up to
//! 10,000 jobs a second once its inserts are fast, more than a worker with
//! 8 places starts there, so its lateness is that backlog's (see the
//! PostgreSQL module docs).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::watch;
use tokio::task::{AbortHandle, Id, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use super::backoff::Backoff;
use super::health::Record;
use super::job::Job;
use super::store::{Applied, Batch, Ending, Finish, MAX_CLAIM, RunMetric, Sealed, Taken};
use super::take::Abandon;
use super::worker::Counters;
use super::{Durable, Outcome};
use crate::queue::deadline_after;

mod heartbeat;
mod run;

use heartbeat::Extension;
use run::{Cause, Fence, Guarded, Ran};

/// How long a request waits, while handlers still run, for more of them to
/// end: handlers that end together then share one round trip (and one
/// commit, on PostgreSQL) instead of one each. A place freed by a handler
/// that ends alone waits this long longer to be claimed.
const LINGER: Duration = Duration::from_millis(1);

/// How long, past the grace, `Worker::shutdown` waits for dropped handlers
/// to end (a handler can only be dropped at an await) and for their
/// give-backs to land, before it returns; the engine goes on with them in
/// the background.
const ANSWER_AFTER: Duration = Duration::from_millis(100);

/// How long, past the grace (or the end of the last handler that ended
/// after it), the engine keeps sending its last finishes before it gives
/// them up (their leases then run out).
const STOP_WAIT: Duration = Duration::from_secs(1);

type Lease<Q> = <Q as Sealed>::Lease;
type Value<Q> = <Q as Sealed>::Value;
type StoreError<Q> = <Q as Sealed>::Failure;

/// How a handler's task ended.
enum Ended {
    /// What the handler said (a panic: a retry).
    Said(Outcome, Cause),
    /// Aborted by the engine (see the run's state).
    Aborted,
    /// Stopped by its own fence: its lease may have run out.
    Fenced,
}

/// A handler's run.
struct Run<L> {
    lease: L,
    id: String,
    attempt: u32,
    abort: AbortHandle,
    /// Resolves the job's `cancelled()` future.
    cancel: watch::Sender<bool>,
    state: RunState,
    /// Until when its lease is surely held (also read by its task).
    fence: Arc<Fence>,
    started: Instant,
    /// When its delivery began (its claim), by the store's clock, in ms.
    claimed: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RunState {
    Running,
    /// Its lease was lost: aborted, its outcome discarded.
    Dropped,
    /// Its entry was cancelled: aborted, its outcome discarded.
    Cancelled,
    /// Aborted at the end of a shutdown's grace: given back (attempt
    /// counted) once its task has ended, acked if it had finished. Its
    /// lease is kept alive until then (a handler that blocks its thread
    /// cannot be dropped): its entry never goes to another consumer while
    /// it runs.
    Stopped,
}

/// An entry claimed ahead.
struct Prefetched<T, L> {
    /// Tells copies of one entry apart (a later claim may take it again).
    seq: u64,
    taken: Taken<T, L>,
    valid_until: Instant,
    /// When its claim ran, by the store's clock, in ms.
    claimed: u64,
}

type Request<Q> = Pin<Box<dyn Future<Output = Reply<Q>> + Send>>;

enum Reply<Q: Sealed> {
    Claim {
        result: Result<Batch<Value<Q>, Lease<Q>>, StoreError<Q>>,
        /// On an error: the claim, to be sent again.
        attempt: Option<Q::Attempt>,
        sent: Vec<Finish<Lease<Q>>>,
        asked: usize,
        sent_at: Instant,
    },
    Finish {
        result: Result<Vec<Applied>, StoreError<Q>>,
        sent: Vec<Finish<Lease<Q>>>,
    },
    /// A claim that got no reply within `Sealed::give_up_claim_after`: given up
    /// (what it may have leased goes back with the handle's next request).
    GaveUp { sent: Vec<Finish<Lease<Q>>> },
    /// Finishes alone that got no reply within that bound: sent again.
    FinishGaveUp { sent: Vec<Finish<Lease<Q>>> },
}

pub(super) struct Engine<Q: Durable, H, Fut> {
    queue: Q,
    name: String,
    /// This worker's id (what its leases and record name) and what its
    /// record says of it besides its runs.
    worker: Arc<str>,
    record: Record,
    /// The store's name, for metrics.
    store: &'static str,
    handler: Arc<H>,
    concurrency: usize,
    backoff: Backoff,
    timeout: Option<Duration>,
    lease: Duration,
    counters: Arc<Counters>,
    kicks: watch::Receiver<u64>,
    /// Pushes that an entry was cancelled (where the store pushes them):
    /// the next extension is sent at once, and says which.
    cancels: Option<watch::Receiver<u64>>,
    stopped: watch::Receiver<Option<Duration>>,
    tasks: JoinSet<Ran>,
    runs: HashMap<Id, Run<Lease<Q>>>,
    /// The live run of each entry id.
    by_id: HashMap<String, Id>,
    prefetched: VecDeque<Prefetched<Value<Q>, Lease<Q>>>,
    next_seq: u64,
    /// Finishes not yet sent.
    finished: Vec<Finish<Lease<Q>>>,
    /// The requests in flight: one claim (with finishes) or finishes alone
    /// at a time; where the store finishes apart
    /// ([`Sealed::finishes_apart`]), a claim (with no finishes) and
    /// finishes alone side by side. One claim at a time: measured against
    /// two on Redis, it claims larger batches (on Redis everything that
    /// finished while a claim was on its way rides with the next one) and
    /// drains faster (0.43x against 0.38x the bench's poller).
    requests: FuturesUnordered<Request<Q>>,
    claim_out: bool,
    /// The claim in flight carries finishes (where they ride with claims).
    claim_carries: bool,
    finish_out: bool,
    /// Whether claims carry no finishes (see `Sealed::finishes_apart`).
    apart: bool,
    /// A claim was given up on (its give-back waits for the next request).
    gave_up: bool,
    /// The last request of finishes alone failed: where finishes go apart,
    /// no claim is sent until one succeeds (runs whose finishes cannot be
    /// applied must not be followed by more), and a claim's success does not
    /// end their pause.
    finish_failing: bool,
    /// A claim whose reply was lost: sent again first, to get what it leased.
    resend: Option<Q::Attempt>,
    /// Set while a small request waits for more places (see `LINGER`).
    linger_until: Option<Instant>,
    extension: Option<Extension<Q>>,
    failing: Failing,
    /// Whether entries may be due now; else the engine waits for `next_due`.
    due: bool,
    /// How many entries it may claim beyond its free places while a backlog
    /// lasts (`WorkerBuilder::prefetch`), and whether one does: the last
    /// claim came back full.
    ahead: usize,
    backlog: bool,
    next_due: Instant,
    /// The end of a shutdown's grace.
    stopping: Option<Instant>,
    /// When the last handler's task ended.
    last_end: Instant,
    /// Tells `Worker::shutdown` that it may return.
    answer: watch::Sender<bool>,
    /// Every `Worker` handle is gone without a shutdown: the engine runs on.
    detached: bool,
    _outputs: PhantomData<fn() -> Fut>,
}

impl<Q, H, Fut> Engine<Q, H, Fut>
where
    Q: Durable,
    H: Fn(Job<Q::Item>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Into<Outcome>,
{
    // (A constructor of the fields it is given, one each.)
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        queue: Q,
        handler: H,
        concurrency: usize,
        backoff: Backoff,
        timeout: Option<Duration>,
        label: Option<String>,
        ahead: usize,
        counters: Arc<Counters>,
        stopped: watch::Receiver<Option<Duration>>,
        answer: watch::Sender<bool>,
    ) -> Self {
        let apart = queue.finishes_apart();
        let worker = super::store::new_token();
        let lease = queue.lease_duration();
        let record = Record {
            id: worker.to_string(),
            name: label,
            host: super::health::host_name(),
            pid: std::process::id(),
            concurrency,
            every_ms: crate::durable::ops::millis(beat_every(lease)).max(1),
            running: Vec::new(),
            stopping: false,
        };
        Engine {
            worker,
            record,
            name: queue.queue_name().to_owned(),
            store: queue.store_kind(),
            lease: queue.lease_duration(),
            kicks: queue.kicks(),
            cancels: queue.cancels(),
            queue,
            handler: Arc::new(handler),
            concurrency,
            backoff,
            timeout,
            counters,
            stopped,
            tasks: JoinSet::new(),
            runs: HashMap::new(),
            by_id: HashMap::new(),
            prefetched: VecDeque::new(),
            next_seq: 0,
            finished: Vec::new(),
            requests: FuturesUnordered::new(),
            claim_out: false,
            claim_carries: false,
            finish_out: false,
            apart,
            gave_up: false,
            finish_failing: false,
            resend: None,
            linger_until: None,
            extension: None,
            failing: Failing::default(),
            due: true,
            ahead,
            backlog: false,
            next_due: Instant::now(),
            stopping: None,
            last_end: Instant::now(),
            answer,
            detached: false,
            _outputs: PhantomData,
        }
    }

    pub(super) async fn run(mut self) {
        let beat = beat_every(self.lease);
        // The first beat registers the worker at once.
        let mut next_beat = Instant::now();
        loop {
            let now = Instant::now();
            self.start_prefetched(now);
            self.send_requests(now);
            let free = self.concurrency.saturating_sub(self.runs.len());
            let starving = free > 0 && self.prefetched.is_empty();
            if let Some(grace_over) = self.stopping {
                let settled =
                    self.runs.is_empty() && self.finished.is_empty() && self.requests.is_empty();
                // Settled, the answer waits for the worker's record to go
                // (below, after the loop): `workers()` no longer lists it
                // once `shutdown` returns.
                if !settled && now >= deadline_after(grace_over, ANSWER_AFTER) {
                    // What is still on its way goes on in the background; a
                    // handler that could not be dropped keeps its lease.
                    self.answer.send_replace(true);
                }
                let give_up = deadline_after(grace_over.max(self.last_end), STOP_WAIT);
                // Once answered, a claim alone in flight is not waited for:
                // dropped here, it is given up, and the exit gives back what
                // it leased at once rather than when its reply comes.
                let claim_alone = *self.answer.borrow()
                    && self.runs.is_empty()
                    && self.finished.is_empty()
                    && !self.finish_out
                    && !self.claim_carries;
                if settled || claim_alone || (self.runs.is_empty() && now >= give_up) {
                    if !settled && !claim_alone {
                        tracing::warn!(
                            queue = self.name,
                            unsent = self.finished.len(),
                            "shutdown gave up waiting: what is left keeps its lease until it runs out"
                        );
                    }
                    break;
                }
            }
            let waiting = !self.claim_out && self.stopping.is_none() && starving && !self.due;
            let wake = self
                .next_due
                .min(deadline_after(now, self.queue.poll_interval()));
            let retry_at = self.failing.retry_at;
            let linger_until = self.linger_until;
            let grace_over = self.stopping;
            // Once every handler has ended: when the last finishes are given up.
            let stop_wait = self
                .stopping
                .filter(|_| self.runs.is_empty())
                .map(|at| deadline_after(at.max(self.last_end), STOP_WAIT));
            let answer_at = self
                .stopping
                .filter(|_| !*self.answer.borrow())
                .map(|at| deadline_after(at, ANSWER_AFTER));
            let running = self.runs.values().any(|run| run.state == RunState::Running);
            // A handler is dropped when its lease may have run out, whether
            // or not an extension is on its way (one may hang).
            let fence = self.fence();
            let can_send = if self.apart {
                !(self.claim_out && self.finish_out)
            } else {
                self.requests.is_empty()
            };
            tokio::select! {
                Some(reply) = self.requests.next(), if !self.requests.is_empty() => {
                    self.replied(reply);
                }
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.joined(joined);
                }
                (result, holders, sent_at) = async { self.extension.as_mut().expect("checked").await }, if self.extension.is_some() => {
                    self.extension = None;
                    self.extended(result, holders, sent_at);
                }
                _ = tokio::time::sleep_until(next_beat), if self.extension.is_none() => {
                    next_beat = deadline_after(Instant::now(), beat);
                    self.heartbeat();
                }
                pushed = async { self.cancels.as_mut().expect("checked").changed().await }, if self.cancels.is_some() && !(self.runs.is_empty() && self.prefetched.is_empty()) => {
                    match pushed {
                        // The next extension, at once, says which was cancelled.
                        Ok(()) => next_beat = Instant::now(),
                        Err(_) => self.cancels = None,
                    }
                }
                _ = tokio::time::sleep_until(fence.unwrap_or(now)), if fence.is_some() => {
                    self.drop_overdue(Instant::now());
                }
                _ = self.kicks.changed(), if waiting => self.due = true,
                _ = tokio::time::sleep_until(wake), if waiting => self.due = true,
                // (Not while a failed request's pause lasts: nothing is
                // sent before it ends, and a linger already over would
                // wake this loop at once, again and again.)
                _ = tokio::time::sleep_until(linger_until.unwrap_or(now)), if linger_until.is_some() && can_send && retry_at.is_none() => {}
                _ = tokio::time::sleep_until(retry_at.unwrap_or(now)), if retry_at.is_some() && can_send => {
                    self.failing.retry_at = None;
                }
                changed = self.stopped.changed(), if self.stopping.is_none() && !self.detached => {
                    match changed {
                        Ok(()) => {
                            let grace = self.stopped.borrow().unwrap_or(Duration::ZERO);
                            self.stopping = Some(deadline_after(Instant::now(), grace));
                            self.give_back_prefetched();
                            // Its record says so at once.
                            next_beat = Instant::now();
                        }
                        Err(_) => self.detached = true,
                    }
                }
                _ = tokio::time::sleep_until(grace_over.unwrap_or(now)), if grace_over.is_some() && running => {
                    self.stop_runs();
                }
                _ = tokio::time::sleep_until(stop_wait.unwrap_or(now)), if stop_wait.is_some() => {}
                _ = tokio::time::sleep_until(answer_at.unwrap_or(now)), if answer_at.is_some() => {}
            }
        }
        self.tasks.detach_all();
        // Claims whose reply was lost, or that are still on their way (given
        // up as they are dropped here): give back what they may hold now,
        // rather than after their lease (one more round trip, bounded).
        let mut in_doubt = self.claim_out || self.gave_up;
        self.requests = FuturesUnordered::new();
        if let Some(claim) = self.resend.take() {
            in_doubt |= self.queue.abandon(&claim);
        }
        if in_doubt {
            let flush = self.queue.finish(&[]);
            let _ = tokio::time::timeout(STOP_WAIT, flush).await;
        }
        let _ = tokio::time::timeout(STOP_WAIT, self.queue.leave(&self.worker)).await;
        self.answer.send_replace(true);
    }

    /// Starts prefetched entries while places are free. One whose lease may
    /// have run out is forgotten (it comes back when the lease has run
    /// out); one whose entry still runs here waits until the old run (whose
    /// lease is lost: the entry was claimed again) has ended.
    fn start_prefetched(&mut self, now: Instant) {
        if self.stopping.is_some() {
            return;
        }
        let mut at = 0;
        while self.runs.len() < self.concurrency && at < self.prefetched.len() {
            let entry = &self.prefetched[at];
            if entry.valid_until <= now {
                let gone = self.prefetched.remove(at).expect("looked at");
                tracing::warn!(
                    queue = self.name,
                    id = gone.taken.id,
                    "a prefetched job's lease may have run out; it is not started"
                );
                continue;
            }
            if let Some(old) = self.by_id.get(&entry.taken.id).copied() {
                self.drop_run(old, "delivered again while it ran");
                at += 1;
                continue;
            }
            let entry = self.prefetched.remove(at).expect("looked at");
            self.start(entry.taken, entry.valid_until, entry.claimed);
        }
    }

    /// Sends a claim (with the finishes, unless the store finishes apart)
    /// and the finishes alone, where there is room in flight and something
    /// to send.
    fn send_requests(&mut self, now: Instant) {
        if self.failing.retry_at.is_some_and(|at| at > now) {
            return;
        }
        // As many entries as there are free places, no more: an entry due
        // now that this worker could not start at once is left to another
        // consumer (a replica with free places runs it now). But while a
        // backlog lasts (the last claim came back full), up to `ahead` more,
        // so that one round trip carries many jobs; claimed again only once
        // the window is half empty or a place would idle. Their leases are
        // extended with the runs'; one whose lease may have run out is not
        // started, and a shutdown gives them back at once.
        let free = self.concurrency.saturating_sub(self.runs.len());
        let window = if self.backlog { self.ahead } else { 0 };
        let held = self.prefetched.len();
        let room = if free > held || held <= window / 2 {
            (free + window).saturating_sub(held)
        } else {
            0
        };
        // Where finishes go apart, not beside a request of finishes that
        // failed last (its runs' outcomes are not applied yet); else not
        // beside any request.
        let other_ok = if self.apart {
            !self.finish_failing
        } else {
            !self.finish_out
        };
        let claim = !self.claim_out
            && other_ok
            && self.stopping.is_none()
            && (self.resend.is_some()
                || (room > 0
                    // Finishes riding with a claim never wait for a batch:
                    // a finished run's lease is no longer extended.
                    && (self.due || (!self.apart && !self.finished.is_empty()))));
        // While stopping no claim will carry them: they go alone at once.
        let finish = !self.finish_out
            && (self.apart || self.stopping.is_some() || !(claim || self.claim_out))
            && !self.finished.is_empty();
        if !claim && !finish {
            // Whatever a linger waited for is gone (a shutdown began, say).
            self.linger_until = None;
            return;
        }
        // Handlers still run: wait a moment for the ones that end with
        // these, so they share the round trip.
        let small = !self.runs.is_empty();
        if small && self.resend.is_none() && self.stopping.is_none() {
            let until = *self
                .linger_until
                .get_or_insert_with(|| deadline_after(now, LINGER));
            if now < until {
                return;
            }
        }
        self.linger_until = None;
        if claim {
            let attempt = self
                .resend
                .take()
                .unwrap_or_else(|| self.queue.new_attempt());
            self.kicks.borrow_and_update();
            // Apart, the finishes go alone (below); else they ride here, and
            // `finish` is false.
            let sent = if self.apart {
                Vec::new()
            } else {
                std::mem::take(&mut self.finished)
            };
            self.claim_out = true;
            self.claim_carries = !sent.is_empty();
            let queue = self.queue.clone();
            let bound = self.queue.give_up_claim_after();
            let worker = Arc::clone(&self.worker);
            self.requests.push(Box::pin(async move {
                let sent_at = Instant::now();
                // Dropped unanswered (the engine stopped waiting for it, or
                // `bound` passed), the claim is given up: its leases go back
                // with the handle's next request.
                let mut pending = Abandon(&queue, attempt);
                let claim = queue.claim_for(&mut pending.1, room, &sent, &worker);
                let Some(result) = within(bound, claim).await else {
                    drop(pending);
                    return Reply::GaveUp { sent };
                };
                // On an error it is sent again: out of the guard, which keeps
                // a fresh claim, in doubt of nothing.
                let attempt = result
                    .is_err()
                    .then(|| std::mem::replace(&mut pending.1, queue.new_attempt()));
                Reply::Claim {
                    result,
                    attempt,
                    sent,
                    asked: room,
                    sent_at,
                }
            }));
        }
        if finish {
            let sent = std::mem::take(&mut self.finished);
            self.finish_out = true;
            let queue = self.queue.clone();
            self.requests.push(Box::pin(async move {
                match within(queue.give_up_claim_after(), queue.finish(&sent)).await {
                    Some(result) => Reply::Finish { result, sent },
                    None => Reply::FinishGaveUp { sent },
                }
            }));
        }
    }

    fn replied(&mut self, reply: Reply<Q>) {
        match reply {
            Reply::Claim {
                result,
                attempt,
                sent,
                asked,
                sent_at,
            } => {
                self.claim_out = false;
                self.claim_carries = false;
                match result {
                    Ok(batch) => {
                        // (Every claim has its own token: a delivery can only
                        // ever finish the lease its own claim was granted.)
                        // It carried the give-back of any claim given up on.
                        self.gave_up = false;
                        self.settled(&sent, &batch.done);
                        // A full batch: more may be due at once.
                        self.due = batch.taken.len() >= asked.min(MAX_CLAIM);
                        self.backlog = self.due || batch.more_due;
                        self.next_due = batch.next_due;
                        if self.next_due <= Instant::now() {
                            self.due = true;
                        }
                        for taken in batch.taken {
                            // Surely held until what was left of its lease
                            // when the claim ran, counted from before it was
                            // sent: a whole lease for what this claim leased,
                            // less for what a claim sent again recovered
                            // from its first sending.
                            let left = taken
                                .lease_until
                                .duration_since(batch.now)
                                .unwrap_or_default()
                                .min(self.lease);
                            let valid_until = deadline_after(sent_at, left);
                            // An older copy of the entry lost its lease to
                            // this claim.
                            self.prefetched.retain(|entry| entry.taken.id != taken.id);
                            self.next_seq += 1;
                            self.prefetched.push_back(Prefetched {
                                seq: self.next_seq,
                                taken,
                                valid_until,
                                claimed: crate::durable::ops::millis(
                                    batch
                                        .now
                                        .duration_since(std::time::UNIX_EPOCH)
                                        .unwrap_or_default(),
                                ),
                            });
                        }
                        if self.stopping.is_some() {
                            self.give_back_prefetched();
                        }
                    }
                    Err(error) => {
                        // Sent again (also while stopping: the engine's exit
                        // gives back what it leased), it returns what it
                        // leased the first time.
                        self.resend = attempt;
                        self.failed_request(&error, sent);
                    }
                }
            }
            Reply::GaveUp { mut sent } => {
                self.claim_out = false;
                self.claim_carries = false;
                self.gave_up = true;
                tracing::warn!(
                    queue = self.name,
                    after = ?self.queue.give_up_claim_after(),
                    "a claim got no reply; it is given up and what it leased is given back"
                );
                // They may have applied: sent again, and counted as such.
                for finish in &mut sent {
                    finish.resent = true;
                }
                sent.append(&mut self.finished);
                self.finished = sent;
                self.due = true;
            }
            Reply::FinishGaveUp { mut sent } => {
                self.finish_out = false;
                self.finish_failing = true;
                let pause = self.failing.fail();
                tracing::warn!(
                    queue = self.name,
                    ?pause,
                    "finishes got no answer in time; they are sent again"
                );
                for finish in &mut sent {
                    finish.resent = true;
                }
                sent.append(&mut self.finished);
                self.finished = sent;
            }
            Reply::Finish { result, sent } => {
                self.finish_out = false;
                match result {
                    Ok(done) => {
                        self.finish_failing = false;
                        self.settled(&sent, &done);
                    }
                    Err(error) => {
                        self.finish_failing = true;
                        self.failed_request(&error, sent);
                    }
                }
            }
        }
    }

    /// Spawns the handler for `taken`.
    fn start(&mut self, taken: Taken<Value<Q>, Lease<Q>>, valid_until: Instant, claimed: u64) {
        let Taken {
            id,
            value,
            attempt,
            deadline,
            schedule,
            key,
            priority,
            trace,
            lease,
            ..
        } = taken;
        let span = super::trace::run_span(
            self.store,
            &self.name,
            &id,
            attempt,
            schedule.as_deref(),
            trace.as_deref(),
        );
        let cancel = watch::Sender::new(false);
        let job = Job {
            id: id.clone(),
            value,
            attempt,
            deadline,
            schedule,
            key,
            priority,
            cancel: cancel.subscribe(),
        };
        let handler = Arc::clone(&self.handler);
        let fence = Fence::new(valid_until);
        let outcome = AssertUnwindSafe(async move {
            let fut = handler(job);
            (fut.await.into(), Cause::Handler)
        })
        .catch_unwind()
        .map(|outcome| {
            outcome.unwrap_or_else(|panic| {
                let reason = panic_message(&*panic);
                drop_payload(panic);
                (Outcome::retry(reason), Cause::Panic)
            })
        });
        let run = Guarded::new(outcome, Arc::clone(&fence), self.timeout);
        let abort = self.tasks.spawn(run.instrument(span));
        self.by_id.insert(id.clone(), abort.id());
        self.counters.running.fetch_add(1, Ordering::Relaxed);
        super::metrics::running(self.store, &self.name, 1);
        self.runs.insert(
            abort.id(),
            Run {
                lease,
                id,
                attempt,
                abort,
                cancel,
                state: RunState::Running,
                fence,
                started: Instant::now(),
                claimed,
            },
        );
    }

    /// A handler's task ended: its outcome becomes a finish to send.
    fn joined(&mut self, joined: Result<(Id, Ran), JoinError>) {
        let (task, ended) = match joined {
            Ok((task, Ran::Said(outcome, cause))) => (task, Ended::Said(outcome, cause)),
            Ok((task, Ran::Fenced)) => (task, Ended::Fenced),
            Err(error) => {
                let task = error.id();
                // A handler's own panic is caught inside its task: a panic
                // here comes from dropping an aborted handler (a drop guard
                // of its own), which ends it as aborted all the same.
                let aborted = self
                    .runs
                    .get(&task)
                    .is_some_and(|run| run.state != RunState::Running);
                match error.try_into_panic() {
                    Ok(panic) => {
                        let reason = panic_message(&*panic);
                        drop_payload(panic);
                        (
                            task,
                            if aborted {
                                Ended::Aborted
                            } else {
                                Ended::Said(Outcome::retry(reason), Cause::Panic)
                            },
                        )
                    }
                    Err(_) => (task, Ended::Aborted),
                }
            }
        };
        self.last_end = Instant::now();
        let Some(run) = self.remove_run(task) else {
            return;
        };
        let took = run.started.elapsed();
        let outcome = match (run.state, ended) {
            (RunState::Dropped, _) => {
                // Its lease was lost.
                self.processed(took, "lost", None);
                return;
            }
            (RunState::Cancelled, _) => {
                self.processed(took, "cancelled", None);
                return;
            }
            (_, Ended::Fenced) => {
                self.processed(took, "lost", None);
                Counters::bump(&self.counters.lost);
                tracing::warn!(
                    queue = self.name,
                    id = run.id,
                    attempt = run.attempt,
                    "a job ran past the end of its lease; its outcome is discarded"
                );
                return;
            }
            (_, Ended::Aborted) => Ending::GiveBack { counted: true },
            // It ended before the abort took: its outcome stands.
            (_, Ended::Said(outcome, cause)) => {
                let ending = self.ending(&run, outcome);
                let (label, error) = match (&ending, cause) {
                    (Ending::Ack { .. }, _) => ("done", None),
                    (Ending::Snooze { .. }, _) => ("snooze", None),
                    (Ending::Discard { .. }, _) => ("discard", Some("handler")),
                    (_, Cause::Timeout) => ("timeout", Some("timeout")),
                    (_, Cause::Panic) => ("panic", Some("panic")),
                    _ => ("retry", Some("handler")),
                };
                self.finished.push(Finish {
                    lease: run.lease,
                    ending,
                    resent: false,
                    run: Some(RunMetric {
                        took,
                        outcome: label,
                        error,
                    }),
                });
                return;
            }
        };
        self.finished.push(Finish {
            lease: run.lease,
            ending: outcome,
            resent: false,
            run: None,
        });
    }

    /// Reports a handler run (`messaging.process.duration`).
    fn processed(&self, took: Duration, outcome: &'static str, error: Option<&'static str>) {
        super::metrics::processed(self.store, &self.name, took, outcome, error);
    }

    /// How `run` ends by what its handler said; counts its failures.
    fn ending(&self, run: &Run<Lease<Q>>, outcome: Outcome) -> Ending {
        let (reason, ending) = match outcome {
            Outcome::Done => return Ending::Ack { output: None },
            Outcome::Output(output) => {
                return Ending::Ack {
                    output: Some(output.to_string()),
                };
            }
            Outcome::Snooze(delay) => return Ending::Snooze { delay },
            Outcome::Retry { reason, after } => (
                reason.clone(),
                Ending::Fail {
                    delay: after.unwrap_or_else(|| self.backoff.delay(run.attempt)),
                    reason,
                },
            ),
            Outcome::Discard { reason } => (reason.clone(), Ending::Discard { reason }),
        };
        Counters::bump(&self.counters.failed);
        tracing::warn!(
            queue = self.name,
            id = run.id,
            attempt = run.attempt,
            reason,
            discarded = matches!(ending, Ending::Discard { .. }),
            "a job failed"
        );
        ending
    }

    /// Takes run `task` out of the books.
    fn remove_run(&mut self, task: Id) -> Option<Run<Lease<Q>>> {
        let run = self.runs.remove(&task)?;
        if self.by_id.get(&run.id) == Some(&task) {
            self.by_id.remove(&run.id);
        }
        self.counters.running.fetch_sub(1, Ordering::Relaxed);
        super::metrics::running(self.store, &self.name, -1);
        Some(run)
    }

    /// Drops run `task` at its next await (its lease was lost); it keeps its
    /// place until its task has ended.
    fn drop_run(&mut self, task: Id, why: &str) {
        let Some(run) = self.runs.get_mut(&task) else {
            return;
        };
        if run.state != RunState::Running {
            return;
        }
        run.state = RunState::Dropped;
        run.abort.abort();
        Counters::bump(&self.counters.lost);
        tracing::warn!(
            queue = self.name,
            id = run.id,
            attempt = run.attempt,
            why,
            "a job's lease was lost; its handler is dropped"
        );
    }

    /// Stops run `task`, whose entry was cancelled: resolves its job's
    /// `cancelled()` first, then drops the handler at its next await (as
    /// for a lost lease: it is not polled again). Counted in `lost`.
    fn cancel_run(&mut self, task: Id) {
        let Some(run) = self.runs.get_mut(&task) else {
            return;
        };
        if run.state != RunState::Running {
            return;
        }
        run.state = RunState::Cancelled;
        run.cancel.send_replace(true);
        run.abort.abort();
        Counters::bump(&self.counters.lost);
        tracing::info!(
            queue = self.name,
            id = run.id,
            attempt = run.attempt,
            "a job was cancelled; its handler is dropped"
        );
    }

    /// The grace is over: the handlers still running are dropped at their
    /// next await and given back when their tasks have ended.
    fn stop_runs(&mut self) {
        for run in self.runs.values_mut() {
            if run.state == RunState::Running {
                run.state = RunState::Stopped;
                run.abort.abort();
            }
        }
    }

    /// Taken but not started: back in the queue at once, no attempt counted.
    fn give_back_prefetched(&mut self) {
        for entry in std::mem::take(&mut self.prefetched) {
            if let Some(old) = self.by_id.get(&entry.taken.id).copied() {
                self.drop_run(old, "delivered again while it ran");
            }
            self.finished.push(Finish {
                lease: entry.taken.lease,
                ending: Ending::GiveBack { counted: false },
                resent: false,
                run: None,
            });
        }
    }

    /// Counts what the store made of finishes; those it could not apply yet
    /// go with the next request, after a pause.
    fn settled(&mut self, sent: &[Finish<Lease<Q>>], done: &[Applied]) {
        let mut pending = false;
        for (finish, applied) in sent.iter().zip(done) {
            if let (Some(run), false) = (finish.run, *applied == Applied::Pending) {
                let outcome = match applied {
                    Applied::Lost if !finish.resent => "lost",
                    Applied::Dead if matches!(finish.ending, Ending::Fail { .. }) => "dead",
                    _ => run.outcome,
                };
                self.processed(run.took, outcome, run.error);
            }
            match (&finish.ending, applied) {
                (_, Applied::Pending) => {
                    pending = true;
                    self.finished.push(finish.clone());
                }
                (Ending::Ack { .. }, Applied::Done) => Counters::bump(&self.counters.completed),
                // Sent before in a request whose reply was lost: it applied
                // then (most likely), or its lease was lost; counted done.
                (Ending::Ack { .. }, Applied::Lost) if finish.resent => {
                    Counters::bump(&self.counters.completed);
                }
                // Likewise a failure or a snooze: applied then, and
                // counted already.
                (
                    Ending::Fail { .. } | Ending::Discard { .. } | Ending::Snooze { .. },
                    Applied::Lost,
                ) if finish.resent => {}
                (
                    Ending::Ack { .. }
                    | Ending::Fail { .. }
                    | Ending::Discard { .. }
                    | Ending::Snooze { .. },
                    Applied::Lost,
                ) => {
                    // The run ended after its lease was lost: its outcome is
                    // discarded (another delivery has the entry).
                    Counters::bump(&self.counters.lost);
                }
                (Ending::Fail { .. } | Ending::Discard { .. }, Applied::Dead) => {
                    Counters::bump(&self.counters.dead);
                }
                _ => {}
            }
        }
        if pending {
            self.failing.fail();
        } else if !(self.apart && self.finish_failing) {
            self.failing.reset();
        }
    }

    /// A request failed: its finishes go with the next one, after a pause;
    /// once a shutdown's grace is over they are given up (their leases run
    /// out, and the entries come back then).
    fn failed_request(&mut self, error: &StoreError<Q>, mut sent: Vec<Finish<Lease<Q>>>) {
        if self
            .stopping
            .is_some_and(|grace_over| grace_over <= Instant::now())
        {
            tracing::warn!(queue = self.name, %error, unsent = sent.len(),
                "the store is unreachable at shutdown; the leases it holds will run out");
            return;
        }
        let pause = self.failing.fail();
        if Q::is_transient(error) {
            tracing::warn!(queue = self.name, %error, ?pause,
                "store unreachable; the worker retries");
        } else {
            tracing::error!(queue = self.name, %error, ?pause,
                "the store refused a request; the worker retries");
        }
        if Q::is_in_doubt(error) {
            for finish in &mut sent {
                finish.resent = true;
            }
        }
        sent.append(&mut self.finished);
        self.finished = sent;
    }
}

/// How often a worker beats: extends its leases and refreshes its record
/// (a third of the lease, at most 5 s).
fn beat_every(lease: Duration) -> Duration {
    (lease / 3)
        .min(Duration::from_secs(5))
        .max(Duration::from_millis(1))
}

/// Capped back-off between failed requests: 10 ms, 20 ms, ... up to 1 s.
#[derive(Debug, Default)]
struct Failing {
    failures: u32,
    retry_at: Option<Instant>,
}

impl Failing {
    fn fail(&mut self) -> Duration {
        let pause = Duration::from_millis(10 << self.failures.min(7)).min(Duration::from_secs(1));
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(deadline_after(Instant::now(), pause));
        pause
    }

    fn reset(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }
}

/// `fut`'s output, or `None` if `bound` passed first (with no bound, it
/// waits for it).
async fn within<F: Future>(bound: Option<Duration>, fut: F) -> Option<F::Output> {
    match bound {
        Some(bound) => tokio::time::timeout(bound, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// Drops a panic's payload, whose own `Drop` may panic too: that second
/// panic is caught, and its payload forgotten.
fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// A panic's message, as a reason for the dead letters.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "the handler panicked".to_owned()
    }
}
