//! What every handle and delivery of one built queue shares, and the calls
//! of the scripts that lease and finish entries.
//!
//! A claim carries a *token* made here, unique to that claim (64 random
//! bits of the process and a counter), stored with every lease it grants:
//! it is what identifies a delivery's lease, so a delivery can only finish
//! the lease its own claim was granted, even after a purge. When a claim's
//! reply is lost (a timeout, a dropped connection), the consumer sends the
//! same claim again with the same token and a `recover` bound, and gets what
//! the first sending leased, if it ran; a consumer that gives up instead
//! leaves the token *in doubt*, and the next claim of the handle gives back
//! whatever that token holds, without counting the attempt. Either way, no
//! attempt is spent on an entry nobody saw.
//!
//! On a cluster every write, each sending of a claim included, also carries
//! a request identity of its own from [`identify`](Inner::identify): the
//! server keeps the answer under it, so a sending that the cluster client
//! repeats by itself (see `scripts/lib/requests.lua`) leases nothing more
//! and answers as the first execution did.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{FromRedisValue, ScriptInvocation, Value};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::conn::Conn;
use super::error::Error;
use super::scripts::{Keys, SCRIPTS};
use super::wait::Listener;
use crate::durable::batch::Batcher;
pub(crate) use crate::durable::ops::{Held, Op};
use crate::durable::ops::{OpResult, Releases, Retention, Tick, pending_where_unsettled, settle};
pub(crate) use crate::durable::ops::{cron_instants, millis};
use crate::durable::store::{Applied, Extended};
use crate::durable::wait::Waiter;
use crate::lock::Lock;
use crate::queue::deadline_after;

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    /// The rules the claim and finish scripts take (max attempts and
    /// dead-letter retention), formatted once.
    pub(crate) rules: String,
    pub(crate) poll_interval: Duration,
    pub(crate) waiter: Waiter,
    /// The latest server clock reading seen (ms since the epoch): a lower
    /// bound of the clock of any later claim.
    server_now: AtomicU64,
    /// Claims whose reply was lost and that nobody will send again: the next
    /// claim gives back what they hold.
    /// (As `Op::release`s, each with a lower bound of the end of the
    /// leases its claim may have been granted.)
    in_doubt: Lock<Vec<Op>>,
    /// Single inserts made at the same time, sent as one script.
    pub(crate) inserts: Arc<Batcher<Put, (bool, String), Error>>,
    /// The ids of finished entries whose results are kept, as the done
    /// channel announces them (the listener sends them), for `wait`.
    pub(crate) finishes: broadcast::Sender<Arc<str>>,
    /// Counts the done channel's announcements of cancelled leases (and
    /// the listener's subscriptions, after which some may have been
    /// missed), for workers.
    pub(crate) cancels: watch::Sender<u64>,
}

/// One entry of an insert: its id (`""`: made by the script), value,
/// `"d"` (`ms` is a delay) or `"a"` (`ms` is a time).
#[derive(Debug)]
pub(crate) struct Put {
    pub(crate) id: String,
    pub(crate) json: String,
    pub(crate) kind: &'static str,
    pub(crate) ms: u64,
    /// The inserting span's trace context (feature `opentelemetry`).
    pub(crate) trace: Option<String>,
}

/// The most entries one batch of single inserts carries: about a
/// millisecond of the server's time, which a claim behind it waits.
const INSERT_BATCH: usize = 256;

/// An op's arguments, as `scripts/lib/finish.lua` reads them.
fn push_op(invocation: &mut ScriptInvocation<'_>, op: &Op) {
    invocation
        .arg(op.kind)
        .arg(&op.id)
        .arg(&*op.token)
        .arg(op.ms)
        .arg(&op.reason)
        .arg(&op.cands)
        .arg(op.output.as_deref().unwrap_or(""));
}

/// One entry of a claim.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) held: Held,
    /// The stored value; bytes, since a writer in another language may have
    /// stored anything.
    pub(crate) json: Option<Vec<u8>>,
    pub(crate) attempt: u32,
    pub(crate) deadline: SystemTime,
    pub(crate) lease_until: SystemTime,
    /// Set when the entry must go to the dead letters instead (a cron tick
    /// past its attempts: its successor needs this process's cron instants).
    pub(crate) bury: Option<String>,
    /// The key whose limits it runs under, if any.
    pub(crate) key: Option<String>,
    pub(crate) priority: i16,
    /// The inserting span's trace context, if it was kept.
    pub(crate) trace: Option<String>,
}

