//! How deliveries finish, as every store's scripts or functions read it:
//! one op per delivery (ack, retry, fail, bury, give back), the lease it
//! finishes, and the cron instants a tick's successor needs.
//!
//! The memory store reads only the ops themselves; the rest (releases of
//! claims in doubt, cron instants sent along, settling) is for the stores
//! across a network.

#![cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::store::{Applied, Ending, Finish};
use crate::lock::Lock;

/// What a delivery needs to finish its lease.
#[derive(Debug, Clone)]
pub struct Held {
    pub(crate) id: String,
    pub(crate) token: Arc<str>,
    /// For a schedule's tick: its schedule record and instant.
    pub(crate) tick: Option<Tick>,
}

/// A schedule's tick: its schedule's record and its instant (ms).
#[derive(Debug, Clone)]
pub(crate) struct Tick {
    pub(crate) rec: Arc<str>,
    pub(crate) instant: i64,
}

/// How a delivery finishes (Redis: `scripts/lib/finish.lua`; PostgreSQL:
/// `finish_one` in `sql/schema.sql`).
#[derive(Debug, Clone)]
pub(crate) struct Op {
    /// 'a' ack, 'r' retry, 'f' fail, 'b' bury, 's' snooze, 'x' discard, 'g'
    /// give back, 'G' give back everything a claim in doubt holds.
    pub(crate) kind: &'static str,
    pub(crate) id: String,
    pub(crate) token: Arc<str>,
    pub(crate) ms: u64,
    pub(crate) reason: String,
    /// A tick's schedule and instant, for the cron instants of its
    /// successor.
    pub(crate) tick: Option<Tick>,
    /// The cron instants of a tick's successor.
    pub(crate) cands: String,
    /// An ack's output (JSON), kept in its result.
    pub(crate) output: Option<String>,
}

impl Op {
    pub(crate) fn ack(lease: &Held) -> Op {
        Op::new("a", lease, 0, String::new())
    }

    pub(crate) fn retry(lease: &Held, delay: Duration) -> Op {
        Op::new("r", lease, millis(delay), String::new())
    }

    /// A failed attempt: retried after `delay`, or dead with `reason` once
    /// the attempts reached the queue's `max_attempts`.
    pub(crate) fn fail(lease: &Held, delay: Duration, reason: String) -> Op {
        Op::new("f", lease, millis(delay), reason)
    }

    /// To the dead letters with `reason`; that delivery does not count.
    pub(crate) fn bury(lease: &Held, reason: String) -> Op {
        Op::new("b", lease, 0, reason)
    }

    /// Due again after `delay`; that delivery does not count (a tick keeps
    /// its instant).
    pub(crate) fn snooze(lease: &Held, delay: Duration) -> Op {
        Op::new("s", lease, millis(delay), String::new())
    }

    /// To the dead letters now with `reason`; that delivery counts.
    pub(crate) fn discard(lease: &Held, reason: String) -> Op {
        Op::new("x", lease, 0, reason)
    }

    /// Back in the queue, due at once in its old place; `counted`: whether
    /// this delivery counts as an attempt.
    pub(crate) fn give_back(lease: &Held, counted: bool) -> Op {
        Op::new("g", lease, u64::from(counted), String::new())
    }

    /// The op of a worker's finish.
    pub(crate) fn of(finish: &Finish<Held>) -> Op {
        match &finish.ending {
            Ending::Ack { output } => Op {
                output: output.clone(),
                ..Op::ack(&finish.lease)
            },
            Ending::Fail { delay, reason } => Op::fail(&finish.lease, *delay, reason.clone()),
            Ending::Snooze { delay } => Op::snooze(&finish.lease, *delay),
            Ending::Discard { reason } => Op::discard(&finish.lease, reason.clone()),
            Ending::GiveBack { counted } => Op::give_back(&finish.lease, *counted),
        }
    }

    /// Gives back everything the claim `token` holds, attempts not counted;
    /// `from`: a lower bound of the end of its leases (0: none known).
    pub(crate) fn release(token: &Arc<str>, from: u64) -> Op {
        Op {
            kind: "G",
            id: String::new(),
            token: Arc::clone(token),
            ms: from,
            reason: String::new(),
            tick: None,
            cands: String::new(),
            output: None,
        }
    }

