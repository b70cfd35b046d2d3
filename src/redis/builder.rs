//! Configuration of a [`RedisQueue`].

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::conn::Conn;
use super::error::{Error, check_name};
use super::inner::Inner;
use super::queue::RedisQueue;
use crate::durable::ops::Retention;

/// Builds a [`RedisQueue`]; made by [`RedisQueue::builder`].
///
/// # Examples
///
/// ```no_run
/// use punctual::redis::RedisQueue;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), punctual::redis::Error> {
/// let orders: RedisQueue<u64> = RedisQueue::builder("unpaid-orders")
///     .url("redis://127.0.0.1:6379/")
///     .lease(Duration::from_secs(60))
///     .max_attempts(5)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct RedisQueueBuilder<T> {
    name: String,
    source: Source,
    lease: Duration,
    max_attempts: u32,
    retention: Retention,
    poll_interval: Duration,
    response_timeout: Duration,
    _values: PhantomData<fn(T) -> T>,
}

enum Source {
    Url(String),
    Client(Box<redis::Client>),
    #[cfg(feature = "redis-cluster")]
    Cluster(Vec<String>),
}

impl<T> fmt::Debug for RedisQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source: &dyn fmt::Debug = match &self.source {
            Source::Url(url) => url,
            Source::Client(client) => client,
            #[cfg(feature = "redis-cluster")]
            Source::Cluster(seeds) => seeds,
        };
        f.debug_struct("RedisQueueBuilder")
            .field("name", &self.name)
            .field("source", source)
            .field("lease", &self.lease)
            .field("max_attempts", &self.max_attempts)
            .field("retention", &self.retention)
            .field("poll_interval", &self.poll_interval)
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

impl<T> RedisQueueBuilder<T> {
    pub(crate) fn new(name: &str) -> Self {
        RedisQueueBuilder {
            name: name.to_owned(),
            source: Source::Url("redis://127.0.0.1:6379/".to_owned()),
            lease: Duration::from_secs(30),
            max_attempts: 10,
            retention: Retention::default(),
            poll_interval: Duration::from_secs(1),
            response_timeout: Duration::from_secs(10),
            _values: PhantomData,
        }
    }

