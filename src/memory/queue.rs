//! [`MemoryQueue`]: the producer, consumer and inspection calls.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::Stream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::builder::MemoryQueueBuilder;
use super::clock::{ms_of, system_time};
use super::delivery::Delivery;
use super::error::{Error, check_id};
use super::inner::Inner;
use super::operations::Seen;
use super::state::Rules;
use super::{DeadLetter, MemoryStats};
use crate::MissedTicks;
use crate::durable::ops::{Held, millis};
use crate::durable::store::{MAX_CLAIM, Sealed, Taken};
use crate::durable::take::take_until;
use crate::durable::{
    At, Cursor, EntryInfo, EntryState, MAX_PAGE, Page, ScheduleInfo, period_ms, policy, spec_of,
};
use crate::queue::deadline_after;

/// A durable-queue API kept in this process's memory, on Tokio's clock.
/// See the [module docs](super).
///
/// Cloning gives another handle to the same queue.
pub struct MemoryQueue<T> {
    inner: Arc<Inner>,
    /// This handle's settings (a handle that joined another's queue keeps
    /// its own, as a replica does on the other stores).
    pub(crate) lease: Duration,
    pub(crate) rules: Rules,
    _values: PhantomData<fn() -> T>,
}

impl<T> Clone for MemoryQueue<T> {
    fn clone(&self) -> Self {
        self.typed()
    }
}

impl<T> fmt::Debug for MemoryQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("name", &self.inner.name)
            .field("lease", &self.lease)
            .field("max_attempts", &self.rules.limit)
            .finish_non_exhaustive()
    }
}

impl<T> MemoryQueue<T> {
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn from_parts(inner: Arc<Inner>, lease: Duration, rules: Rules) -> Self {
        MemoryQueue {
            inner,
            lease,
            rules,
            _values: PhantomData,
        }
    }

