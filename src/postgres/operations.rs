//! Looking into and acting on a [`PgQueue`]: entries by state a page at a
//! time (`page` in `sql/schema.sql`), one entry, pause and resume, run a
//! schedule now, the dead letters all at once.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row as _;

use super::error::{Error, check_id};
use super::inner::{call, millis, system_time};
use super::queue::PgQueue;
use crate::durable::{At, AttemptError, Cursor, EntryInfo, EntryState, MAX_PAGE, Page, Row};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> PgQueue<T> {
    /// One page of the entries in `state`, in delivery order (`Pending`,
    /// `Due`: by due time, FIFO on ties; `Leased`: by lease end; `Dead`:
    /// oldest death first), at most `min(limit, 1000)`, after `cursor`.
    /// Walking the pages visits exactly once every entry that stays in that
    /// state, at the same due time (lease end), during the walk. One page is
    /// one statement, an index range scan (`entries_leased`, `entries_dead`)
    /// or two merged (`entries_plain` and `entries_special`, for the due and
    /// the pending entries): O(limit + log n).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a cursor of another queue or state;
    /// [`Error::Database`] if the database cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::durable::EntryState;
    /// use punctual::postgres::PgQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let jobs: PgQueue<String> = PgQueue::connect("postgres://localhost/shop", "jobs").await?;
    /// let page = jobs.entries(EntryState::Dead, None, 50).await?;
    /// for dead in &page.entries {
    ///     println!("{}: {:?}", dead.id, dead.last_error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn entries(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<T>, Error> {
        let (score, seq) = match cursor {
            None => (-1, -1),
            Some(cursor) => {
                let at = At::of(cursor, &self.inner().identity, state).map_err(Error::InvalidId)?;
                let seq: i64 = at.tie.parse().map_err(|_| {
                    Error::InvalidId(format!("cursor {cursor} is not a PostgreSQL queue's"))
                })?;
                (i64::try_from(at.score).unwrap_or(i64::MAX), seq)
            }
        };
        if limit == 0 {
            return Ok(Page {
                entries: Vec::new(),
                next: cursor.cloned(),
            });
        }
        let limit = limit.min(MAX_PAGE);
        let code = state_code(state);
        let inner = self.inner();
        let rows = call!(inner, |conn| {
            sqlx::query(&inner.sql.page)
                .bind(&inner.name)
                .bind(code)
                .bind(score)
                .bind(seq)
                .bind(i32::try_from(limit + 1).unwrap_or(i32::MAX))
                .fetch_all(conn)
        })?;
        let (entries, last) = page_rows(rows, state, limit)?;
        let next = last.map(|(score, seq)| {
            At::cursor(
                &self.inner().identity,
                state,
                u64::try_from(score).unwrap_or(0),
                &seq.to_string(),
            )
        });
        Ok(Page { entries, next })
    }

    /// Entry `id` in any state, or `None` if it is absent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an invalid id; [`Error::Database`] if the
    /// database cannot be reached.
    pub async fn entry(&self, id: &str) -> Result<Option<EntryInfo<T>>, Error> {
        check_id(id)?;
        let inner = self.inner();
        let row = call!(inner, |conn| {
            sqlx::query(&inner.sql.entry)
                .bind(&inner.name)
                .bind(id)
                .fetch_optional(conn)
        })?;
        let Some(row) = row else {
            return Ok(None);
        };
        let now: i64 = row.try_get("now")?;
        let run_at: Option<i64> = row.try_get("run_at")?;
        let died_at: Option<i64> = row.try_get("died_at")?;
        let leased: bool = row.try_get("leased")?;
        let (state, score) = match run_at {
            None => (EntryState::Dead, died_at.unwrap_or(0)),
            Some(at) if at <= now => (EntryState::Due, at),
            Some(at) if leased => (EntryState::Leased, at),
            Some(at) => (EntryState::Pending, at),
        };
        let attempt: i32 = row.try_get("attempt")?;
        let deadline: Option<i64> = row.try_get("deadline")?;
        let info = Row {
            id: id.to_owned(),
            state,
            score: u64::try_from(score).unwrap_or(0),
            deadline: deadline.and_then(|d| u64::try_from(d).ok()),
            attempt: u32::try_from(attempt).unwrap_or(0),
            tick: row.try_get("tick")?,
            reason: row.try_get("reason")?,
            value: row.try_get("value")?,
            key: row.try_get("key")?,
            priority: row.try_get("priority")?,
        }
        .info();
        Ok(Some(health(
            info,
            row.try_get("schedule")?,
            row.try_get("errors")?,
            row.try_get("since")?,
            row.try_get("token")?,
        )))
    }

    /// Puts every dead letter back as pending, due `delay` from now,
    /// attempts reset to 0, in their order of death, in one statement; how
    /// many.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn requeue_all_dead(&self, delay: Duration) -> Result<u64, Error> {
        self.dead_all(true, delay).await
    }

    /// Deletes every dead letter, in one statement; how many.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn clear_dead(&self) -> Result<u64, Error> {
        self.dead_all(false, Duration::ZERO).await
    }

    async fn dead_all(&self, requeue: bool, delay: Duration) -> Result<u64, Error> {
        let inner = self.inner();
        let n: i64 = call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.dead_all)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(requeue)
                .bind(millis(delay))
                .fetch_one(conn)
        })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Stops every consumer of the queue, in every process, from taking
    /// anything (`take*` waits, a `Worker` starts nothing new): it waits
    /// for the claims running now, and every claim after it leases nothing;
    /// what is leased may still be acked, retried or extended, and inserts,
    /// removes, resets and schedule calls work as usual. Kept in the table
    /// `<schema>.queues` (it survives restarts). `true` if it was running.
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
    /// let mails: PgQueue<String> = PgQueue::connect("postgres://localhost/shop", "mails").await?;
    /// // A bad deploy sends broken e-mails: stop every consumer now.
    /// mails.pause().await?;
    /// // ... fix, deploy ...
    /// mails.resume().await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self) -> Result<bool, Error> {
        self.set_paused(true).await
    }

    /// Lets consumers take again, waking those waiting at once (a
    /// `NOTIFY`). `true` if it was paused.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn resume(&self) -> Result<bool, Error> {
        self.set_paused(false).await
    }

    async fn set_paused(&self, paused: bool) -> Result<bool, Error> {
        let inner = self.inner();
        call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.pause)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(paused)
                .fetch_one(conn)
        })
    }

    /// Whether the queue is paused.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn is_paused(&self) -> Result<bool, Error> {
        let inner = self.inner();
        call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.paused)
                .bind(&inner.name)
                .fetch_one(conn)
        })
    }

    /// Makes schedule `name`'s pending tick due now (its instant becomes
    /// the database's now); the run after it follows the schedule's rule
    /// from that instant. `false` if there is no such schedule or its tick
    /// is leased.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a name that breaks the id rules;
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn run_now(&self, name: &str) -> Result<bool, Error> {
        check_id(name)?;
        let inner = self.inner();
        call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.reset)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(name)
                .bind(0_i64)
                .bind(true)
                .fetch_one(conn)
        })
    }
}

