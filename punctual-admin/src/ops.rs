//! The operations layer: every face (command line, JSON API, pages) goes
//! through [`Ops`], and only it talks to the stores.
//!
//! Ground rules of its shared state:
//! - `found` (the queues each store holds) is read again once it is older
//!   than the policy's `discovery_ttl` (or a few seconds after a store
//!   could not be listed); its async mutex makes concurrent callers share
//!   one read, except the second look at a failed store, which one task
//!   (the `relisting` flag) makes without holding it.
//! - `snapshots` and `timelines` keep one slot per queue, each behind its
//!   own async mutex: the first caller to find a slot stale reads the
//!   store while the others wait for its answer, so however many people
//!   watch, a queue's counts are read at most once per `stats_ttl` (errors
//!   are kept as long, so a store that is down is not hammered either).
//!   With `background`, a stale snapshot is answered at once and one task
//!   (the slot's `refreshing` flag) reads it again. A write forgets the
//!   queue's slots, so the page after it shows its effect.
//! - `handles` opens each queue once; `history` is a std mutex never held
//!   across an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use punctual::durable::{
    Cursor, EntryInfo, EntryState, JobResult, KeyLimit, Minute, Page, QueueStats, Rate,
    ScheduleInfo, WorkerInfo,
};
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::audit::{self, Record, Who};
use crate::error::OpError;
use crate::health::Health;
use crate::history::{History, Point};
use crate::store::{AUDIT_QUEUE, Handle, Kind, Source, identities};
use crate::timeline::{READ_AT_MOST, Timeline};

/// How long what was read stays good.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    /// The queues each store holds.
    pub(crate) discovery_ttl: Duration,
    /// A queue's counts, paused flag and clock, and its timeline.
    pub(crate) stats_ttl: Duration,
    /// Whether fresh counts are kept for the charts.
    pub(crate) history: bool,
    /// Whether stale counts are answered at once while one task reads them
    /// again (a page never waits on a slow count; the first read of a
    /// queue, and the one after a write, still wait).
    pub(crate) background: bool,
}

impl Policy {
    /// One command: the stores listed once, everything else read when
    /// asked.
    pub(crate) const FRESH: Policy = Policy {
        discovery_ttl: Duration::from_secs(3600),
        stats_ttl: Duration::ZERO,
        history: false,
        background: false,
    };

    /// A dashboard that many people may watch at once.
    pub(crate) const SHARED: Policy = Policy {
        discovery_ttl: Duration::from_secs(30),
        stats_ttl: Duration::from_secs(3),
        history: true,
        background: true,
    };
}

/// A queue: which store (its index among the sources) and its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct QueueId {
    pub(crate) source: usize,
    pub(crate) name: String,
}

/// A queue's counts, paused flag and clock, read together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    pub(crate) stats: QueueStats,
    pub(crate) paused: bool,
    /// The store's clock when it was read.
    pub(crate) store_now: SystemTime,
    /// The store's clock minus this process's, in seconds.
    pub(crate) offset: f64,
    /// When it was read, on this process's monotonic clock.
    pub(crate) read_at: Instant,
}

impl Snapshot {
    /// The store's clock now, from its reading and the time since.
    pub(crate) fn now(&self) -> SystemTime {
        self.store_now + self.read_at.elapsed()
    }
}

/// The queues each store holds, as last read.
#[derive(Debug)]
pub(crate) struct Found {
    at: Instant,
    /// Per source, in the order the sources were given.
    pub(crate) stores: Vec<Result<Vec<String>, OpError>>,
}

impl Found {
    /// Every queue found, by store then name.
    pub(crate) fn ids(&self) -> impl Iterator<Item = QueueId> + '_ {
        self.stores.iter().enumerate().flat_map(|(source, names)| {
            names.iter().flatten().map(move |name| QueueId {
                source,
                name: name.clone(),
            })
        })
    }

    /// Whether a store could not be listed.
    fn failed(&self) -> bool {
        self.stores.iter().any(Result::is_err)
    }

    fn holders(&self, name: &str) -> Vec<QueueId> {
        self.ids().filter(|id| id.name == name).collect()
    }

    /// Whether store `source` holds a queue `name`.
    fn holds(&self, source: usize, name: &str) -> bool {
        self.stores
            .get(source)
            .and_then(|names| names.as_ref().ok())
            .is_some_and(|names| names.iter().any(|n| n == name))
    }
}

/// A queue in a list, with its counts (or why they could not be read).
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub(crate) id: QueueId,
    pub(crate) kind: Kind,
    /// Its store's identity when that is not the store's kind (a label, or
    /// `redis@2` for the second Redis store): the JSON's `"source"`.
    pub(crate) source: Option<String>,
    /// The name, or `store:name` when several stores hold the name.
    pub(crate) label: String,
    pub(crate) snapshot: Result<Snapshot, OpError>,
    /// Its workers and latency, when asked for.
    pub(crate) health: Option<Result<Health, OpError>>,
}

/// A queue's key limits, with how many entries of each key run now.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Limits {
    /// Each limit the store keeps, the default (`*`) first, then by key,
    /// with how many entries it holds leased now: for a key, its own; for
    /// `*`, those of every key without a limit of its own.
    pub(crate) limits: Vec<(String, KeyLimit, u64)>,
    /// Keys with entries leased now and no limit of their own (they run
    /// under `*` when it is set), the busiest first.
    pub(crate) others: Vec<(String, u64)>,
    /// More than [`LEASED_AT_MOST`] entries were leased: the counts are of
    /// the first that many (by lease end).
    pub(crate) capped: bool,
}

/// The most leased entries read to count what runs of each key.
pub(crate) const LEASED_AT_MOST: usize = 10 * MAX_PAGE;

/// What a requeue puts back.
#[derive(Clone, Debug)]
pub(crate) enum Requeue {
    One(String),
    AllDead,
}

/// Which way a page of entries walks its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Order {
    /// In delivery order (`entries`): due time, lease end, time of death.
    #[default]
    Oldest,
    /// Backwards (`entries_newest`, with cursors of its own).
    Newest,
}

impl Order {
    pub(crate) fn parse(s: &str) -> Result<Order, OpError> {
        match s {
            "oldest" => Ok(Order::Oldest),
            "newest" => Ok(Order::Newest),
            _ => Err(OpError::Invalid(format!("order {s:?}: oldest or newest"))),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Order::Oldest => "oldest",
            Order::Newest => "newest",
        }
    }
}

