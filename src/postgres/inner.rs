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
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, Row};
use tokio::time::Instant;

use super::error::Error;
use super::sql::Statements;
use crate::durable::batch::Batcher;
pub(crate) use crate::durable::ops::{Held, Op, cron_instants};
use crate::durable::ops::{OpResult, Releases, Retention, Tick, pending_where_unsettled, settle};
use crate::durable::store::{Applied, Extended};
use crate::durable::wait::Waiter;
use crate::lock::Lock;
use crate::queue::deadline_after;

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) name: String,
    /// What tells this queue from every other, in cursors: its name, the
    /// server (`system_identifier`), database and schema.
    pub(crate) identity: String,
    pub(crate) pool: PgPool,
    pub(crate) sql: Statements,
    /// The `LISTEN` channel of the queue.
    pub(crate) channel: String,
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    /// The dead-letter retention claims and finishes apply:
    /// '<max age ms>,<max count>' (-1: no limit), or '' for none.
    pub(crate) dead: String,
    pub(crate) poll_interval: Duration,
    /// The longest wait for a connection, then for one statement's answer.
    pub(crate) response_timeout: Duration,
    pub(crate) waiter: Waiter,
    /// The latest database clock reading seen (ms since the epoch).
    server_now: AtomicI64,
    /// Claims whose reply was lost and that nobody will send again (as
    /// `Op::release`s): the next claim or finish gives back what they hold.
    in_doubt: Lock<Vec<Op>>,
    /// Single inserts made at the same time, sent as one statement.
    pub(crate) inserts: Arc<Batcher<Put, (bool, String), Failed>>,
    /// How long the results of entries that finish through this handle
    /// are kept, in ms (0: none).
    pub(crate) keep: i64,
    /// The ids of finished entries that a `wait` of this schema looks for,
    /// as the listener hears them ('f<id>').
    pub(crate) finishes: tokio::sync::broadcast::Sender<Arc<str>>,
    /// Counts the cancels of leased entries the listener hears of ('c').
    pub(crate) cancels: Arc<tokio::sync::watch::Sender<u64>>,
    /// Counts the finishes the listener heard of, each counted before it
    /// is pushed to the waiters.
    pub(crate) pushes: Arc<std::sync::atomic::AtomicU64>,
    /// The lookups of `wait` under way, by id, each with the count of
    /// pushes when it was sent: waiters of one id share one (see
    /// `results.rs`).
    pub(crate) lookups: Lock<std::collections::HashMap<String, Looking>>,
}

/// A lookup of `wait` under way: the count of pushes when it was sent, and
/// its answer once it comes (`None` while it runs; the sender dropped if
/// it failed or was given up).
pub(crate) type Looking = (u64, tokio::sync::watch::Receiver<Option<Seen>>);

/// What a lookup found, shared by the waiters of one id.
#[derive(Debug, Clone)]
pub(crate) enum Seen {
    Finished(crate::durable::JobResult),
    Live,
    Unknown,
}

/// One entry of an insert: its id (`None`: made by the database), value,
/// and `ms`, a time (`absolute`) or a delay.
#[derive(Debug)]
pub(crate) struct Put {
    pub(crate) id: Option<String>,
    pub(crate) json: String,
    pub(crate) absolute: bool,
    pub(crate) ms: i64,
    /// The inserting span's trace context.
    pub(crate) trace: Option<String>,
}

/// Why an insert of a batch did not apply.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The batch's statement failed; this is its error.
    Error(Error),
    /// The batch's statement failed with an error that cannot be copied
    /// for each insert (the database's own): it did not apply, and each
    /// insert is sent again alone, to get its own.
    Alone,
}

/// The most entries one batch of single inserts carries (a few
/// milliseconds of the database's time, one transaction).
const INSERT_BATCH: usize = 256;

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
    fn push(&mut self, mut op: Op) {
        if op.kind == "a" {
            // An ack's output rides in its reason (an ack has none).
            op.reason = op.output.take().unwrap_or_default();
        }
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
    /// The key whose limits it runs under.
    pub(crate) key: Option<String>,
    pub(crate) priority: i16,
    /// The inserting span's trace context.
    pub(crate) trace: Option<String>,
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

    /// Makes the token of this attempt's next claims name worker
    /// `worker` (`<worker> <token>`: an entry's holder is read from its
    /// lease), unless a sending may still be on its way (it keeps its
    /// token).
    pub(crate) fn name_worker(&mut self, worker: &str) {
        if self.in_doubt || self.token.starts_with(&format!("{worker} ")) {
            return;
        }
        self.token = Arc::from(format!("{worker} {}", crate::durable::store::new_token()));
    }
}

