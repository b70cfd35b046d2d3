//! What every handle and delivery of one built queue shares, and the calls
//! that lease and finish entries (functions of `sql/schema.sql`).
//!
//! As on Redis, a claim carries a *token* made here, never the same twice,
//! stored with every lease it grants: a delivery can only finish the lease
//! its own claim was granted. When a claim's reply is lost (the connection
//! broke after the statement was sent: it may have committed), the consumer
//! sends it again with the same token and gets what the first sending
//! leased; a consumer that gives up instead leaves the token *in doubt*,
//! and the next claim or finish of the handle gives back what it holds,
//! without counting the attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tokio::time::Instant;

use super::error::Error;
use super::sql::Statements;
pub(crate) use crate::durable::ops::{Held, Op, cron_instants};
use crate::durable::ops::{OpResult, Releases, Tick, pending_where_unsettled, settle};
use crate::durable::store::Applied;
use crate::durable::wait::Waiter;
use crate::lock::Lock;
use crate::queue::deadline_after;

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) pool: PgPool,
    pub(crate) sql: Statements,
    /// The `LISTEN` channel of the queue.
    pub(crate) channel: String,
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) poll_interval: Duration,
    pub(crate) waiter: Waiter,
    /// The latest database clock reading seen (ms since the epoch).
    server_now: AtomicI64,
    /// Claims whose reply was lost and that nobody will send again (as
    /// `Op::release`s): the next claim or finish gives back what they hold.
    in_doubt: Lock<Vec<Op>>,
}

/// How soon a consumer asks again while due entries are locked by another
/// transaction (a claim, a caller's open `remove_in`).
const LOCKED_RECHECK: Duration = Duration::from_millis(200);

/// The ops of one call as the parallel arrays the SQL functions take.
#[derive(Default)]
struct OpArrays {
    kinds: Vec<&'static str>,
    ids: Vec<String>,
    tokens: Vec<String>,
    ms: Vec<i64>,
    reasons: Vec<String>,
    cands: Vec<String>,
}

impl OpArrays {
    fn push(&mut self, op: Op) {
        self.kinds.push(op.kind);
        self.ids.push(op.id);
        self.tokens.push(op.token.to_string());
        self.ms.push(i64::try_from(op.ms).unwrap_or(i64::MAX));
        // PostgreSQL text cannot hold NUL: a reason carrying one (a
        // handler's error message) would fail every finish sent with it.
        self.reasons.push(if op.reason.contains('\0') {
            op.reason.replace('\0', "\u{fffd}")
        } else {
            op.reason
        });
        self.cands.push(op.cands);
    }
}

/// One entry of a claim.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) held: Held,
    pub(crate) json: String,
    pub(crate) attempt: u32,
    pub(crate) deadline: SystemTime,
    pub(crate) lease_until: SystemTime,
    /// Set when the entry must go to the dead letters instead (a cron tick
    /// past its attempts: its successor needs this process's cron instants).
    pub(crate) bury: Option<String>,
}

/// The answer of a claim.
#[derive(Debug)]
pub(crate) struct Claim {
    /// When, on this process's clock, the head is due as the claim saw it.
    pub(crate) next_due: Instant,
    /// More entries were due than the claim took.
    pub(crate) more_due: bool,
    /// What became of each op sent with the claim.
    pub(crate) done: Vec<Applied>,
    pub(crate) items: Vec<Claimed>,
    /// The database's clock when the claim ran, in ms.
    pub(crate) now: i64,
}

/// A claim on its way: sent again with the same token after a lost reply.
#[derive(Debug)]
pub struct Attempt {
    token: Arc<str>,
    /// Set while a sending may have run without its reply reaching us.
    in_doubt: bool,
    /// A lower bound of the end of the leases a sending may have granted
    /// (the database's clock seen before the first sending, plus the
    /// lease): where a resend or a give-back looks for them.
    from: i64,
}

impl Attempt {
    pub(crate) fn new() -> Attempt {
        Attempt {
            token: crate::durable::store::new_token(),
            in_doubt: false,
            from: 0,
        }
    }
}

impl Inner {
    pub(crate) fn new(
        name: String,
        pool: PgPool,
        sql: Statements,
        channel: String,
        lease: Duration,
        max_attempts: u32,
        poll_interval: Duration,
    ) -> Inner {
        Inner {
            name,
            pool,
            sql,
            channel,
            lease,
            max_attempts,
            poll_interval,
            waiter: Waiter::default(),
            server_now: AtomicI64::new(0),
            in_doubt: Lock::new(Vec::new()),
        }
    }

    fn saw_clock(&self, now: i64) {
        self.server_now.fetch_max(now, Ordering::Relaxed);
    }

    /// Leaves `attempt` for the next claim of this handle to give back.
    pub(crate) fn abandon(&self, attempt: &Attempt) -> bool {
        if !attempt.in_doubt {
            return false;
        }
        let from = u64::try_from(attempt.from).unwrap_or(0);
        self.in_doubt.lock().push(Op::release(&attempt.token, from));
        true
    }

