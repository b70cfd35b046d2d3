//! Delayed and periodic work for Tokio services.
//!
//! `punctual` provides two things, modelled on the JDK's `DelayQueue` and
//! `ScheduledThreadPoolExecutor`:
//!
//! - [`DelayQueue`]: an async queue of values ordered exactly by deadline,
//!   shared by any number of producers and consumers: a timing wheel holds
//!   the far future and a small exact heap what is about to come due.
//!   Inserting, removing or rescheduling an entry by its [`Key`] costs O(1)
//!   while it is far off, and waiting consumers use Leader-Follower so that
//!   only one of them holds a timer.
//! - [`Scheduler`]: a pool of worker tasks running one-shot jobs (with a
//!   result) and fixed-rate or fixed-delay periodic jobs from such a queue,
//!   with [`JobHandle`]s that cancel by key, isolated panics, and JDK-style
//!   shutdown policies.
//!
//! Both take a bound for back-pressure ([`DelayQueue::bounded`],
//! [`Builder::max_pending`]); fixed-rate jobs choose what happens after
//! missed runs ([`MissedTicks`]); and with the cargo feature `cron`,
//! `Scheduler::schedule_cron` runs jobs at the instants of a cron
//! expression, in UTC or in the time zone of a `CRON_TZ=` prefix.
//!
//! All times are [`tokio::time::Instant`] and [`std::time::Duration`], so
//! tests can drive everything with paused time.
//!
//! For work that must outlive the process, the same delay queue lives in a
//! store every replica shares: `punctual::redis::RedisQueue` (cargo feature
//! `redis`) and `punctual::postgres::PgQueue` (cargo feature `postgres`,
//! with inserts inside the caller's transaction). [`durable`] runs them: a
//! `Worker` with retries, lease heartbeats and graceful shutdown, and
//! recurring schedules that run once per tick across every replica; its
//! [`Durable`](durable::Durable) trait is their one API, and
//! [`memory::MemoryQueue`] answers it in process memory, on Tokio's clock,
//! so a service's durable jobs are tested in paused time.
//!
//! # Waiting consumers
//!
//! A consumer waiting in [`DelayQueue::take`] may be the one that times the
//! earliest deadline for everyone: keep polling a `take` future once polled,
//! or drop it (in a `select!` loop, create it inside the loop). A
//! [`TakeStream`] may be kept across `select!` iterations: when its
//! [`next()`](TakeStream::next) loses the race, its future is dropped and
//! the stream gives its place up, so it never holds up another consumer
//! while the loop body runs.
//!
//! # Examples
//!
//! ```
//! use punctual::DelayQueue;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let unpaid = DelayQueue::new();
//! let order_1 = unpaid.insert(1, Duration::from_secs(30 * 60));
//! unpaid.insert(2, Duration::from_secs(30 * 60));
//! unpaid.remove(order_1); // paid in time
//! assert_eq!(unpaid.take().await, 2); // expires after 30 minutes
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

#[cfg(feature = "cron")]
mod cron;
pub mod durable;
mod lock;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod queue;
#[cfg(feature = "redis")]
pub mod redis;
mod scheduler;

pub use queue::{DelayQueue, Full, Key, StreamNext, TakeStream};
pub use scheduler::{Builder, JobError, JobHandle, MissedTicks, ScheduleError, Scheduler, Stats};

/// The README's examples, compiled and run as doctests. Its quick starts use
/// the features `postgres` and `cron` (`scripts/test` turns every feature on).
#[cfg(all(doctest, feature = "postgres", feature = "cron"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