    fn new(kind: &'static str, lease: &Held, ms: u64, reason: String) -> Op {
        Op {
            kind,
            id: lease.id.clone(),
            token: Arc::clone(&lease.token),
            ms,
            reason,
            tick: lease.tick.clone(),
            cands: String::new(),
            output: None,
        }
    }

    /// This op, with the cron instants its tick's successor will need sent
    /// along (from the tick's instant, or the store's clock as last seen,
    /// `seen` ms, if later), so the store rarely has to ask for them.
    pub(crate) fn with_cron_instants(&self, seen: i64) -> Op {
        let mut op = self.clone();
        if let Some(tick) = op.tick.take() {
            if op.cands.is_empty() && tick.rec.starts_with("c,") {
                let from = tick.instant.max(seen - 1000);
                // Without them the store asks, and `settle` answers.
                op.cands = cron_instants(&tick.rec, from, 4).unwrap_or_default();
            }
        }
        op
    }
}

/// What became of one op.
#[derive(Debug)]
pub(crate) enum OpResult {
    /// Applied, or not because the lease was lost (or the op was applied
    /// already, by a sending whose reply was lost).
    Applied(Applied),
    /// Not applied: the successor of the tick needs the cron instants of
    /// schedule record `rec` after `from`.
    NeedsCron { from: i64, rec: String },
}

/// Why a tick's successor cannot be computed here.
#[derive(Debug)]
pub(crate) enum Unsettled {
    /// The schedule's cron expression does not parse.
    #[cfg_attr(not(feature = "cron"), allow(dead_code))]
    Invalid(String),
    /// This process cannot compute it (no cargo feature `cron`), or the
    /// instants never settled.
    Unsupported(String),
}

/// The cron instants a tick of schedule record `rec` (`c,<expression>`)
/// needs after `from`: `<rec>\n<from>,<c1>,...[,x]`, the first `count`
/// instants strictly after `from`, ending in `x` when there are no more.
#[cfg_attr(not(feature = "cron"), allow(unused_variables))]
pub(crate) fn cron_instants(rec: &str, from: i64, count: usize) -> Result<String, Unsettled> {
    #[cfg(feature = "cron")]
    if let Some(expr) = rec.strip_prefix("c,") {
        return super::cron_instants(rec, expr, from, count).map_err(Unsettled::Invalid);
    }
    Err(Unsettled::Unsupported(format!(
        "schedule record `{rec}` needs the cargo feature `cron` in this process"
    )))
}

/// Whether each op applied, after sending again with `finish_once` (with
/// their cron instants) those whose tick's successor needed them.
pub(crate) async fn settle<E, F, Fut>(
    ops: &[Op],
    results: &mut [OpResult],
    mut finish_once: F,
) -> Result<Vec<Applied>, E>
where
    E: From<Unsettled>,
    F: FnMut(Vec<Op>) -> Fut,
    Fut: Future<Output = Result<Vec<OpResult>, E>>,
{
    for _ in 0..3 {
        let mut again = Vec::new();
        let mut at = Vec::new();
        for (i, result) in results.iter().enumerate() {
            if let OpResult::NeedsCron { from, rec } = result {
                let mut op = ops[i].clone();
                op.cands = cron_instants(rec, *from, 4)?;
                again.push(op);
                at.push(i);
            }
        }
        if again.is_empty() {
            break;
        }
        let answers = finish_once(again).await?;
        for (i, answer) in at.into_iter().zip(answers) {
            results[i] = answer;
        }
    }
    results
        .iter()
        .map(|result| match result {
            OpResult::Applied(applied) => Ok(*applied),
            OpResult::NeedsCron { rec, .. } => Err(E::from(Unsettled::Unsupported(format!(
                "the cron instants of schedule record `{rec}` do not settle"
            )))),
        })
        .collect()
}

