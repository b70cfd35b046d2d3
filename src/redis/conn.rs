//! The connection every handle and delivery of a built queue shares: one
//! multiplexed connection to a single server, replaced by a new one (built
//! from the client) when it stops answering; or, with the feature
//! `redis-cluster`, redis-rs's async cluster connection, which holds one
//! connection per node, follows `MOVED`/`ASK` and refreshes the slot map
//! itself.
//!
//! Ground rules (single server): `current` (a short lock, never held across
//! an await) holds the connection in use and its number; `connecting` (an
//! async lock) is held by the one caller that builds a replacement, so a
//! dead server sees one connection attempt at a time, spaced by a capped
//! back-off. A request that fails with an I/O error or gets no reply within
//! `response_timeout` retires the connection it used (by number, so a late
//! failure of an old connection never retires its replacement). redis-rs's
//! own `ConnectionManager` is not used: it keeps a connection whose replies
//! time out, and a reconnection refused once (a password rolled out late)
//! stays cached as failed.
//!
//! TLS (`rediss://`, feature `redis-tls`) changes nothing here: redis-rs
//! opens the TCP socket with the settings of [`with_tcp_settings`] and runs
//! rustls over it, so keepalive, no-delay and linger apply to TLS
//! connections too.

use std::io;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
use redis::{AsyncConnectionConfig, Client, FromRedisValue, RedisError, ScriptInvocation};
use tokio::time::Instant;

use super::error::Error;
use crate::durable::wait::Backoff;
use crate::lock::Lock;

pub(crate) struct Conn {
    link: Link,
    response_timeout: Duration,
    /// What pub/sub connections are opened from: the server, or a
    /// cluster's seed nodes (a cluster forwards a `PUBLISH` to every node,
    /// so any node serves a subscription).
    pubsub: Vec<Client>,
}

enum Link {
    Single(Single),
    #[cfg(feature = "redis-cluster")]
    Cluster(Cluster),
}

/// A cluster connection, replaced by a new one (with a fresh slot map)
/// when a node answers `READONLY`: redis-rs sends `READONLY` on every node
/// connection, so after a failover the demoted primary serves a script
/// (not flagged as a write) itself and fails it, instead of redirecting,
/// and redis-rs does not refresh its slots on that error.
#[cfg(feature = "redis-cluster")]
struct Cluster {
    client: redis::cluster::ClusterClient,
    current: Lock<(u64, redis::cluster_async::ClusterConnection)>,
    /// Held by the one caller that replaces the connection; when the last
    /// replacement may be followed by another.
    replacing: tokio::sync::Mutex<Option<Instant>>,
}

struct Single {
    client: Client,
    config: AsyncConnectionConfig,
    current: Lock<Option<Current>>,
    connecting: tokio::sync::Mutex<Reconnect>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("Conn");
        match &self.link {
            Link::Single(single) => f
                .field("client", &single.client)
                .field("current", &single.current),
            #[cfg(feature = "redis-cluster")]
            Link::Cluster(_) => f.field("cluster", &self.pubsub),
        };
        f.field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Current {
    number: u64,
    conn: MultiplexedConnection,
}

impl std::fmt::Debug for Current {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current")
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

/// The state of reconnection: the number of the last connection built,
/// when the next attempt may start after failed ones, and how the last of
/// them failed (a caller that waited behind a failed attempt fails at once
/// with its error instead of trying again in turn).
#[derive(Debug, Default)]
struct Reconnect {
    built: u64,
    backoff: Backoff,
    not_before: Option<Instant>,
    last_failure: String,
}

impl Conn {
    /// Builds the shared connection from `client`, with TCP keepalive on,
    /// and connects once, so that `build()` reports a server that cannot be
    /// reached, refuses the login or presents a certificate that is not
    /// trusted.
    pub(crate) async fn connect(client: Client, response_timeout: Duration) -> Result<Conn, Error> {
        check_tls(client.get_connection_info())?;
        let client = with_tcp_settings(client)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(response_timeout))
            .set_response_timeout(Some(response_timeout));
        let conn = Conn {
            link: Link::Single(Single {
                client: client.clone(),
                config,
                current: Lock::new(None),
                connecting: tokio::sync::Mutex::new(Reconnect::default()),
            }),
            response_timeout,
            pubsub: vec![client],
        };
        conn.single_get().await?;
        Ok(conn)
    }