    /// Another handle to the same queue, reading and writing its values as
    /// `U`: what a replica running other code sees of a shared queue
    /// (values are kept as JSON, as in every store). A rolling deploy is
    /// tested with it: a handle of the new type inserts what a worker of
    /// the old type cannot decode.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::memory::MemoryQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let numbers: MemoryQueue<u64> = MemoryQueue::new("jobs");
    /// let strings: MemoryQueue<String> = numbers.typed();
    /// strings.insert(&"seven".to_owned(), Duration::ZERO).await?;
    /// assert_eq!(numbers.stats().await?.due, 1);
    /// // Never handed out as a u64: a failed attempt, retried later.
    /// assert!(numbers.try_take().await?.is_none());
    /// assert_eq!(strings.take().await?.value(), "seven");
    /// # Ok(()) }
    /// ```
    pub fn typed<U>(&self) -> MemoryQueue<U> {
        MemoryQueue::from_parts(Arc::clone(&self.inner), self.lease, self.rules)
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Arc<str>, Error> {
    serde_json::to_string(value)
        .map(Arc::from)
        .map_err(Error::Encode)
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> MemoryQueue<T> {
    /// The queue `name` with the default settings:
    /// `MemoryQueue::builder(name).build()`.
    ///
    /// # Panics
    ///
    /// As [`MemoryQueueBuilder::build`]: on a name the queue-name rules
    /// refuse, or outside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::memory::MemoryQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let orders: MemoryQueue<u64> = MemoryQueue::new("orders");
    /// assert_eq!(orders.name(), "orders");
    /// # }
    /// ```
    #[track_caller]
    pub fn new(name: &str) -> Self {
        Self::builder(name).build()
    }

    /// A builder for the queue `name`.
    pub fn builder(name: &str) -> MemoryQueueBuilder<T> {
        MemoryQueueBuilder::new(name)
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The queue's clock: the wall time when it was built (or its
    /// `start_at`) plus Tokio's time elapsed since.
    ///
    /// # Errors
    ///
    /// None in memory; `Result` keeps the signature of every store.
    pub async fn now(&self) -> Result<SystemTime, Error> {
        Ok(system_time(self.inner.clock.now_ms()))
    }

    /// Inserts `value`, due `delay` from now, under a new unique id
    /// (`#<n>`), which it returns.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if the value does not serialize.
    ///
    /// # Examples
    ///
    /// ```
    /// # use punctual::memory::MemoryQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let orders: MemoryQueue<u64> = MemoryQueue::new("orders");
    /// let id = orders.insert(&17, Duration::from_secs(30 * 60)).await?;
    /// assert!(orders.deadline(&id).await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn insert(&self, value: &T, delay: Duration) -> Result<String, Error> {
        let value = encode(value)?;
        self.inserted(1);
        let delay = millis(delay);
        Ok(self.inner.write(|state, now, moved| {
            state
                .insert(None, value, now.saturating_add(delay), now, moved)
                .expect("a made id")
        }))
    }

    /// Inserts `value`, due at `at` (a time before the Unix epoch counts as
    /// the epoch), under a new unique id.
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    pub async fn insert_at(&self, value: &T, at: SystemTime) -> Result<String, Error> {
        let value = encode(value)?;
        self.inserted(1);
        let at = ms_of(at);
        Ok(self.inner.write(|state, now, moved| {
            state
                .insert(None, value, at, now, moved)
                .expect("a made id")
        }))
    }

    /// Inserts `value` under the caller's `id`, due `delay` from now. If an
    /// entry with that id is already in the queue (pending, leased or
    /// dead), nothing changes and it returns `Ok(false)`, so a retried
    /// insert never duplicates.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an empty id, one over 512 bytes or one
    /// holding a NUL character; otherwise as [`insert`](Self::insert).
    pub async fn insert_with_id(
        &self,
        id: &str,
        value: &T,
        delay: Duration,
    ) -> Result<bool, Error> {
        check_id(id)?;
        let value = encode(value)?;
        let delay = millis(delay);
        let inserted = self.inner.write(|state, now, moved| {
            state
                .insert(Some(id), value, now.saturating_add(delay), now, moved)
                .is_some()
        });
        self.inserted(u64::from(inserted));
        Ok(inserted)
    }

    /// Inserts many entries at once, all or none, each due its delay from
    /// now, under new unique ids, which it returns in order. Entries with
    /// equal deadlines come out in the order given.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if a value does not serialize (nothing is
    /// inserted).
    pub async fn insert_many(&self, entries: &[(T, Duration)]) -> Result<Vec<String>, Error> {
        let values = entries
            .iter()
            .map(|(value, delay)| Ok((encode(value)?, millis(*delay))))
            .collect::<Result<Vec<_>, Error>>()?;
        self.inserted(values.len() as u64);
        Ok(self.inner.write(|state, now, moved| {
            values
                .into_iter()
                .map(|(value, delay)| {
                    state
                        .insert(None, value, now.saturating_add(delay), now, moved)
                        .expect("a made id")
                })
                .collect()
        }))
    }

    /// Deletes the entry `id`, pending, leased or dead (`true` if it was
    /// there). A consumer already running it is not stopped: its `ack` then
    /// returns `Ok(false)`, so guard the handler's effect where that
    /// matters. A schedule's tick takes its schedule with it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an invalid id.
    pub async fn remove(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        Ok(self
            .inner
            .write(|state, now, moved| state.remove(id, false, now, moved)))
    }

    /// Moves a pending entry to `delay` from now (ordered as if inserted
    /// then); `false` for an entry that is leased, dead or absent.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn reset(&self, id: &str, delay: Duration) -> Result<bool, Error> {
        check_id(id)?;
        let delay = millis(delay);
        Ok(self.inner.write(|state, now, moved| {
            state
                .reset(id, now.saturating_add(delay))
                .map(|m| moved.announce |= m.announce)
                .is_some()
        }))
    }

    /// When the entry `id` is due (the end of its lease while leased), or
    /// `None` if it is absent or dead.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn deadline(&self, id: &str) -> Result<Option<SystemTime>, Error> {
        check_id(id)?;
        Ok(self
            .inner
            .read(|state, _| state.deadline(id))
            .map(system_time))
    }

    /// Waits until an entry is due and takes it under a lease.
    ///
    /// # Errors
    ///
    /// None in memory.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses no entry: a claim and its reply are one
    /// step here, so nothing is leased to a dropped future.
    ///
    /// # Examples
    ///
    /// ```
    /// # use punctual::memory::MemoryQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let orders: MemoryQueue<u64> = MemoryQueue::new("orders");
    /// orders.insert(&17, Duration::from_secs(30 * 60)).await?;
    /// let expired = orders.take().await?; // 30 minutes later (paused time)
    /// assert_eq!((*expired.value(), expired.attempt()), (17, 1));
    /// expired.ack().await?;
    /// # Ok(()) }
    /// ```
    pub async fn take(&self) -> Result<Delivery<T>, Error> {
        let mut taken = self.take_within(1, None).await?;
        Ok(taken.pop().expect("an untimed take returns an entry"))
    }

    /// As [`take`](Self::take), giving up after `timeout` with `Ok(None)`.
    ///
    /// # Errors
    ///
    /// None in memory.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub async fn take_timeout(&self, timeout: Duration) -> Result<Option<Delivery<T>>, Error> {
        let until = deadline_after(Instant::now(), timeout);
        Ok(self.take_within(1, Some(until)).await?.pop())
    }