    fn op_arrays(&self, releases: Option<&Releases<'_>>, ops: &[Op]) -> OpArrays {
        let mut arrays = OpArrays::default();
        for release in releases.iter().flat_map(|r| &r.ops) {
            arrays.push(release.clone());
        }
        let seen = self.server_now.load(Ordering::Relaxed);
        for op in ops {
            arrays.push(op.with_cron_instants(seen));
        }
        arrays
    }

    /// Sends `attempt` (again, after a lost reply): applies `ops`, then
    /// leases up to `max` due entries. From the moment it is sent until its
    /// reply comes, the claim is in doubt: on an error after which it may
    /// have run, or if this future is dropped, send it again or
    /// [`abandon`](Self::abandon) it.
    pub(crate) async fn claim(
        &self,
        attempt: &mut Attempt,
        max: usize,
        ops: &[Op],
    ) -> Result<Claim, Error> {
        let releases = Releases::take(&self.in_doubt);
        let recover = attempt.in_doubt.then_some(attempt.from);
        if !attempt.in_doubt {
            // No sending before this one ran: the leases of this one end a
            // lease after it reaches the database, later than the clock
            // last seen (less a second, should that clock step back).
            attempt.from = self
                .server_now
                .load(Ordering::Relaxed)
                .saturating_add(millis(self.lease).max(1))
                .saturating_sub(1000);
        }
        attempt.in_doubt = true;
        let arrays = self.op_arrays(Some(&releases), ops);
        let kicks = *self.waiter.kicks().borrow();
        let max = i32::try_from(max.min(crate::durable::store::MAX_CLAIM)).unwrap_or(1);
        let reply = retry_dead(|| {
            sqlx::query(&self.sql.claim)
                .bind(&self.name)
                .bind(&self.channel)
                .bind(max)
                .bind(millis(self.lease).max(1))
                .bind(i32::try_from(self.max_attempts).unwrap_or(i32::MAX))
                .bind(&*attempt.token)
                .bind(recover)
                .bind(&arrays.kinds)
                .bind(&arrays.ids)
                .bind(&arrays.tokens)
                .bind(&arrays.ms)
                .bind(&arrays.reasons)
                .bind(&arrays.cands)
                .fetch_one(&self.pool)
        })
        .await;
        let row = match reply {
            Ok(row) => row,
            Err(error) => {
                let error = Error::Database(error);
                if !error.is_in_doubt() {
                    attempt.in_doubt = recover.is_some();
                }
                return Err(error);
            }
        };
        attempt.in_doubt = false;
        let released = releases.sent();
        let now: i64 = row.try_get("now")?;
        self.saw_clock(now);
        let head: Option<i64> = row.try_get("head")?;
        let more_due: bool = row.try_get("more")?;
        let mut results = op_results(&row)?.split_off(released);
        let items = claimed(&row, &attempt.token)?;
        // The claim has leased its items: an op that cannot be settled now
        // must not lose them; it is reported pending, to be sent again.
        let done = match self.settle(ops, &mut results).await {
            Ok(done) => done,
            Err(error) => {
                tracing::warn!(queue = %self.name, %error,
                    "could not finish the ticks sent with a claim; they are sent again");
                pending_where_unsettled(&results)
            }
        };
        let mut wait = head.map_or(self.poll_interval, |head| {
            Duration::from_millis(u64::try_from(head - now).unwrap_or(0))
        });
        if row.try_get::<bool, _>("locked")? {
            // Another transaction holds due entries; its rollback would
            // announce nothing.
            wait = wait.min(LOCKED_RECHECK.min(self.poll_interval));
        }
        let next_due = deadline_after(Instant::now(), wait);
        self.waiter.set_next_due(next_due, kicks);
        Ok(Claim {
            next_due,
            more_due,
            done,
            items,
            now,
        })
    }

    /// Whether each op applied, after sending again (with their cron
    /// instants) those whose tick's successor needed them.
    async fn settle(&self, ops: &[Op], results: &mut [OpResult]) -> Result<Vec<Applied>, Error> {
        settle(ops, results, |again| async move {
            self.finish_once(&again, false).await
        })
        .await
    }

    /// Applies `ops` without claiming (and gives back what claims in doubt
    /// hold).
    pub(crate) async fn finish(&self, ops: &[Op]) -> Result<Vec<Applied>, Error> {
        let mut results = self.finish_once(ops, true).await?;
        self.settle(ops, &mut results).await
    }

