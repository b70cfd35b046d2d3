//! Batches and recurring schedules on a [`RedisQueue`]: `insert_many`,
//! `schedule_every`, `schedule_cron`, `unschedule`, `schedules`.

use std::time::Duration;

use redis::Value;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{Error, check_id};
use super::inner::{cron_instants, millis, parse, system_time};
use super::queue::{ALONE_FROM, RedisQueue};
use super::scripts::SCRIPTS;
use crate::MissedTicks;
use crate::durable::{ScheduleInfo, period_ms, policy, spec_of};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> RedisQueue<T> {
    /// Inserts many entries in one round trip, all or none, each due its
    /// delay from now (the server's now), under new unique ids, which it
    /// returns in order. Entries with equal deadlines come out in the order
    /// given. An empty slice is `Ok(vec![])` without a request.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if a value does not serialize (nothing is sent),
    /// [`Error::Redis`] if Redis cannot be reached (then nothing, or all,
    /// was written).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let reminders: RedisQueue<u64> = RedisQueue::connect("redis://127.0.0.1/", "reminders").await?;
    /// let day = Duration::from_secs(86_400);
    /// let ids = reminders.insert_many(&[(1, day), (2, day), (3, 2 * day)]).await?;
    /// assert_eq!(ids.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn insert_many(&self, entries: &[(T, Duration)]) -> Result<Vec<String>, Error> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let json = entries
            .iter()
            .map(|(value, _)| serde_json::to_string(value).map_err(Error::Encode))
            .collect::<Result<Vec<_>, _>>()?;
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.insert);
        invocation.arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        invocation.arg(entries.len());
        let trace = crate::durable::trace::current();
        for ((_, delay), json) in entries.iter().zip(&json) {
            invocation
                .arg("")
                .arg(json)
                .arg("d")
                .arg(millis(*delay))
                .arg("") // no options
                .arg(trace.as_deref().unwrap_or(""));
        }
        // {inserted, id, ...}: the ids, in order.
        // A value the server may refuse to read goes on a connection of
        // its own (see `RedisQueue::insert`).
        let reply: Vec<(i64, String)> = if json.iter().any(|j| j.len() >= ALONE_FROM) {
            inner.conn.run_apart(&invocation).await?
        } else {
            inner.run(&invocation).await?
        };
        crate::durable::metrics::inserted("redis", &inner.name, "insert", reply.len() as u64);
        Ok(reply.into_iter().map(|(_, id)| id).collect())
    }

    /// Creates or changes the schedule `name`: a tick every `period`, on a
    /// grid anchored at the Unix epoch (so replicas agree without talking),
    /// the first one at the first grid instant after now; after a late run,
    /// `missed` decides the next one (see the module docs of
    /// [`durable`](crate::durable)). Ticks carry `value` and go to any
    /// consumer of the queue (a [`Worker`](crate::durable::Worker), or
    /// `take`). `true` if it was created or changed, `false` if the same
    /// call was made before, so every replica may call it at start-up.
    ///
    /// Millisecond resolution.
    ///
    /// ```text
    /// period 10 s, a run from 0 s that took 25 s:
    ///   Burst  next ticks at 10 s, 20 s (due at once), 30 s
    ///   Skip   next tick at 30 s (the first grid instant after now)
    ///   Delay  next tick at 10 s after the late run's claim, then every 10 s
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a name that breaks the id rules,
    /// [`Error::InvalidSchedule`] for a period under 1 ms or a name taken by
    /// an entry that is not a tick, [`Error::Encode`], [`Error::Redis`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # use punctual::MissedTicks;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let jobs: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
    /// let every_minute = Duration::from_secs(60);
    /// jobs.schedule_every("sweep", every_minute, MissedTicks::Skip, &"sweep".into()).await?;
    /// // Another replica, the same call: nothing changes.
    /// assert!(!jobs.schedule_every("sweep", every_minute, MissedTicks::Skip, &"sweep".into()).await?);
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

    /// Creates or changes the schedule `name`: a tick at every instant of
    /// the cron expression `expr` (5 fields, or 6 with seconds first;
    /// `@daily` and the like; an optional `CRON_TZ=<zone> ` prefix, UTC
    /// without it, DST handled as [`Scheduler::schedule_cron`] does), from
    /// the first one after now. After a late run (downtime, or a run that
    /// overran the next instant), the next tick is the first instant after
    /// the store's now: missed instants are skipped, one late run happens,
    /// none repeats. `true` if created or changed, `false` if the same call
    /// was made before. Available with the cargo feature `cron`; every
    /// process that consumes the queue needs it too (it computes the cron
    /// instants the store picks from by its own clock).
    ///
    /// [`Scheduler::schedule_cron`]: crate::Scheduler::schedule_cron
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchedule`] for a bad expression or an unknown
    /// `CRON_TZ` zone (naming it), otherwise as
    /// [`schedule_every`](Self::schedule_every).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let jobs: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
    /// jobs.schedule_cron("nightly", "CRON_TZ=Europe/Berlin 0 3 * * *", &"report".into()).await?;
    /// # Ok(()) }
    /// ```
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
            let mut invocation = inner.script(&SCRIPTS.schedule);
            invocation
                .arg(name)
                .arg(&rec)
                .arg(&json)
                .arg(&cands)
                .arg(&inner.keys.channel);
            inner.identify(&mut invocation);
            match inner.run::<Value>(&invocation).await? {
                Value::Int(changed) => {
                    let changed = changed == 1;
                    crate::durable::metrics::inserted(
                        "redis",
                        &inner.name,
                        "schedule",
                        u64::from(changed),
                    );
                    return Ok(changed);
                }
                other => {
                    let (code, from): (i64, i64) = parse(other)?;
                    if code == TAKEN {
                        return Err(Error::InvalidSchedule(format!(
                            "the id `{name}` is taken by an entry that is not a schedule's tick"
                        )));
                    }
                    cands = cron_instants(&rec, from, 2)?;
                }
            }
        }
        Err(Error::Unsupported(format!(
            "the first instant of schedule `{name}` did not settle"
        )))
    }

    /// Deletes the schedule `name` and its tick (pending or leased: a
    /// consumer holding it then gets `Ok(false)` from `ack`); `true` if it
    /// existed. Equivalent to `remove(name)`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], or [`Error::Redis`] if Redis cannot be reached.
    pub async fn unschedule(&self, name: &str) -> Result<bool, Error> {
        check_id(name)?;
        let mut invocation = self.inner().script(&SCRIPTS.remove);
        invocation.arg(name).arg("s");
        self.inner().identify(&mut invocation);
        self.inner().run(&invocation).await
    }

    /// Every schedule of the queue: name, spec, next instant (`None` while
    /// its tick is leased), value (a value that no longer decodes as `T`
    /// is skipped).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use punctual::redis::RedisQueue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// # let jobs: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
    /// for schedule in jobs.schedules().await? {
    ///     println!("{}: {} next at {:?}", schedule.name, schedule.spec, schedule.next);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo<T>>, Error> {
        let invocation = self.inner().script(&SCRIPTS.schedules);
        let rows: Vec<(String, String, Vec<u8>, i64, String, i64)> =
            self.inner().run(&invocation).await?;
        let mut out: Vec<ScheduleInfo<T>> = rows
            .into_iter()
            .filter_map(|(name, rec, value, next, last, paused)| {
                // '<since>,<state>' (see `last_run` in scripts/lib/prelude.lua).
                let (since, state) = last.split_once(',').unwrap_or(("", ""));
                Some(ScheduleInfo {
                    spec: spec_of(&rec),
                    value: serde_json::from_slice(&value).ok()?,
                    next: (next >= 0).then(|| system_time(next)),
                    name,
                    last_run: since.parse().ok().map(system_time),
                    last_outcome: crate::durable::Finished::of_code(state),
                    paused: paused == 1,
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

/// The schedule script's answer when the name belongs to a plain entry.
const TAKEN: i64 = -2;