/// A write, as every face asks for it and the audit log records it.
#[derive(Clone, Debug)]
pub(crate) enum Write {
    Pause,
    Resume,
    ClearDead,
    /// Dead letters back, due `delay` from now.
    Requeue {
        what: Requeue,
        delay: Duration,
    },
    Remove {
        id: String,
    },
    Cancel {
        id: String,
    },
    RunNow {
        name: String,
    },
    Unschedule {
        name: String,
    },
    PauseSchedule {
        name: String,
    },
    ResumeSchedule {
        name: String,
    },
    SetLimit {
        key: String,
        limit: KeyLimit,
    },
    RemoveLimit {
        key: String,
    },
}

impl Write {
    /// Its name in the audit log.
    pub(crate) fn action(&self) -> &'static str {
        match self {
            Write::Pause => "pause",
            Write::Resume => "resume",
            Write::ClearDead => "clear-dead",
            Write::Requeue { .. } => "requeue",
            Write::Remove { .. } => "remove",
            Write::Cancel { .. } => "cancel",
            Write::RunNow { .. } => "run-now",
            Write::Unschedule { .. } => "unschedule",
            Write::PauseSchedule { .. } => "pause-schedule",
            Write::ResumeSchedule { .. } => "resume-schedule",
            Write::SetLimit { .. } => "set-limit",
            Write::RemoveLimit { .. } => "remove-limit",
        }
    }

    /// The entries, schedules or keys it names.
    fn ids(&self) -> Vec<String> {
        match self {
            Write::Pause | Write::Resume | Write::ClearDead => Vec::new(),
            Write::Requeue { what, .. } => match what {
                Requeue::One(id) => vec![id.clone()],
                Requeue::AllDead => Vec::new(),
            },
            Write::Remove { id } | Write::Cancel { id } => vec![id.clone()],
            Write::RunNow { name }
            | Write::Unschedule { name }
            | Write::PauseSchedule { name }
            | Write::ResumeSchedule { name } => vec![name.clone()],
            Write::SetLimit { key, .. } | Write::RemoveLimit { key } => vec![key.clone()],
        }
    }

    /// What else it says, for the audit log.
    fn detail(&self) -> Option<String> {
        match self {
            Write::Requeue { what, delay } => {
                let mut parts = Vec::new();
                if matches!(what, Requeue::AllDead) {
                    parts.push("every dead letter".to_owned());
                }
                if !delay.is_zero() {
                    parts.push(format!("delay {}", crate::fmt::period(*delay)));
                }
                (!parts.is_empty()).then(|| parts.join(", "))
            }
            Write::SetLimit { limit, .. } => Some(limit_words(limit)),
            _ => None,
        }
    }
}

/// A limit in words: `concurrency 5, rate 100/1m`, or `no bound`.
pub(crate) fn limit_words(limit: &KeyLimit) -> String {
    let mut parts = Vec::new();
    if let Some(n) = limit.concurrency {
        parts.push(format!("concurrency {n}"));
    }
    if let Some(rate) = &limit.rate {
        parts.push(format!(
            "rate {}/{}",
            rate.max,
            crate::fmt::period(rate.per)
        ));
    }
    if parts.is_empty() {
        "no bound".to_owned()
    } else {
        parts.join(", ")
    }
}

/// What a bulk action does to each entry it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bulk {
    /// Dead letters back, due `delay` from now.
    Requeue { delay: Duration },
    /// Entries deleted, in any state.
    Delete,
}

impl Bulk {
    fn action(self) -> &'static str {
        match self {
            Bulk::Requeue { .. } => "bulk-requeue",
            Bulk::Delete => "bulk-delete",
        }
    }
}

/// What a bulk action did to one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BulkOutcome {
    pub(crate) id: String,
    pub(crate) changed: bool,
    /// Why it did nothing: no such entry, not a dead letter, a store error.
    pub(crate) error: Option<String>,
}

/// An entry and what is kept of its finish; either may be missing.
#[derive(Clone, Debug)]
pub(crate) struct Shown {
    pub(crate) entry: Option<EntryInfo<Value>>,
    /// The kept result (`Ok(None)`: none kept), or why it could not be
    /// read.
    pub(crate) result: Result<Option<JobResult>, OpError>,
}

/// The runs under way in a queue: a page of its leased entries and the
/// workers that hold them.
#[derive(Clone, Debug)]
pub(crate) struct Running {
    pub(crate) page: Page<Value>,
    pub(crate) workers: Result<Vec<WorkerInfo>, OpError>,
}

/// A page of a store's audit log, newest first.
#[derive(Clone, Debug)]
pub(crate) struct AuditPage {
    pub(crate) records: Vec<audit::Listed>,
    pub(crate) next: Option<Cursor>,
}

/// The spans of history the pages chart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Span {
    #[default]
    Hour,
    Day,
}

impl Span {
    pub(crate) fn duration(self) -> Duration {
        match self {
            Span::Hour => Duration::from_secs(3600),
            Span::Day => Duration::from_secs(86_400),
        }
    }
}

/// The most entries a store gives in one page.
pub(crate) const MAX_PAGE: usize = 1000;

/// Entries asked for without a limit get this many.
pub(crate) const DEFAULT_LIMIT: usize = 50;

/// A queue not found is looked for again after this long, not sooner
/// (a request for a name that does not exist must not cost a scan of the
/// store each time).
const RECHECK_AFTER: Duration = Duration::from_secs(2);

