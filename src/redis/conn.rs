//! The connection every handle and delivery of a built queue shares: one
//! multiplexed connection, replaced by a new one (built from the client)
//! when it stops answering.
//!
//! Ground rules: `current` (a short lock, never held across an await) holds
//! the connection in use and its number; `connecting` (an async lock) is held
//! by the one caller that builds a replacement, so a dead server sees one
//! connection attempt at a time, spaced by a capped back-off. A request that
//! fails with an I/O error or gets no reply within `response_timeout`
//! retires the connection it used (by number, so a late failure of an old
//! connection never retires its replacement). redis-rs's own
//! `ConnectionManager` is not used: it keeps a connection whose replies
//! time out, and a reconnection refused once (a password rolled out late)
//! stays cached as failed.

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
    client: Client,
    config: AsyncConnectionConfig,
    response_timeout: Duration,
    current: Lock<Option<Current>>,
    connecting: tokio::sync::Mutex<Reconnect>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("client", &self.client)
            .field("response_timeout", &self.response_timeout)
            .field("current", &self.current)
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
    /// reached or refuses the login.
    pub(crate) async fn connect(client: Client, response_timeout: Duration) -> Result<Conn, Error> {
        let client = with_tcp_settings(client)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(response_timeout))
            .set_response_timeout(Some(response_timeout));
        let conn = Conn {
            client,
            config,
            response_timeout,
            current: Lock::new(None),
            connecting: tokio::sync::Mutex::new(Reconnect::default()),
        };
        conn.get().await?;
        Ok(conn)
    }

    /// The client the connections are built from (for pub/sub).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The longest wait for one reply.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Runs a script, waiting for its reply up to the response timeout.
    pub(crate) async fn run<R: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<R, Error> {
        let (number, mut conn) = self.get().await?;
        let reply = tokio::time::timeout(self.response_timeout, invocation.invoke_async(&mut conn));
        self.settle(number, reply.await)
    }

    /// Runs one command, waiting for its reply up to the response timeout.
    pub(crate) async fn query<R: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<R, Error> {
        let (number, mut conn) = self.get().await?;
        let reply = tokio::time::timeout(self.response_timeout, async {
            let value = conn.req_packed_command(cmd).await?.extract_error()?;
            redis::from_redis_value(value).map_err(RedisError::from)
        });
        self.settle(number, reply.await)
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
                if error.is_unrecoverable_error()
                    || error.is_io_error()
                    || error.is_timeout()
                    || demoted
                {
                    self.retire(number);
                }
                Err(Error::Redis(error))
            }
            Err(_) => {
                self.retire(number);
                Err(Error::Redis(RedisError::from(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no reply from redis within {:?}", self.response_timeout),
                ))))
            }
        }
    }

    /// Drops connection `number` if it is still the current one: the next
    /// request builds a new one.
    fn retire(&self, number: u64) {
        let mut current = self.current.lock();
        if current.as_ref().is_some_and(|c| c.number == number) {
            *current = None;
            tracing::debug!(number, "redis connection retired");
        }
    }

    /// The current connection, built first if there is none.
    async fn get(&self) -> Result<(u64, MultiplexedConnection), Error> {
        if let Some(current) = self.current.lock().clone() {
            return Ok((current.number, current.conn));
        }
        // Held only by a caller that is connecting: if it is held now, this
        // caller waits for that attempt and shares its outcome.
        let waited = self.connecting.try_lock().is_err();
        let mut reconnect = self.connecting.lock().await;
        // Built by another caller while this one waited for the lock.
        if let Some(current) = self.current.lock().clone() {
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
            self.client
                .get_multiplexed_async_connection_with_config(&self.config),
        )
        .await;
        let failure = match attempt {
            Ok(Ok(conn)) => {
                reconnect.built += 1;
                reconnect.backoff.reset();
                reconnect.not_before = None;
                let number = reconnect.built;
                *self.current.lock() = Some(Current {
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

/// `client` with TCP keepalive (a peer that vanished is noticed even on an
/// idle connection) and linger 0: a connection retired after a timeout is
/// reset, so a request still in its send buffer is discarded rather than
/// run by the server later, when nobody waits for its reply.
fn with_tcp_settings(client: Client) -> Result<Client, Error> {
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10));
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
        .set_linger_time(Duration::ZERO);
    let info = client
        .get_connection_info()
        .clone()
        .set_tcp_settings(settings);
    Ok(Client::open(info)?)
}
