//! [`PgQueue`]: the producer, consumer and inspection calls.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::Stream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::{PgConnection, PgExecutor, Row};
use tokio::time::Instant;

use super::builder::PgQueueBuilder;
use super::delivery::Delivery;
use super::error::{Error, check_id};
use super::inner::{Attempt, Failed, Inner, Put, call, millis, on_callers, system_time};
use super::{DeadLetter, PgStats};
use crate::durable::store::{Sealed, Taken};
use crate::durable::take::{Abandon, take_until};
use crate::durable::wait::Backoff;
use crate::queue::deadline_after;

/// A delay queue kept in PostgreSQL, shared by every process that opens it.
/// See the [module docs](super).
///
/// Cloning gives another handle to the same queue: clones share the pool
/// and the waiter.
pub struct PgQueue<T> {
    inner: Arc<Inner>,
    _values: PhantomData<fn() -> T>,
}

impl<T> Clone for PgQueue<T> {
    fn clone(&self) -> Self {
        PgQueue {
            inner: Arc::clone(&self.inner),
            _values: PhantomData,
        }
    }
}

impl<T> fmt::Debug for PgQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgQueue")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("max_attempts", &self.inner.max_attempts)
            .field("poll_interval", &self.inner.poll_interval)
            .finish_non_exhaustive()
    }
}

impl<T> PgQueue<T> {
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        PgQueue {
            inner: Arc::new(inner),
            _values: PhantomData,
        }
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> PgQueue<T> {
    /// Connects to the database at `url` and opens the queue `name`, with
    /// the default settings: `PgQueue::builder(name).url(url).build()`.
    ///
    /// # Errors
    ///
    /// As [`PgQueueBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::postgres::PgQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let orders: PgQueue<u64> = PgQueue::connect("postgres://localhost/shop", "orders").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, name: &str) -> Result<Self, Error> {
        Self::builder(name).url(url).build().await
    }

    /// A builder for the queue `name`.
    pub fn builder(name: &str) -> PgQueueBuilder<T> {
        PgQueueBuilder::new(name)
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The database's clock (`clock_timestamp()`), which decides what is
    /// due.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::postgres::PgQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let orders: PgQueue<u64> = PgQueue::connect("postgres://localhost/shop", "orders").await?;
    /// println!("the database's clock reads {:?}", orders.now().await?);
    /// # Ok(()) }
    /// ```
    pub async fn now(&self) -> Result<SystemTime, Error> {
        let ms: i64 = call!(&self.inner, |conn| {
            sqlx::query_scalar(&self.inner.sql.now).fetch_one(conn)
        })?;
        Ok(system_time(ms))
    }

    /// Inserts `value`, due `delay` from now (the database's clock), under a
    /// new unique id, which it returns.
    ///
    /// Inserts made on this handle (and its clones) while another is on its
    /// way wait for it and go to the database together, in one statement
    /// and transaction, each with its own answer (see
    /// [How it works](crate::postgres#how-it-works)); now is then when that
    /// statement runs.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if the value does not serialize; [`Error::Database`]
    /// if the database cannot be reached (the insert may still have
    /// happened if the connection broke after it was sent).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::postgres::PgQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// # let orders: PgQueue<u64> = PgQueue::connect("postgres://localhost/shop", "orders").await?;
    /// let id = orders.insert(&17, Duration::from_secs(30 * 60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn insert(&self, value: &T, delay: Duration) -> Result<String, Error> {
        let (_, id) = self.put_batched(None, value, false, millis(delay)).await?;
        Ok(id)
    }

    /// Inserts `value`, due at `at` (a time before the Unix epoch counts as
    /// the epoch), under a new unique id.
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    pub async fn insert_at(&self, value: &T, at: SystemTime) -> Result<String, Error> {
        let at = at.duration_since(UNIX_EPOCH).map_or(0, millis);
        let (_, id) = self.put_batched(None, value, true, at).await?;
        Ok(id)
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
        let (inserted, _) = self
            .put_batched(Some(id), value, false, millis(delay))
            .await?;
        Ok(inserted)
    }