/// The answer of a claim.
#[derive(Debug)]
pub(crate) struct Claim {
    /// The server's clock, in ms since the epoch.
    pub(crate) now: i64,
    /// The score of the schedule's head after the claim.
    pub(crate) head: Option<i64>,
    /// What became of each op sent with the claim.
    pub(crate) done: Vec<Applied>,
    pub(crate) items: Vec<Claimed>,
    /// The count of announcements read before the claim was sent.
    pub(crate) kicks: u64,
}

/// A claim on its way: sent again with the same token after a lost reply.
#[derive(Debug)]
pub struct Attempt {
    token: Arc<str>,
    /// Set while a sending may have run without its reply reaching us (in
    /// flight, or its reply lost): a lower bound of the end of the leases
    /// it was granted.
    in_doubt: Option<i64>,
}

impl Attempt {
    pub(crate) fn new() -> Attempt {
        Attempt {
            token: crate::durable::store::new_token(),
            in_doubt: None,
        }
    }

    /// Names worker `worker` in the claim's token, `<worker>/<token>`, so
    /// that the leases the claim grants name their holder (the token stays
    /// unique; a worker's id holds no `/`). A claim already sent keeps its
    /// token.
    pub(crate) fn for_worker(&mut self, worker: &str) {
        if self.in_doubt.is_none() && !self.token.contains('/') {
            self.token = Arc::from(format!("{worker}/{}", self.token));
        }
    }
}

impl Inner {
    pub(crate) fn new(
        name: String,
        conn: Conn,
        lease: Duration,
        max_attempts: u32,
        retention: Retention,
        poll_interval: Duration,
    ) -> Inner {
        Inner {
            keys: Keys::new(&name),
            name,
            conn,
            lease,
            max_attempts,
            rules: rules_of(retention, max_attempts),
            poll_interval,
            waiter: Waiter::default(),
            server_now: AtomicU64::new(0),
            in_doubt: Lock::new(Vec::new()),
            inserts: Batcher::new(INSERT_BATCH, 1),
            finishes: broadcast::channel(1024).0,
            cancels: watch::Sender::new(0),
        }
    }

    /// Inserts `puts` in one script run, each with its own answer. A batch
    /// that the server answered with an error reply wrote nothing (each
    /// script checks before its first write; a request the server refused
    /// to read, such as one holding a value over its `proto-max-bulk-len`,
    /// never ran): it is sent again one insert at a time, so one bad entry
    /// fails only its own caller. Any other error (a lost reply, one that
    /// does not parse) may come after the script ran: each caller gets it.
    pub(crate) async fn insert_batch(&self, puts: Vec<Put>) -> Vec<Result<(bool, String), Error>> {
        match self.insert_run(&puts, false).await {
            Ok(reply) => reply.into_iter().map(Ok).collect(),
            Err(Error::Redis(e)) if puts.len() > 1 && e.code().is_some() => {
                let alone = puts
                    .chunks(1)
                    .map(|put| async move { self.insert_run(put, false).await });
                futures::future::join_all(alone)
                    .await
                    .into_iter()
                    .map(|reply| reply.map(|mut reply| reply.remove(0)))
                    .collect()
            }
            Err(error) => puts.iter().map(|_| Err(error.again())).collect(),
        }
    }

    /// Inserts `put` alone, on a connection of its own (see
    /// `Conn::run_apart`): a value the server may refuse to read.
    pub(crate) async fn insert_apart(&self, put: Put) -> Result<(bool, String), Error> {
        let mut reply = self.insert_run(std::slice::from_ref(&put), true).await?;
        Ok(reply.remove(0))
    }