/// The worker named by a lease's token, if its claim was a worker's.
pub(crate) fn worker_of(token: &str) -> Option<&str> {
    token.split_once(' ').map(|(worker, _)| worker)
}

impl Inner {
    // (A constructor of the fields it is given, one each.)
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        identity: String,
        name: String,
        pool: PgPool,
        sql: Statements,
        channel: String,
        lease: Duration,
        max_attempts: u32,
        retention: Retention,
        poll_interval: Duration,
        response_timeout: Duration,
    ) -> Inner {
        let keep = millis(retention.keep_results);
        Inner {
            keep,
            finishes: tokio::sync::broadcast::channel(1024).0,
            cancels: Arc::new(tokio::sync::watch::channel(0).0),
            pushes: Arc::new(AtomicU64::new(0)),
            lookups: Lock::new(std::collections::HashMap::new()),
            identity,
            name,
            pool,
            sql,
            channel,
            lease,
            max_attempts,
            dead: retention.rules(),
            poll_interval,
            response_timeout,
            waiter: Waiter::default(),
            server_now: AtomicI64::new(0),
            in_doubt: Lock::new(Vec::new()),
            inserts: Batcher::new(INSERT_BATCH, 1),
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
        let reply: Result<PgRow, Error> = call!(self, |conn| {
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
                .bind(&self.dead)
                .bind(self.keep)
                .fetch_one(conn)
        });
        let row = match reply {
            Ok(row) => row,
            Err(error) => {
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
        let row: PgRow = call!(self, |conn| {
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
                .bind(&self.dead)
                .bind(self.keep)
                .fetch_one(conn)
        })?;
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
        let ends: Vec<i64> = call!(self, |conn| {
            sqlx::query_scalar(&self.sql.extend)
                .bind(&self.name)
                .bind(&self.channel)
                .bind(millis(lease))
                .bind(&ids)
                .bind(&tokens)
                .fetch_one(conn)
        })?;
        Ok(ends
            .into_iter()
            .map(|end| (end > 0).then(|| system_time(end)))
            .collect())
    }

    /// A worker's heartbeat (`beat` in `sql/schema.sql`): refreshes its
    /// `record` and extends `held` to now + `lease`, telling a lease lost
    /// to a cancel from one lost otherwise.
    pub(crate) async fn beat(
        &self,
        held: &[Held],
        lease: Duration,
        record: Option<(&str, &str, u64)>,
    ) -> Result<Vec<Extended>, Error> {
        let ids: Vec<&str> = held.iter().map(|h| h.id.as_str()).collect();
        let tokens: Vec<&str> = held.iter().map(|h| &*h.token).collect();
        let ends: Vec<i64> = match record {
            Some((worker, record, every)) => call!(self, |conn| {
                sqlx::query_scalar(&self.sql.beat)
                    .bind(&self.name)
                    .bind(&self.channel)
                    .bind(millis(lease))
                    .bind(&ids)
                    .bind(&tokens)
                    .bind(worker)
                    .bind(record)
                    .bind(i64::try_from(every).unwrap_or(i64::MAX))
                    .fetch_one(conn)
            })?,
            None => call!(self, |conn| {
                sqlx::query_scalar(&self.sql.extend)
                    .bind(&self.name)
                    .bind(&self.channel)
                    .bind(millis(lease))
                    .bind(&ids)
                    .bind(&tokens)
                    .fetch_one(conn)
            })?,
        };
        Ok(ends
            .into_iter()
            .map(|end| match end {
                end if end > 0 => Extended::Held,
                -1 => Extended::Cancelled,
                _ => Extended::Lost,
            })
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
    let keys: Vec<Option<String>> = row.try_get("keys")?;
    let priorities: Vec<i16> = row.try_get("priorities")?;
    let mut traces: Vec<Option<String>> = row.try_get("traces")?;
    traces.resize(ids.len(), None);
    Ok(ids
        .into_iter()
        .zip(values)
        .zip(attempts)
        .zip(deadlines)
        .zip(lease_ends)
        .zip(recs)
        .zip(whys)
        .zip(keys.into_iter().zip(priorities).zip(traces))
        .map(
            |(
                ((((((id, json), attempt), deadline), lease_end), rec), why),
                ((key, priority), trace),
            )| {
                Claimed {
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
                    key,
                    priority,
                    trace,
                }
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

/// Runs a statement on a connection of the pool, waiting at most the
/// response timeout for the connection and then for the answer:
/// `call!(inner, |conn| sqlx::query(..).fetch_one(conn))` (a macro, so that
/// the statement may borrow both the connection and the caller's values).
///
/// A statement that fails on a pooled connection that died before it was
/// sent (the server restarted, or an administrator terminated the session)
/// never ran: it is sent again at once on the next connection, so a handle
/// does not fail one call per dead connection of its pool. A statement
/// with no answer in time may have run: it fails in doubt, and its
/// connection is closed rather than pooled (the link may have gone silent;
/// sqlx's test of a connection given back, a round trip, would wait for
/// good), and so is every idle one (see [`Inner::close_idle`]), so the next
/// call does not wait out another timeout on a connection as dead.
macro_rules! call {
    ($inner:expr, |$conn:ident| $statement:expr) => {{
        let inner: &$crate::postgres::inner::Inner = $inner;
        let mut dead = 0;
        loop {
            let mut pooled = inner.acquire().await?;
            let answer = {
                let $conn: &mut ::sqlx::PgConnection = &mut pooled;
                ::tokio::time::timeout(inner.response_timeout, $statement).await
            };
            match inner.answered(pooled, answer, &mut dead) {
                Some(result) => break result,
                None => continue,
            }
        }
    }};
}
pub(crate) use call;

impl Inner {
    /// Inserts `puts` in one statement (one transaction): for each, whether
    /// it was inserted (`false`: its id was taken) and its id.
    pub(crate) async fn insert_batch(&self, puts: Vec<Put>) -> Vec<Result<(bool, String), Failed>> {
        let mut ids = Vec::with_capacity(puts.len());
        let mut values = Vec::with_capacity(puts.len());
        let mut absolute = Vec::with_capacity(puts.len());
        let mut ms = Vec::with_capacity(puts.len());
        let mut traces = Vec::with_capacity(puts.len());
        for put in &puts {
            ids.push(put.id.as_deref());
            values.push(put.json.as_str());
            absolute.push(put.absolute);
            ms.push(put.ms);
            traces.push(put.trace.as_deref());
        }
        let made: Result<Vec<Option<String>>, Error> = async {
            call!(self, |conn| {
                sqlx::query_scalar(&self.sql.insert_batch)
                    .bind(&self.name)
                    .bind(&self.channel)
                    .bind(&ids)
                    .bind(&values)
                    .bind(&absolute)
                    .bind(&ms)
                    .bind(&traces)
                    .fetch_one(conn)
            })
        }
        .await;
        match made {
            Ok(made) if made.len() == puts.len() => {
                let inserted = made.iter().filter(|id| id.is_some()).count();
                crate::durable::metrics::inserted(
                    "postgres",
                    &self.name,
                    "insert",
                    inserted as u64,
                );
                made.into_iter()
                    .zip(puts)
                    // NULL: the caller's id was taken.
                    .map(|(made, put)| {
                        Ok(match made {
                            Some(id) => (true, id),
                            None => (false, put.id.unwrap_or_default()),
                        })
                    })
                    .collect()
            }
            Ok(made) => {
                let error = sqlx::Error::Protocol(format!(
                    "the batch of inserts answered {} rows for {}",
                    made.len(),
                    puts.len()
                ));
                puts.iter()
                    .map(|_| {
                        Err(Failed::Error(Error::Database(
                            copy(&error).expect("copied"),
                        )))
                    })
                    .collect()
            }
            Err(error) => puts
                .iter()
                .map(|_| match &error {
                    Error::Database(e) => match copy(e) {
                        Some(e) => Err(Failed::Error(Error::Database(e))),
                        None => Err(Failed::Alone),
                    },
                    _ => Err(Failed::Alone),
                })
                .collect(),
        }
    }

    /// A connection of the pool, within the response timeout.
    pub(crate) async fn acquire(&self) -> Result<PoolConnection<Postgres>, Error> {
        let acquired = tokio::time::timeout(self.response_timeout, self.pool.acquire())
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut));
        if let Err(sqlx::Error::PoolTimedOut) = acquired {
            // A pool that tests an idle connection before handing it out
            // (sqlx's default, so maybe a service's own pool) waits here on
            // a silent one.
            self.close_idle();
        }
        Ok(acquired?)
    }

    /// Closes every idle connection of the pool, after a wait for the
    /// database ran out. The link may have gone silent (a NAT or firewall
    /// that dropped its state: no FIN, no RST), and then every connection
    /// that sat idle through it is as dead as the one that timed out; left
    /// in the pool, each would cost a later call another full response
    /// timeout, one after the other (a pool of 10, ten timeouts). Which of
    /// them answered last before the silence began cannot be told (sqlx
    /// does not show when a connection was given back but to a
    /// `before_acquire` hook, which a service's own pool does not have), so
    /// all go: a healthy one costs a connect, and only after a timeout.
    ///
    /// Connections in use are left to their own call's timeout, and one
    /// given back from now on has just answered sqlx's test on release (see
    /// [`release`]): from here the pool holds no connection that was idle
    /// through the silence, so the next call opens a new one.
    fn close_idle(&self) {
        // `try_acquire` hands out only idle connections, untested, without
        // waiting; each one closed shrinks the pool, so this is bounded. It
        // hands out none while calls wait for a connection: those take the
        // idle ones, and each waits out at most its own timeout, side by
        // side.
        for _ in 0..self.pool.size() {
            match self.pool.try_acquire() {
                Some(conn) => drop(conn.detach()),
                None => break,
            }
        }
    }

    /// What [`call!`] makes of a statement's answer: `None` to send it
    /// again on another connection.
    pub(crate) fn answered<R, E: DiedBeforeRunning + Into<Error>>(
        &self,
        conn: PoolConnection<Postgres>,
        answer: Result<Result<R, E>, tokio::time::error::Elapsed>,
        dead: &mut u32,
    ) -> Option<Result<R, Error>> {
        match answer {
            Ok(Err(error)) if error.died_before_running() && *dead < 64 => {
                *dead += 1;
                drop(conn.detach());
                None
            }
            Ok(result) => {
                release(conn, self.response_timeout);
                Some(result.map_err(Into::into))
            }
            Err(_) => {
                drop(conn.detach());
                self.close_idle();
                Some(Err(timed_out("a statement", self.response_timeout)))
            }
        }
    }
}

/// Gives `conn` back to the pool. sqlx tests it first with a round trip
/// that has no bound of its own: one that gets no answer in time drops the
/// connection (closed, and the pool may open another).
fn release(mut conn: PoolConnection<Postgres>, limit: Duration) {
    let back = conn.return_to_pool();
    drop(conn);
    tokio::spawn(async move {
        let _ = tokio::time::timeout(limit, back).await;
    });
}

/// The error of a wait for the database that ran out: transient, and in
/// doubt (what was sent may have run).
pub(crate) fn timed_out(what: &str, limit: Duration) -> Error {
    Error::Database(sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} got no answer from PostgreSQL within {limit:?} (response_timeout)"),
    )))
}

/// `fut` on the caller's own connection (a transactional call), bounded by
/// the response timeout; that connection cannot be closed here.
pub(crate) async fn on_callers<R>(
    limit: Duration,
    fut: impl Future<Output = Result<R, Error>>,
) -> Result<R, Error> {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| Err(timed_out("a statement on the caller's connection", limit)))
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

/// `error` again, for another insert of its batch, where it can be
/// rebuilt with what makes it transient or in doubt; `None` for the
/// database's own errors (the statement failed: nothing applied).
fn copy(error: &sqlx::Error) -> Option<sqlx::Error> {
    Some(match error {
        sqlx::Error::Io(e) => sqlx::Error::Io(std::io::Error::new(e.kind(), e.to_string())),
        sqlx::Error::Protocol(why) => sqlx::Error::Protocol(why.clone()),
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        sqlx::Error::WorkerCrashed => sqlx::Error::WorkerCrashed,
        _ => return None,
    })
}
