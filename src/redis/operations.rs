//! Looking into and acting on a [`RedisQueue`]: entries by state a page at
//! a time (`entries.lua`), one entry, pause and resume, run a schedule now,
//! the dead letters all at once.

use std::time::Duration;

use redis::Value;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{Error, check_id};
use super::inner::{millis, parse};
use super::queue::RedisQueue;
use super::scripts::SCRIPTS;
use crate::durable::{At, Cursor, EntryInfo, EntryState, MAX_PAGE, PARKED, Page, Row};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> RedisQueue<T> {
    /// One page of the entries in `state`, in delivery order (`Pending`,
    /// `Due`: by due time, FIFO on ties; `Leased`: by lease end; `Dead`:
    /// oldest death first), at most `min(limit, 1000)`, after `cursor`.
    /// Walking the pages visits exactly once every entry that stays in that
    /// state, at the same due time (lease end), during the walk. One page is
    /// one script: a range read of the state's sorted set (`schedule`,
    /// `leases` or `dead`), O(limit + log n).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a cursor of another queue or state;
    /// [`Error::Redis`] if Redis cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::durable::EntryState;
    /// use punctual::redis::RedisQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let jobs: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "jobs").await?;
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
        self.page(state, cursor, limit, false).await
    }

    /// A page of `entries`, or of `entries_newest` (`newest`: the state's
    /// order walked backwards, with cursors of its own).
    pub(crate) async fn page(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
        newest: bool,
    ) -> Result<Page<T>, Error> {
        // The store checks the cursor's queue id: it is kept with the
        // queue's keys, on its server.
        let after = match cursor {
            None => None,
            Some(cursor) => Some(instance_of(cursor, self.name(), state, newest)?),
        };
        if limit == 0 {
            return Ok(Page {
                entries: Vec::new(),
                next: cursor.cloned(),
            });
        }
        let limit = limit.min(MAX_PAGE);
        let code = match state {
            EntryState::Pending => "p",
            EntryState::Due => "d",
            EntryState::Leased => "l",
            EntryState::Dead => "x",
        };
        let mut invocation = self.inner().script(&SCRIPTS.entries);
        invocation.arg(code);
        match &after {
            Some((at, instance)) => invocation.arg(at.score).arg(&at.tie).arg(instance),
            None => invocation.arg(-1).arg("").arg(""),
        };
        invocation
            .arg(limit)
            .arg(crate::durable::store::new_token().as_ref())
            .arg(if newest { "1" } else { "0" });
        let reply: Vec<Value> = self.inner().run(&invocation).await?;
        let mut reply = reply.into_iter();
        let _now: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        let more: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        if more < 0 {
            let cursor = cursor.map(ToString::to_string).unwrap_or_default();
            return Err(Error::InvalidId(format!(
                "cursor {cursor} is another queue's"
            )));
        }
        let instance: String = parse(reply.next().unwrap_or(Value::Nil))?;
        let mut rows = Vec::new();
        let mut last = None;
        for item in reply {
            let (id, score, member, record, value, reason, errors, schedule): PageRow =
                parse(item)?;
            last = Some((score, member));
            let mut info = row(id, state, score, &record, value, reason).info();
            health(&mut info, &record, &errors, schedule);
            rows.push(info);
        }
        let next = last.filter(|_| more == 1).map(|(score, member)| {
            let queue = identity(self.name(), &instance);
            if newest {
                At::cursor_newest(&queue, state, score, &member)
            } else {
                At::cursor(&queue, state, score, &member)
            }
        });
        Ok(Page {
            entries: rows,
            next,
        })
    }

    /// Entry `id` in any state, or `None` if it is absent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an invalid id; [`Error::Redis`] if Redis
    /// cannot be reached.
    pub async fn entry(&self, id: &str) -> Result<Option<EntryInfo<T>>, Error> {
        check_id(id)?;
        let mut invocation = self.inner().script(&SCRIPTS.entry);
        invocation.arg(id);
        let reply: Option<EntryReply> = self.inner().run(&invocation).await?;
        Ok(reply.map(
            |(now, score, dead, record, value, reason, errors, schedule)| {
                let token = record.split(',').nth(1).unwrap_or("");
                let state = if dead == 1 {
                    EntryState::Dead
                } else if score <= now {
                    EntryState::Due
                } else if !token.is_empty() {
                    EntryState::Leased
                } else {
                    EntryState::Pending
                };
                let mut info = row(id.to_owned(), state, score, &record, value, reason).info();
                health(&mut info, &record, &errors, schedule);
                info
            },
        ))
    }

    /// Puts every dead letter back as pending, due `delay` from now,
    /// attempts reset to 0, in one step; how many.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn requeue_all_dead(&self, delay: Duration) -> Result<u64, Error> {
        self.dead_all("r", delay).await
    }

    /// Deletes every dead letter, in one step; how many.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn clear_dead(&self) -> Result<u64, Error> {
        self.dead_all("c", Duration::ZERO).await
    }

    async fn dead_all(&self, what: &str, delay: Duration) -> Result<u64, Error> {
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.dead_all);
        invocation
            .arg(what)
            .arg(millis(delay))
            .arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        inner.run(&invocation).await
    }

    /// Stops every consumer of the queue, in every process, from taking
    /// anything (`take*` waits, a `Worker` starts nothing new), in the same
    /// step as each claim; what is leased may still be acked, retried or
    /// extended, and inserts, removes, resets and schedule calls work as
    /// usual. Kept in Redis (it survives restarts as far as the server's
    /// persistence goes). `true` if it was running.
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
    /// let mails: RedisQueue<String> = RedisQueue::connect("redis://127.0.0.1/", "mails").await?;
    /// // A bad deploy sends broken e-mails: stop every consumer now.
    /// mails.pause().await?;
    /// // ... fix, deploy ...
    /// mails.resume().await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self) -> Result<bool, Error> {
        self.set_paused(true).await
    }

    /// Lets consumers take again, waking those waiting at once (through
    /// the queue's channel). `true` if it was paused.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn resume(&self) -> Result<bool, Error> {
        self.set_paused(false).await
    }

    async fn set_paused(&self, paused: bool) -> Result<bool, Error> {
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.pause);
        invocation
            .arg(if paused { "1" } else { "0" })
            .arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        inner.run(&invocation).await
    }

    /// Whether the queue is paused.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn is_paused(&self) -> Result<bool, Error> {
        let invocation = self.inner().script(&SCRIPTS.paused);
        self.inner().run(&invocation).await
    }

    /// Makes schedule `name`'s pending tick due now (its instant becomes
    /// the server's now); the run after it follows the schedule's rule from
    /// that instant. `false` if there is no such schedule or its tick is
    /// leased.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a name that breaks the id rules;
    /// [`Error::Redis`] if Redis cannot be reached.
    pub async fn run_now(&self, name: &str) -> Result<bool, Error> {
        check_id(name)?;
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.reset);
        invocation.arg(name).arg(0).arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        invocation.arg("1");
        inner.run(&invocation).await
    }
}