    /// The server to connect to; default `redis://127.0.0.1:6379/`.
    ///
    /// `redis://[user[:password]@]host[:port][/db]`; a user name and
    /// password (percent-encoded) log in as that ACL user on every
    /// connection the queue opens, pub/sub included. `rediss://` connects
    /// over TLS (cargo feature `redis-tls`), checking the server's
    /// certificate against the platform's roots (and a bundle named by
    /// `SSL_CERT_FILE`) and its name against the URL's host. A bad URL is
    /// reported by [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::redis::RedisQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// // A managed Redis: TLS and an ACL user (with the `redis-tls` feature).
    /// let orders: RedisQueue<u64> = RedisQueue::builder("unpaid-orders")
    ///     .url("rediss://orders:s3cr%40t@redis.example.com:6380/")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn url(mut self, url: &str) -> Self {
        self.source = Source::Url(url.to_owned());
        self
    }

    /// A client built by hand, instead of a URL: a private CA or a client
    /// certificate (`Client::build_with_tls`), other connection settings.
    pub fn client(mut self, client: redis::Client) -> Self {
        self.source = Source::Client(Box::new(client));
        self
    }

    /// Connects to a Redis Cluster through any of the `urls` (seed nodes;
    /// one is enough, more survive one being down), instead of one server
    /// (cargo feature `redis-cluster`).
    ///
    /// The connection follows `MOVED` and `ASK` redirects and topology
    /// changes (failovers, slot migrations) through redis-rs's async
    /// cluster client. All keys of a queue share one hash tag, so a queue
    /// lives in one slot, on one node, with its order and atomic scripts
    /// unchanged; queues with different names spread over the nodes by
    /// their slots. Producer calls may return `Err` while a failover or a
    /// migration of the queue's slot is under way; `take*` and workers
    /// ride through. Every URL must carry the same user, password and
    /// scheme (`rediss://` for TLS, feature `redis-tls`); the nodes' own
    /// addresses, as the cluster announces them, are used after the first
    /// contact. Announcements use plain pub/sub, which a cluster forwards
    /// to every node, so consumers subscribe on a seed node. This replaces
    /// any [`url`](Self::url) or [`client`](Self::client) given before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::redis::RedisQueue;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let orders: RedisQueue<u64> = RedisQueue::builder("unpaid-orders")
    ///     .cluster(&["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"])
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "redis-cluster")]
    pub fn cluster(mut self, urls: &[&str]) -> Self {
        self.source = Source::Cluster(urls.iter().map(|url| (*url).to_owned()).collect());
        self
    }

    /// How long a taken entry stays leased to its consumer before it is
    /// delivered again; default 30 s. Millisecond resolution.
    ///
    /// # Panics
    ///
    /// Panics if `lease` is zero.
    #[track_caller]
    pub fn lease(mut self, lease: Duration) -> Self {
        assert!(!lease.is_zero(), "`lease` must be greater than zero");
        self.lease = lease;
        self
    }

    /// After how many deliveries without an ack an entry goes to the dead
    /// letters instead of being delivered again; default 10, 0 for never.
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

    /// The longest a waiting consumer goes without asking Redis, which bounds
    /// how late a delivery is when a notification is lost; default 1 s. An
    /// idle queue costs one request per interval per built handle (clones
    /// share it). Zero is taken as 1 ms.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The longest any call waits for one reply from Redis; default 10 s.
    ///
    /// A reply can be late without anything being wrong: a server paused
    /// for a failover (`CLIENT PAUSE ... WRITE`), a slow link, a long script
    /// of another client. A call whose reply does not come in time returns
    /// `Err` (a producer's call may still have been applied: retry with
    /// [`insert_with_id`](super::RedisQueue::insert_with_id) where a
    /// duplicate matters), and its connection is replaced by a new one, so
    /// a half-open connection (a NAT or load balancer that dropped its
    /// state) costs one timeout, not the queue. Consumers send a claim whose
    /// reply was lost again and get what it leased, so no attempt is spent
    /// on an entry nobody saw. Millisecond resolution.
    ///
    /// # Panics
    ///
    /// Panics if `limit` is zero.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use punctual::redis::RedisQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), punctual::redis::Error> {
    /// let orders: RedisQueue<u64> = RedisQueue::builder("unpaid-orders")
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

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> RedisQueueBuilder<T> {
    /// Connects and checks the server: its version, the types of the
    /// queue's keys, and the user's rights.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad queue name; [`Error::Redis`] for a
    /// bad URL, a server that cannot be reached, a login refused, a TLS
    /// certificate that is not trusted or names another host, a user who
    /// may not run what the queue runs on its keys (`NOPERM`, naming each
    /// missing command; checked ahead on Redis 7) or a key of the queue
    /// that holds a foreign type (`WRONGTYPE`); [`Error::Unsupported`] for
    /// a server older than Redis 6.2, or a `rediss://` URL without the
    /// cargo feature `redis-tls`.
    pub async fn build(self) -> Result<RedisQueue<T>, Error> {
        check_name(&self.name)?;
        let conn = match self.source {
            Source::Url(url) => {
                check_scheme(&url)?;
                Conn::connect(redis::Client::open(url.as_str())?, self.response_timeout).await?
            }
            Source::Client(client) => Conn::connect(*client, self.response_timeout).await?,
            #[cfg(feature = "redis-cluster")]
            Source::Cluster(urls) => {
                let mut seeds = Vec::with_capacity(urls.len());
                for url in &urls {
                    check_scheme(url)?;
                    seeds.push(redis::IntoConnectionInfo::into_connection_info(
                        url.as_str(),
                    )?);
                }
                Conn::connect_cluster(seeds, self.response_timeout).await?
            }
        };
        match conn.server_info().await {
            Ok(info) => check_version(&info)?,
            // A user without INFO (it is not among the rights a queue
            // needs): ACL users mean Redis 6 or later, and the rights
            // check below names what else is missing.
            Err(Error::Redis(e)) if e.code() == Some("NOPERM") => {
                tracing::debug!(error = %e, "this user may not run INFO: the server's version is not checked");
            }
            Err(e) => return Err(e),
        }
        let inner = Inner::new(
            self.name,
            conn,
            self.lease,
            self.max_attempts,
            self.retention,
            self.poll_interval,
        );
        inner.check().await.map_err(|e| name_the_keys(e, &inner))?;
        inner.check_rights().await?;
        inner.preload().await;
        check_channel(&inner).await?;
        Ok(RedisQueue::from_inner(inner))
    }
}

