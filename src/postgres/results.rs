//! What the postgres store keeps of finished entries, how it cancels, and
//! its health at a glance (the public methods are written once for every
//! store, in `durable/front.rs`). Each call is one statement of
//! `sql/schema.sql` (`lookup`, `cancel`, `pause_schedule`, `page_newest`,
//! the tables `results`, `workers`, `minutes`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use sqlx::Row as _;
use sqlx::postgres::PgRow;

use super::error::{Error, check_id};
use super::inner::{Looking, Seen, call, cron_instants, millis};
use super::queue::PgQueue;
use crate::durable::health::Record;
use crate::durable::results::{Lookup, Results};
use crate::durable::{At, Cursor, EntryState, Finished, JobResult, MAX_PAGE, Minute, Page};
use crate::lock::Lock;
use tokio::sync::watch;

/// `cancel`'s answer: the successor of a cancelled tick needs the cron
/// instants of its schedule.
const NEEDS_CRON: i32 = -1;

impl<T> PgQueue<T> {
    /// Entry `id`'s kept result.
    pub(crate) async fn read_result(&self, id: &str) -> Result<Option<JobResult>, Error> {
        check_id(id)?;
        let inner = self.inner();
        let row = call!(inner, |conn| {
            sqlx::query(&inner.sql.result)
                .bind(&inner.name)
                .bind(id)
                .fetch_optional(conn)
        })?;
        row.map(|row| result_of(id, &row)).transpose()
    }

    /// Cancels entry `id`; whether there was one.
    pub(crate) async fn cancel_entry(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        let inner = self.inner();
        let mut cands = String::new();
        // A cron tick's successor may need this process's instants: at most
        // a few rounds (the clock moves on between them).
        for _ in 0..8 {
            let row = call!(inner, |conn| {
                sqlx::query(&inner.sql.cancel)
                    .bind(&inner.name)
                    .bind(&inner.channel)
                    .bind(id)
                    .bind(millis(inner.lease).max(1))
                    .bind(inner.keep)
                    .bind(&cands)
                    .fetch_one(conn)
            })?;
            let result: i32 = row.try_get("result")?;
            if result != NEEDS_CRON {
                return Ok(result > 0);
            }
            let from: i64 = row.try_get("cron_from")?;
            let rec: String = row.try_get("rec")?;
            cands = cron_instants(&rec, from, 2)?;
        }
        Err(Error::Unsupported(format!(
            "the next instant of schedule `{id}` did not settle"
        )))
    }