/// The operations, over the stores given.
pub(crate) struct Ops {
    sources: Vec<Source>,
    /// Each source's identity (see [`identities`]), by index.
    identities: Vec<String>,
    policy: Policy,
    found: tokio::sync::Mutex<Option<Arc<Found>>>,
    /// A task is listing the stores again after one failed.
    relisting: std::sync::atomic::AtomicBool,
    handles: Mutex<HashMap<QueueId, Arc<OnceCell<Handle>>>>,
    snapshots: Slots<Snapshot>,
    timelines: Slots<Timeline>,
    limits: Slots<Limits>,
    health: Slots<Health>,
    minutes_hour: Slots<Vec<Minute>>,
    minutes_day: Slots<Vec<Minute>>,
    history: Mutex<HashMap<QueueId, History>>,
    /// Each queue's latency as sampled (ms; `None`: nothing due).
    latencies: Mutex<HashMap<QueueId, History<Option<u64>>>>,
    /// When each store's audit log was last looked at for old records.
    swept: Mutex<HashMap<usize, Instant>>,
    stats_reads: AtomicU64,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field(
                "sources",
                &self
                    .sources
                    .iter()
                    .map(Source::describe)
                    .collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Ops {
    /// The operations over `sources`, whose labels the caller has checked
    /// with [`identities`].
    ///
    /// # Panics
    ///
    /// If two of `sources` cannot be told apart (see [`identities`]).
    #[track_caller]
    pub(crate) fn new(sources: Vec<Source>, policy: Policy) -> Ops {
        debug_assert!(!policy.discovery_ttl.is_zero());
        let identities = identities(&sources).unwrap_or_else(|why| panic!("{why}"));
        Ops {
            sources,
            identities,
            policy,
            found: tokio::sync::Mutex::new(None),
            relisting: std::sync::atomic::AtomicBool::new(false),
            handles: Mutex::new(HashMap::new()),
            snapshots: Slots::default(),
            timelines: Slots::default(),
            limits: Slots::default(),
            health: Slots::default(),
            minutes_hour: Slots::default(),
            minutes_day: Slots::default(),
            history: Mutex::new(HashMap::new()),
            latencies: Mutex::new(HashMap::new()),
            swept: Mutex::new(HashMap::new()),
            stats_reads: AtomicU64::new(0),
        }
    }

    /// How long a queue's counts stay good.
    pub(crate) fn refresh(&self) -> Duration {
        self.policy.stats_ttl
    }

    pub(crate) fn sources(&self) -> &[Source] {
        &self.sources
    }

    pub(crate) fn kind(&self, id: &QueueId) -> Kind {
        self.sources[id.source].kind()
    }

    /// What `STORE:NAME` writes before `:` for store `source`: its label,
    /// or its kind, or `kind@n` for the n-th store of a kind.
    pub(crate) fn identity(&self, source: usize) -> &str {
        &self.identities[source]
    }

    /// Store `source`'s identity when it is not merely its kind (the one
    /// store of its kind, unlabelled, reads as before: no `"source"`, no
    /// `punctual_source`).
    pub(crate) fn distinct_identity(&self, source: usize) -> Option<&str> {
        let identity = self.identity(source);
        (identity != self.sources[source].kind().as_str()).then_some(identity)
    }

    /// Store `source` for people: `redis`, `redis@2`, `eu (redis)`.
    pub(crate) fn store_name(&self, source: usize) -> String {
        let (identity, kind) = (self.identity(source), self.sources[source].kind());
        let numbered = identity
            .strip_prefix(kind.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'));
        if numbered {
            identity.to_owned()
        } else {
            format!("{identity} ({kind})")
        }
    }

    /// How many times the stores' counts were read (for the tests and the
    /// benchmark: the cache's promise, counted).
    pub(crate) fn stats_reads(&self) -> u64 {
        self.stats_reads.load(Ordering::Relaxed)
    }

    /// The queues each store holds, read again when older than the policy
    /// allows, or after [`RECHECK_AFTER`] when a store could not be listed
    /// (so that a store that comes back is seen within seconds, not at the
    /// next `discovery_ttl`). With `background`, that second look is one
    /// task's while everyone is answered with what failed: a store that
    /// hangs holds up no page.
    pub(crate) async fn found(self: &Arc<Self>) -> Arc<Found> {
        let ttl = self.policy.discovery_ttl;
        {
            let found = self.found.lock().await;
            if let Some(f) = &*found {
                let age = f.at.elapsed();
                if age < ttl && (!f.failed() || age < RECHECK_AFTER) {
                    return f.clone();
                }
                if age < ttl && self.policy.background {
                    if !self.relisting.swap(true, Ordering::AcqRel) {
                        let ops = self.clone();
                        tokio::spawn(async move {
                            // Listed without the lock held: a page that
                            // wants the list meanwhile gets the old one.
                            let fresh = Arc::new(ops.list().await);
                            *ops.found.lock().await = Some(fresh);
                            ops.relisting.store(false, Ordering::Release);
                        });
                    }
                    return f.clone();
                }
            }
        }
        self.found_within(RECHECK_AFTER.min(ttl)).await
    }

    async fn found_within(&self, max_age: Duration) -> Arc<Found> {
        let mut found = self.found.lock().await;
        if let Some(f) = &*found {
            if f.at.elapsed() < max_age {
                return f.clone();
            }
        }
        let fresh = Arc::new(self.list().await);
        *found = Some(fresh.clone());
        fresh
    }

    /// Asks every store for its queues.
    async fn list(&self) -> Found {
        let mut stores = Vec::with_capacity(self.sources.len());
        for source in &self.sources {
            stores.push(source.names().await);
        }
        Found {
            at: Instant::now(),
            stores,
        }
    }

    /// The name of `id` as a face writes it: plain, or `store:name` (the
    /// store's [`identity`](Self::identity)) when several stores hold that
    /// name or when the name itself reads as `store:rest` (a queue named
    /// `redis:jobs` written plain would name the Redis queue `jobs`).
    pub(crate) fn label(&self, found: &Found, id: &QueueId) -> String {
        let looks_qualified = id.name.split_once(':').is_some_and(|(prefix, _)| {
            Kind::parse(prefix).is_some() || self.identities.iter().any(|i| i == prefix)
        });
        if looks_qualified || found.holders(&id.name).len() > 1 {
            self.qualified(id)
        } else {
            id.name.clone()
        }
    }

    /// `store:name`, which names `id` whatever the other stores hold.
    fn qualified(&self, id: &QueueId) -> String {
        format!("{}:{}", self.identity(id.source), id.name)
    }

    /// `a:q or b:q`, the forms that name each of `hits`.
    fn forms(&self, hits: &[QueueId]) -> String {
        let forms: Vec<String> = hits.iter().map(|id| self.qualified(id)).collect();
        forms.join(" or ")
    }

    /// The queue that `q` (`name` or `store:name`) names.
    pub(crate) async fn resolve(self: &Arc<Self>, q: &str) -> Result<QueueId, OpError> {
        let found = self.found().await;
        match self.lookup(&found, q) {
            Err(OpError::NotFound(_)) if found.at.elapsed() >= RECHECK_AFTER => {
                let found = self.found_within(RECHECK_AFTER).await;
                self.lookup(&found, q)
            }
            other => other,
        }
    }

    /// `store:name` is queue `name` of the store of that identity; else,
    /// when `store` is a kind (`redis`), of the one store of that kind
    /// holding it; else `q` is a name of its own (`redis:x` may be the
    /// PostgreSQL queue named so).
    fn lookup(&self, found: &Found, q: &str) -> Result<QueueId, OpError> {
        if let Some((prefix, rest)) = q.split_once(':') {
            if let Some(source) = self.identities.iter().position(|i| i == prefix) {
                if found.holds(source, rest) {
                    return Ok(QueueId {
                        source,
                        name: rest.to_owned(),
                    });
                }
            }
            if let Some(kind) = Kind::parse(prefix) {
                let hits: Vec<QueueId> = found
                    .holders(rest)
                    .into_iter()
                    .filter(|id| self.kind(id) == kind)
                    .collect();
                match hits.len() {
                    0 => {}
                    1 => return Ok(hits.into_iter().next().expect("one")),
                    n => {
                        return Err(OpError::Invalid(format!(
                            "{n} {kind} stores hold a queue {rest:?}: write {}",
                            self.forms(&hits)
                        )));
                    }
                }
            }
        }
        let hits = found.holders(q);
        match hits.len() {
            1 => Ok(hits.into_iter().next().expect("one")),
            0 => {
                // A store that could not be listed may hold it.
                if let Some(Err(e)) = found.stores.iter().find(|s| s.is_err()) {
                    return Err(OpError::Store(format!(
                        "queue {q:?} not found, and a store could not be listed: {e}"
                    )));
                }
                Err(OpError::NotFound(format!(
                    "no queue {q:?} on the stores given"
                )))
            }
            _ => Err(OpError::Invalid(format!(
                "several stores hold a queue {q:?}: write {}",
                self.forms(&hits)
            ))),
        }
    }

    /// The queue `id`, opened once.
    pub(crate) async fn handle(&self, id: &QueueId) -> Result<Handle, OpError> {
        let cell = lock(&self.handles).entry(id.clone()).or_default().clone();
        cell.get_or_try_init(|| self.sources[id.source].open(&id.name))
            .await
            .cloned()
    }

    /// The counts, paused flag and clock of `id`, read at most once per
    /// `stats_ttl`.
    pub(crate) async fn snapshot(self: &Arc<Self>, id: &QueueId) -> Result<Snapshot, OpError> {
        let ttl = self.policy.stats_ttl;
        let slot = self.snapshots.slot(id);
        let mut held = slot.value.lock().await;
        if let Some((at, value)) = &*held {
            if at.elapsed() < ttl {
                return value.clone();
            }
            if let (true, Ok(stale)) = (self.policy.background && !ttl.is_zero(), value) {
                if !slot.refreshing.swap(true, Ordering::AcqRel) {
                    let (ops, id, slot) = (self.clone(), id.clone(), slot.clone());
                    tokio::spawn(async move {
                        let fresh = ops.read_snapshot(&id).await;
                        *slot.value.lock().await = Some((Instant::now(), fresh));
                        slot.refreshing.store(false, Ordering::Release);
                    });
                }
                return Ok(*stale);
            }
        }
        let value = self.read_snapshot(id).await;
        *held = Some((Instant::now(), value.clone()));
        value
    }

    async fn read_snapshot(&self, id: &QueueId) -> Result<Snapshot, OpError> {
        let handle = self.handle(id).await?;
        let before = wall_clock();
        let started = Instant::now();
        let store_now = handle.now().await?;
        // The store read its clock about halfway through the round trip.
        let local = before + started.elapsed() / 2;
        let offset = match store_now.duration_since(local) {
            Ok(ahead) => ahead.as_secs_f64(),
            Err(behind) => -behind.duration().as_secs_f64(),
        };
        let read_at = Instant::now();
        self.stats_reads.fetch_add(1, Ordering::Relaxed);
        let (stats, paused) = tokio::try_join!(handle.stats(), handle.is_paused())?;
        let snapshot = Snapshot {
            stats,
            paused,
            store_now: store_now + read_at.duration_since(started) / 2,
            offset,
            read_at,
        };
        if self.policy.history {
            lock(&self.history)
                .entry(id.clone())
                .or_default()
                .record(snapshot.store_now, stats);
        }
        Ok(snapshot)
    }

    /// Every queue of every store with its counts; and the stores that
    /// could not be listed.
    pub(crate) async fn queues(self: &Arc<Self>) -> (Vec<Listed>, Vec<(usize, OpError)>) {
        self.queues_with(false).await
    }

    /// [`queues`](Self::queues), with each queue's workers and latency
    /// when `health` (read at most once per `stats_ttl` too).
    pub(crate) async fn queues_with(
        self: &Arc<Self>,
        health: bool,
    ) -> (Vec<Listed>, Vec<(usize, OpError)>) {
        let found = self.found().await;
        let mut reads = tokio::task::JoinSet::new();
        for (i, id) in found.ids().enumerate() {
            let ops = self.clone();
            reads.spawn(async move {
                let (snapshot, health) = if health {
                    let (s, h) = tokio::join!(ops.snapshot(&id), ops.health(&id));
                    (s, Some(h))
                } else {
                    (ops.snapshot(&id).await, None)
                };
                (i, id, snapshot, health)
            });
        }
        let mut listed = Vec::new();
        while let Some(done) = reads.join_next().await {
            let (i, id, snapshot, health) = done.expect("a snapshot read does not panic");
            listed.push((
                i,
                Listed {
                    kind: self.kind(&id),
                    source: self.distinct_identity(id.source).map(str::to_owned),
                    label: self.label(&found, &id),
                    id,
                    snapshot,
                    health,
                },
            ));
        }
        listed.sort_by_key(|(i, _)| *i);
        let failed = found
            .stores
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().err().map(|e| (i, e.clone())))
            .collect();
        (listed.into_iter().map(|(_, l)| l).collect(), failed)
    }

    /// One queue with its counts.
    pub(crate) async fn stats(self: &Arc<Self>, q: &str) -> Result<Listed, OpError> {
        let id = self.resolve(q).await?;
        let snapshot = self.snapshot(&id).await?;
        let found = self.found().await;
        Ok(Listed {
            kind: self.kind(&id),
            source: self.distinct_identity(id.source).map(str::to_owned),
            label: self.label(&found, &id),
            id,
            snapshot: Ok(snapshot),
            health: None,
        })
    }

    /// One page of `state`'s entries of `id`, at most [`MAX_PAGE`] (a
    /// larger `limit` is that many). As the library has it, `limit` 0 is an
    /// empty page whose `next` is the cursor given (checked all the same).
    pub(crate) async fn entries(
        &self,
        id: &QueueId,
        state: EntryState,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Value>, OpError> {
        let cursor = cursor.map(parse_cursor).transpose()?;
        self.handle(id)
            .await?
            .entries(state, cursor.as_ref(), limit.min(MAX_PAGE))
            .await
    }

    /// Entry `entry` of `id`.
    pub(crate) async fn entry(
        &self,
        id: &QueueId,
        entry: &str,
    ) -> Result<EntryInfo<Value>, OpError> {
        self.handle(id)
            .await?
            .entry(entry)
            .await?
            .ok_or_else(|| OpError::NotFound(format!("no entry {entry:?} in queue {:?}", id.name)))
    }

    pub(crate) async fn schedules(
        &self,
        id: &QueueId,
    ) -> Result<Vec<ScheduleInfo<Value>>, OpError> {
        self.handle(id).await?.schedules().await
    }

    /// What comes due over the next hour (read at most once per
    /// `stats_ttl`, from at most [`READ_AT_MOST`] entries).
    pub(crate) async fn timeline(self: &Arc<Self>, id: &QueueId) -> Result<Timeline, OpError> {
        self.timelines
            .get(id, self.policy.stats_ttl, || self.read_timeline(id))
            .await
    }

    async fn read_timeline(self: &Arc<Self>, id: &QueueId) -> Result<Timeline, OpError> {
        let snapshot = self.snapshot(id).await?;
        let handle = self.handle(id).await?;
        let mut timeline = Timeline::new(snapshot.now(), snapshot.stats.due);
        let paused: std::collections::HashSet<String> = handle
            .schedules()
            .await?
            .into_iter()
            .filter(|s| s.paused)
            .map(|s| s.name)
            .collect();
        let mut cursor: Option<Cursor> = None;
        loop {
            let want = (READ_AT_MOST - timeline.read).min(MAX_PAGE);
            let page = handle
                .entries(EntryState::Pending, cursor.as_ref(), want)
                .await?;
            let more = page.entries.iter().all(|e| timeline.add(e, &paused));
            match page.next {
                Some(next) if more => cursor = Some(next),
                _ => return Ok(timeline),
            }
        }
    }

    /// The sampled counts of `id` since the dashboard started.
    pub(crate) fn history(&self, id: &QueueId) -> Vec<Point> {
        lock(&self.history)
            .get(id)
            .map(|h| h.points().to_vec())
            .unwrap_or_default()
    }

    /// The key limits of `id` and how many entries of each key are
    /// leased now (read at most once per `stats_ttl`). The leased entries
    /// are read a page at a time, at most [`LEASED_AT_MOST`] of them: as
    /// many as the consumers hold, not a scan of the queue.
    pub(crate) async fn limits(&self, id: &QueueId) -> Result<Limits, OpError> {
        self.limits
            .get(id, self.policy.stats_ttl, || self.read_limits(id))
            .await
    }

    async fn read_limits(&self, id: &QueueId) -> Result<Limits, OpError> {
        let handle = self.handle(id).await?;
        let mut kept = handle.key_limits().await?;
        let mut running: HashMap<String, u64> = HashMap::new();
        let mut cursor: Option<Cursor> = None;
        let mut read = 0;
        let capped = loop {
            let want = (LEASED_AT_MOST - read).min(MAX_PAGE);
            let page = handle
                .entries(EntryState::Leased, cursor.as_ref(), want)
                .await?;
            read += page.entries.len();
            for e in page.entries {
                if let Some(key) = e.key {
                    *running.entry(key).or_default() += 1;
                }
            }
            match page.next {
                Some(_) if read >= LEASED_AT_MOST => break true,
                Some(next) => cursor = Some(next),
                None => break false,
            }
        };
        kept.sort_by(|(a, _), (b, _)| (a != DEFAULT_KEY, a).cmp(&(b != DEFAULT_KEY, b)));
        let mut others: Vec<(String, u64)> = running
            .iter()
            .filter(|(key, _)| !kept.iter().any(|(k, _)| k == *key))
            .map(|(key, n)| (key.clone(), *n))
            .collect();
        others.sort_by(|(a, m), (b, n)| n.cmp(m).then_with(|| a.cmp(b)));
        let under_default: u64 = others.iter().map(|(_, n)| n).sum();
        let limits = kept
            .into_iter()
            .map(|(key, limit)| {
                let n = if key == DEFAULT_KEY {
                    under_default
                } else {
                    running.get(&key).copied().unwrap_or(0)
                };
                (key, limit, n)
            })
            .collect();
        Ok(Limits {
            limits,
            others,
            capped,
        })
    }

    /// Sets the limit of `key` (`*`: the default): 1 if it changed, else 0.
    pub(crate) async fn set_limit(
        &self,
        id: &QueueId,
        key: &str,
        limit: KeyLimit,
    ) -> Result<u64, OpError> {
        let changed = self.handle(id).await?.set_key_limit(key, limit).await?;
        self.changed(id);
        Ok(changed.into())
    }

    /// Removes the limit of `key` (`*`: the default): 1 if it had one,
    /// else 0.
    pub(crate) async fn remove_limit(&self, id: &QueueId, key: &str) -> Result<u64, OpError> {
        let removed = self.handle(id).await?.remove_key_limit(key).await?;
        self.changed(id);
        Ok(removed.into())
    }

    /// Forgets what was read of `id`, after a write.
    fn changed(&self, id: &QueueId) {
        self.snapshots.forget(id);
        self.timelines.forget(id);
        self.limits.forget(id);
        self.health.forget(id);
    }

    /// Puts dead letters back, due `delay` from now; how many.
    pub(crate) async fn requeue(
        &self,
        id: &QueueId,
        what: &Requeue,
        delay: Duration,
    ) -> Result<u64, OpError> {
        let handle = self.handle(id).await?;
        let changed = match what {
            Requeue::AllDead => handle.requeue_all_dead(delay).await?,
            Requeue::One(entry) => {
                if handle.requeue_dead(entry, delay).await? {
                    1
                } else {
                    // Absent, or there and not dead: nothing to requeue.
                    self.entry(id, entry).await?;
                    0
                }
            }
        };
        self.changed(id);
        Ok(changed)
    }

    pub(crate) async fn remove(&self, id: &QueueId, entry: &str) -> Result<u64, OpError> {
        let removed = self.handle(id).await?.remove(entry).await?;
        self.changed(id);
        if !removed {
            return Err(OpError::NotFound(format!(
                "no entry {entry:?} in queue {:?}",
                id.name
            )));
        }
        Ok(1)
    }

    pub(crate) async fn clear_dead(&self, id: &QueueId) -> Result<u64, OpError> {
        let n = self.handle(id).await?.clear_dead().await?;
        self.changed(id);
        Ok(n)
    }

    pub(crate) async fn pause(&self, id: &QueueId) -> Result<u64, OpError> {
        let changed = self.handle(id).await?.pause().await?;
        self.changed(id);
        Ok(changed.into())
    }

    pub(crate) async fn resume(&self, id: &QueueId) -> Result<u64, OpError> {
        let changed = self.handle(id).await?.resume().await?;
        self.changed(id);
        Ok(changed.into())
    }

    /// Makes a schedule's tick due now: 1, or 0 while it runs.
    pub(crate) async fn run_now(&self, id: &QueueId, name: &str) -> Result<u64, OpError> {
        let handle = self.handle(id).await?;
        let ran = handle.run_now(name).await?;
        self.changed(id);
        if ran {
            return Ok(1);
        }
        if handle.schedules().await?.iter().any(|s| s.name == name) {
            Ok(0)
        } else {
            Err(no_schedule(id, name))
        }
    }

    pub(crate) async fn unschedule(&self, id: &QueueId, name: &str) -> Result<u64, OpError> {
        let removed = self.handle(id).await?.unschedule(name).await?;
        self.changed(id);
        if removed {
            Ok(1)
        } else {
            Err(no_schedule(id, name))
        }
    }
    /// Cancels entry `entry`: 1 if there was one (a leased entry's run is
    /// stopped), else 0 (it may have finished meanwhile).
    pub(crate) async fn cancel(&self, id: &QueueId, entry: &str) -> Result<u64, OpError> {
        let cancelled = self.handle(id).await?.cancel(entry).await?;
        self.changed(id);
        Ok(cancelled.into())
    }

    /// Pauses (`pause`) or resumes schedule `name`: 1 if that changed it,
    /// 0 if it was so already.
    pub(crate) async fn pause_schedule(
        &self,
        id: &QueueId,
        name: &str,
        pause: bool,
    ) -> Result<u64, OpError> {
        let handle = self.handle(id).await?;
        let changed = if pause {
            handle.pause_schedule(name).await?
        } else {
            handle.resume_schedule(name).await?
        };
        self.changed(id);
        if changed {
            return Ok(1);
        }
        if handle.schedules().await?.iter().any(|s| s.name == name) {
            Ok(0)
        } else {
            Err(no_schedule(id, name))
        }
    }

    /// Does `write` on queue `id` for `who`, and records it (and its
    /// outcome, a failure too) in the store's audit log.
    pub(crate) async fn apply(
        &self,
        who: &Who,
        id: &QueueId,
        write: &Write,
    ) -> Result<u64, OpError> {
        let outcome = match write {
            Write::Pause => self.pause(id).await,
            Write::Resume => self.resume(id).await,
            Write::ClearDead => self.clear_dead(id).await,
            Write::Requeue { what, delay } => self.requeue(id, what, *delay).await,
            Write::Remove { id: entry } => self.remove(id, entry).await,
            Write::Cancel { id: entry } => self.cancel(id, entry).await,
            Write::RunNow { name } => self.run_now(id, name).await,
            Write::Unschedule { name } => self.unschedule(id, name).await,
            Write::PauseSchedule { name } => self.pause_schedule(id, name, true).await,
            Write::ResumeSchedule { name } => self.pause_schedule(id, name, false).await,
            Write::SetLimit { key, limit } => self.set_limit(id, key, *limit).await,
            Write::RemoveLimit { key } => self.remove_limit(id, key).await,
        };
        let record = Record {
            action: write.action().to_owned(),
            queue: id.name.clone(),
            ids: write.ids(),
            detail: write.detail(),
            ok: outcome.is_ok(),
            changed: *outcome.as_ref().unwrap_or(&0),
            error: outcome.as_ref().err().map(|e| e.message().to_owned()),
            via: who.via,
            from: who.from.clone(),
            forwarded_for: who.forwarded_for.clone(),
            token: who.token,
        };
        self.audit(id.source, &record).await;
        outcome
    }

    /// Does `bulk` to each of `ids` (at most [`MAX_PAGE`], each once),
    /// each answered: what changed, and why the others did not. Recorded
    /// in the audit log as one write.
    pub(crate) async fn bulk(
        &self,
        who: &Who,
        id: &QueueId,
        bulk: Bulk,
        ids: &[String],
    ) -> Result<Vec<BulkOutcome>, OpError> {
        let mut unique: Vec<String> = Vec::with_capacity(ids.len());
        for entry in ids {
            if !unique.contains(entry) {
                unique.push(entry.clone());
            }
        }
        if unique.is_empty() {
            return Err(OpError::Invalid("select at least one entry".to_owned()));
        }
        if unique.len() > MAX_PAGE {
            return Err(OpError::Invalid(format!(
                "at most {MAX_PAGE} entries at once, not {}",
                unique.len()
            )));
        }
        let handle = self.handle(id).await?;
        let mut outcomes = Vec::with_capacity(unique.len());
        for entry in &unique {
            let done = match bulk {
                Bulk::Delete => handle.remove(entry).await,
                Bulk::Requeue { delay } => handle.requeue_dead(entry, delay).await,
            };
            let outcome = match done {
                Ok(true) => BulkOutcome {
                    id: entry.clone(),
                    changed: true,
                    error: None,
                },
                Ok(false) => {
                    let why = match (bulk, handle.entry(entry).await) {
                        (_, Ok(None)) => "no such entry in this queue".to_owned(),
                        (Bulk::Requeue { .. }, Ok(Some(e))) => {
                            format!("not a dead letter: it is {}", e.state)
                        }
                        (Bulk::Delete, Ok(Some(e))) => format!("still {}", e.state),
                        (_, Err(e)) => e.message().to_owned(),
                    };
                    BulkOutcome {
                        id: entry.clone(),
                        changed: false,
                        error: Some(why),
                    }
                }
                Err(e) => BulkOutcome {
                    id: entry.clone(),
                    changed: false,
                    error: Some(e.message().to_owned()),
                },
            };
            outcomes.push(outcome);
        }
        self.changed(id);
        let changed = outcomes.iter().filter(|o| o.changed).count() as u64;
        let failed = outcomes.len() as u64 - changed;
        let mut detail = Vec::new();
        if let Bulk::Requeue { delay } = bulk {
            if !delay.is_zero() {
                detail.push(format!("delay {}", crate::fmt::period(delay)));
            }
        }
        if failed > 0 {
            detail.push(format!("{failed} not changed"));
        }
        let record = Record {
            action: bulk.action().to_owned(),
            queue: id.name.clone(),
            ids: unique,
            detail: (!detail.is_empty()).then(|| detail.join(", ")),
            ok: true,
            changed,
            error: None,
            via: who.via,
            from: who.from.clone(),
            forwarded_for: who.forwarded_for.clone(),
            token: who.token,
        };
        self.audit(id.source, &record).await;
        Ok(outcomes)
    }

    /// The audit log's queue of store `source`.
    async fn audit_handle(&self, source: usize) -> Result<Handle, OpError> {
        self.handle(&QueueId {
            source,
            name: AUDIT_QUEUE.to_owned(),
        })
        .await
    }

    /// Adds `record` to store `source`'s audit log, kept for
    /// [`audit::KEEP`]; at most once per [`audit::SWEEP_EVERY`] a store's
    /// write removes a page of the records past that. A log that cannot be
    /// written does not undo or fail the write it records: it says so on
    /// stderr.
    async fn audit(&self, source: usize, record: &Record) {
        let written = async {
            let handle = self.audit_handle(source).await?;
            let value = serde_json::to_value(record).expect("a record serializes");
            handle.insert(&value, audit::KEEP).await?;
            let due = {
                let mut swept = lock(&self.swept);
                let due = swept
                    .get(&source)
                    .is_none_or(|at| at.elapsed() >= audit::SWEEP_EVERY);
                if due {
                    swept.insert(source, Instant::now());
                }
                due
            };
            if due {
                let old = handle
                    .entries(EntryState::Due, None, audit::SWEEP_PAGE)
                    .await?;
                for entry in old.entries {
                    handle.remove(&entry.id).await?;
                }
            }
            Ok::<(), OpError>(())
        };
        if let Err(e) = written.await {
            eprintln!(
                "punctual-admin: could not write the audit log of {}: {e}",
                self.identity(source)
            );
        }
    }

    /// A page of store `source`'s audit log, newest first.
    pub(crate) async fn audit_page(
        &self,
        source: usize,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, OpError> {
        let cursor = cursor.map(parse_cursor).transpose()?;
        let handle = self.audit_handle(source).await?;
        let page = handle
            .entries_newest(EntryState::Pending, cursor.as_ref(), limit.min(MAX_PAGE))
            .await?;
        Ok(AuditPage {
            records: page.entries.iter().map(audit::Listed::of).collect(),
            next: page.next,
        })
    }

    /// The store whose identity is `identity` (`redis`, `postgres@2`, a
    /// label); the first store when `None`.
    pub(crate) fn source_of(&self, identity: Option<&str>) -> Result<usize, OpError> {
        match identity {
            None if self.sources.is_empty() => Err(OpError::NotFound("no store".to_owned())),
            None => Ok(0),
            Some(wanted) => self
                .identities
                .iter()
                .position(|i| i == wanted)
                .ok_or_else(|| {
                    OpError::NotFound(format!(
                        "no store {wanted:?}: the stores are {}",
                        self.identities.join(", ")
                    ))
                }),
        }
    }

    /// One page of `state`'s entries of `id` walked `order`'s way.
    pub(crate) async fn entries_in(
        &self,
        id: &QueueId,
        state: EntryState,
        order: Order,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Value>, OpError> {
        match order {
            Order::Oldest => self.entries(id, state, cursor, limit).await,
            Order::Newest => {
                let cursor = cursor.map(parse_cursor).transpose()?;
                self.handle(id)
                    .await?
                    .entries_newest(state, cursor.as_ref(), limit.min(MAX_PAGE))
                    .await
            }
        }
    }

    /// Entry `entry` of `id` and its kept result, read together: an entry
    /// that finished is gone, and only its result (where the queue keeps
    /// one) says how it ended. Not found when neither is there.
    pub(crate) async fn show(&self, id: &QueueId, entry: &str) -> Result<Shown, OpError> {
        let handle = self.handle(id).await?;
        let (found, result) = tokio::join!(handle.entry(entry), handle.result(entry));
        let found = found?;
        if found.is_none() && !matches!(result, Ok(Some(_))) {
            return Err(OpError::NotFound(format!(
                "no entry {entry:?} in queue {:?}",
                id.name
            )));
        }
        Ok(Shown {
            entry: found,
            result,
        })
    }

    /// The workers of `id` and its latency (read at most once per
    /// `stats_ttl`); sampled for the latency chart.
    pub(crate) async fn health(&self, id: &QueueId) -> Result<Health, OpError> {
        self.health
            .get(id, self.policy.stats_ttl, || self.read_health(id))
            .await
    }

    async fn read_health(&self, id: &QueueId) -> Result<Health, OpError> {
        let handle = self.handle(id).await?;
        let (latency, workers, now) =
            tokio::try_join!(handle.latency(), handle.workers(), handle.now())?;
        if self.policy.history {
            let ms = latency.map(|l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX));
            lock(&self.latencies)
                .entry(id.clone())
                .or_default()
                .record(now, ms);
        }
        Ok(Health { latency, workers })
    }

    /// The sampled latency of `id` since the dashboard started (ms).
    pub(crate) fn latency_history(&self, id: &QueueId) -> Vec<Point<Option<u64>>> {
        lock(&self.latencies)
            .get(id)
            .map(|h| h.points().to_vec())
            .unwrap_or_default()
    }

    /// The per-minute history of `id` over the last `span` (read at most
    /// once per `stats_ttl`).
    pub(crate) async fn minutes(
        self: &Arc<Self>,
        id: &QueueId,
        span: Span,
    ) -> Result<Vec<Minute>, OpError> {
        let slots = match span {
            Span::Hour => &self.minutes_hour,
            Span::Day => &self.minutes_day,
        };
        slots
            .get(id, self.policy.stats_ttl, || async {
                let now = self.snapshot(id).await?.now();
                self.history_since(id, now - span.duration()).await
            })
            .await
    }

    /// The per-minute history of `id` since `since` (the store's clock).
    pub(crate) async fn history_since(
        &self,
        id: &QueueId,
        since: SystemTime,
    ) -> Result<Vec<Minute>, OpError> {
        self.handle(id).await?.history(since).await
    }

    /// A page of the runs under way in `id` (its leased entries), with the
    /// workers that hold them.
    pub(crate) async fn running(
        &self,
        id: &QueueId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Running, OpError> {
        let (page, health) = tokio::join!(
            self.entries(id, EntryState::Leased, cursor, limit),
            self.health(id)
        );
        Ok(Running {
            page: page?,
            workers: health.map(|h| h.workers),
        })
    }

    /// The store's clock, read now.
    pub(crate) async fn store_now(&self, id: &QueueId) -> Result<SystemTime, OpError> {
        self.handle(id).await?.now().await
    }
}

fn no_schedule(id: &QueueId, name: &str) -> OpError {
    OpError::NotFound(format!("no schedule {name:?} in queue {:?}", id.name))
}

/// A state's name (`pending`, `due`, `leased`, `dead`).
pub(crate) fn parse_state(s: &str) -> Result<EntryState, OpError> {
    s.parse().map_err(|e| OpError::Invalid(format!("{e}")))
}

/// A page's `limit`: a whole number, any size (more than [`MAX_PAGE`]
/// reads as [`MAX_PAGE`], so a number too large for `usize` is clamped as
/// well rather than refused).
pub(crate) fn parse_limit(s: &str) -> Result<usize, OpError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(OpError::Invalid(format!(
            "limit {s:?}: a whole number of entries (0 to {MAX_PAGE}; more reads as {MAX_PAGE})"
        )));
    }
    Ok(s.parse::<usize>().unwrap_or(usize::MAX))
}

/// The key under which the default limit is kept and listed.
pub(crate) const DEFAULT_KEY: &str = "*";

/// A period: whole numbers with units, `500ms`, `30s`, `1m`, `2h`, `1d`,
/// or several of them (`1m30s`).
pub(crate) fn parse_period(s: &str) -> Result<Duration, OpError> {
    let bad = || {
        OpError::Invalid(format!(
            "period {s:?}: a whole number with a unit, such as 500ms, 30s, 1m, 2h or 1d"
        ))
    };
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let ms_per = match &rest[..unit] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit..];
        let ms = n.checked_mul(ms_per).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(ms))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// A rate, `MAX/PER`: `100/1m` is at most 100 deliveries begun in any
/// minute (PER as [`parse_period`] reads it).
pub(crate) fn parse_rate(s: &str) -> Result<Rate, OpError> {
    let Some((max, per)) = s.split_once('/') else {
        return Err(OpError::Invalid(format!(
            "rate {s:?}: MAX/PER, such as 100/1m or 5/500ms"
        )));
    };
    Ok(Rate {
        max: parse_count(max.trim(), "a rate's MAX")?,
        per: parse_period(per)?,
    })
}

/// A count of entries (a concurrency, a rate's max): a whole number that
/// fits 32 bits.
pub(crate) fn parse_count(s: &str, what: &str) -> Result<u32, OpError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(OpError::Invalid(format!(
            "{what} {s:?}: a whole number (0 to {})",
            u32::MAX
        )));
    }
    s.parse()
        .map_err(|_| OpError::Invalid(format!("{what} {s:?}: at most {}", u32::MAX)))
}

