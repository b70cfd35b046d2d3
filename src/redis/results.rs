//! What the redis store keeps of finished entries, how it cancels, and
//! what it tells of a queue's health (the public methods are written once
//! for every store, in `durable/front.rs`): each one script.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{Error, check_id};
use super::inner::{cron_instants, millis, parse, system_time};
use super::queue::RedisQueue;
use super::scripts::SCRIPTS;
use crate::durable::health::Record;
use crate::durable::results::{Lookup, Results};
use crate::durable::{Finished, JobResult, Minute, WorkerInfo};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> RedisQueue<T> {
    /// Entry `id`'s kept result.
    pub(crate) async fn read_result(&self, id: &str) -> Result<Option<JobResult>, Error> {
        Ok(self.look(id).await?.1)
    }

    /// Whether a live entry has id `id`, and its kept result.
    async fn look(&self, id: &str) -> Result<(bool, Option<JobResult>), Error> {
        check_id(id)?;
        let mut invocation = self.inner().script(&SCRIPTS.result);
        invocation.arg(id);
        let (_now, live, kept): (i64, i64, Option<Vec<u8>>) = self.inner().run(&invocation).await?;
        let result = kept.and_then(|kept| result_of(id, &kept));
        Ok((live == 1, result))
    }

    /// Cancels entry `id`; whether there was one.
    pub(crate) async fn cancel_entry(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        let inner = self.inner();
        let mut cands = String::new();
        // A cron tick's successor needs this process's cron instants:
        // asked for, then sent.
        for _ in 0..3 {
            let mut invocation = inner.script(&SCRIPTS.cancel);
            invocation.arg(id).arg(&inner.keys.channel);
            inner.identify(&mut invocation);
            invocation
                .arg(&inner.rules)
                .arg(millis(inner.lease).max(1))
                .arg(&cands);
            let reply: Value = inner.run(&invocation).await?;
            if let Value::Array(_) = reply {
                let (_, from, rec): (i64, i64, String) = parse(reply)?;
                cands = cron_instants(&rec, from, 4)?;
                continue;
            }
            let cancelled: i64 = parse(reply)?;
            return Ok(cancelled == 1);
        }
        Err(Error::from(crate::durable::ops::Unsettled::Unsupported(
            "the cron instants of a cancelled tick's schedule do not settle".to_owned(),
        )))
    }

    /// The live workers.
    pub(crate) async fn read_workers(&self) -> Result<Vec<WorkerInfo>, Error> {
        let invocation = self.inner().script(&SCRIPTS.workers);
        let reply: Vec<Value> = self.inner().run(&invocation).await?;
        let mut reply = reply.into_iter();
        let now: u64 = parse(reply.next().unwrap_or(Value::Nil))?;
        let mut out = Vec::new();
        for row in reply {
            let (_, text): (String, String) = parse(row)?;
            let mut parts = text.splitn(3, ',');
            let (Some(first), Some(last), Some(json)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Ok(first), Ok(last)) = (first.parse(), last.parse()) else {
                continue;
            };
            if let Some(info) = Record::from_json(json).and_then(|r| r.info(first, last, now)) {
                out.push(info);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The minutes with events since `since` (ms).
    pub(crate) async fn read_history(&self, since: u64) -> Result<Vec<Minute>, Error> {
        let mut invocation = self.inner().script(&SCRIPTS.history);
        invocation.arg(since);
        let reply: Vec<Value> = self.inner().run(&invocation).await?;
        let mut out = Vec::new();
        for row in reply.into_iter().skip(1) {
            let (at, inserted, done, failed, dead): (u64, u64, u64, u64, u64) = parse(row)?;
            out.push(Minute {
                at: system_time(i64::try_from(at).unwrap_or(i64::MAX)),
                inserted,
                done,
                failed,
                dead,
            });
        }
        Ok(out)
    }

    /// How long the oldest due entry has waited.
    pub(crate) async fn read_latency(&self) -> Result<Option<Duration>, Error> {
        let invocation = self.inner().script(&SCRIPTS.latency);
        let ms: i64 = self.inner().run(&invocation).await?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }

    /// Pauses or resumes schedule `name`; whether it changed.
    pub(crate) async fn put_schedule_paused(&self, name: &str, pause: bool) -> Result<bool, Error> {
        check_id(name)?;
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.pause_schedule);
        invocation
            .arg(name)
            .arg(if pause { "1" } else { "0" })
            .arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        let changed: i64 = inner.run(&invocation).await?;
        Ok(changed == 1)
    }

    /// A page of `state`'s entries, newest first.
    pub(crate) async fn newest_page(
        &self,
        state: crate::durable::EntryState,
        cursor: Option<&crate::durable::Cursor>,
        limit: usize,
    ) -> Result<crate::durable::Page<T>, Error> {
        self.page(state, cursor, limit, true).await
    }
}

/// A result as the scripts keep it: `<state>,<at>,<attempts>,<reason
/// length>,<output length>:<reason><output>` (see `keep_result` in
/// `scripts/lib/prelude.lua`).
fn result_of(id: &str, kept: &[u8]) -> Option<JobResult> {
    let colon = kept.iter().position(|&b| b == b':')?;
    let head = std::str::from_utf8(&kept[..colon]).ok()?;
    let rest = &kept[colon + 1..];
    let mut fields = head.split(',');
    let state = Finished::of_code(fields.next()?)?;
    let at: u64 = fields.next()?.parse().ok()?;
    let attempts: u32 = fields.next()?.parse().ok()?;
    let reason_len: Option<usize> = fields.next()?.parse().ok();
    let output_len: Option<usize> = fields.next()?.parse().ok();
    let reason_end = reason_len.unwrap_or(0);
    let reason = match reason_len {
        Some(n) => Some(String::from_utf8_lossy(rest.get(..n)?).into_owned()),
        None => None,
    };
    let output = match output_len {
        Some(n) => {
            Some(String::from_utf8_lossy(rest.get(reason_end..reason_end + n)?).into_owned())
        }
        None => None,
    };
    Some(JobResult::kept(
        id,
        state,
        at,
        attempts,
        output.as_deref(),
        reason,
    ))
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Results for RedisQueue<T> {
    type Failure = Error;

    async fn lookup(&self, id: &str) -> Result<Lookup, Error> {
        Ok(match self.look(id).await? {
            (_, Some(result)) => Lookup::Finished(result),
            (true, None) => Lookup::Live,
            (false, None) => Lookup::Unknown,
        })
    }

    fn finishes(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        // The queue's one subscription, shared by every waiter.
        self.inner().listen();
        self.inner().finishes.subscribe()
    }

    fn recheck_every(&self) -> Duration {
        self.inner().poll_interval
    }
}