    /// The live workers.
    pub(crate) async fn read_workers(&self) -> Result<Vec<crate::durable::WorkerInfo>, Error> {
        let inner = self.inner();
        let rows = call!(inner, |conn| {
            sqlx::query(&inner.sql.workers)
                .bind(&inner.name)
                .fetch_all(conn)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let record: String = row.try_get("record")?;
            let (first, last, now): (i64, i64, i64) = (
                row.try_get("first")?,
                row.try_get("last")?,
                row.try_get("now")?,
            );
            let ms = |ms: i64| u64::try_from(ms).unwrap_or(0);
            if let Some(info) =
                Record::from_json(&record).and_then(|r| r.info(ms(first), ms(last), ms(now)))
            {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The minutes with events since `since` (ms).
    pub(crate) async fn read_history(&self, since: u64) -> Result<Vec<Minute>, Error> {
        let inner = self.inner();
        let rows = call!(inner, |conn| {
            sqlx::query(&inner.sql.history)
                .bind(&inner.name)
                .bind(i64::try_from(since).unwrap_or(i64::MAX))
                .fetch_all(conn)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let count = |name: &str| -> Result<u64, Error> {
                Ok(u64::try_from(row.try_get::<i64, _>(name)?).unwrap_or(0))
            };
            let minute = Minute {
                at: UNIX_EPOCH + Duration::from_millis(count("at")?),
                inserted: count("inserted")?,
                done: count("done")?,
                failed: count("failed")?,
                dead: count("dead")?,
            };
            if minute.inserted + minute.done + minute.failed + minute.dead > 0 {
                out.push(minute);
            }
        }
        Ok(out)
    }

    /// How long the oldest due entry has waited: the queue's head (one
    /// index probe of the plain entries and one of the special ones), if
    /// it is due.
    pub(crate) async fn read_latency(&self) -> Result<Option<Duration>, Error> {
        let inner = self.inner();
        let row = call!(inner, |conn| {
            sqlx::query(&inner.sql.latency)
                .bind(&inner.name)
                .fetch_one(conn)
        })?;
        let now: i64 = row.try_get("now")?;
        let head: Option<i64> = row.try_get("head")?;
        Ok(head
            .filter(|head| *head <= now)
            .map(|head| Duration::from_millis(u64::try_from(now - head).unwrap_or(0))))
    }

    /// Pauses or resumes schedule `name`; whether it changed.
    pub(crate) async fn put_schedule_paused(&self, name: &str, pause: bool) -> Result<bool, Error> {
        check_id(name)?;
        let inner = self.inner();
        let changed: i32 = call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.pause_schedule)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(name)
                .bind(pause)
                .fetch_one(conn)
        })?;
        Ok(changed == 1)
    }
}

impl<T: DeserializeOwned> PgQueue<T> {
    /// A page of `state`'s entries, newest first (`page_newest`: the
    /// indexes of `page`, walked backwards).
    pub(crate) async fn newest_page(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<T>, Error> {
        let (score, seq) = match cursor {
            None => (i64::MAX, i64::MAX),
            Some(cursor) => {
                let at = At::of_newest(cursor, &self.inner().identity, state)
                    .map_err(Error::InvalidId)?;
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
        let inner = self.inner();
        let rows = call!(inner, |conn| {
            sqlx::query(&inner.sql.page_newest)
                .bind(&inner.name)
                .bind(super::operations::state_code(state))
                .bind(score)
                .bind(seq)
                .bind(i32::try_from(limit + 1).unwrap_or(i32::MAX))
                .fetch_all(conn)
        })?;
        let (entries, last) = super::operations::page_rows(rows, state, limit)?;
        let next = last.map(|(score, seq)| {
            At::cursor_newest(
                &inner.identity,
                state,
                u64::try_from(score).unwrap_or(0),
                &seq.to_string(),
            )
        });
        Ok(Page { entries, next })
    }
}

/// A row of `results` (or of `lookup`) as a [`JobResult`].
fn result_of(id: &str, row: &PgRow) -> Result<JobResult, Error> {
    let state: String = row.try_get("state")?;
    let at: i64 = row.try_get("at")?;
    let attempts: i32 = row.try_get("attempts")?;
    let output: Option<String> = row.try_get("output")?;
    let reason: Option<String> = row.try_get("reason")?;
    Ok(JobResult::kept(
        id,
        Finished::of_code(&state).unwrap_or(Finished::Done),
        u64::try_from(at).unwrap_or(0),
        u32::try_from(attempts).unwrap_or(0),
        output.as_deref(),
        reason,
    ))
}

impl<T: Send + Sync> Results for PgQueue<T> {
    type Failure = Error;

    /// One statement (`lookup`): the kept result, or whether a live entry
    /// has the id; while one does, the id is looked for (table `waits`), so
    /// that its finish notifies it. The waiters of one id share a lookup
    /// sent since the last push they may have heard: a push that wakes a
    /// thousand waiters of one id costs one statement, not a thousand.
    async fn lookup(&self, id: &str) -> Result<Lookup, Error> {
        check_id(id)?;
        let inner = self.inner();
        // A lookup sent after the count read here sees every finish pushed
        // before (the listener counts a push before it sends it, and hears
        // it after the finish committed).
        let pushed = inner.pushes.load(Ordering::SeqCst);
        let leading = {
            let mut lookups = inner.lookups.lock();
            match lookups.get(id) {
                Some((sent, answer)) if *sent >= pushed => Err(answer.clone()),
                _ => {
                    let (tell, answer) = watch::channel(None);
                    lookups.insert(id.to_owned(), (pushed, answer.clone()));
                    Ok(Leading {
                        lookups: &inner.lookups,
                        id,
                        mine: answer,
                        tell,
                    })
                }
            }
        };
        match leading {
            Ok(leading) => {
                let seen = self.look(id).await;
                if let Ok(seen) = &seen {
                    leading.tell.send_replace(Some(seen.clone()));
                }
                seen.map(lookup_of)
            }
            Err(mut answer) => {
                let shared = answer
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|seen| seen.clone());
                match shared {
                    Some(seen) => Ok(lookup_of(seen)),
                    // Its lookup failed or was given up: look alone.
                    None => self.look(id).await.map(lookup_of),
                }
            }
        }
    }

    /// The ids the handle's `LISTEN` task hears finish (it starts here if
    /// it has not yet).
    fn finishes(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.listen();
        self.inner().finishes.subscribe()
    }

    /// The poll interval: a push lost (the listener reconnecting, a finish
    /// committed beside the lookup that registered the wait) costs at most
    /// that.
    fn recheck_every(&self) -> Duration {
        self.inner().poll_interval
    }
}

impl<T: Send + Sync> PgQueue<T> {
    /// One `lookup` statement of `wait`.
    async fn look(&self, id: &str) -> Result<Seen, Error> {
        let inner = self.inner();
        // Looked for a little longer than a waiter goes without looking.
        let wait = millis(self.recheck_every()).saturating_add(5000);
        let row = call!(inner, |conn| {
            sqlx::query(&inner.sql.lookup)
                .bind(&inner.name)
                .bind(id)
                .bind(wait)
                .fetch_one(conn)
        })?;
        if row.try_get::<Option<String>, _>("state")?.is_some() {
            return Ok(Seen::Finished(result_of(id, &row)?));
        }
        Ok(if row.try_get("live")? {
            Seen::Live
        } else {
            Seen::Unknown
        })
    }
}

fn lookup_of(seen: Seen) -> Lookup {
    match seen {
        Seen::Finished(result) => Lookup::Finished(result),
        Seen::Live => Lookup::Live,
        Seen::Unknown => Lookup::Unknown,
    }
}

/// The lookup of an id that other waiters of it may share: once answered,
/// or given up (dropped), it is no longer offered to them.
struct Leading<'a> {
    lookups: &'a Lock<HashMap<String, Looking>>,
    id: &'a str,
    mine: watch::Receiver<Option<Seen>>,
    tell: watch::Sender<Option<Seen>>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut lookups = self.lookups.lock();
        if lookups
            .get(self.id)
            .is_some_and(|(_, answer)| answer.same_channel(&self.mine))
        {
            lookups.remove(self.id);
        }
    }
}