    /// Connects to the Redis Cluster that `seeds` belong to (any of its
    /// nodes will do), with the same TCP settings and timeouts as a single
    /// server. redis-rs's cluster client takes the login and TLS mode of
    /// the first seed for every node.
    #[cfg(feature = "redis-cluster")]
    pub(crate) async fn connect_cluster(
        seeds: Vec<redis::ConnectionInfo>,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        if seeds.is_empty() {
            return Err(Error::Redis(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster needs at least one seed url",
            ))));
        }
        let mut pubsub = Vec::with_capacity(seeds.len());
        for seed in &seeds {
            check_tls(seed)?;
            pubsub.push(with_tcp_settings(Client::open(seed.clone())?)?);
        }
        let client = redis::cluster::ClusterClient::builder(seeds)
            .tcp_settings(tcp_settings())
            .connection_timeout(response_timeout)
            .response_timeout(response_timeout)
            .build()?;
        let conn = cluster_connect(&client, response_timeout).await?;
        Ok(Conn {
            link: Link::Cluster(Cluster {
                client,
                current: Lock::new((1, conn)),
                replacing: tokio::sync::Mutex::new(None),
            }),
            response_timeout,
            pubsub,
        })
    }

    /// Replaces cluster connection `number` by a new one, unless that was
    /// done already; at most once per 200 ms.
    #[cfg(feature = "redis-cluster")]
    async fn replace_cluster(&self, cluster: &Cluster, number: u64) {
        let mut replacing = cluster.replacing.lock().await;
        if cluster.current.lock().0 != number {
            return;
        }
        if let Some(not_before) = *replacing {
            tokio::time::sleep_until(not_before).await;
        }
        *replacing = Some(Instant::now() + Duration::from_millis(200));
        match cluster_connect(&cluster.client, self.response_timeout).await {
            Ok(conn) => {
                *cluster.current.lock() = (number + 1, conn);
                tracing::debug!(number, "redis cluster connection replaced");
            }
            Err(error) => {
                tracing::debug!(%error, "redis cluster connection not replaced");
            }
        }
    }

    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        !matches!(self.link, Link::Single(_))
    }

    /// What pub/sub connections are opened from, in order of preference.
    pub(crate) fn pubsub_clients(&self) -> &[Client] {
        &self.pubsub
    }

    /// The longest wait for one reply.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// `INFO server` of the server (of one node of a cluster).
    pub(crate) async fn server_info(&self) -> Result<String, Error> {
        let info = redis::cmd("INFO").arg("server").to_owned();
        match &self.link {
            Link::Single(_) => self.query(&info).await,
            #[cfg(feature = "redis-cluster")]
            Link::Cluster(_) => {
                // Through the cluster connection, INFO goes to every node
                // and the replies come back as a map; one node's is enough.
                let mut last = None;
                for client in &self.pubsub {
                    let reply = tokio::time::timeout(self.response_timeout, async {
                        let mut conn = client.get_multiplexed_async_connection().await?;
                        info.query_async::<String>(&mut conn).await
                    })
                    .await;
                    match reply {
                        Ok(Ok(info)) => return Ok(info),
                        Ok(Err(e)) => last = Some(e),
                        Err(_) => last = Some(timed_out(self.response_timeout)),
                    }
                }
                Err(Error::Redis(
                    last.unwrap_or_else(|| timed_out(self.response_timeout)),
                ))
            }
        }
    }

    /// Runs a script on a connection of its own, opened for it and closed
    /// after: for a request the server may refuse to read (one holding a
    /// value over its `proto-max-bulk-len`), which makes it close the
    /// connection under every request in flight on it. (On a cluster, as
    /// `run`.)
    pub(crate) async fn run_apart<R: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<R, Error> {
        match &self.link {
            Link::Single(single) => {
                let reply = tokio::time::timeout(self.response_timeout, async {
                    let mut conn = single
                        .client
                        .get_multiplexed_async_connection_with_config(&single.config)
                        .await?;
                    invocation.invoke_async(&mut conn).await
                })
                .await;
                match reply {
                    Ok(reply) => reply.map_err(Error::Redis),
                    Err(_) => Err(Error::Redis(timed_out(self.response_timeout))),
                }
            }
            #[cfg(feature = "redis-cluster")]
            Link::Cluster(_) => self.run(invocation).await,
        }
    }

    /// Runs a script, waiting for its reply up to the response timeout.
    pub(crate) async fn run<R: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<R, Error> {
        match &self.link {
            Link::Single(_) => {
                let (number, mut conn) = self.single_get().await?;
                let reply =
                    tokio::time::timeout(self.response_timeout, invocation.invoke_async(&mut conn));
                self.settle(number, reply.await)
            }
            #[cfg(feature = "redis-cluster")]
            Link::Cluster(cluster) => {
                let (number, mut conn) = cluster.current.lock().clone();
                let reply =
                    tokio::time::timeout(self.response_timeout, invocation.invoke_async(&mut conn));
                self.settle_cluster(cluster, number, reply.await).await
            }
        }
    }

    /// Loads `script` into the server's script cache, so that its first
    /// call is one round trip (a call that finds it missing loads it again).
    pub(crate) async fn load(&self, script: &redis::Script) -> Result<(), Error> {
        match &self.link {
            Link::Single(_) => {
                let (number, mut conn) = self.single_get().await?;
                let reply =
                    tokio::time::timeout(self.response_timeout, script.load_async(&mut conn));
                self.settle(number, reply.await).map(|_: String| ())
            }
            #[cfg(feature = "redis-cluster")]
            Link::Cluster(cluster) => {
                let (number, mut conn) = cluster.current.lock().clone();
                let reply =
                    tokio::time::timeout(self.response_timeout, script.load_async(&mut conn));
                self.settle_cluster(cluster, number, reply.await)
                    .await
                    .map(|_: String| ())
            }
        }
    }

    /// Runs one command, waiting for its reply up to the response timeout.
    pub(crate) async fn query<R: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<R, Error> {
        async fn send<R: FromRedisValue>(
            conn: &mut impl ConnectionLike,
            cmd: &redis::Cmd,
        ) -> Result<R, RedisError> {
            let value = conn.req_packed_command(cmd).await?.extract_error()?;
            redis::from_redis_value(value).map_err(RedisError::from)
        }
        match &self.link {
            Link::Single(_) => {
                let (number, mut conn) = self.single_get().await?;
                let reply = tokio::time::timeout(self.response_timeout, send(&mut conn, cmd));
                self.settle(number, reply.await)
            }
            #[cfg(feature = "redis-cluster")]
            Link::Cluster(cluster) => {
                let (number, mut conn) = cluster.current.lock().clone();
                let reply = tokio::time::timeout(self.response_timeout, send(&mut conn, cmd));
                self.settle_cluster(cluster, number, reply.await).await
            }
        }
    }

    /// A cluster's reply: the cluster connection replaces broken node
    /// connections and follows redirects itself; a demoted node's
    /// `READONLY` replaces the whole connection (see [`Cluster`]).
    #[cfg(feature = "redis-cluster")]
    async fn settle_cluster<R>(
        &self,
        cluster: &Cluster,
        number: u64,
        reply: Result<Result<R, RedisError>, tokio::time::error::Elapsed>,
    ) -> Result<R, Error> {
        match reply {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if matches!(error.code(), Some("READONLY" | "MASTERDOWN")) {
                    self.replace_cluster(cluster, number).await;
                }
                Err(Error::Redis(error))
            }
            Err(_) => Err(Error::Redis(timed_out(self.response_timeout))),
        }
    }

    /// The reply, after retiring connection `number` if it failed or timed out.
    fn settle<R>(
        &self,
        number: u64,
        reply: Result<Result<R, RedisError>, tokio::time::error::Elapsed>,
    ) -> Result<R, Error> {
        match reply {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                // READONLY, MASTERDOWN: this node was demoted or lost its
                // primary in a failover; a new connection may reach the new
                // primary (behind a DNS name or a proxy).
                let demoted = matches!(error.code(), Some("READONLY" | "MASTERDOWN"));
                // A request the server could not read (a value over its
                // `proto-max-bulk-len`): it closes the connection.
                let unreadable = error.code() == Some("ERR")
                    && error
                        .detail()
                        .is_some_and(|d| d.starts_with("Protocol error"));
                if error.is_unrecoverable_error()
                    || error.is_io_error()
                    || error.is_timeout()
                    || demoted
                    || unreadable
                {
                    self.retire(number);
                }
                Err(Error::Redis(error))
            }
            Err(_) => {
                self.retire(number);
                Err(Error::Redis(timed_out(self.response_timeout)))
            }
        }
    }

    /// Drops connection `number` if it is still the current one: the next
    /// request builds a new one.
    fn retire(&self, number: u64) {
        #[allow(irrefutable_let_patterns)] // without `redis-cluster`
        let Link::Single(single) = &self.link else {
            return;
        };
        let mut current = single.current.lock();
        if current.as_ref().is_some_and(|c| c.number == number) {
            *current = None;
            tracing::debug!(number, "redis connection retired");
        }
    }

    /// The current connection to the single server, built first if there
    /// is none.
    async fn single_get(&self) -> Result<(u64, MultiplexedConnection), Error> {
        #[allow(irrefutable_let_patterns)] // without `redis-cluster`
        let Link::Single(single) = &self.link else {
            return Err(Error::Unsupported(
                "a single-server request on a cluster connection".into(),
            ));
        };
        if let Some(current) = single.current.lock().clone() {
            return Ok((current.number, current.conn));
        }
        // Held only by a caller that is connecting: if it is held now, this
        // caller waits for that attempt and shares its outcome.
        let waited = single.connecting.try_lock().is_err();
        let mut reconnect = single.connecting.lock().await;
        // Built by another caller while this one waited for the lock.
        if let Some(current) = single.current.lock().clone() {
            return Ok((current.number, current.conn));
        }
        // The attempt this caller waited for failed: fail at once with its
        // error rather than queue one attempt (of up to a response timeout)
        // per caller. Nothing was sent, so nothing is in doubt.
        if waited {
            return Err(Error::Redis(RedisError::from(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("no connection to redis: {}", reconnect.last_failure),
            ))));
        }
        if let Some(not_before) = reconnect.not_before {
            tokio::time::sleep_until(not_before).await;
        }
        let attempt = tokio::time::timeout(
            self.response_timeout,
            single
                .client
                .get_multiplexed_async_connection_with_config(&single.config),
        )
        .await;
        let failure = match attempt {
            Ok(Ok(conn)) => {
                reconnect.built += 1;
                reconnect.backoff.reset();
                reconnect.not_before = None;
                let number = reconnect.built;
                *single.current.lock() = Some(Current {
                    number,
                    conn: conn.clone(),
                });
                return Ok((number, conn));
            }
            Ok(Err(error)) => error,
            Err(_) => RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection to redis within {:?}", self.response_timeout),
            )),
        };
        reconnect.not_before = Some(Instant::now() + reconnect.backoff.next());
        reconnect.last_failure = failure.to_string();
        Err(Error::Redis(failure))
    }
}