    /// One run of the insert script for `puts`, on a connection of its own
    /// if `apart`: `(inserted, id)` for each, in order.
    async fn insert_run(&self, puts: &[Put], apart: bool) -> Result<Vec<(bool, String)>, Error> {
        let mut invocation = self.script(&SCRIPTS.insert);
        invocation.arg(&self.keys.channel);
        self.identify(&mut invocation);
        invocation.arg(puts.len());
        for put in puts {
            invocation
                .arg(&put.id)
                .arg(&put.json)
                .arg(put.kind)
                .arg(put.ms)
                .arg("") // no options
                .arg(put.trace.as_deref().unwrap_or(""));
        }
        // {inserted, id, ...}, in order.
        let reply: Vec<(bool, String)> = if apart {
            self.conn.run_apart(&invocation).await?
        } else {
            self.run(&invocation).await?
        };
        if reply.len() != puts.len() {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "the insert script answered for another number of entries",
                format!("{} for {}", reply.len(), puts.len()),
            ))));
        }
        let inserted = reply.iter().filter(|(inserted, _)| *inserted).count();
        crate::durable::metrics::inserted("redis", &self.name, "insert", inserted as u64);
        Ok(reply)
    }

    /// An invocation of `script` with the queue's keys.
    pub(crate) fn script(&self, script: &'static redis::Script) -> ScriptInvocation<'static> {
        let mut invocation = script.prepare_invoke();
        for key in &self.keys.all {
            invocation.key(key);
        }
        invocation
    }

    /// Adds a write's request identity (see `scripts/lib/requests.lua`).
    /// On a cluster, whose client sends a request again by itself after a
    /// dropped connection (as long as its caller waits: a response
    /// timeout), a token made for this one request and how long the store
    /// keeps its answer for a second execution: twice the response
    /// timeout. On a single server, whose connection never sends a request
    /// twice, nothing (an empty argument): nothing is kept.
    pub(crate) fn identify(&self, invocation: &mut ScriptInvocation<'_>) {
        if self.conn.is_cluster() {
            let keep = millis(self.conn.response_timeout())
                .saturating_mul(2)
                .max(1);
            let token = crate::durable::store::new_token();
            invocation.arg(format!("{keep}:{token}"));
        } else {
            invocation.arg("");
        }
    }

    pub(crate) async fn run<R: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<R, Error> {
        self.conn.run(invocation).await
    }

    fn saw_clock(&self, now: i64) {
        self.server_now
            .fetch_max(u64::try_from(now).unwrap_or(0), Ordering::Relaxed);
    }

    /// When, on this process's clock, the schedule's head is due according
    /// to `claim` (the head may be a lease running out); a poll interval on
    /// if the queue is empty. Recorded for the waiter.
    pub(crate) fn next_due(&self, claim: &Claim) -> Instant {
        let wait = claim.head.map_or(self.poll_interval, |head| {
            Duration::from_millis(u64::try_from(head - claim.now).unwrap_or(0))
        });
        let next_due = deadline_after(Instant::now(), wait);
        self.waiter.set_next_due(next_due, claim.kicks);
        next_due
    }

    /// Loads the scripts a worker may first need when a reply is slow (a
    /// shutdown's finishes, a heartbeat), so that they cost one round trip
    /// rather than two. Best effort: a script missing later is loaded then.
    pub(crate) async fn preload(&self) {
        for script in [&SCRIPTS.finish, &SCRIPTS.extend, &SCRIPTS.claim] {
            if let Err(error) = self.conn.load(script).await {
                tracing::debug!(queue = %self.name, %error, "could not preload a script");
                return;
            }
        }
    }

    /// Fails if a key of the queue holds a foreign type.
    pub(crate) async fn check(&self) -> Result<(), Error> {
        let _: i64 = self.run(&self.script(&SCRIPTS.check)).await?;
        Ok(())
    }

    /// Fails, naming what is missing, if the user may not run what the
    /// queue runs on its keys (Redis 7; older servers cannot tell).
    pub(crate) async fn check_rights(&self) -> Result<(), Error> {
        let mut invocation = self.script(&SCRIPTS.rights);
        invocation.arg(if self.conn.is_cluster() { "1" } else { "0" });
        let checked: i64 = self.run(&invocation).await?;
        if checked == 0 {
            tracing::debug!(queue = %self.name,
                "this server cannot check ACL rights ahead (before Redis 7)");
        }
        Ok(())
    }

    /// Starts the task that turns announcements into kicks, once per handle.
    pub(crate) fn listen(&self) {
        self.waiter.listen(|kicks, stop| {
            Listener {
                clients: self.conn.pubsub_clients().to_vec(),
                channel: self.keys.channel.clone(),
                done: self.keys.done.clone(),
                finishes: self.finishes.clone(),
                cancels: self.cancels.clone(),
                queue: self.name.clone(),
                response_timeout: self.conn.response_timeout(),
                ping_after: self
                    .poll_interval
                    .saturating_mul(10)
                    .clamp(Duration::from_millis(500), Duration::from_secs(30)),
            }
            .run(kicks, stop)
        });
    }

    /// Leaves `attempt` for the next claim of this handle to give back.
    pub(crate) fn abandon(&self, attempt: &Attempt) -> bool {
        let Some(from) = attempt.in_doubt else {
            return false;
        };
        let from = u64::try_from(from).unwrap_or(0);
        self.in_doubt.lock().push(Op::release(&attempt.token, from));
        true
    }

    /// Sends `attempt` (again, after a lost reply): applies `ops`, then
    /// leases up to `max` due entries (at most [`MAX_BATCH`]). From the
    /// moment it is sent until its reply comes, the claim is in doubt: on an
    /// error after which it may have run, or if this future is dropped,
    /// send it again or [`abandon`](Self::abandon) it.
    pub(crate) async fn claim(
        &self,
        attempt: &mut Attempt,
        max: usize,
        ops: &[Op],
    ) -> Result<Claim, Error> {
        let releases = Releases::take(&self.in_doubt);
        let previous = attempt.in_doubt;
        attempt.in_doubt = Some(previous.unwrap_or_else(|| self.recover_bound()));
        let mut invocation = self.script(&SCRIPTS.claim);
        invocation
            .arg(max.min(MAX_BATCH))
            .arg(millis(self.lease).max(1))
            .arg(&self.rules)
            .arg(&*attempt.token)
            .arg(previous.unwrap_or(-1))
            .arg(&self.keys.channel);
        // Each sending is a request of its own: the ops it carries may
        // differ from an earlier sending's.
        self.identify(&mut invocation);
        invocation.arg(releases.ops.len() + ops.len());
        for release in &releases.ops {
            push_op(&mut invocation, release);
        }
        for op in ops {
            push_op(&mut invocation, &op.with_cron_instants(self.seen_clock()));
        }
        let kicks = *self.waiter.kicks().borrow();
        let reply: Value = match self.run(&invocation).await {
            Ok(reply) => reply,
            Err(error) => {
                if !error.is_in_doubt() {
                    attempt.in_doubt = previous;
                }
                return Err(error);
            }
        };
        attempt.in_doubt = None;
        let released = releases.sent();
        let mut fields = Fields::new(reply, "claim")?;
        let now: i64 = fields.next()?;
        let head: i64 = fields.next()?;
        self.saw_clock(now);
        let mut results = op_results(fields.next_value()?)?.split_off(released);
        let items = parse_items(fields.next_value()?, &attempt.token)?;
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
        Ok(Claim {
            now,
            head: (head >= 0).then_some(head),
            done,
            items,
            kicks,
        })
    }

    /// The store's clock as last seen, in ms.
    fn seen_clock(&self) -> i64 {
        i64::try_from(self.server_now.load(Ordering::Relaxed)).unwrap_or(0)
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
        let mut invocation = self.script(&SCRIPTS.finish);
        let doubts = releases.as_ref().map_or(0, |r| r.ops.len());
        invocation.arg(&self.rules).arg(&self.keys.channel);
        self.identify(&mut invocation);
        invocation.arg(doubts + ops.len());
        for release in releases.iter().flat_map(|r| &r.ops) {
            push_op(&mut invocation, release);
        }
        for op in ops {
            push_op(&mut invocation, &op.with_cron_instants(self.seen_clock()));
        }
        let reply: Value = self.run(&invocation).await?;
        let released = releases.map_or(0, Releases::sent);
        let mut fields = Fields::new(reply, "finish")?;
        let now: i64 = fields.next()?;
        self.saw_clock(now);
        Ok(op_results(fields.next_value()?)?.split_off(released))
    }

    /// A lower bound of the end of any lease a claim sent now is granted.
    fn recover_bound(&self) -> i64 {
        let seen = i64::try_from(self.server_now.load(Ordering::Relaxed)).unwrap_or(0);
        if seen == 0 {
            return 0;
        }
        // A second of slack for a server clock stepping back.
        (seen + i64::try_from(millis(self.lease)).unwrap_or(0) - 1000).max(0)
    }

    /// Pushes the leases of `held` to now + `lease`; the new end of each, or
    /// `None` where it was lost.
    pub(crate) async fn extend(
        &self,
        held: &[&Held],
        lease: Duration,
    ) -> Result<Vec<Option<SystemTime>>, Error> {
        let ends = self.extend_raw(held, lease, None).await?;
        Ok(ends
            .into_iter()
            .map(|end| (end > 0).then(|| system_time(end)))
            .collect())
    }

    /// As `extend`, telling a lease lost to a cancel, and refreshing the
    /// record of worker `worker` (`(id, record JSON)`) in the same script.
    pub(crate) async fn extend_marked(
        &self,
        held: &[&Held],
        lease: Duration,
        worker: Option<(&str, &str)>,
    ) -> Result<Vec<Extended>, Error> {
        let ends = self.extend_raw(held, lease, worker).await?;
        Ok(ends
            .into_iter()
            .map(|end| match end {
                end if end > 0 => Extended::Held,
                -1 => Extended::Cancelled,
                _ => Extended::Lost,
            })
            .collect())
    }

    async fn extend_raw(
        &self,
        held: &[&Held],
        lease: Duration,
        worker: Option<(&str, &str)>,
    ) -> Result<Vec<i64>, Error> {
        let mut invocation = self.script(&SCRIPTS.extend);
        let (id, record) = worker.unwrap_or(("", ""));
        invocation
            .arg(millis(lease))
            .arg(&self.keys.channel)
            .arg(id)
            .arg(record);
        for lease in held {
            invocation.arg(&lease.id).arg(&*lease.token);
        }
        self.run(&invocation).await
    }
}