/// One entry of a page from `entries.lua`: id, score, member, record,
/// value, reason, errors, a dead tick's schedule.
type PageRow = (
    String,
    u64,
    String,
    String,
    Option<String>,
    Option<String>,
    Vec<u8>,
    String,
);

/// What `entry.lua` answers: now, score, dead (0/1), record, value,
/// reason, errors, a dead tick's schedule.
type EntryReply = (
    u64,
    u64,
    i64,
    String,
    Option<String>,
    Option<String>,
    Vec<u8>,
    String,
);

/// Adds what the scripts keep beside an entry's record: a leased entry's
/// start (its claim's time) and worker (named in its claim's token,
/// `<worker>/<token>`), its failed attempts (`add_error` in
/// `scripts/lib/prelude.lua`), and a dead tick's schedule.
fn health<T>(info: &mut EntryInfo<T>, record: &str, errors: &[u8], schedule: String) {
    let mut fields = record.splitn(4, ',');
    let _attempt = fields.next();
    let token = fields.next().unwrap_or("");
    let since: Option<u64> = fields.next().and_then(|s| s.parse().ok());
    if info.state == EntryState::Leased {
        info.started_at = since.map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
        info.worker = token.split_once('/').map(|(worker, _)| worker.to_owned());
    }
    if !schedule.is_empty() {
        info.schedule = Some(schedule);
    }
    let mut rest = errors;
    while !rest.is_empty() {
        let Some(colon) = rest.iter().position(|&b| b == b':') else {
            break;
        };
        let head = String::from_utf8_lossy(&rest[..colon]).into_owned();
        let mut parts = head.split(',');
        let (Some(Ok(attempt)), Some(Ok(at)), Some(Ok(len))) = (
            parts.next().map(str::parse::<u32>),
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<usize>),
        ) else {
            break;
        };
        let Some(reason) = rest.get(colon + 1..colon + 1 + len) else {
            break;
        };
        info.errors.push(crate::durable::AttemptError {
            attempt,
            at: std::time::UNIX_EPOCH + Duration::from_millis(at),
            reason: String::from_utf8_lossy(reason).into_owned(),
        });
        rest = &rest[colon + 1 + len..];
    }
}

