//! [`Durable`]: the store-neutral API of a durable queue, which the memory,
//! Redis and PostgreSQL queues answer alike, and the types it speaks in.

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::store::Sealed;
use super::{
    Cursor, EntryInfo, EntryState, InsertOptions, JobResult, KeyLimit, Minute, Page, ScheduleInfo,
    WorkerInfo,
};
use crate::MissedTicks;

/// Counts of a durable queue's entries by state, from `stats()` (on every
/// store: `RedisStats`, `PgStats` and `MemoryStats` are this type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Not yet due.
    pub pending: u64,
    /// Due and not leased (an entry whose lease ran out counts here).
    pub due: u64,
    /// Leased to a consumer.
    pub leased: u64,
    /// In the dead letters.
    pub dead: u64,
}

/// An entry that was given up on, from `dead_letters()` (every store's
/// `DeadLetter` is this type).
#[derive(Debug)]
pub struct DeadLetter<T> {
    /// The entry's id.
    pub id: String,
    /// The value, or `None` if it no longer decodes as `T`.
    pub value: Option<T>,
    /// Deliveries made before it died.
    pub attempts: u32,
    /// Why it died.
    pub reason: String,
}

/// A durable queue, whatever its store: `MemoryQueue<T>`, `RedisQueue<T>`
/// (feature `redis`) or `PgQueue<T>` (feature `postgres`). Write a service
/// once against it and the store is a type (and a constructor) to change;
/// test it on a [`MemoryQueue`](crate::memory::MemoryQueue) in paused time.
///
/// Each method has the semantics of the queues' inherent method of the same
/// name (documented there); each returns a future that is `Send`. The trait
/// is sealed: only the crate's queues implement it. A [`Worker`](super::Worker)
/// runs any of them.
///
/// # Examples
///
/// ```
/// use punctual::durable::{Durable, Worker};
/// use punctual::memory::MemoryQueue;
/// use std::time::Duration;
///
/// /// The shop's expiry logic, for any store.
/// async fn order_placed<Q: Durable<Item = u64>>(queue: &Q, order: u64) -> Result<(), Q::Error> {
///     queue.insert_with_id(&format!("order-{order}"), &order, Duration::from_secs(1800)).await?;
///     Ok(())
/// }
///
/// async fn order_paid<Q: Durable<Item = u64>>(queue: &Q, order: u64) -> Result<bool, Q::Error> {
///     queue.remove(&format!("order-{order}")).await
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), punctual::memory::Error> {
/// let queue: MemoryQueue<u64> = MemoryQueue::new("expiries");
/// order_placed(&queue, 1).await?;
/// order_placed(&queue, 2).await?;
/// assert!(order_paid(&queue, 1).await?);
/// let worker = Worker::builder(queue.clone()).spawn(|job| async move {
///     assert_eq!(*job.value(), 2); // only the unpaid order expires
///     Ok::<(), String>(())
/// });
/// tokio::time::sleep(Duration::from_secs(1801)).await;
/// assert_eq!(worker.shutdown(Duration::ZERO).await.completed, 1);
/// # Ok(()) }
/// ```
pub trait Durable: Sealed<Value = <Self as Durable>::Item> + Clone + Send + Sync + 'static {
    /// The queue's values.
    type Item: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The queue's name.
    fn name(&self) -> &str;

    /// The store's clock (Redis `TIME`, PostgreSQL `clock_timestamp()`,
    /// the memory queue's clock): the one that decides what is due.
    fn now(&self) -> impl Future<Output = Result<SystemTime, Self::Error>> + Send;

    /// Inserts `value`, due `delay` from now, under a new unique id.
    fn insert(
        &self,
        value: &Self::Item,
        delay: Duration,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send;

    /// Inserts `value`, due at `at`, under a new unique id.
    fn insert_at(
        &self,
        value: &Self::Item,
        at: SystemTime,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send;

    /// Inserts `value` under the caller's `id`, unless that id is taken
    /// (then `false`, and nothing changes).
    fn insert_with_id(
        &self,
        id: &str,
        value: &Self::Item,
        delay: Duration,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Inserts many entries, all or none; their ids in order.
    fn insert_many(
        &self,
        entries: &[(Self::Item, Duration)],
    ) -> impl Future<Output = Result<Vec<String>, Self::Error>> + Send;

    /// Deletes entry `id` (pending, leased or dead); whether it was there.
    fn remove(&self, id: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Moves a pending entry to `delay` from now.
    fn reset(
        &self,
        id: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// When entry `id` is due (its lease end while leased).
    fn deadline(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SystemTime>, Self::Error>> + Send;

    /// Creates or changes a schedule with a tick every `period`.
    fn schedule_every(
        &self,
        name: &str,
        period: Duration,
        missed: MissedTicks,
        value: &Self::Item,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Creates or changes a schedule with a tick at each instant of `expr`.
    #[cfg(feature = "cron")]
    fn schedule_cron(
        &self,
        name: &str,
        expr: &str,
        value: &Self::Item,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Deletes schedule `name` and its tick.
    fn unschedule(&self, name: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Every schedule of the queue.
    fn schedules(
        &self,
    ) -> impl Future<Output = Result<Vec<ScheduleInfo<Self::Item>>, Self::Error>> + Send;

    /// Counts the queue's entries by state.
    fn stats(&self) -> impl Future<Output = Result<QueueStats, Self::Error>> + Send;

    /// Puts dead letter `id` back as pending, attempts reset.
    fn requeue_dead(
        &self,
        id: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Every dead letter back as pending, attempts reset; how many.
    fn requeue_all_dead(
        &self,
        delay: Duration,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;

    /// Deletes every dead letter; how many.
    fn clear_dead(&self) -> impl Future<Output = Result<u64, Self::Error>> + Send;

    /// One page of the entries in `state`, after `cursor`.
    fn entries(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Page<Self::Item>, Self::Error>> + Send;

    /// Entry `id` in any state.
    fn entry(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<EntryInfo<Self::Item>>, Self::Error>> + Send;

    /// Stops every consumer from taking anything; whether it was running.
    fn pause(&self) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Lets consumers take again; whether it was paused.
    fn resume(&self) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Whether the queue is paused.
    fn is_paused(&self) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Makes schedule `name`'s pending tick due now.
    fn run_now(&self, name: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Inserts `value` as `options` say; its id, or `None` if refused.
    fn insert_with(
        &self,
        value: &Self::Item,
        options: &InsertOptions,
    ) -> impl Future<Output = Result<Option<String>, Self::Error>> + Send;

    /// Inserts many entries with options in one step; each one's id, or
    /// `None` where refused, in order.
    fn insert_many_with(
        &self,
        entries: &[(Self::Item, InsertOptions)],
    ) -> impl Future<Output = Result<Vec<Option<String>>, Self::Error>> + Send;

    /// Sets the limits of `key`'s entries; whether it changed them.
    fn set_key_limit(
        &self,
        key: &str,
        limit: KeyLimit,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Sets the limits of every key without its own.
    fn set_default_key_limit(
        &self,
        limit: KeyLimit,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Removes the limits of `key` (`*`: the default).
    fn remove_key_limit(&self, key: &str)
    -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Every key limit, by key (the default under `*`).
    fn key_limits(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, KeyLimit)>, Self::Error>> + Send;

    /// What became of entry `id`, if its result is kept.
    fn result(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<JobResult>, Self::Error>> + Send;

    /// Waits at most `timeout` for entry `id` to finish; its result.
    fn wait(
        &self,
        id: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<JobResult>, Self::Error>> + Send;

    /// Cancels entry `id`, stopping its run if one holds it; whether there
    /// was such an entry.
    fn cancel(&self, id: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// The live workers of the queue.
    fn workers(&self) -> impl Future<Output = Result<Vec<WorkerInfo>, Self::Error>> + Send;

    /// What happened minute by minute since `since` (within a day).
    fn history(
        &self,
        since: SystemTime,
    ) -> impl Future<Output = Result<Vec<Minute>, Self::Error>> + Send;

    /// How long the oldest due entry has waited.
    fn latency(&self) -> impl Future<Output = Result<Option<Duration>, Self::Error>> + Send;

    /// Pauses schedule `name`; whether it changed.
    fn pause_schedule(&self, name: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Resumes schedule `name`; whether it changed.
    fn resume_schedule(&self, name: &str)
    -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// One page of the entries in `state`, newest first, after `cursor`.
    fn entries_newest(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Page<Self::Item>, Self::Error>> + Send;
}

/// Implements [`Durable`] for a store's queue by its inherent methods of
/// the same names.
macro_rules! durable_by_inherent_methods {
    ($queue:ident) => {
        impl<T> $crate::durable::Durable for $queue<T>
        where
            T: ::serde::Serialize + ::serde::de::DeserializeOwned + Send + Sync + 'static,
        {
            type Item = T;
            type Error = Error;

            fn name(&self) -> &str {
                $queue::name(self)
            }

            fn now(
                &self,
            ) -> impl ::std::future::Future<Output = Result<::std::time::SystemTime, Error>> + Send
            {
                $queue::now(self)
            }

            fn insert(
                &self,
                value: &T,
                delay: ::std::time::Duration,
            ) -> impl ::std::future::Future<Output = Result<String, Error>> + Send {
                $queue::insert(self, value, delay)
            }

            fn insert_at(
                &self,
                value: &T,
                at: ::std::time::SystemTime,
            ) -> impl ::std::future::Future<Output = Result<String, Error>> + Send {
                $queue::insert_at(self, value, at)
            }

            fn insert_with_id(
                &self,
                id: &str,
                value: &T,
                delay: ::std::time::Duration,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::insert_with_id(self, id, value, delay)
            }

            fn insert_many(
                &self,
                entries: &[(T, ::std::time::Duration)],
            ) -> impl ::std::future::Future<Output = Result<Vec<String>, Error>> + Send {
                $queue::insert_many(self, entries)
            }

            fn remove(
                &self,
                id: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::remove(self, id)
            }

            fn reset(
                &self,
                id: &str,
                delay: ::std::time::Duration,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::reset(self, id, delay)
            }

            fn deadline(
                &self,
                id: &str,
            ) -> impl ::std::future::Future<
                Output = Result<Option<::std::time::SystemTime>, Error>,
            > + Send {
                $queue::deadline(self, id)
            }

            fn schedule_every(
                &self,
                name: &str,
                period: ::std::time::Duration,
                missed: $crate::MissedTicks,
                value: &T,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::schedule_every(self, name, period, missed, value)
            }

            #[cfg(feature = "cron")]
            fn schedule_cron(
                &self,
                name: &str,
                expr: &str,
                value: &T,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::schedule_cron(self, name, expr, value)
            }

            fn unschedule(
                &self,
                name: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::unschedule(self, name)
            }

            fn schedules(
                &self,
            ) -> impl ::std::future::Future<
                Output = Result<Vec<$crate::durable::ScheduleInfo<T>>, Error>,
            > + Send {
                $queue::schedules(self)
            }

            fn stats(
                &self,
            ) -> impl ::std::future::Future<Output = Result<$crate::durable::QueueStats, Error>>
            + Send {
                $queue::stats(self)
            }

            fn requeue_dead(
                &self,
                id: &str,
                delay: ::std::time::Duration,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::requeue_dead(self, id, delay)
            }

            fn requeue_all_dead(
                &self,
                delay: ::std::time::Duration,
            ) -> impl ::std::future::Future<Output = Result<u64, Error>> + Send {
                $queue::requeue_all_dead(self, delay)
            }

            fn clear_dead(&self) -> impl ::std::future::Future<Output = Result<u64, Error>> + Send {
                $queue::clear_dead(self)
            }

            fn entries(
                &self,
                state: $crate::durable::EntryState,
                cursor: Option<&$crate::durable::Cursor>,
                limit: usize,
            ) -> impl ::std::future::Future<Output = Result<$crate::durable::Page<T>, Error>> + Send
            {
                $queue::entries(self, state, cursor, limit)
            }

            fn entry(
                &self,
                id: &str,
            ) -> impl ::std::future::Future<
                Output = Result<Option<$crate::durable::EntryInfo<T>>, Error>,
            > + Send {
                $queue::entry(self, id)
            }

            fn pause(&self) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::pause(self)
            }

            fn resume(&self) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::resume(self)
            }

            fn is_paused(&self) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::is_paused(self)
            }

            fn run_now(
                &self,
                name: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::run_now(self, name)
            }

            fn insert_with(
                &self,
                value: &T,
                options: &$crate::durable::InsertOptions,
            ) -> impl ::std::future::Future<Output = Result<Option<String>, Error>> + Send {
                $queue::insert_with(self, value, options)
            }

            fn insert_many_with(
                &self,
                entries: &[(T, $crate::durable::InsertOptions)],
            ) -> impl ::std::future::Future<Output = Result<Vec<Option<String>>, Error>> + Send
            {
                $queue::insert_many_with(self, entries)
            }

            fn set_key_limit(
                &self,
                key: &str,
                limit: $crate::durable::KeyLimit,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::set_key_limit(self, key, limit)
            }

            fn set_default_key_limit(
                &self,
                limit: $crate::durable::KeyLimit,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::set_default_key_limit(self, limit)
            }

            fn remove_key_limit(
                &self,
                key: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::remove_key_limit(self, key)
            }

            fn key_limits(
                &self,
            ) -> impl ::std::future::Future<
                Output = Result<Vec<(String, $crate::durable::KeyLimit)>, Error>,
            > + Send {
                $queue::key_limits(self)
            }

            fn result(
                &self,
                id: &str,
            ) -> impl ::std::future::Future<
                Output = Result<Option<$crate::durable::JobResult>, Error>,
            > + Send {
                $queue::result(self, id)
            }

            fn wait(
                &self,
                id: &str,
                timeout: ::std::time::Duration,
            ) -> impl ::std::future::Future<
                Output = Result<Option<$crate::durable::JobResult>, Error>,
            > + Send {
                $queue::wait(self, id, timeout)
            }

            fn cancel(
                &self,
                id: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::cancel(self, id)
            }

            fn workers(
                &self,
            ) -> impl ::std::future::Future<
                Output = Result<Vec<$crate::durable::WorkerInfo>, Error>,
            > + Send {
                $queue::workers(self)
            }

            fn history(
                &self,
                since: ::std::time::SystemTime,
            ) -> impl ::std::future::Future<Output = Result<Vec<$crate::durable::Minute>, Error>>
            + Send {
                $queue::history(self, since)
            }

            fn latency(
                &self,
            ) -> impl ::std::future::Future<Output = Result<Option<::std::time::Duration>, Error>>
            + Send {
                $queue::latency(self)
            }

            fn pause_schedule(
                &self,
                name: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::pause_schedule(self, name)
            }

            fn resume_schedule(
                &self,
                name: &str,
            ) -> impl ::std::future::Future<Output = Result<bool, Error>> + Send {
                $queue::resume_schedule(self, name)
            }

            fn entries_newest(
                &self,
                state: $crate::durable::EntryState,
                cursor: Option<&$crate::durable::Cursor>,
                limit: usize,
            ) -> impl ::std::future::Future<Output = Result<$crate::durable::Page<T>, Error>> + Send
            {
                $queue::entries_newest(self, state, cursor, limit)
            }
        }
    };
}
pub(crate) use durable_by_inherent_methods;