/// A new cluster connection (it reads the slot map from the seed nodes).
#[cfg(feature = "redis-cluster")]
async fn cluster_connect(
    client: &redis::cluster::ClusterClient,
    response_timeout: Duration,
) -> Result<redis::cluster_async::ClusterConnection, Error> {
    match tokio::time::timeout(response_timeout, client.get_async_connection()).await {
        Ok(conn) => Ok(conn?),
        Err(_) => Err(Error::Redis(RedisError::from(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no connection to the redis cluster within {response_timeout:?}"),
        )))),
    }
}

fn timed_out(limit: Duration) -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no reply from redis within {limit:?}"),
    ))
}

/// Makes sure rustls has a crypto provider before a TLS connection is made.
fn check_tls(info: &redis::ConnectionInfo) -> Result<(), Error> {
    #[cfg(feature = "redis-tls")]
    if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
        && rustls::crypto::CryptoProvider::get_default().is_none()
    {
        // redis-rs builds its rustls config with the process's default
        // provider, which rustls picks by itself only when exactly one
        // provider's feature is on in the whole build (else it panics).
        // Installing ring fails harmlessly if another thread installed one
        // meanwhile.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    #[cfg(not(feature = "redis-tls"))]
    let _ = info;
    Ok(())
}

/// `client` with TCP keepalive (a peer that vanished is noticed even on an
/// idle connection) and linger 0: a connection retired after a timeout is
/// reset, so a request still in its send buffer is discarded rather than
/// run by the server later, when nobody waits for its reply.
fn with_tcp_settings(client: Client) -> Result<Client, Error> {
    let info = client
        .get_connection_info()
        .clone()
        .set_tcp_settings(tcp_settings());
    Ok(Client::open(info)?)
}

fn tcp_settings() -> TcpSettings {
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10));
    TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
        .set_linger_time(Duration::ZERO)
}