fn op_results(value: Value) -> Result<Vec<OpResult>, Error> {
    let results: Vec<Value> = parse(value)?;
    results
        .into_iter()
        .map(|result| match result {
            Value::Int(applied) => Ok(OpResult::Applied(match applied {
                1 => Applied::Done,
                2 => Applied::Dead,
                _ => Applied::Lost,
            })),
            other => {
                let (_, from, rec): (i64, i64, String) = parse(other)?;
                Ok(OpResult::NeedsCron { from, rec })
            }
        })
        .collect()
}

/// One item of a claim's reply: id, value, attempt, deadline, lease end,
/// schedule record (or ''), reason to bury it (or ''), key (or ''),
/// priority, trace context (or '').
type Item = (
    String,
    Option<Vec<u8>>,
    u32,
    i64,
    i64,
    String,
    String,
    String,
    i16,
    String,
);

/// The rules the claim and finish scripts take: `<max attempts>`, or
/// `<max attempts>,<dead max age ms>,<dead max count>[,<keep results
/// ms>]` (-1: no limit).
fn rules_of(retention: Retention, max_attempts: u32) -> String {
    let keep = millis(retention.keep_results);
    if keep == 0 {
        return retention.with_limit(max_attempts);
    }
    let age = retention
        .max_age
        .map_or(-1, |age| i64::try_from(millis(age)).unwrap_or(i64::MAX));
    let count = retention
        .max_count
        .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    format!("{max_attempts},{age},{count},{keep}")
}

