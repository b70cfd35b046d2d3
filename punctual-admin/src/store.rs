//! The stores a dashboard or a command looks into, and a queue of any of
//! them opened as `serde_json::Value`s.
//!
//! Nothing here caches: [`Source::names`] asks the store each time and
//! [`Source::open`] opens a new handle (the operations layer keeps them).

use std::fmt;
use std::time::Duration;

use punctual::durable::{
    Cursor, EntryInfo, EntryState, JobResult, KeyLimit, Minute, Page, QueueStats, ScheduleInfo,
    WorkerInfo,
};
use punctual::memory::MemoryQueue;
use punctual::postgres::PgQueue;
use punctual::postgres::sqlx::PgPool;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use punctual::redis::RedisQueue;
use serde_json::Value;
use tokio::sync::OnceCell;

/// How long the store keeps the result of a run cancelled through the
/// dashboard (the application's own `keep_results` is not known here): a
/// `wait` on it answers `Cancelled`, and the entry's page shows it.
const CANCEL_RESULTS: Duration = Duration::from_secs(24 * 3600);

use crate::error::OpError;

mod explain;

/// Which kind of store holds a queue, as the JSON's `"store"` and the
/// `kind:NAME` form of a queue's name write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Redis,
    Postgres,
    Memory,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Redis => "redis",
            Kind::Postgres => "postgres",
            Kind::Memory => "memory",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "redis" => Kind::Redis,
            "postgres" => Kind::Postgres,
            "memory" => Kind::Memory,
            _ => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One store given to the dashboard or the command line.
pub(crate) enum Source {
    /// Every queue of the Redis server at `url`.
    Redis { label: Option<String>, url: String },
    /// Every queue of `schema` in the database at `url`, all through one
    /// small pool (a queue opened with its own pool would hold its own
    /// connections).
    Postgres {
        label: Option<String>,
        url: String,
        schema: String,
        pool: OnceCell<PgPool>,
    },
    /// The queues given by hand, and the audit log's queue, made in
    /// this process's memory when first written.
    Memory {
        queues: Vec<MemoryQueue<Value>>,
        audit: OnceCell<MemoryQueue<Value>>,
    },
}

/// The queue each store keeps the admin's audit log in (see
/// `audit.rs`): hidden from every list, never resolved by name.
pub(crate) const AUDIT_QUEUE: &str = "punctual-admin.audit";

/// How long a PostgreSQL listing may take before the dashboard looks at
/// what answers at the store's address.
const SLOW_LISTING: Duration = Duration::from_secs(2);

/// How long opening a queue or listing a store's queues may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

impl Source {
    /// The Redis server of `spec`, `[LABEL=]URL` (see [`split_label`]).
    pub(crate) fn redis(spec: &str) -> Source {
        let (label, url) = split_label(spec);
        Source::Redis {
            label: label.map(str::to_owned),
            url: url.to_owned(),
        }
    }

    /// `schema` of the database of `spec`, `[LABEL=]URL` (see
    /// [`split_label`]).
    pub(crate) fn postgres(spec: &str, schema: &str) -> Source {
        let (label, url) = split_label(spec);
        Source::Postgres {
            label: label.map(str::to_owned),
            url: url.to_owned(),
            schema: schema.to_owned(),
            pool: OnceCell::new(),
        }
    }

    /// The label it was given, if any.
    fn label(&self) -> Option<&str> {
        match self {
            Source::Redis { label, .. } | Source::Postgres { label, .. } => label.as_deref(),
            Source::Memory { .. } => None,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Source::Redis { .. } => Kind::Redis,
            Source::Postgres { .. } => Kind::Postgres,
            Source::Memory { .. } => Kind::Memory,
        }
    }

    /// The queues of this process's memory given by hand.
    pub(crate) fn memory(queues: Vec<MemoryQueue<Value>>) -> Source {
        Source::Memory {
            queues,
            audit: OnceCell::new(),
        }
    }