pub(crate) fn parse_cursor(s: &str) -> Result<Cursor, OpError> {
    s.parse().map_err(|e| OpError::Invalid(format!("{e}")))
}

/// This process's wall clock: the dashboard's, which the store's clock is
/// compared with. (The crate's lints keep `SystemTime::now` out of code
/// that paused time should drive; this is the one place that wants the
/// real one.)
#[allow(clippy::disallowed_methods)]
pub(crate) fn wall_clock() -> SystemTime {
    SystemTime::now()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One cached value (or error) per queue, each read by one caller at a
/// time while the others wait for it.
struct Slots<T> {
    map: Mutex<HashMap<QueueId, Arc<Slot<T>>>>,
}

struct Slot<T> {
    value: tokio::sync::Mutex<Option<(Instant, Result<T, OpError>)>>,
    /// A task is reading it again.
    refreshing: std::sync::atomic::AtomicBool,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Slots<T> {
    fn slot(&self, id: &QueueId) -> Arc<Slot<T>> {
        lock(&self.map)
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    value: tokio::sync::Mutex::new(None),
                    refreshing: std::sync::atomic::AtomicBool::new(false),
                })
            })
            .clone()
    }

    async fn get<F>(
        &self,
        id: &QueueId,
        ttl: Duration,
        read: impl FnOnce() -> F,
    ) -> Result<T, OpError>
    where
        F: Future<Output = Result<T, OpError>>,
    {
        let slot = self.slot(id);
        let mut held = slot.value.lock().await;
        if let Some((at, value)) = &*held {
            if at.elapsed() < ttl {
                return value.clone();
            }
        }
        let value = read().await;
        *held = Some((Instant::now(), value.clone()));
        value
    }

    /// The next `get` reads again (a read under way answers its waiters
    /// with what it read, and a refresh under way writes into the slot
    /// forgotten).
    fn forget(&self, id: &QueueId) {
        lock(&self.map).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_and_rates_read_as_people_write_them() {
        let ms = |n| Duration::from_millis(n);
        assert_eq!(parse_period("500ms").unwrap(), ms(500));
        assert_eq!(parse_period("30s").unwrap(), ms(30_000));
        assert_eq!(parse_period("1m").unwrap(), ms(60_000));
        assert_eq!(parse_period("1m30s").unwrap(), ms(90_000));
        assert_eq!(parse_period("2h").unwrap(), ms(7_200_000));
        assert_eq!(parse_period("1d").unwrap(), ms(86_400_000));
        assert_eq!(parse_period("0s").unwrap(), Duration::ZERO);
        for bad in [
            "",
            "1",
            "m",
            "1x",
            "-1s",
            "1.5s",
            "1 m",
            "99999999999999999999s",
        ] {
            assert!(parse_period(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_rate("100/1m").unwrap(),
            Rate {
                max: 100,
                per: ms(60_000)
            }
        );
        for bad in ["100", "x/1m", "100/", "/1m", "-1/1s", "4294967296/1s"] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_count("4294967295", "n").unwrap(), u32::MAX);
        assert!(parse_count("4294967296", "n").is_err());
        assert!(parse_count("-1", "n").is_err());
    }
}