/// A key permission error names the keys: the server's does not.
fn name_the_keys(error: Error, inner: &Inner) -> Error {
    match error {
        Error::Redis(e) if e.code() == Some("NOPERM") && e.to_string().contains("keys") => {
            Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
                "this redis user may not access the queue's keys",
                format!(
                    "grant ~punctual:{{{}}}:* (the server said: {e})",
                    inner.name
                ),
            )))
        }
        other => other,
    }
}

/// Fails with a clear error for a TLS URL in a build without TLS.
fn check_scheme(url: &str) -> Result<(), Error> {
    let tls = ["rediss://", "valkeys://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
    });
    if tls && !cfg!(feature = "redis-tls") {
        return Err(Error::Unsupported(
            "a rediss:// (TLS) url needs the cargo feature `redis-tls`".into(),
        ));
    }
    Ok(())
}

/// Warns (through `tracing`) when the user may not publish or subscribe to
/// the queue's channel: announcements are an optimisation, and consumers
/// then find new entries by polling.
async fn check_channel(inner: &Inner) -> Result<(), Error> {
    let channel = &inner.keys.channel;
    let published: Result<i64, Error> = inner
        .conn
        .query(redis::cmd("PUBLISH").arg(channel).arg(""))
        .await;
    match published {
        Err(Error::Redis(e)) if e.code() == Some("NOPERM") => {
            tracing::warn!(queue = %inner.name, channel, error = %e,
                "this user may not publish to the queue's channel: waiting consumers \
                 find new entries by polling (poll_interval)");
        }
        other => {
            other?;
        }
    }
    let timeout = inner.conn.response_timeout();
    let subscribed = tokio::time::timeout(timeout, async {
        let mut last = None;
        for client in inner.conn.pubsub_clients() {
            match client.get_async_pubsub().await {
                Ok(mut pubsub) => return pubsub.subscribe(channel).await,
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no server to subscribe on",
            ))
        }))
    })
    .await;
    match subscribed {
        Ok(Err(e)) if e.code() == Some("NOPERM") => {
            tracing::warn!(queue = %inner.name, channel, error = %e,
                "this user may not subscribe to the queue's channel: waiting consumers \
                 find new entries by polling (poll_interval)");
        }
        Ok(Err(e)) => return Err(Error::Redis(e)),
        Ok(Ok(())) => {}
        Err(_) => {
            return Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer to a subscription in time",
            ))));
        }
    }
    Ok(())
}

/// Fails unless `INFO server` names Redis 6.2 or later.
fn check_version(info: &str) -> Result<(), Error> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(str::trim)
        .ok_or_else(|| Error::Unsupported("INFO names no redis_version".into()))?;
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (6, 2) {
        return Err(Error::Unsupported(format!(
            "Redis {version} is older than 6.2"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_version;

    #[test]
    fn versions() {
        assert!(check_version("# Server\r\nredis_version:7.0.15\r\n").is_ok());
        assert!(check_version("redis_version:6.2.0\r\n").is_ok());
        assert!(check_version("redis_version:10.0.0\r\n").is_ok());
        assert!(check_version("redis_version:6.0.16\r\n").is_err());
        assert!(check_version("redis_version:5.0.7\r\n").is_err());
        assert!(check_version("# Server\r\n").is_err());
    }
}