    async fn finish_once(&self, ops: &[Op], release: bool) -> Result<Vec<OpResult>, Error> {
        let releases = release.then(|| Releases::take(&self.in_doubt));
        let arrays = self.op_arrays(releases.as_ref(), ops);
        let row = retry_dead(|| {
            sqlx::query(&self.sql.finish)
                .bind(&self.name)
                .bind(&self.channel)
                .bind(i32::try_from(self.max_attempts).unwrap_or(i32::MAX))
                .bind(millis(self.lease).max(1))
                .bind(&arrays.kinds)
                .bind(&arrays.ids)
                .bind(&arrays.tokens)
                .bind(&arrays.ms)
                .bind(&arrays.reasons)
                .bind(&arrays.cands)
                .fetch_one(&self.pool)
        })
        .await?;
        let released = releases.map_or(0, Releases::sent);
        self.saw_clock(row.try_get("now")?);
        Ok(op_results(&row)?.split_off(released))
    }

    /// Pushes the leases of `held` to now + `lease`; the new end of each, or
    /// `None` where it was lost.
    pub(crate) async fn extend(
        &self,
        held: &[&Held],
        lease: Duration,
    ) -> Result<Vec<Option<SystemTime>>, Error> {
        let ids: Vec<&str> = held.iter().map(|h| h.id.as_str()).collect();
        let tokens: Vec<&str> = held.iter().map(|h| &*h.token).collect();
        let ends: Vec<i64> = retry_dead(|| {
            sqlx::query_scalar(&self.sql.extend)
                .bind(&self.name)
                .bind(&self.channel)
                .bind(millis(lease))
                .bind(&ids)
                .bind(&tokens)
                .fetch_one(&self.pool)
        })
        .await?;
        Ok(ends
            .into_iter()
            .map(|end| (end > 0).then(|| system_time(end)))
            .collect())
    }
}

fn op_results(row: &PgRow) -> Result<Vec<OpResult>, Error> {
    let results: Vec<i32> = row.try_get("results")?;
    let from: Vec<Option<i64>> = row.try_get("cron_from")?;
    let recs: Vec<Option<String>> = row.try_get("recs")?;
    Ok(results
        .into_iter()
        .zip(from)
        .zip(recs)
        .map(|((result, from), rec)| match (result, from, rec) {
            (-1, Some(from), Some(rec)) => OpResult::NeedsCron { from, rec },
            (1, ..) => OpResult::Applied(Applied::Done),
            (2, ..) => OpResult::Applied(Applied::Dead),
            _ => OpResult::Applied(Applied::Lost),
        })
        .collect())
}

fn claimed(row: &PgRow, token: &Arc<str>) -> Result<Vec<Claimed>, Error> {
    let ids: Vec<String> = row.try_get("ids")?;
    let values: Vec<String> = row.try_get("vals")?;
    let attempts: Vec<i32> = row.try_get("attempts")?;
    let deadlines: Vec<i64> = row.try_get("deadlines")?;
    let lease_ends: Vec<i64> = row.try_get("lease_ends")?;
    let recs: Vec<Option<String>> = row.try_get("schedule_recs")?;
    let whys: Vec<Option<String>> = row.try_get("whys")?;
    Ok(ids
        .into_iter()
        .zip(values)
        .zip(attempts)
        .zip(deadlines)
        .zip(lease_ends)
        .zip(recs)
        .zip(whys)
        .map(
            |((((((id, json), attempt), deadline), lease_end), rec), why)| Claimed {
                held: Held {
                    id,
                    token: Arc::clone(token),
                    tick: rec.map(|rec| Tick {
                        rec: Arc::from(rec),
                        instant: deadline,
                    }),
                },
                json,
                attempt: u32::try_from(attempt).unwrap_or(0),
                deadline: system_time(deadline),
                lease_until: system_time(lease_end),
                bury: why,
            },
        )
        .collect())
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(crate::durable::ops::millis(d)).unwrap_or(i64::MAX)
}

pub(crate) fn system_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Runs `call` again, at once, while it fails on a pooled connection that
/// died before the statement was sent (the server restarted, or an
/// administrator terminated it): the statement never ran, so asking again
/// on the next connection is safe, and a handle does not fail one call per
/// dead connection of its pool. Other errors are returned as they are.
pub(crate) async fn retry_dead<R, E, F, Fut>(mut call: F) -> Result<R, E>
where
    E: DiedBeforeRunning,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<R, E>>,
{
    // More than a pool's connections: each dead one fails once.
    for _ in 0..64 {
        match call().await {
            Err(error) if error.died_before_running() => continue,
            other => return other,
        }
    }
    call().await
}

/// Whether the server ended the session before the statement ran:
/// shutdown, crash or an administrator's `pg_terminate_backend` (the FATAL
/// message was waiting on the socket).
pub(crate) trait DiedBeforeRunning {
    fn died_before_running(&self) -> bool;
}

impl DiedBeforeRunning for sqlx::Error {
    fn died_before_running(&self) -> bool {
        match self {
            sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("57P01" | "57P02")),
            _ => false,
        }
    }
}

impl DiedBeforeRunning for Error {
    fn died_before_running(&self) -> bool {
        matches!(self, Error::Database(e) if e.died_before_running())
    }
}