    /// Where the store is, for people: its URL without a password (and the
    /// schema).
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::Redis { url, .. } => redact(url),
            Source::Postgres { url, schema, .. } => format!("{} schema {schema}", redact(url)),
            Source::Memory { queues, .. } => {
                format!("this process's memory ({} queues)", queues.len())
            }
        }
    }

    /// The names of the store's queues, sorted (the audit log's apart);
    /// an error names the store and, where it can, says what answers at
    /// its address when that is not the store it should be.
    pub(crate) async fn names(&self) -> Result<Vec<String>, OpError> {
        let mut names = match self {
            Source::Redis { url, .. } => match bounded(punctual::redis::queue_names(url)).await {
                Ok(Ok(names)) => names,
                Ok(Err(e)) => return Err(explain::redis(url, &e.to_string()).await),
                Err(e) => return Err(explain::redis(url, e.message()).await),
            },
            Source::Postgres { url, schema, .. } => {
                let listing = bounded(punctual::postgres::queue_names(url, schema));
                tokio::pin!(listing);
                let listed = tokio::select! {
                    listed = &mut listing => listed,
                    () = tokio::time::sleep(SLOW_LISTING) => {
                        // Slow: a server of another protocol would keep it
                        // waiting for its whole response timeout.
                        if let Some(e) = explain::not_postgres(url).await {
                            return Err(e);
                        }
                        listing.await
                    }
                };
                match listed {
                    Ok(Ok(names)) if names.is_empty() => {
                        self.check_schema().await?;
                        names
                    }
                    Ok(Ok(names)) => names,
                    Ok(Err(e)) => return Err(explain::postgres(url, &e.to_string()).await),
                    Err(e) => return Err(explain::postgres(url, e.message()).await),
                }
            }
            Source::Memory { queues, .. } => {
                let mut names: Vec<String> = queues.iter().map(|q| q.name().to_owned()).collect();
                names.sort();
                names.dedup();
                names
            }
        };
        names.retain(|n| n != AUDIT_QUEUE);
        Ok(names)
    }

    /// A PostgreSQL store's schema exists (a schema that does not is a
    /// mistake in `--schema`, not a store without queues).
    async fn check_schema(&self) -> Result<(), OpError> {
        let Source::Postgres { url, schema, .. } = self else {
            return Ok(());
        };
        let pool = self.pool().await?;
        let found: Result<Option<i32>, _> = bounded(
            punctual::postgres::sqlx::query_scalar(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
            )
            .bind(schema.as_str())
            .fetch_optional(&pool),
        )
        .await?;
        match found {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(OpError::Invalid(format!(
                "{}: the database has no schema {schema:?} (punctual's queues live in schema \
                 {:?} unless the application chose another: give it with --schema)",
                redact(url),
                crate::DEFAULT_SCHEMA
            ))),
            Err(e) => Err(explain::postgres(url, &e.to_string()).await),
        }
    }

    /// A PostgreSQL store's pool, made when first needed.
    async fn pool(&self) -> Result<PgPool, OpError> {
        let Source::Postgres { url, pool, .. } = self else {
            unreachable!("a PostgreSQL store's pool");
        };
        pool.get_or_try_init(|| async {
            PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(CONNECT_LIMIT)
                .connect_lazy(url)
                .map_err(|e| OpError::Store(format!("{}: {e}", redact(url))))
        })
        .await
        .cloned()
    }

    /// Opens queue `name` of this store (the audit log's queue,
    /// [`AUDIT_QUEUE`], too: in memory it is made here when first asked
    /// for, on the clock of the first queue given).
    pub(crate) async fn open(&self, name: &str) -> Result<Handle, OpError> {
        match self {
            Source::Redis { url, .. } => {
                let built = bounded(
                    RedisQueue::builder(name)
                        .url(url)
                        .keep_results(CANCEL_RESULTS)
                        .build(),
                )
                .await?;
                match built {
                    Ok(queue) => Ok(Handle::Redis(queue)),
                    Err(e @ punctual::redis::Error::InvalidName(_)) => Err(OpError::redis(e)),
                    Err(e) => Err(explain::redis(url, &e.to_string()).await),
                }
            }
            Source::Postgres { url, schema, .. } => {
                let pool = self.pool().await?;
                let built = bounded(
                    PgQueue::builder(name)
                        .pool(pool)
                        .schema(schema)
                        .keep_results(CANCEL_RESULTS)
                        .build(),
                )
                .await?;
                match built {
                    Ok(queue) => Ok(Handle::Postgres(queue)),
                    Err(e @ punctual::postgres::Error::InvalidName(_)) => Err(OpError::postgres(e)),
                    Err(e) => Err(explain::postgres(url, &e.to_string()).await),
                }
            }
            Source::Memory { queues, audit } if name == AUDIT_QUEUE => {
                let queue = audit
                    .get_or_try_init(|| async {
                        let mut builder = MemoryQueue::builder(AUDIT_QUEUE);
                        if let Some(first) = queues.first() {
                            builder = builder.start_at(first.now().await.map_err(OpError::memory)?);
                        }
                        Ok::<_, OpError>(builder.build())
                    })
                    .await?;
                Ok(Handle::Memory(queue.clone()))
            }
            Source::Memory { queues, .. } => queues
                .iter()
                .find(|q| q.name() == name)
                .map(|q| Handle::Memory(q.clone()))
                .ok_or_else(|| OpError::NotFound(format!("no queue {name:?} in memory"))),
        }
    }
}

