//! [`Worker`]: runs a handler for each due entry of a durable queue.
//!
//! Ground rules. One task (the *engine*) owns everything: the handlers it
//! spawned (a `JoinSet`, keyed by task id), the entries claimed ahead, the
//! finishes not yet sent, at most two requests to the store in flight for
//! claims and finishes and one for lease extensions. A request in flight is
//! never dropped while the engine waits for other events: it is a boxed
//! future polled to its end, so a reply is never lost by the worker itself. Finishes ride with
//! the next claim (one round trip acks what finished and takes as many as
//! places came free). Counters shared with [`Worker::stats`] are atomics
//! written only by the engine.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use super::Durable;
use super::backoff::Backoff;
use super::job::Job;
use super::store::{Applied, Batch, Finish, Outcome, Sealed, Taken};
use crate::queue::deadline_after;

/// Runs a handler for each due entry of a durable queue, at most
/// `concurrency` at once, keeping their leases alive and finishing each by
/// its outcome; made by [`Worker::builder`].
///
/// `Ok(())` acks the entry. `Err(e)`, a panic, or a run longer than
/// [`timeout`](WorkerBuilder::timeout) is a failed attempt: retried after
/// [`Backoff::delay`]`(attempt)`, or moved to the dead letters with `e`'s
/// `Display` (the panic message, or "timed out after ...") as its reason
/// once the queue's `max_attempts` is reached. A panic never takes the
/// worker down. While a handler runs, the worker extends its lease every
/// third of the queue's lease (all of its leases in one request); a handler
/// whose lease was lost (the entry was removed, or delivered elsewhere
/// after the worker could not reach the store in time) is dropped at its
/// next await and its outcome discarded. Each run is inside a `tracing`
/// span `punctual.job` (queue, id, attempt, schedule); failures and lost
/// leases are events.
///
/// The worker claims in batches, up to `concurrency` entries ahead of the
/// ones running, and sends the outcomes of finished runs with its next
/// claim: one round trip per batch when busy.
///
/// Dropping the `Worker` detaches it: it keeps running on the runtime.
/// [`shutdown`](Self::shutdown) stops it.
///
/// # Examples
///
/// ```no_run
/// use punctual::durable::{Backoff, Worker};
/// use punctual::redis::RedisQueue;
/// use std::time::Duration;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), punctual::redis::Error> {
/// let reminders: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "reminders").await?;
/// let worker = Worker::builder(reminders.clone())
///     .concurrency(8)
///     .backoff(Backoff::exponential(Duration::from_secs(5)).max(Duration::from_secs(600)))
///     .timeout(Duration::from_secs(60))
///     .spawn(|job| async move {
///         println!("remind {} (attempt {})", job.value(), job.attempt());
///         Ok::<(), std::io::Error>(())
///     });
/// reminders.insert(&"alice@example.com".to_owned(), Duration::from_secs(3600)).await?;
/// // ... on SIGTERM:
/// let stats = worker.shutdown(Duration::from_secs(10)).await;
/// println!("{} runs acked", stats.completed);
/// # Ok(()) }
/// ```
pub struct Worker {
    counters: Arc<Counters>,
    stop: watch::Sender<Option<Duration>>,
    engine: JoinHandle<()>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Counts of a [`Worker`]'s runs, from [`Worker::stats`] and
/// [`Worker::shutdown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Handlers running now.
    pub running: usize,
    /// Runs acked.
    pub completed: u64,
    /// Failed attempts (`Err`, panic, timeout), those that dead-lettered
    /// included.
    pub failed: u64,
    /// Entries this worker moved to the dead letters.
    pub dead: u64,
    /// Runs dropped (or whose outcome was discarded) because their lease
    /// was lost. A run dropped at shutdown counts in none.
    pub lost: u64,
}