/// The code of `state` in `page` and `page_newest`.
pub(crate) fn state_code(state: EntryState) -> &'static str {
    match state {
        EntryState::Pending => "p",
        EntryState::Due => "d",
        EntryState::Leased => "l",
        EntryState::Dead => "x",
    }
}

/// A page's entries, and the place (score, seq) of its last entry if more
/// follow.
pub(crate) type PageRows<T> = (Vec<EntryInfo<T>>, Option<(i64, i64)>);

/// The entries of a page's rows (`limit + 1` asked for), and the place of
/// its last entry if more follow.
pub(crate) fn page_rows<T: DeserializeOwned>(
    rows: Vec<sqlx::postgres::PgRow>,
    state: EntryState,
    limit: usize,
) -> Result<PageRows<T>, Error> {
    let more = rows.len() > limit;
    let mut entries = Vec::with_capacity(limit.min(rows.len()));
    let mut last = None;
    for row in rows.into_iter().take(limit) {
        let score: i64 = row.try_get("o_score")?;
        let seq: i64 = row.try_get("o_seq")?;
        last = Some((score, seq));
        let attempt: i32 = row.try_get("o_attempt")?;
        let deadline: Option<i64> = row.try_get("o_deadline")?;
        let info = Row {
            id: row.try_get("o_id")?,
            state,
            score: u64::try_from(score).unwrap_or(0),
            deadline: deadline.and_then(|d| u64::try_from(d).ok()),
            attempt: u32::try_from(attempt).unwrap_or(0),
            tick: row.try_get("o_tick")?,
            reason: row.try_get("o_reason")?,
            value: row.try_get("o_value")?,
            key: row.try_get("o_key")?,
            priority: row.try_get("o_priority")?,
        }
        .info();
        entries.push(health(
            info,
            row.try_get("o_schedule")?,
            row.try_get("o_errors")?,
            row.try_get("o_since")?,
            row.try_get("o_token")?,
        ));
    }
    Ok((entries, last.filter(|_| more)))
}

/// `info` with what health shows of it: a dead tick's schedule, its failed
/// attempts (`errors`, JSON `[[attempt, at, reason], ...]`), and, leased,
/// when its delivery began and the worker that holds it (named by the
/// lease's token).
fn health<T>(
    mut info: EntryInfo<T>,
    schedule: Option<String>,
    errors: Option<String>,
    since: Option<i64>,
    token: Option<String>,
) -> EntryInfo<T> {
    if schedule.is_some() {
        info.schedule = schedule;
    }
    if info.state == EntryState::Leased {
        info.started_at = since.map(system_time);
        info.worker = token
            .as_deref()
            .and_then(super::inner::worker_of)
            .map(str::to_owned);
    }
    if let Some(errors) = errors {
        let read: Vec<(u32, i64, String)> = serde_json::from_str(&errors).unwrap_or_default();
        info.errors = read
            .into_iter()
            .map(|(attempt, at, reason)| AttemptError {
                attempt,
                at: system_time(at),
                reason,
            })
            .collect();
    }
    info
}
