//! The durable-queue API kept in this process's memory, on Tokio's clock:
//! [`MemoryQueue`], a third store beside Redis and PostgreSQL.
//!
//! **Nothing survives a restart**: entries, leases, dead letters and
//! schedules live as long as the process. Everything else is what the
//! other stores do, with the same rules (the shared test bodies run on all
//! three): ids, leases and attempts, retries and dead letters, schedules
//! once per tick, inspection. A [`Worker`](crate::durable::Worker) runs on
//! it unchanged.
//!
//! Two uses:
//!
//! - a single process that wants what a `Worker` gives (retries with
//!   backoff, dead letters, schedules with missed-tick policies and cron
//!   time zones) without a server;
//! - tests: a service written against [`Durable`](crate::durable::Durable)
//!   runs on a `MemoryQueue` under `#[tokio::test(start_paused = true)]`,
//!   so a nightly cron job across a change of daylight saving time is
//!   tested in milliseconds.
//!
//! # Its clock
//!
//! The queue's clock reads the wall time when it is built (or the time
//! given to [`start_at`](MemoryQueueBuilder::start_at)) plus Tokio's time
//! elapsed since: with paused time, every deadline, lease, schedule and
//! cron instant moves with `tokio::time::advance` (or auto-advance)
//! exactly. Times have millisecond resolution, as on the other stores.
//!
//! # How it works
//!
//! Values are kept as JSON, as in the other stores, so a value that does
//! not round-trip through serde_json behaves the same everywhere. Live
//! entries are kept in delivery order (due time, then insertion order; a
//! leased entry under its lease end) and dead letters in order of death,
//! in ordered maps behind one lock per queue, held for one short step and
//! never while waking anyone. Waiting consumers of a queue share one
//! waiter (Leader-Follower, as on the other stores): each change that can
//! make an entry due earlier wakes it at once, and it sleeps until the
//! head is due, so an idle queue costs nothing. Two queues built with the
//! same name are two queues: a queue is its handle and that handle's
//! clones ([`typed`](MemoryQueue::typed) gives a handle that reads the
//! values as another type).
//!
//! # Examples
//!
//! ```
//! use punctual::durable::Worker;
//! use punctual::memory::MemoryQueue;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), punctual::memory::Error> {
//! let reminders: MemoryQueue<String> = MemoryQueue::new("reminders");
//! let worker = Worker::builder(reminders.clone()).spawn(|job| async move {
//!     println!("remind {}", job.value());
//!     Ok::<(), String>(())
//! });
//! reminders.insert(&"alice@example.com".into(), Duration::from_secs(3600)).await?;
//! tokio::time::sleep(Duration::from_secs(3601)).await; // paused: instant
//! assert_eq!(worker.shutdown(Duration::from_secs(1)).await.completed, 1);
//! # Ok(()) }
//! ```

mod builder;
mod clock;
mod delivery;
mod durable;
mod error;
mod health;
mod inner;
mod kept;
mod operations;
mod options;
mod queue;
mod ready;
mod state;
mod ticks;

pub use crate::durable::ScheduleInfo;

/// Counts of a queue's entries by state, from [`MemoryQueue::stats`]: the
/// store-neutral [`QueueStats`](crate::durable::QueueStats).
pub type MemoryStats = crate::durable::QueueStats;

/// An entry that was given up on, from [`MemoryQueue::dead_letters`]: the
/// store-neutral [`DeadLetter`](crate::durable::DeadLetter).
pub type DeadLetter<T> = crate::durable::DeadLetter<T>;
pub use builder::MemoryQueueBuilder;
pub use delivery::Delivery;
pub use error::Error;
pub use queue::MemoryQueue;