/// A store's spec, `[LABEL=]URL`, as its label and its URL: the part
/// before the first `=` is a label when it is letters, digits, `-` and `_`
/// only and what follows holds `://`. A URL never reads so (its scheme
/// comes first, and a PostgreSQL URL's `?sslmode=` follows a `://`).
pub(crate) fn split_label(spec: &str) -> (Option<&str>, &str) {
    if let Some((label, url)) = spec.split_once('=') {
        let is_label = !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if is_label && url.contains("://") {
            return (Some(label), url);
        }
    }
    (None, spec)
}

/// Each store's identity, what a face writes before `:` in `STORE:NAME`
/// (and the JSON's `"source"`, the metrics' `punctual_source`): its label
/// when it has one; else its kind for the first store of its kind given,
/// and `kind@n` for the n-th (`redis@2`), so that two stores of one kind
/// never share one. An error says why the labels cannot be told apart.
pub(crate) fn identities(sources: &[Source]) -> Result<Vec<String>, String> {
    let mut seen: Vec<Kind> = Vec::with_capacity(sources.len());
    let mut out: Vec<String> = Vec::with_capacity(sources.len());
    for source in sources {
        let kind = source.kind();
        seen.push(kind);
        let nth = seen.iter().filter(|k| **k == kind).count();
        let identity = match source.label() {
            Some(label) if Kind::parse(label).is_some() => {
                return Err(format!(
                    "the label {label:?} is the name of a kind of store: choose another"
                ));
            }
            Some(label) => label.to_owned(),
            None if nth == 1 => kind.as_str().to_owned(),
            None => format!("{kind}@{nth}"),
        };
        if out.contains(&identity) {
            return Err(format!(
                "two stores are labelled {identity:?}: give each its own label"
            ));
        }
        out.push(identity);
    }
    Ok(out)
}

/// `fut`, or a store error once [`CONNECT_LIMIT`] has passed.
async fn bounded<R>(fut: impl Future<Output = R>) -> Result<R, OpError> {
    tokio::time::timeout(CONNECT_LIMIT, fut).await.map_err(|_| {
        OpError::Store(format!(
            "the store did not answer within {} s",
            CONNECT_LIMIT.as_secs()
        ))
    })
}

/// `url` with its password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let hidden = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{hidden}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// A queue of any store, its values as JSON.
#[derive(Clone)]
pub(crate) enum Handle {
    Memory(MemoryQueue<Value>),
    Redis(RedisQueue<Value>),
    Postgres(PgQueue<Value>),
}

/// Calls the same method on whichever queue `$handle` holds, its error
/// made an [`OpError`].
macro_rules! each {
    ($handle:expr, $q:ident => $call:expr) => {
        match $handle {
            Handle::Memory($q) => $call.await.map_err(OpError::memory),
            Handle::Redis($q) => $call.await.map_err(OpError::redis),
            Handle::Postgres($q) => $call.await.map_err(OpError::postgres),
        }
    };
}

impl Handle {
    pub(crate) async fn now(&self) -> Result<std::time::SystemTime, OpError> {
        each!(self, q => q.now())
    }

    pub(crate) async fn stats(&self) -> Result<QueueStats, OpError> {
        each!(self, q => q.stats())
    }

    pub(crate) async fn is_paused(&self) -> Result<bool, OpError> {
        each!(self, q => q.is_paused())
    }