    /// As [`insert`](Self::insert), inside the caller's transaction (or on
    /// any connection of theirs): the entry exists if and only if that
    /// transaction commits, and waiting consumers are woken at the commit.
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert); a database error aborts the caller's
    /// transaction, as any failed statement does.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::postgres::PgQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// # let pool = punctual::postgres::sqlx::PgPool::connect("postgres://localhost/shop").await?;
    /// let expiries: PgQueue<i64> = PgQueue::builder("expiries").pool(pool.clone()).build().await?;
    /// let mut tx = pool.begin().await?;
    /// let order: i64 = punctual::postgres::sqlx::query_scalar(
    ///     "INSERT INTO orders (state) VALUES ('unpaid') RETURNING id")
    ///     .fetch_one(&mut *tx).await?;
    /// // The order and its expiry in 30 minutes, or neither.
    /// expiries.insert_in(&mut tx, &order, Duration::from_secs(30 * 60)).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn insert_in(
        &self,
        tx: &mut PgConnection,
        value: &T,
        delay: Duration,
    ) -> Result<String, Error> {
        let put = self.put(tx, None, value, false, millis(delay));
        let (_, id) = on_callers(self.inner.response_timeout, put).await?;
        Ok(id)
    }

    /// As [`insert_with_id`](Self::insert_with_id), inside the caller's
    /// transaction (see [`insert_in`](Self::insert_in)).
    ///
    /// # Errors
    ///
    /// As [`insert_with_id`](Self::insert_with_id).
    pub async fn insert_with_id_in(
        &self,
        tx: &mut PgConnection,
        id: &str,
        value: &T,
        delay: Duration,
    ) -> Result<bool, Error> {
        check_id(id)?;
        let put = self.put(tx, Some(id), value, false, millis(delay));
        let (inserted, _) = on_callers(self.inner.response_timeout, put).await?;
        Ok(inserted)
    }

    /// One insert, sent alone or with the inserts of this handle made
    /// while another request of them is on its way (see
    /// `durable/batch.rs`), each in its own transaction or all of them in
    /// one.
    async fn put_batched(
        &self,
        id: Option<&str>,
        value: &T,
        absolute: bool,
        ms: i64,
    ) -> Result<(bool, String), Error> {
        let json = serde_json::to_string(value).map_err(Error::Encode)?;
        let put = Put {
            id: id.map(str::to_owned),
            json,
            absolute,
            ms,
            trace: crate::durable::trace::current(),
        };
        let inner = Arc::clone(&self.inner);
        let send = move |puts: Vec<Put>| {
            let inner = Arc::clone(&inner);
            async move { inner.insert_batch(puts).await }
        };
        match self
            .inner
            .inserts
            .call(put, send, || Failed::Error(lost_insert()))
            .await
        {
            Ok(done) => Ok(done),
            Err(Failed::Error(error)) => Err(error),
            // Its batch failed with the database's own error (nothing
            // applied): sent alone, it gets its own.
            Err(Failed::Alone) => {
                call!(&self.inner, |conn| self.put(conn, id, value, absolute, ms))
            }
        }
    }

    async fn put<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        id: Option<&str>,
        value: &T,
        absolute: bool,
        ms: i64,
    ) -> Result<(bool, String), Error> {
        let json = serde_json::to_string(value).map_err(Error::Encode)?;
        let made: Option<String> = sqlx::query_scalar(&self.inner.sql.insert)
            .bind(&self.inner.name)
            .bind(&self.inner.channel)
            .bind(id)
            .bind(json)
            .bind(absolute)
            .bind(ms)
            .bind(crate::durable::trace::current())
            .fetch_one(executor)
            .await?;
        // NULL: the caller's id was taken.
        let inserted = made.is_some();
        crate::durable::metrics::inserted(
            "postgres",
            &self.inner.name,
            "insert",
            u64::from(inserted),
        );
        Ok(match made {
            Some(id) => (true, id),
            None => (false, id.unwrap_or_default().to_owned()),
        })
    }

    /// Deletes the entry `id`, pending, leased or dead (`true` if it was
    /// there). A schedule's tick takes its schedule with it.
    ///
    /// `true` means the entry was there and is gone: it is never delivered
    /// again. It does not stop a handler already under way: a consumer that
    /// took the entry before (it was leased) may still be running its
    /// handler, whose [`ack`](crate::postgres::Delivery::ack) then returns
    /// `Ok(false)`. A [`Worker`](crate::durable::Worker) drops such a handler
    /// at its next await once a lease extension finds the entry gone, which
    /// may be after the handler did its work. So guard the effect in the
    /// handler itself: expire an order only if it is still unpaid, in one
    /// conditional `UPDATE ... WHERE id = $1 AND status = 'unpaid'` that
    /// succeeds whether or not it changed the row (see
    /// `examples/pg_orders.rs`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an invalid id; [`Error::Database`] if the
    /// database cannot be reached.
    pub async fn remove(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        call!(&self.inner, |conn| self.remove_on(conn, id, false))
    }

    /// As [`remove`](Self::remove), inside the caller's transaction: the
    /// entry is gone if and only if it commits.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn remove_in(&self, tx: &mut PgConnection, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        on_callers(self.inner.response_timeout, self.remove_on(tx, id, false)).await
    }

    pub(crate) async fn remove_on<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        id: &str,
        tick_only: bool,
    ) -> Result<bool, Error> {
        Ok(sqlx::query_scalar(&self.inner.sql.remove)
            .bind(&self.inner.name)
            .bind(&self.inner.channel)
            .bind(id)
            .bind(tick_only)
            .fetch_one(executor)
            .await?)
    }

    /// Moves a pending entry to `delay` from now (ordered as if inserted
    /// then); `false` for an entry that is leased, dead or absent.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn reset(&self, id: &str, delay: Duration) -> Result<bool, Error> {
        check_id(id)?;
        Ok(call!(&self.inner, |conn| {
            sqlx::query_scalar(&self.inner.sql.reset)
                .bind(&self.inner.name)
                .bind(&self.inner.channel)
                .bind(id)
                .bind(millis(delay))
                .bind(false)
                .fetch_one(conn)
        })?)
    }

    /// When the entry `id` is due (the end of its lease while leased), or
    /// `None` if it is absent or dead.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn deadline(&self, id: &str) -> Result<Option<SystemTime>, Error> {
        check_id(id)?;
        let at: Option<i64> = call!(&self.inner, |conn| {
            sqlx::query_scalar(&self.inner.sql.deadline)
                .bind(&self.inner.name)
                .bind(id)
                .fetch_optional(conn)
        })?;
        Ok(at.map(system_time))
    }

    /// Waits until an entry is due and takes it under a lease.
    ///
    /// # Errors
    ///
    /// Only for errors a retry cannot fix (a failed login, a missing
    /// table); a lost connection or a restarting server is retried with
    /// capped back-off and reported through `tracing`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses no entry: an entry it had claimed but not
    /// returned is given back by the handle's next claim or finish (no
    /// attempt counted), or else delivered again when its lease runs out.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::postgres::PgQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let orders: PgQueue<u64> = PgQueue::connect("postgres://localhost/shop", "orders").await?;
    /// loop {
    ///     let delivery = orders.take().await?;
    ///     println!("order {} expired", delivery.value());
    ///     delivery.ack().await?;
    /// }
    /// # }
    /// ```
    pub async fn take(&self) -> Result<Delivery<T>, Error> {
        let mut taken = self.take_within(1, None).await?;
        Ok(taken.pop().expect("an untimed take returns an entry"))
    }

    /// As [`take`](Self::take), giving up after `timeout` with `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub async fn take_timeout(&self, timeout: Duration) -> Result<Option<Delivery<T>>, Error> {
        let until = deadline_after(Instant::now(), timeout);
        let mut taken = self.take_within(1, Some(until)).await?;
        Ok(taken.pop())
    }

    /// Takes a due entry if there is one, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub async fn try_take(&self) -> Result<Option<Delivery<T>>, Error> {
        let mut pending = Abandon(self, Attempt::new());
        loop {
            let mut batch = Sealed::claim(self, &mut pending.1, 1, &[]).await?;
            if let Some(taken) = batch.taken.pop() {
                return Ok(Some(self.delivery(taken)));
            }
            if !batch.more_due {
                return Ok(None);
            }
            pending.1 = Attempt::new();
        }
    }

    /// Waits until at least one entry is due, then takes between 1 and `max`
    /// due entries, in order, in one round trip. `max == 0` returns an empty
    /// vector at once; one call takes at most 1024, however large `max` is.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    pub async fn take_many(&self, max: usize) -> Result<Vec<Delivery<T>>, Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let max = max.min(crate::durable::store::MAX_CLAIM);
        self.take_within(max, None).await
    }

    /// A stream of deliveries: [`take`](Self::take) in a loop. It never
    /// ends: an error is yielded and the stream goes on, after a pause that
    /// grows (20 ms, 40 ms, ... up to 1 s) while errors repeat.
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take): dropping the stream (or a `next()` future)
    /// loses no entry.
    pub fn stream(&self) -> impl Stream<Item = Result<Delivery<T>, Error>> + Send + 'static {
        let failing = Backoff::default();
        futures::stream::unfold((self.clone(), failing), |(queue, mut failing)| async move {
            if failing.failed() {
                // Not a busy loop on an error that the next take repeats.
                tokio::time::sleep(failing.next()).await;
            }
            let next = queue.take().await;
            match next {
                Ok(_) => failing.reset(),
                Err(_) => failing.fail(),
            }
            Some((next, (queue, failing)))
        })
    }

    /// Counts the queue's entries by state, on the database's clock.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn stats(&self) -> Result<PgStats, Error> {
        let row = call!(&self.inner, |conn| {
            sqlx::query(&self.inner.sql.stats)
                .bind(&self.inner.name)
                .fetch_one(conn)
        })?;
        let count = |column: &str| -> Result<u64, Error> {
            let n: i64 = row.try_get(column)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(PgStats {
            pending: count("pending")?,
            due: count("due")?,
            leased: count("leased")?,
            dead: count("dead")?,
        })
    }

    /// Up to `max` dead letters, oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn dead_letters(&self, max: usize) -> Result<Vec<DeadLetter<T>>, Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let rows = call!(&self.inner, |conn| {
            sqlx::query(&self.inner.sql.dead_letters)
                .bind(&self.inner.name)
                .bind(i64::try_from(max).unwrap_or(i64::MAX))
                .fetch_all(conn)
        })?;
        rows.into_iter()
            .map(|row| {
                let value: String = row.try_get("value")?;
                let attempts: i32 = row.try_get("attempt")?;
                let reason: Option<String> = row.try_get("reason")?;
                Ok(DeadLetter {
                    id: row.try_get("id")?,
                    value: serde_json::from_str(&value).ok(),
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    reason: reason.unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Puts the dead letter `id` back as pending, due `delay` from now,
    /// attempts reset to 0; `false` if there is no such dead letter.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn requeue_dead(&self, id: &str, delay: Duration) -> Result<bool, Error> {
        check_id(id)?;
        Ok(call!(&self.inner, |conn| {
            sqlx::query_scalar(&self.inner.sql.requeue_dead)
                .bind(&self.inner.name)
                .bind(&self.inner.channel)
                .bind(id)
                .bind(millis(delay))
                .fetch_one(conn)
        })?)
    }

    /// Deletes every entry and schedule of this queue (other queues of the
    /// schema are untouched).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn purge(&self) -> Result<(), Error> {
        call!(&self.inner, |conn| {
            sqlx::query(&self.inner.sql.purge)
                .bind(&self.inner.name)
                .execute(conn)
        })?;
        Ok(())
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

    fn delivery(&self, taken: Taken<T, super::inner::Held>) -> Delivery<T> {
        Delivery::new(Arc::clone(&self.inner), taken)
    }
}

/// The error of an insert whose request could not be sent or whose answer
/// was lost (it may have applied).
fn lost_insert() -> Error {
    Error::Database(sqlx::Error::Io(std::io::Error::other(
        "the request carrying this insert was lost; it may have applied",
    )))
}
