//! [`PgQueueBuilder`]: where the queue lives and how it leases.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use super::error::{Error, check_name, check_schema};
use super::inner::{Inner, timed_out};
use super::queue::PgQueue;
use super::sql::{self, Statements};
use super::tls;
use crate::durable::At;
use crate::durable::ops::Retention;

/// Builds a [`PgQueue`]: `PgQueue::builder(name)`, then the settings, then
/// [`build`](Self::build).
pub struct PgQueueBuilder<T> {
    name: String,
    url: String,
    pool: Option<PgPool>,
    schema: String,
    lease: Duration,
    max_attempts: u32,
    retention: Retention,
    poll_interval: Duration,
    response_timeout: Duration,
    _values: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for PgQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgQueueBuilder")
            .field("name", &self.name)
            .field("pool", &self.pool.is_some())
            .field("schema", &self.schema)
            .field("lease", &self.lease)
            .field("max_attempts", &self.max_attempts)
            .field("retention", &self.retention)
            .field("poll_interval", &self.poll_interval)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

impl<T> PgQueueBuilder<T> {
    pub(crate) fn new(name: &str) -> Self {
        PgQueueBuilder {
            name: name.to_owned(),
            url: "postgres://localhost/postgres".to_owned(),
            pool: None,
            schema: "punctual".to_owned(),
            lease: Duration::from_secs(30),
            max_attempts: 10,
            retention: Retention::default(),
            poll_interval: Duration::from_secs(1),
            response_timeout: Duration::from_secs(10),
            _values: PhantomData,
        }
    }

    /// The database to connect to; default `postgres://localhost/postgres`.
    /// Ignored when a [`pool`](Self::pool) is given. Its `sslmode` and
    /// `sslrootcert` choose TLS (cargo feature `postgres-tls`; see
    /// [TLS](super#tls)).
    pub fn url(mut self, url: &str) -> Self {
        url.clone_into(&mut self.url);
        self
    }

    /// Shares the service's own pool (so [`insert_in`](PgQueue::insert_in)
    /// can run on its transactions' connections). The queue takes one of
    /// its connections for `LISTEN` while consumers wait.
    pub fn pool(mut self, pool: PgPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The schema holding the tables (several queues share them); default
    /// `punctual`. A plain identifier: ASCII letters, digits and `_`.
    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.schema);
        self
    }

    /// How long a taken entry stays leased before it is delivered again;
    /// default 30 s.
    ///
    /// # Panics
    ///
    /// If `lease` is zero.
    #[track_caller]
    pub fn lease(mut self, lease: Duration) -> Self {
        assert!(
            !lease.is_zero(),
            "PgQueueBuilder::lease: the lease must not be zero"
        );
        self.lease = lease;
        self
    }

    /// Deliveries before an entry goes to the dead letters; default 10; 0
    /// never dead-letters.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// How long the result of an entry that finished through this handle
    /// (acked, dead-lettered, cancelled) is kept in the store for `result`
    /// and `wait`; default 0: nothing is kept once an entry finishes.
    pub fn keep_results(mut self, for_: Duration) -> Self {
        self.retention.keep_results = for_;
        self
    }

    /// Dead letters older than `age` are deleted right after each death
    /// through this handle; default: kept whatever their age.
    pub fn dead_max_age(mut self, age: Duration) -> Self {
        self.retention.max_age = Some(age);
        self
    }

    /// At most `n` dead letters are kept, the oldest deleted first, right
    /// after each death through this handle; default: no limit.
    pub fn dead_max_count(mut self, n: u64) -> Self {
        self.retention.max_count = Some(n);
        self
    }

    /// The longest a waiting consumer goes without asking the database
    /// (a lost notification delays a delivery by at most this); default
    /// 1 s. Zero is taken as 1 ms, as on Redis.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The longest wait for a connection of the pool, and then for the
    /// answer to one statement; default 10 s. A statement that gets no
    /// answer in time (a link gone silent, a server paused) fails with a
    /// transient [`Error::Database`] (an I/O error of kind `TimedOut`), and
    /// its connection is closed, never returned to the pool; the statement
    /// may still have run. `take*` and a `Worker` ride through: they ask
    /// again on another connection (a claim whose answer was lost gets
    /// what it leased). On the caller's own connection (`insert_in` and the
    /// other transactional calls) the connection cannot be closed: drop
    /// the transaction.
    ///
    /// # Panics
    ///
    /// Panics if `limit` is zero.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::postgres::PgQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::postgres::Error> {
    /// let orders: PgQueue<u64> = PgQueue::builder("unpaid-orders")
    ///     .url("postgres://localhost/shop")
    ///     .response_timeout(Duration::from_secs(3))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn response_timeout(mut self, limit: Duration) -> Self {
        assert!(
            !limit.is_zero(),
            "`response_timeout` must be greater than zero"
        );
        self.response_timeout = limit;
        self
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> PgQueueBuilder<T> {
    /// Connects (unless given a pool), creates or upgrades the schema's
    /// tables and functions (once, under an advisory lock, so many
    /// processes may start together) and returns the queue.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad queue or schema name;
    /// [`Error::Database`] if the database cannot be reached or refuses
    /// (the user may not create the schema, say), or if TLS fails or is
    /// missing (the message says what to change: see [TLS](super#tls));
    /// [`Error::Unsupported`] for a server older than PostgreSQL 12.
    pub async fn build(self) -> Result<PgQueue<T>, Error> {
        check_name(&self.name)?;
        check_schema(&self.schema)?;
        let pool = match self.pool {
            Some(pool) => pool,
            None => {
                PgPoolOptions::new()
                    .max_connections(10)
                    .acquire_timeout(self.response_timeout)
                    // A ping before each query would double its round trips;
                    // a broken connection fails the query, which is retried.
                    .test_before_acquire(false)
                    .connect(&self.url)
                    .await
                    .map_err(|e| tls::explain(e, &self.url))?
            }
        };
        let limit = self.response_timeout;
        // The install may wait for another process's, under its lock.
        bounded(
            limit,
            "installing the schema",
            sql::install(&pool, &self.schema),
        )
        .await?;
        let statements = Statements::new(&self.schema);
        // The channel, and the server and database, which with the schema
        // tell this queue from every other in cursors.
        let (channel, server): (String, String) = bounded(limit, "naming the channel", async {
            sqlx::query_as(&statements.channel)
                .bind(&self.schema)
                .bind(&self.name)
                .fetch_one(&pool)
                .await
                .map_err(Error::Database)
        })
        .await?;
        let identity = At::queue("postgres", &self.name, &format!("{server}/{}", self.schema));
        Ok(PgQueue::from_inner(Inner::new(
            identity,
            self.name,
            pool,
            statements,
            channel,
            self.lease,
            self.max_attempts,
            self.retention,
            self.poll_interval,
            limit,
        )))
    }
}

/// `fut`, or a timed-out error naming `what` once `limit` has passed.
async fn bounded<R>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = Result<R, Error>>,
) -> Result<R, Error> {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| Err(timed_out(what, limit)))
}
