//! Durable jobs: [`Worker`]s that run a handler for each due entry of a
//! durable queue, and recurring schedules kept in the store, shared by every
//! replica of a service and surviving its restarts.
//!
//! What [`Scheduler`](crate::Scheduler) is to the in-memory
//! [`DelayQueue`](crate::DelayQueue), this module is to the durable queues:
//! [`MemoryQueue`](crate::memory::MemoryQueue) (no feature; one process,
//! nothing survives it: for tests in paused time and for services without
//! a server), `RedisQueue` (feature `redis`) and `PgQueue` (feature
//! `postgres`). [`Durable`] is their one API: a service written against it
//! changes store by changing a type. One worker implementation serves every
//! store, which only answers (claim many, finish and claim in one round
//! trip, extend many, give back).
//!
//! A handler says what became of its job with an [`Outcome`] (done, retry
//! after the backoff or after a delay of its choosing, snooze without
//! spending an attempt, discard to the dead letters); a handler returning
//! `Result<(), E>` says done or retry.
//!
//! # Which one
//!
//! `Scheduler` for work that may die with the process (a cache refresh, a
//! metrics flush): no network, nanosecond deadlines, but every replica runs
//! its own copy of a periodic job. A durable `Worker` for work that must
//! happen once even if this process does not live to do it (expire the
//! order, send the reminder, the nightly report of a service with three
//! replicas): at least once, millisecond deadlines, one store round trip
//! per batch.
//!
//! # Priorities, limits and uniqueness
//!
//! An insert may say more than "this value, due then"
//! ([`InsertOptions`], with `insert_with` and `insert_many_with` on every
//! store): a **priority** (among due entries, higher first; never due
//! sooner), a **key** (a tenant, an account, a provider) whose [`KeyLimit`]
//! bounds how many of its entries run at once and how many start per period,
//! its own **max attempts**, a **unique window** (the id stays taken for a
//! while after the entry finishes: "at most one digest per user per hour"),
//! and **replace** (a pending entry of the id takes the new value and due
//! time: "re-index 2 s after the last edit"). Each rule is decided in the
//! store's one atomic step (the claim's script or statement), so no number of
//! consumers in any number of processes exceeds a limit, and:
//!
//! - a key at its limit never holds up other entries: a claim takes the next
//!   eligible one, and a worker waiting on a key wakes when a place of the
//!   key frees (or its rate window opens), not at its poll interval;
//! - a claim is fair across keys: among due entries of equal priority it
//!   takes one entry of each key before a second of any (an entry without a
//!   key is a key of its own), so one tenant's backlog of 50,000 imports
//!   delays another tenant's one import by no more than a claim.
//!
//! A tenant-fair import queue beside a payment provider that takes at most 2
//! calls at once and 5 a second:
//!
//! ```
//! use punctual::durable::{InsertOptions, Job, KeyLimit, Outcome, Rate, Worker};
//! use punctual::memory::MemoryQueue;
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), punctual::memory::Error> {
//! let jobs: MemoryQueue<String> = MemoryQueue::new("jobs");
//! let provider = KeyLimit {
//!     concurrency: Some(2),
//!     rate: Some(Rate { max: 5, per: Duration::from_secs(1) }),
//! };
//! jobs.set_key_limit("payments", provider).await?;
//! // Every tenant: at most 2 imports at once.
//! jobs.set_default_key_limit(KeyLimit { concurrency: Some(2), rate: None }).await?;
//!
//! // Tenant a's big import, then tenant b's small one, then a charge that
//! // must not wait behind either.
//! let big: Vec<(String, InsertOptions)> = (0..1000)
//!     .map(|n| (format!("a:{n}"), InsertOptions::new().key("tenant-a")))
//!     .collect();
//! jobs.insert_many_with(&big).await?;
//! jobs.insert_with(&"b:0".into(), &InsertOptions::new().key("tenant-b")).await?;
//! let charge = InsertOptions::new().key("payments").priority(10).max_attempts(20);
//! jobs.insert_with(&"charge order 17".into(), &charge).await?;
//!
//! let started = Arc::new(Mutex::new(Vec::new()));
//! let worker = Worker::builder(jobs.clone()).concurrency(8).spawn({
//!     let started = started.clone();
//!     move |job: Job<String>| {
//!         started.lock().unwrap().push(job.value().clone());
//!         async { tokio::time::sleep(Duration::from_millis(100)).await; Outcome::Done }
//!     }
//! });
//! tokio::time::sleep(Duration::from_millis(50)).await;
//! // The first claim: the charge first (priority), then one entry of each
//! // tenant before a second of tenant a (fairness), within their limits.
//! assert_eq!(started.lock().unwrap()[..4], ["charge order 17", "a:0", "b:0", "a:1"]);
//! # worker.shutdown(Duration::ZERO).await;
//! # Ok(()) }
//! ```
//!
//! # Rolling deploys
//!
//! An entry whose value does not decode as the worker's type (a replica
//! still running older code met a newer variant) never reaches a handler
//! or a `take*` caller: each such delivery is a failed attempt with the
//! reason `value does not decode: <serde error>`, due again after
//! `min(2^(attempt-1) s, 1 h)`, and it goes to the dead letters only once
//! its attempts reach `max_attempts`, so a replica that can decode it gets
//! its turn.
//!
//! # Once per tick
//!
//! A schedule (`schedule_every`, `schedule_cron`) is a named entry kept in
//! the store. Exactly one *tick* of it exists at any time (pending, due or
//! leased), under the schedule's name; the store-side step that acks a tick
//! (or sends it to the dead letters) inserts the next one in the same
//! atomic step, from the store's clock. So every replica may declare the
//! same schedules at start-up (the call is an upsert), and:
//!
//! - runs of one schedule never overlap, and no tick runs twice: only one
//!   tick exists, and one consumer holds it;
//! - a replica that crashes while running a tick leaves it leased; after
//!   its lease it is delivered again (attempt + 1) to another replica. "Once
//!   per tick" is "at least once" under a crash: the interrupted run is
//!   repeated, so handlers should be idempotent;
//! - nothing needs a leader, a lock or a daemon.
//!
//! ```no_run
//! use punctual::MissedTicks;
//! use punctual::durable::Worker;
//! use punctual::redis::RedisQueue;
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), punctual::redis::Error> {
//! let jobs: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
//! // Every replica declares it; one tick exists, so it runs once per minute.
//! jobs.schedule_every("sweep", Duration::from_secs(60), MissedTicks::Skip, &"sweep".into())
//!     .await?;
//! let worker = Worker::builder(jobs.clone()).spawn(|job| async move {
//!     println!("{} at {:?}", job.value(), job.deadline());
//!     Ok::<(), String>(())
//! });
//! # Ok(()) }
//! ```

mod api;
mod backoff;
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) mod batch;
mod engine;
mod entries;
pub(crate) mod front;
pub(crate) mod health;
mod job;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod options;
mod outcome;
pub(crate) mod results;
pub(crate) mod rules;
mod schedule;
pub(crate) mod store;
pub(crate) mod take;
pub(crate) mod trace;
pub(crate) mod wait;
mod worker;

pub(crate) use api::durable_by_inherent_methods;
pub use api::{DeadLetter, Durable, QueueStats};
pub use backoff::Backoff;
pub(crate) use entries::{At, MAX_PAGE, PARKED, Row};
pub use entries::{Cursor, EntryInfo, EntryState, InvalidCursor, Page};
pub use health::{AttemptError, Minute, RunInfo, WorkerInfo};
pub use job::Job;
pub use options::{InsertOptions, KeyLimit, Rate};
pub use outcome::Outcome;
pub use results::{Finished, JobResult};
pub use schedule::ScheduleInfo;
#[cfg(feature = "cron")]
pub(crate) use schedule::cron_instants;
pub(crate) use schedule::{period_ms, policy, spec_of};
pub use worker::{Worker, WorkerBuilder, WorkerStats};