#[derive(Debug, Default)]
struct Counters {
    running: AtomicUsize,
    completed: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
    lost: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            running: self.running.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Worker {
    /// A builder of a worker for `queue` (any durable queue: a
    /// [`RedisQueue`](crate::redis::RedisQueue) clone, for instance).
    pub fn builder<Q: Durable>(queue: Q) -> WorkerBuilder<Q> {
        WorkerBuilder {
            queue,
            concurrency: 16,
            backoff: Backoff::default(),
            timeout: None,
        }
    }

    /// The worker's counts now.
    pub fn stats(&self) -> WorkerStats {
        self.counters.snapshot()
    }

    /// Stops the worker: it stops taking at once and gives back the entries
    /// taken but not started (no attempt counted); running handlers may
    /// finish within `grace` (acked or retried as usual); the rest are then
    /// dropped and their entries given back due at once (that attempt
    /// counts). Returns the final stats as soon as no handler runs, after
    /// `grace` at the latest (plus one round trip to the store). Every
    /// entry the worker held is then back in the queue or acked: none waits
    /// for a lease to run out, unless the store cannot be reached (then its
    /// lease runs out as usual).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the shutdown: the worker goes on
    /// with it in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::durable::Worker;
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let queue: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
    /// let worker = Worker::builder(queue).spawn(|_job| async { Ok::<(), String>(()) });
    /// tokio::signal::ctrl_c().await.ok();
    /// let stats = worker.shutdown(Duration::from_secs(30)).await;
    /// assert_eq!(stats.running, 0);
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self, grace: Duration) -> WorkerStats {
        self.stop.send_replace(Some(grace));
        let _ = self.engine.await;
        self.counters.snapshot()
    }
}

/// Configures and spawns a [`Worker`]; made by [`Worker::builder`].
pub struct WorkerBuilder<Q> {
    queue: Q,
    concurrency: usize,
    backoff: Backoff,
    timeout: Option<Duration>,
}

impl<Q: fmt::Debug> fmt::Debug for WorkerBuilder<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("queue", &self.queue)
            .field("concurrency", &self.concurrency)
            .field("backoff", &self.backoff)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<Q: Durable> WorkerBuilder<Q> {
    /// How many handlers run at once; default 16. The worker also claims
    /// up to as many entries ahead (their leases kept alive like the
    /// running ones'), so a handler that ends is followed at once while the
    /// next claim is on its way; one claim takes at most 1024 entries.
    ///
    /// # Panics
    ///
    /// Panics if `n` is zero.
    #[track_caller]
    pub fn concurrency(mut self, n: usize) -> Self {
        assert!(n > 0, "`concurrency` must be greater than zero");
        self.concurrency = n;
        self
    }

    /// The delay before a failed entry's next attempt; default
    /// `Backoff::exponential(1 s).max(1 h).jitter(true)`.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// A run longer than `limit` fails (it is dropped at its next await,
    /// with the reason "timed out after `limit`"); default none.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Starts the worker on the current Tokio runtime, running `handler`
    /// for each due entry.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime.
    #[track_caller]
    pub fn spawn<H, Fut, E>(self, handler: H) -> Worker
    where
        H: Fn(Job<Q::Item>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            panic!("`WorkerBuilder::spawn` must be called inside a Tokio runtime");
        };
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = watch::channel(None);
        let engine = Engine {
            kicks: self.queue.kicks(),
            queue: self.queue,
            handler: Arc::new(handler),
            concurrency: self.concurrency,
            backoff: self.backoff,
            timeout: self.timeout,
            counters: Arc::clone(&counters),
            tasks: JoinSet::new(),
            runs: HashMap::new(),
            by_id: HashMap::new(),
            prefetched: VecDeque::new(),
            finished: Vec::new(),
            stopped,
            _outputs: std::marker::PhantomData,
        };
        Worker {
            counters,
            stop,
            engine: runtime.spawn(engine.run()),
        }
    }
}

/// What a handler's task returns: `Ok` or why the attempt failed.
type RunResult = Result<(), String>;

/// A running handler.
struct Run<L> {
    lease: L,
    id: String,
    attempt: u32,
    abort: AbortHandle,
    /// Aborted (its lease was lost): it keeps its place until its task has
    /// ended, so two runs of one entry never overlap, and its outcome is
    /// discarded.
    dropped: bool,
}

/// A request to the store in flight.
type Request<T, L, A, E> = Pin<Box<dyn Future<Output = Reply<T, L, A, E>> + Send>>;

enum Reply<T, L, A, E> {
    Claim {
        result: Result<Batch<T, L>, E>,
        attempt: A,
        sent: Vec<Finish<L>>,
        /// How many entries it asked for.
        asked: usize,
    },
    Finish {
        result: Result<Vec<Applied>, E>,
        sent: Vec<Finish<L>>,
    },
}