/// An entry read by a script: its record is
/// `attempt,token,since,deadline,tick,member`, or with options
/// `attempt,token,since,deadline,tick,o<priority>:<max>:<unique>:<key
/// length>:<key>,member` (see `scripts/lib/prelude.lua`).
fn row(
    id: String,
    state: EntryState,
    score: u64,
    record: &str,
    value: Option<String>,
    reason: Option<String>,
) -> Row {
    let mut fields = record.splitn(6, ',');
    let attempt = fields.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let _token = fields.next();
    let _since = fields.next();
    let deadline = fields.next().and_then(|d| d.parse().ok());
    let instant: Option<u64> = fields.next().and_then(|t| t.parse().ok());
    let (priority, key) = fields.next().map_or((0, None), options);
    Row {
        id,
        state,
        score,
        // A parked tick (see `pause_schedule.lua`) shows its instant.
        deadline: if score >= PARKED { instant } else { deadline },
        attempt,
        tick: instant.is_some(),
        reason,
        value,
        key,
        priority,
    }
}

/// The priority and key in the rest of a record (its options field, if
/// it has one, then its member).
fn options(rest: &str) -> (i16, Option<String>) {
    let Some(rest) = rest.strip_prefix('o') else {
        return (0, None);
    };
    let mut parts = rest.splitn(5, ':');
    let priority = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let _max = parts.next();
    let _unique = parts.next();
    let length: Option<usize> = parts.next().and_then(|l| l.parse().ok());
    let key = length.and_then(|length| parts.next()?.get(..length).map(str::to_owned));
    (priority, key)
}

/// The identity of queue `name` whose own id (kept with its keys) is
/// `instance`.
fn identity(name: &str, instance: &str) -> String {
    At::queue("redis", name, instance)
}

/// What `cursor` says and the queue id it was made with, if it is one of
/// `state` of a queue named `name` (the script checks that id).
fn instance_of(
    cursor: &Cursor,
    name: &str,
    state: EntryState,
    newest: bool,
) -> Result<(At, String), Error> {
    let text = cursor.to_string();
    // The id is the last part of the queue's identity: try it against the
    // identity that id would give.
    let instance = At::instance_in(cursor, &identity(name, ""))
        .ok_or_else(|| Error::InvalidId(format!("cursor {text} is another queue's")))?;
    let queue = identity(name, &instance);
    let at = if newest {
        At::of_newest(cursor, &queue, state)
    } else {
        At::of(cursor, &queue, state)
    }
    .map_err(Error::InvalidId)?;
    Ok((at, instance))
}