    /// Takes a due entry if there is one, without waiting.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn try_take(&self) -> Result<Option<Delivery<T>>, Error> {
        loop {
            let batch = Sealed::claim(self, &mut (), 1, &[]).await?;
            if let Some(taken) = batch.taken.into_iter().next() {
                return Ok(Some(self.delivery(taken)));
            }
            if !batch.more_due {
                return Ok(None);
            }
        }
    }

    /// Waits until at least one entry is due, then takes between 1 and
    /// `max` due entries, in order. `max == 0` returns an empty vector at
    /// once; one call takes at most 1024.
    ///
    /// # Errors
    ///
    /// None in memory.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub async fn take_many(&self, max: usize) -> Result<Vec<Delivery<T>>, Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.take_within(max.min(MAX_CLAIM), None).await
    }

    /// A stream of deliveries: [`take`](Self::take) in a loop. It never
    /// ends.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub fn stream(&self) -> impl Stream<Item = Result<Delivery<T>, Error>> + Send + 'static {
        futures::stream::unfold(self.clone(), |queue| async move {
            let next = queue.take().await;
            Some((next, queue))
        })
    }

    /// Counts the queue's entries by state.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn stats(&self) -> Result<MemoryStats, Error> {
        let counts = self.inner.read(|state, now| state.counts(now));
        Ok(MemoryStats {
            pending: counts.pending,
            due: counts.due,
            leased: counts.leased,
            dead: counts.dead,
        })
    }

    /// Up to `max` dead letters, oldest first.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn dead_letters(&self, max: usize) -> Result<Vec<DeadLetter<T>>, Error> {
        Ok(self.inner.read(|state, _| {
            state
                .dead_letters(max)
                .into_iter()
                .map(|(id, e)| DeadLetter {
                    id: id.to_owned(),
                    value: e
                        .value
                        .as_deref()
                        .and_then(|json| serde_json::from_str(json).ok()),
                    attempts: e.attempt,
                    reason: e.reason.clone().unwrap_or_default(),
                })
                .collect()
        }))
    }

    /// Puts the dead letter `id` back as pending, due `delay` from now,
    /// attempts reset to 0; `false` if there is no such dead letter.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn requeue_dead(&self, id: &str, delay: Duration) -> Result<bool, Error> {
        check_id(id)?;
        let delay = millis(delay);
        Ok(self.inner.write(|state, now, moved| {
            state
                .requeue_dead(id, now.saturating_add(delay))
                .map(|m| moved.announce |= m.announce)
                .is_some()
        }))
    }

    /// Deletes every entry and schedule of this queue.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn purge(&self) -> Result<(), Error> {
        self.inner.write(|state, _, _| state.purge());
        Ok(())
    }

    /// Creates or changes the schedule `name`: a tick every `period`, on a
    /// grid anchored at the Unix epoch, `missed` deciding what a late run
    /// does (see the [`durable`](crate::durable) module docs). `true` if it
    /// was created or changed, `false` if the same call was made before.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchedule`] for a zero period or a name taken by an
    /// entry that is not a tick; [`Error::InvalidId`] for a name that breaks
    /// the id rules; [`Error::Encode`] if the value does not serialize.
    pub async fn schedule_every(
        &self,
        name: &str,
        period: Duration,
        missed: MissedTicks,
        value: &T,
    ) -> Result<bool, Error> {
        check_id(name)?;
        let period = period_ms(period).map_err(Error::InvalidSchedule)?;
        self.upsert(name, format!("e,{period},{}", policy(missed)), value)
    }

    /// Creates or changes the schedule `name`: a tick at each instant of the
    /// cron expression `expr` (in UTC, or the zone of a `CRON_TZ=` prefix).
    /// An upsert, as [`schedule_every`](Self::schedule_every).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchedule`] for a bad expression or an unknown zone
    /// (named); otherwise as [`schedule_every`](Self::schedule_every).
    #[cfg(feature = "cron")]
    pub async fn schedule_cron(&self, name: &str, expr: &str, value: &T) -> Result<bool, Error> {
        check_id(name)?;
        if expr.chars().any(char::is_control) {
            return Err(Error::InvalidSchedule(format!(
                "{expr:?}: a cron expression is one line without control characters"
            )));
        }
        crate::cron::CronExpr::parse(expr).map_err(Error::InvalidSchedule)?;
        self.upsert(name, format!("c,{expr}"), value)
    }

    fn upsert(&self, name: &str, rec: String, value: &T) -> Result<bool, Error> {
        let value = encode(value)?;
        let result = self.inner.write(|state, now, moved| {
            let first = || super::ticks::first_tick(&rec, now);
            state.schedule(name, rec.clone(), value, first, moved)
        });
        if result == Ok(true) {
            crate::durable::metrics::inserted("memory", self.name(), "schedule", 1);
        }
        result.map_err(|()| {
            Error::InvalidSchedule(format!(
                "the id `{name}` is taken by an entry that is not a schedule's tick"
            ))
        })
    }

    /// Deletes the schedule `name` and its tick (pending, or leased: then
    /// its ack inserts no successor); `true` if there was one.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn unschedule(&self, name: &str) -> Result<bool, Error> {
        check_id(name)?;
        Ok(self
            .inner
            .write(|state, now, moved| state.remove(name, true, now, moved)))
    }

    /// Every schedule of the queue, by name: its spec, next instant (`None`
    /// while its tick is leased) and value. A schedule whose value does not
    /// decode as `T` is left out.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo<T>>, Error> {
        Ok(self.inner.read(|state, _| {
            state
                .schedules
                .iter()
                .filter_map(|(name, schedule)| {
                    Some(ScheduleInfo {
                        name: name.clone(),
                        spec: spec_of(&schedule.rec),
                        next: state.next_of(name).map(system_time),
                        value: serde_json::from_str(&schedule.value).ok()?,
                        last_run: schedule.last_run.map(system_time),
                        last_outcome: schedule.last_outcome,
                        paused: schedule.paused,
                    })
                })
                .collect()
        }))
    }

    /// One page of the entries in `state`, in delivery order (`Pending`,
    /// `Due`: by due time, FIFO on ties; `Leased`: by lease end; `Dead`:
    /// oldest death first), at most `min(limit, 1000)`, after `cursor`.
    /// Walking the pages visits exactly once every entry that stays in that
    /// state, at the same due time (lease end), during the walk.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a cursor of another queue or state.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::durable::EntryState;
    /// use punctual::memory::MemoryQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let jobs: MemoryQueue<u64> = MemoryQueue::new("jobs");
    /// for n in 0..250 {
    ///     jobs.insert(&n, Duration::from_secs(60)).await?;
    /// }
    /// let mut cursor = None;
    /// let mut seen = 0;
    /// loop {
    ///     let page = jobs.entries(EntryState::Pending, cursor.as_ref(), 100).await?;
    ///     seen += page.entries.len();
    ///     match page.next {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// assert_eq!(seen, 250);
    /// # Ok(()) }
    /// ```
    pub async fn entries(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<T>, Error> {
        self.page_of(state, cursor, limit, false)
    }

    /// One page of `state`'s entries, in its order or (`newest`) backwards.
    pub(crate) fn page_of(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
        newest: bool,
    ) -> Result<Page<T>, Error> {
        let identity = &self.inner.identity;
        let after = match cursor {
            None => None,
            Some(cursor) => {
                let at = if newest {
                    At::of_newest(cursor, identity, state)
                } else {
                    At::of(cursor, identity, state)
                }
                .map_err(Error::InvalidId)?;
                let seq = at.tie.parse().map_err(|_| {
                    Error::InvalidId(format!("cursor {cursor} is not a memory queue's"))
                })?;
                Some((at.score, seq))
            }
        };
        if limit == 0 {
            return Ok(Page {
                entries: Vec::new(),
                next: cursor.cloned(),
            });
        }
        let limit = limit.min(MAX_PAGE);
        let (seen, more) = self
            .inner
            .read(|state_, now| state_.page(state, after, newest, limit, now));
        let next = seen.last().filter(|_| more).map(|last| {
            let (score, tie) = (last.key.0, last.key.1.to_string());
            if newest {
                At::cursor_newest(identity, state, score, &tie)
            } else {
                At::cursor(identity, state, score, &tie)
            }
        });
        Ok(Page {
            entries: seen.into_iter().map(Seen::info).collect(),
            next,
        })
    }

    /// Entry `id` in any state, or `None` if it is absent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an invalid id.
    pub async fn entry(&self, id: &str) -> Result<Option<EntryInfo<T>>, Error> {
        check_id(id)?;
        Ok(self
            .inner
            .read(|state, now| state.entry(id, now))
            .map(Seen::info))
    }

    /// Every dead letter back as pending, due `delay` from now, attempts
    /// reset to 0, in one step; how many.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn requeue_all_dead(&self, delay: Duration) -> Result<u64, Error> {
        let delay = millis(delay);
        Ok(self
            .inner
            .write(|state, now, moved| state.requeue_all_dead(now.saturating_add(delay), moved)))
    }

    /// Deletes every dead letter; how many.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn clear_dead(&self) -> Result<u64, Error> {
        Ok(self.inner.write(|state, now, _| state.clear_dead(now)))
    }

    /// Stops every consumer of the queue from taking anything (`take*`
    /// waits, a `Worker` starts nothing new); what is leased may still be
    /// acked, retried or extended, and inserts, removes, resets and
    /// schedule calls work as usual. `true` if it was running.
    ///
    /// # Errors
    ///
    /// None in memory.
    ///
    /// # Examples
    ///
    /// ```
    /// # use punctual::memory::MemoryQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), punctual::memory::Error> {
    /// let jobs: MemoryQueue<u64> = MemoryQueue::new("jobs");
    /// jobs.insert(&1, Duration::ZERO).await?;
    /// assert!(jobs.pause().await?);
    /// assert!(jobs.try_take().await?.is_none());
    /// assert!(jobs.resume().await?);
    /// assert!(jobs.try_take().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self) -> Result<bool, Error> {
        Ok(self.inner.write(|state, _, _| state.pause()))
    }

    /// Lets consumers take again, waking those waiting at once. `true` if
    /// it was paused.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn resume(&self) -> Result<bool, Error> {
        Ok(self.inner.write(|state, _, moved| state.resume(moved)))
    }

    /// Whether the queue is paused.
    ///
    /// # Errors
    ///
    /// None in memory.
    pub async fn is_paused(&self) -> Result<bool, Error> {
        Ok(self.inner.read(|state, _| state.paused))
    }

    /// Makes schedule `name`'s pending tick due now (its instant becomes
    /// now); the run after it follows the schedule's rule from that
    /// instant. `false` if there is no such schedule or its tick is leased.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a name that breaks the id rules.
    pub async fn run_now(&self, name: &str) -> Result<bool, Error> {
        check_id(name)?;
        Ok(self.inner.write(|state, now, moved| {
            state
                .run_now(name, now)
                .map(|m| moved.announce |= m.announce)
                .is_some()
        }))
    }

    /// Reports `n` entries inserted (`messaging.client.sent.messages`).
    fn inserted(&self, n: u64) {
        crate::durable::metrics::inserted("memory", self.name(), "insert", n);
    }

    async fn take_within(
        &self,
        max: usize,
        until: Option<Instant>,
    ) -> Result<Vec<Delivery<T>>, Error> {
        let taken = take_until(self, max, until).await?;
        Ok(taken
            .into_iter()
            .map(|taken| self.delivery(taken))
            .collect())
    }

    fn delivery(&self, taken: Taken<T, Held>) -> Delivery<T> {
        Delivery::new(Arc::clone(&self.inner), self.rules, taken)
    }
}