    pub(crate) async fn entries(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<Value>, OpError> {
        each!(self, q => q.entries(state, cursor, limit))
    }

    pub(crate) async fn entry(&self, id: &str) -> Result<Option<EntryInfo<Value>>, OpError> {
        each!(self, q => q.entry(id))
    }

    pub(crate) async fn schedules(&self) -> Result<Vec<ScheduleInfo<Value>>, OpError> {
        each!(self, q => q.schedules())
    }

    /// Puts dead letter `id` back, due `delay` from now.
    pub(crate) async fn requeue_dead(&self, id: &str, delay: Duration) -> Result<bool, OpError> {
        each!(self, q => q.requeue_dead(id, delay))
    }

    pub(crate) async fn requeue_all_dead(&self, delay: Duration) -> Result<u64, OpError> {
        each!(self, q => q.requeue_all_dead(delay))
    }

    /// A page of `state`'s entries, newest first (cursors of its own).
    pub(crate) async fn entries_newest(
        &self,
        state: EntryState,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<Value>, OpError> {
        each!(self, q => q.entries_newest(state, cursor, limit))
    }

    /// The result kept of entry `id`, if the queue keeps results.
    pub(crate) async fn result(&self, id: &str) -> Result<Option<JobResult>, OpError> {
        each!(self, q => q.result(id))
    }

    /// Cancels entry `id` (a leased one is stopped); whether there was one.
    pub(crate) async fn cancel(&self, id: &str) -> Result<bool, OpError> {
        each!(self, q => q.cancel(id))
    }

    pub(crate) async fn workers(&self) -> Result<Vec<WorkerInfo>, OpError> {
        each!(self, q => q.workers())
    }

    pub(crate) async fn history(
        &self,
        since: std::time::SystemTime,
    ) -> Result<Vec<Minute>, OpError> {
        each!(self, q => q.history(since))
    }

    pub(crate) async fn latency(&self) -> Result<Option<Duration>, OpError> {
        each!(self, q => q.latency())
    }

    pub(crate) async fn pause_schedule(&self, name: &str) -> Result<bool, OpError> {
        each!(self, q => q.pause_schedule(name))
    }

    pub(crate) async fn resume_schedule(&self, name: &str) -> Result<bool, OpError> {
        each!(self, q => q.resume_schedule(name))
    }

    /// Inserts `value` due `delay` from now (the audit log's records).
    pub(crate) async fn insert(&self, value: &Value, delay: Duration) -> Result<String, OpError> {
        each!(self, q => q.insert(value, delay))
    }

    pub(crate) async fn clear_dead(&self) -> Result<u64, OpError> {
        each!(self, q => q.clear_dead())
    }

    pub(crate) async fn remove(&self, id: &str) -> Result<bool, OpError> {
        each!(self, q => q.remove(id))
    }

    pub(crate) async fn pause(&self) -> Result<bool, OpError> {
        each!(self, q => q.pause())
    }

    pub(crate) async fn resume(&self) -> Result<bool, OpError> {
        each!(self, q => q.resume())
    }

    pub(crate) async fn run_now(&self, name: &str) -> Result<bool, OpError> {
        each!(self, q => q.run_now(name))
    }

    pub(crate) async fn unschedule(&self, name: &str) -> Result<bool, OpError> {
        each!(self, q => q.unschedule(name))
    }

    /// Every key limit, the default under `*`.
    pub(crate) async fn key_limits(&self) -> Result<Vec<(String, KeyLimit)>, OpError> {
        each!(self, q => q.key_limits())
    }

    /// Sets the limit of `key` (`*`: the default); whether it changed.
    pub(crate) async fn set_key_limit(&self, key: &str, limit: KeyLimit) -> Result<bool, OpError> {
        each!(self, q => q.set_key_limit(key, limit))
    }

    /// Removes the limit of `key` (`*`: the default); whether it had one.
    pub(crate) async fn remove_key_limit(&self, key: &str) -> Result<bool, OpError> {
        each!(self, q => q.remove_key_limit(key))
    }
}

#[cfg(test)]
mod tests {
    use super::{Source, identities, redact, split_label};

    #[test]
    fn a_label_is_a_word_before_a_url() {
        assert_eq!(
            split_label("eu=redis://h:6379/"),
            (Some("eu"), "redis://h:6379/")
        );
        assert_eq!(
            split_label("db_2-b=postgres://a@h/x?sslmode=require"),
            (Some("db_2-b"), "postgres://a@h/x?sslmode=require")
        );
        for url in [
            "redis://h/",
            "postgres://a@h/x?sslmode=verify-full&sslrootcert=/ca.pem",
            "host=h dbname=x",
            "=redis://h/",
            "e.u=redis://h/",
        ] {
            assert_eq!(split_label(url), (None, url));
        }
    }

    #[test]
    fn two_stores_of_one_kind_have_their_own_identities() {
        let ids = identities(&[
            Source::redis("redis://a/"),
            Source::redis("redis://b/"),
            Source::redis("eu=redis://c/"),
            Source::postgres("postgres://d/x", "s"),
            Source::postgres("postgres://d/x", "t"),
        ])
        .unwrap();
        assert_eq!(ids, ["redis", "redis@2", "eu", "postgres", "postgres@2"]);
        let labelled_first =
            identities(&[Source::redis("eu=redis://a/"), Source::redis("redis://b/")]).unwrap();
        assert_eq!(labelled_first, ["eu", "redis@2"]);
        assert!(
            identities(&[
                Source::redis("eu=redis://a/"),
                Source::redis("eu=redis://b/")
            ])
            .unwrap_err()
            .contains("\"eu\"")
        );
        assert!(identities(&[Source::redis("postgres=redis://a/")]).is_err());
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("redis://:s3cret@host:6379/0"),
            "redis://:***@host:6379/0"
        );
        assert_eq!(
            redact("postgres://app:pw@db/shop?sslmode=verify-full"),
            "postgres://app:***@db/shop?sslmode=verify-full"
        );
        assert_eq!(redact("postgres://app@db/shop"), "postgres://app@db/shop");
        assert_eq!(redact("redis://127.0.0.1/"), "redis://127.0.0.1/");
    }
}