fn parse_items(items: Value, token: &Arc<str>) -> Result<Vec<Claimed>, Error> {
    let items: Vec<Value> = parse(items)?;
    items
        .into_iter()
        .map(|item| {
            let (id, json, attempt, deadline, lease_until, rec, bury, key, priority, trace): Item =
                parse(item)?;
            Ok(Claimed {
                held: Held {
                    id,
                    token: Arc::clone(token),
                    tick: (!rec.is_empty()).then(|| Tick {
                        rec: Arc::from(rec),
                        instant: deadline,
                    }),
                },
                json,
                attempt,
                deadline: system_time(deadline),
                lease_until: system_time(lease_until),
                bury: (!bury.is_empty()).then_some(bury),
                key: (!key.is_empty()).then_some(key),
                priority,
                trace: (!trace.is_empty()).then_some(trace),
            })
        })
        .collect()
}

/// The fields of a script's reply, one by one.
struct Fields {
    fields: std::vec::IntoIter<Value>,
    script: &'static str,
}

impl Fields {
    fn new(reply: Value, script: &'static str) -> Result<Fields, Error> {
        let fields: Vec<Value> = parse(reply)?;
        Ok(Fields {
            fields: fields.into_iter(),
            script,
        })
    }

    fn next_value(&mut self) -> Result<Value, Error> {
        self.fields.next().ok_or_else(|| {
            Error::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "short reply from a script",
                self.script.to_owned(),
            )))
        })
    }

    fn next<R: FromRedisValue>(&mut self) -> Result<R, Error> {
        parse(self.next_value()?)
    }
}

/// The most entries one claim takes: a script holds the whole server while
/// it runs, so a batch stays a few milliseconds long.
pub(crate) const MAX_BATCH: usize = crate::durable::store::MAX_CLAIM;

pub(crate) fn system_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

pub(crate) fn parse<R: FromRedisValue>(value: Value) -> Result<R, Error> {
    Ok(redis::from_redis_value(value).map_err(redis::RedisError::from)?)
}