type Extension<E> = Pin<Box<dyn Future<Output = (Result<Vec<bool>, E>, Vec<Holder>)> + Send>>;

/// Who holds a lease the worker extends.
#[derive(Debug)]
enum Holder {
    Run(tokio::task::Id),
    Prefetched(String),
}

struct Engine<Q: Durable, H, Fut, E> {
    queue: Q,
    handler: Arc<H>,
    concurrency: usize,
    backoff: Backoff,
    timeout: Option<Duration>,
    counters: Arc<Counters>,
    kicks: watch::Receiver<u64>,
    tasks: JoinSet<RunResult>,
    runs: HashMap<tokio::task::Id, Run<<Q as Sealed>::Lease>>,
    /// The running handler of each entry id.
    by_id: HashMap<String, tokio::task::Id>,
    /// Entries claimed ahead, not started yet (their leases are extended
    /// with the running ones').
    prefetched: VecDeque<Taken<<Q as Sealed>::Value, <Q as Sealed>::Lease>>,
    /// Finishes not yet sent.
    finished: Vec<Finish<<Q as Sealed>::Lease>>,
    stopped: watch::Receiver<Option<Duration>>,
    _outputs: std::marker::PhantomData<fn() -> (Fut, E)>,
}

impl<Q, H, Fut, E> Engine<Q, H, Fut, E>
where
    Q: Durable,
    H: Fn(Job<Q::Item>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    async fn run(mut self) {
        type Req<Q> = Request<
            <Q as Sealed>::Value,
            <Q as Sealed>::Lease,
            <Q as Sealed>::Attempt,
            <Q as Sealed>::Error,
        >;
        let name = self.queue.queue_name().to_owned();
        let lease = self.queue.lease_duration();
        let beat = (lease / 3).max(Duration::from_millis(1));
        // Claims sent again after a lost reply keep their attempt.
        let mut resend: Vec<<Q as Sealed>::Attempt> = Vec::new();
        // Up to two requests in flight: while the store runs one, the worker
        // reads the other's reply and starts its handlers.
        let mut requests: FuturesUnordered<Req<Q>> = FuturesUnordered::new();
        // Entries asked for by the claims in flight.
        let mut reserved = 0;
        let mut extension: Option<Extension<<Q as Sealed>::Error>> = None;
        let mut next_beat = deadline_after(Instant::now(), beat);
        // Whether entries may be due now; else wait until `next_due`.
        let mut due = true;
        let mut next_due = Instant::now();
        let mut failing = Failing::default();
        let mut stopping: Option<Instant> = None;
        // Every `Worker` handle is gone without a shutdown: run on.
        let mut detached = false;
        loop {
            let now = Instant::now();
            // Prefetched entries start as soon as a place is free; one whose
            // entry still runs here (delivered again: the old run's lease is
            // lost) waits until the old run has stopped.
            let mut at = 0;
            while self.runs.len() < self.concurrency && stopping.is_none() {
                let Some(taken) = self.prefetched.get(at) else {
                    break;
                };
                if let Some(old) = self.by_id.get(&taken.id).copied() {
                    self.drop_run(&name, old, "delivered again while it ran");
                    at += 1;
                    continue;
                }
                let taken = self.prefetched.remove(at).expect("looked at");
                if self.runs.is_empty() {
                    next_beat = deadline_after(Instant::now(), beat);
                }
                self.start(&name, taken);
            }
            let free = self.concurrency.saturating_sub(self.runs.len());
            // The worker holds up to twice `concurrency` (running and
            // prefetched), so handlers start while the next claim is on its
            // way. It claims a whole batch at a time, as soon as a free place
            // has nothing to start, or to send finishes.
            let room = (2 * self.concurrency)
                .saturating_sub(self.runs.len() + self.prefetched.len() + reserved);
            let starving = free > 0 && self.prefetched.is_empty() && reserved == 0;
            if requests.len() < MAX_IN_FLIGHT && failing.retry_at.is_none_or(|at| at <= now) {
                // Finishes never wait for a batch: a finished run's lease is
                // no longer extended.
                let claim_now = stopping.is_none()
                    && room > 0
                    && ((due && (room >= self.concurrency || starving))
                        || !self.finished.is_empty());
                if claim_now {
                    let queue = self.queue.clone();
                    let sent = std::mem::take(&mut self.finished);
                    let mut claim = resend.pop().unwrap_or_else(|| self.queue.new_attempt());
                    self.kicks.borrow_and_update();
                    reserved += room;
                    requests.push(Box::pin(async move {
                        let result = queue.claim(&mut claim, room, &sent).await;
                        Reply::Claim {
                            result,
                            attempt: claim,
                            sent,
                            asked: room,
                        }
                    }));
                } else if !self.finished.is_empty() {
                    let queue = self.queue.clone();
                    let sent = std::mem::take(&mut self.finished);
                    requests.push(Box::pin(async move {
                        let result = queue.finish(&sent).await;
                        Reply::Finish { result, sent }
                    }));
                }
            }
            if stopping.is_some()
                && self.runs.is_empty()
                && self.finished.is_empty()
                && requests.is_empty()
            {
                break;
            }
            let waiting = requests.is_empty() && stopping.is_none() && starving && !due;
            let wake = next_due.min(deadline_after(now, self.queue.poll_interval()));
            tokio::select! {
                Some(reply) = requests.next(), if !requests.is_empty() => {
                    match reply {
                        Reply::Claim { result, attempt: claim, sent, asked } => match result {
                            Ok(batch) => {
                                reserved -= asked;
                                failing.reset();
                                self.settled(&sent, &batch.done);
                                // A full batch: more may be due at once.
                                due = batch.taken.len() >= asked;
                                next_due = batch.next_due;
                                if next_due <= Instant::now() {
                                    due = true;
                                }
                                self.prefetched.extend(batch.taken);
                                if stopping.is_some() {
                                    self.give_back_prefetched();
                                }
                                // Every claim has its own token: a delivery can
                                // only ever finish the lease of its own claim.
                                drop(claim);
                            }
                            Err(error) => {
                                reserved -= asked;
                                self.failed_request(&name, &error, sent, &mut failing, stopping);
                                if stopping.is_some() {
                                    // Whatever it leased goes back with the
                                    // next request of the handle.
                                    let _ = self.queue.abandon(&claim);
                                } else {
                                    // Sent again, it returns what it leased.
                                    resend.push(claim);
                                }
                            }
                        },
                        Reply::Finish { result, sent } => match result {
                            Ok(done) => {
                                failing.reset();
                                self.settled(&sent, &done);
                            }
                            Err(error) => {
                                self.failed_request(&name, &error, sent, &mut failing, stopping);
                            }
                        },
                    }
                }
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.joined(&name, joined);
                }
                (result, ids) = async { extension.as_mut().expect("checked").await }, if extension.is_some() => {
                    extension = None;
                    self.extended(&name, result, ids);
                }
                _ = tokio::time::sleep_until(next_beat), if extension.is_none() && !(self.runs.is_empty() && self.prefetched.is_empty()) => {
                    next_beat = deadline_after(Instant::now(), beat);
                    let mut ids = Vec::new();
                    let mut leases = Vec::new();
                    for (task, run) in self.runs.iter().filter(|(_, run)| !run.dropped) {
                        ids.push(Holder::Run(*task));
                        leases.push(run.lease.clone());
                    }
                    for taken in &self.prefetched {
                        ids.push(Holder::Prefetched(taken.id.clone()));
                        leases.push(taken.lease.clone());
                    }
                    let queue = self.queue.clone();
                    extension = Some(Box::pin(async move {
                        (queue.extend(&leases, lease).await, ids)
                    }));
                }
                _ = self.kicks.changed(), if waiting => due = true,
                _ = tokio::time::sleep_until(wake), if waiting => due = true,
                _ = tokio::time::sleep_until(failing.retry_at.unwrap_or(now)), if failing.retry_at.is_some() && requests.len() < MAX_IN_FLIGHT => {
                    failing.retry_at = None;
                }
                changed = self.stopped.changed(), if stopping.is_none() && !detached => {
                    match changed {
                        Ok(()) => {
                            let grace = self.stopped.borrow().unwrap_or(Duration::ZERO);
                            stopping = Some(deadline_after(Instant::now(), grace));
                        }
                        Err(_) => detached = true,
                    }
                    if stopping.is_some() {
                        self.give_back_prefetched();
                    }
                }
                _ = tokio::time::sleep_until(stopping.unwrap_or(now)), if stopping.is_some() && !self.runs.is_empty() => {
                    // Past the grace: drop the rest, give their entries back.
                    self.by_id.clear();
                    for (_, run) in self.runs.drain() {
                        run.abort.abort();
                        self.finished.push(Finish {
                            lease: run.lease,
                            outcome: Outcome::GiveBack { counted: true },
                            resent: false,
                        });
                    }
                    self.counters.running.store(0, Ordering::Relaxed);
                }
            }
        }
        self.tasks.abort_all();
        // Claims whose reply was lost: give back what they may hold now,
        // rather than after their lease (one more round trip, bounded).
        let mut abandoned = false;
        for claim in resend {
            abandoned |= self.queue.abandon(&claim);
        }
        if abandoned {
            let flush = self.queue.finish(&[]);
            let _ = tokio::time::timeout(Duration::from_secs(1), flush).await;
        }
    }

    /// Spawns the handler for `taken`.
    fn start(&mut self, queue: &str, taken: Taken<Q::Item, <Q as Sealed>::Lease>) {
        let Taken {
            id,
            value,
            attempt,
            deadline,
            schedule,
            lease,
        } = taken;
        let span = tracing::info_span!(
            "punctual.job",
            queue,
            id = %id,
            attempt,
            schedule = schedule.as_deref().unwrap_or(""),
        );
        let job = Job {
            id: id.clone(),
            value,
            attempt,
            deadline,
            schedule,
        };
        let handler = Arc::clone(&self.handler);
        let limit = self.timeout;
        let run = async move {
            let outcome = AssertUnwindSafe(async move {
                let fut = handler(job);
                match limit {
                    Some(limit) => match tokio::time::timeout(limit, fut).await {
                        Ok(result) => result.map_err(|e| e.to_string()),
                        Err(_) => Err(format!("timed out after {limit:?}")),
                    },
                    None => fut.await.map_err(|e| e.to_string()),
                }
            })
            .catch_unwind()
            .await;
            outcome.unwrap_or_else(|panic| Err(panic_message(&*panic)))
        };
        let abort = self.tasks.spawn(run.instrument(span));
        self.by_id.insert(id.clone(), abort.id());
        self.counters.running.fetch_add(1, Ordering::Relaxed);
        self.runs.insert(
            abort.id(),
            Run {
                lease,
                id,
                attempt,
                abort,
                dropped: false,
            },
        );
    }

    /// Taken but not started: back in the queue at once, no attempt counted.
    fn give_back_prefetched(&mut self) {
        for taken in self.prefetched.drain(..) {
            self.finished.push(Finish {
                lease: taken.lease,
                outcome: Outcome::GiveBack { counted: false },
                resent: false,
            });
        }
    }

    /// A handler's task ended: its outcome becomes a finish to send.
    fn joined(
        &mut self,
        queue: &str,
        joined: Result<(tokio::task::Id, RunResult), tokio::task::JoinError>,
    ) {
        let (task, result) = match joined {
            Ok(done) => done,
            // Aborted: its lease was lost or the grace ran out; handled then.
            Err(error) => {
                let task = error.id();
                let result = match error.try_into_panic() {
                    Ok(panic) => Err(panic_message(&*panic)),
                    Err(_) => return self.forget(task),
                };
                (task, result)
            }
        };
        let Some(run) = self.remove_run(task) else {
            return; // given back at the end of a shutdown's grace
        };
        if run.dropped {
            return; // its lease was lost: the outcome is discarded
        }
        let outcome = match result {
            Ok(()) => Outcome::Ack,
            Err(reason) => {
                Counters::bump(&self.counters.failed);
                tracing::warn!(
                    queue,
                    id = run.id,
                    attempt = run.attempt,
                    reason,
                    "a job failed"
                );
                Outcome::Fail {
                    delay: self.backoff.delay(run.attempt),
                    reason,
                }
            }
        };
        self.finished.push(Finish {
            lease: run.lease,
            outcome,
            resent: false,
        });
    }

    fn forget(&mut self, task: tokio::task::Id) {
        self.remove_run(task);
    }

    /// Drops run `task` at its next await (its lease was lost); it keeps its
    /// place until its task has ended.
    fn drop_run(&mut self, queue: &str, task: tokio::task::Id, why: &str) {
        let Some(run) = self.runs.get_mut(&task) else {
            return;
        };
        if run.dropped {
            return;
        }
        run.dropped = true;
        run.abort.abort();
        Counters::bump(&self.counters.lost);
        tracing::warn!(
            queue,
            id = run.id,
            attempt = run.attempt,
            why,
            "a job's lease was lost; its handler is dropped"
        );
    }

    /// Takes run `task` out of the books.
    fn remove_run(&mut self, task: tokio::task::Id) -> Option<Run<<Q as Sealed>::Lease>> {
        let run = self.runs.remove(&task)?;
        if self.by_id.get(&run.id) == Some(&task) {
            self.by_id.remove(&run.id);
        }
        self.counters.running.fetch_sub(1, Ordering::Relaxed);
        Some(run)
    }

    /// Counts what the store made of finishes; those it could not apply yet
    /// go with the next request.
    fn settled(&mut self, sent: &[Finish<<Q as Sealed>::Lease>], done: &[Applied]) {
        for (finish, applied) in sent.iter().zip(done) {
            match (&finish.outcome, applied) {
                (_, Applied::Pending) => self.finished.push(finish.clone()),
                (Outcome::Ack, Applied::Done) => Counters::bump(&self.counters.completed),
                // Sent before in a request whose reply was lost: it applied
                // then (most likely) or its lease was lost; count it done.
                (Outcome::Ack, Applied::Lost) if finish.resent => {
                    Counters::bump(&self.counters.completed);
                }
                (Outcome::Ack | Outcome::Fail { .. }, Applied::Lost) if !finish.resent => {
                    // The run finished after its lease was lost: its outcome
                    // is discarded (another delivery has the entry).
                    Counters::bump(&self.counters.lost);
                }
                (Outcome::Fail { .. }, Applied::Dead) => Counters::bump(&self.counters.dead),
                _ => {}
            }
        }
    }

    /// A request failed: its finishes go with the next one, after a pause;
    /// once a shutdown's grace is over, they are given up (their leases run
    /// out, and the entries come back then).
    fn failed_request(
        &mut self,
        queue: &str,
        error: &<Q as Sealed>::Error,
        sent: Vec<Finish<<Q as Sealed>::Lease>>,
        failing: &mut Failing,
        stopping: Option<Instant>,
    ) {
        if stopping.is_some_and(|grace_over| grace_over <= Instant::now()) {
            tracing::warn!(queue, %error, unsent = sent.len() + self.finished.len(),
                "the store is unreachable at shutdown; the leases it holds will run out");
            self.finished.clear();
            return;
        }
        let pause = failing.fail();
        if Q::is_transient(error) {
            tracing::warn!(queue, %error, ?pause, "store unreachable; the worker retries");
        } else {
            tracing::error!(queue, %error, ?pause, "the store refused a request; the worker retries");
        }
        let mut sent = sent;
        for finish in &mut sent {
            finish.resent = true;
        }
        sent.append(&mut self.finished);
        self.finished = sent;
    }

    /// Drops the handlers whose lease an extension found lost.
    fn extended(
        &mut self,
        queue: &str,
        result: Result<Vec<bool>, <Q as Sealed>::Error>,
        holders: Vec<Holder>,
    ) {
        let held = match result {
            Ok(held) => held,
            Err(error) => {
                // The leases run on; the next beat tries again.
                tracing::warn!(queue, %error, "could not extend the leases of running jobs");
                return;
            }
        };
        for (holder, held) in holders.into_iter().zip(held) {
            let task = match holder {
                _ if held => continue,
                Holder::Run(task) => task,
                Holder::Prefetched(id) => {
                    // Lost before it started: it is simply not run.
                    self.prefetched.retain(|taken| taken.id != id);
                    continue;
                }
            };
            self.drop_run(queue, task, "an extension found it lost");
        }
    }
}

/// Requests (claims, finishes) a worker has in flight at most.
const MAX_IN_FLIGHT: usize = 2;

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