/// What the ops of a claim that leased its entries became, when the ticks
/// among them cannot be settled now: pending, to be sent again (the
/// claim's entries must not be lost over them).
pub(crate) fn pending_where_unsettled(results: &[OpResult]) -> Vec<Applied> {
    results
        .iter()
        .map(|result| match result {
            OpResult::Applied(applied) => *applied,
            OpResult::NeedsCron { .. } => Applied::Pending,
        })
        .collect()
}

/// The most a millisecond count can be (about 142,000 years): every time
/// stays an exact integer in a Lua double and a PostgreSQL bigint.
pub(crate) const MAX_MS: u64 = 1 << 52;

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).min(MAX_MS)
}

/// The releases of claims in doubt (`Op::release`) that one request
/// carries, taken from the handle's list: put back for the next request
/// unless this one was answered (they are idempotent).
pub(crate) struct Releases<'a> {
    pending: &'a Lock<Vec<Op>>,
    pub(crate) ops: Vec<Op>,
    answered: bool,
}

impl<'a> Releases<'a> {
    pub(crate) fn take(pending: &'a Lock<Vec<Op>>) -> Releases<'a> {
        Releases {
            pending,
            ops: std::mem::take(&mut *pending.lock()),
            answered: false,
        }
    }

    /// The request was answered; how many releases it carried.
    pub(crate) fn sent(mut self) -> usize {
        self.answered = true;
        self.ops.len()
    }
}

impl Drop for Releases<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.pending.lock().append(&mut self.ops);
        }
    }
}

/// Why a claimed entry is not handed out.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The store says it goes to the dead letters (a cron tick past its
    /// deliveries, whose successor needs this process's cron instants).
    Bury(String),
    /// Its value does not decode (or is missing): a failed attempt, as a
    /// rolling deploy needs (a replica running newer code may decode it).
    Undecodable(String),
}

/// The value of a claimed entry, or why it is not handed out.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    bury: Option<String>,
    json: Option<&[u8]>,
) -> Result<T, Refused> {
    match (bury, json) {
        (Some(why), _) => Err(Refused::Bury(why)),
        (None, Some(json)) => serde_json::from_slice(json)
            .map_err(|e| Refused::Undecodable(format!("value does not decode: {e}"))),
        (None, None) => Err(Refused::Undecodable(
            "value does not decode: the value is missing".to_owned(),
        )),
    }
}

impl Refused {
    /// How the store finishes the delivery of delivery `attempt`: buried,
    /// or a failed attempt due again after `min(2^(attempt-1) s, 1 h)`
    /// (to the dead letters once attempts reach the queue's limit).
    pub(crate) fn op(self, lease: &Held, attempt: u32) -> Op {
        match self {
            Refused::Bury(why) => Op::bury(lease, why),
            Refused::Undecodable(why) => {
                let delay = super::Backoff::exponential(Duration::from_secs(1))
                    .max(Duration::from_secs(3600))
                    .delay(attempt);
                Op::fail(lease, delay, why)
            }
        }
    }

    pub(crate) fn reason(&self) -> &str {
        match self {
            Refused::Bury(why) | Refused::Undecodable(why) => why,
        }
    }
}

/// A handle's dead-letter retention (`dead_max_age`, `dead_max_count` on
/// every builder): applied right after each death through that handle.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Retention {
    pub(crate) max_age: Option<Duration>,
    pub(crate) max_count: Option<u64>,
    /// How long results of entries that finish through the handle are
    /// kept (`keep_results`; zero: none).
    pub(crate) keep_results: Duration,
}

impl Retention {
    /// `<max age ms>,<max count>` (-1: no limit), or '' when neither is set.
    pub(crate) fn rules(self) -> String {
        if self.max_age.is_none() && self.max_count.is_none() {
            return String::new();
        }
        let age = self
            .max_age
            .map_or(-1, |age| i64::try_from(millis(age)).unwrap_or(i64::MAX));
        let count = self
            .max_count
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        format!("{age},{count}")
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    /// The rules a Redis script takes: `<max attempts>,<max age ms>,<max
    /// count>`, or the max attempts alone when no retention is set.
    pub(crate) fn with_limit(self, max_attempts: u32) -> String {
        match self.rules() {
            rules if rules.is_empty() => max_attempts.to_string(),
            rules => format!("{max_attempts},{rules}"),
        }
    }
}
