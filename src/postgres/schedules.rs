//! Batches and recurring schedules on a [`PgQueue`]: `insert_many`,
//! `schedule_every`, `schedule_cron`, `unschedule`, `schedules`.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;

use super::error::{Error, check_id};
use super::inner::{call, cron_instants, millis, system_time};
use super::queue::PgQueue;
use crate::MissedTicks;
use crate::durable::{ScheduleInfo, period_ms, policy, spec_of};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> PgQueue<T> {
    /// Inserts many entries in one statement, all or none: each `(value,
    /// delay)` under a new id, due `delay` from now (one clock reading for
    /// the batch). Returns the ids in order; an empty slice is `Ok(vec![])`
    /// at once.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if a value does not serialize (nothing is sent);
    /// [`Error::Database`] if the database cannot be reached (then nothing
    /// or everything was inserted).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::postgres::PgQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let reminders: PgQueue<String> = PgQueue::connect("postgres://localhost/shop", "reminders").await?;
    /// let ids = reminders
    ///     .insert_many(&[("a".into(), Duration::from_secs(60)), ("b".into(), Duration::ZERO)])
    ///     .await?;
    /// assert_eq!(ids.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn insert_many(&self, entries: &[(T, Duration)]) -> Result<Vec<String>, Error> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let values = entries
            .iter()
            .map(|(value, _)| serde_json::to_string(value).map_err(Error::Encode))
            .collect::<Result<Vec<_>, _>>()?;
        let delays: Vec<i64> = entries.iter().map(|(_, delay)| millis(*delay)).collect();
        let inner = self.inner();
        let ids: Vec<String> = call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.insert_many)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(&values)
                .bind(&delays)
                .bind(crate::durable::trace::current())
                .fetch_one(conn)
        })?;
        crate::durable::metrics::inserted("postgres", &inner.name, "insert", ids.len() as u64);
        Ok(ids)
    }

    /// Creates or changes the schedule `name`: a tick every `period`, on a
    /// grid anchored at the Unix epoch, `missed` deciding what a late run
    /// does (see the [`durable`](crate::durable) module docs). `true` if it
    /// was created or changed, `false` if the same call was made before, so
    /// every replica may call it at start-up.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchedule`] for a zero period or a name taken by an
    /// entry that is not a tick; [`Error::InvalidId`] for a name that breaks
    /// the id rules; [`Error::Database`] if the database cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::postgres::PgQueue;
    /// # use punctual::MissedTicks;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let jobs: PgQueue<String> = PgQueue::connect("postgres://localhost/shop", "jobs").await?;
    /// let every_minute = Duration::from_secs(60);
    /// jobs.schedule_every("sweep", every_minute, MissedTicks::Skip, &"sweep".into()).await?;
    /// # Ok(()) }
    /// ```
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
            .await
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
        self.upsert(name, format!("c,{expr}"), value).await
    }

    async fn upsert(&self, name: &str, rec: String, value: &T) -> Result<bool, Error> {
        let json = serde_json::to_string(value).map_err(Error::Encode)?;
        let inner = self.inner();
        let mut cands = String::new();
        for _ in 0..3 {
            let row = call!(inner, |conn| {
                sqlx::query(&inner.sql.schedule)
                    .bind(&inner.name)
                    .bind(&inner.channel)
                    .bind(name)
                    .bind(&rec)
                    .bind(&json)
                    .bind(&cands)
                    .fetch_one(conn)
            })?;
            let result: i32 = row.try_get("result")?;
            match result {
                TAKEN => {
                    return Err(Error::InvalidSchedule(format!(
                        "the id `{name}` is taken by an entry that is not a schedule's tick"
                    )));
                }
                NEEDS_CRON => {
                    let from: i64 = row.try_get("cron_from")?;
                    cands = cron_instants(&rec, from, 2)?;
                }
                changed => {
                    let changed = changed == 1;
                    crate::durable::metrics::inserted(
                        "postgres",
                        &inner.name,
                        "schedule",
                        u64::from(changed),
                    );
                    return Ok(changed);
                }
            }
        }
        Err(Error::Unsupported(format!(
            "the first instant of schedule `{name}` did not settle"
        )))
    }

    /// Deletes the schedule `name` and its tick (pending, or leased: then
    /// its ack inserts no successor); `true` if there was one.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    pub async fn unschedule(&self, name: &str) -> Result<bool, Error> {
        check_id(name)?;
        call!(self.inner(), |conn| self.remove_on(conn, name, true))
    }

    /// Every schedule of the queue, by name: its spec, next instant (`None`
    /// while its tick is leased) and value. A schedule whose value no
    /// longer decodes as `T` is left out.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] if the database cannot be reached.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo<T>>, Error> {
        let inner = self.inner();
        let rows = call!(inner, |conn| {
            sqlx::query(&inner.sql.schedules)
                .bind(&inner.name)
                .fetch_all(conn)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let rec: String = row.try_get("rec")?;
            let value: String = row.try_get("value")?;
            let next: Option<i64> = row.try_get("next")?;
            let last_run: Option<i64> = row.try_get("last_run")?;
            let last_outcome: Option<String> = row.try_get("last_outcome")?;
            let Ok(value) = serde_json::from_str(&value) else {
                continue;
            };
            out.push(ScheduleInfo {
                name: row.try_get("name")?,
                spec: spec_of(&rec),
                next: next.map(system_time),
                value,
                last_run: last_run.map(system_time),
                last_outcome: last_outcome
                    .as_deref()
                    .and_then(crate::durable::Finished::of_code),
                paused: row.try_get("paused")?,
            });
        }
        Ok(out)
    }
}

const TAKEN: i32 = -2;
const NEEDS_CRON: i32 = -1;
