//! The error type of the Redis queue.

use std::fmt;

/// Error returned by [`RedisQueue`](super::RedisQueue) operations.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Redis answered with an error or could not be reached. A key of the
    /// wrong type under the queue's name is reported here too, with the
    /// server's `WRONGTYPE` message naming the key.
    Redis(redis::RedisError),
    /// The value could not be serialized to JSON; nothing was sent.
    Encode(serde_json::Error),
    /// An id that is empty, longer than 512 bytes or holds a NUL character
    /// (refused by every store, as PostgreSQL text cannot hold one);
    /// nothing was sent.
    InvalidId(String),
    /// A queue name that is empty, longer than 512 bytes or contains `{`,
    /// `}` (they would break the queue's hash tag) or a NUL character.
    InvalidName(String),
    /// The server is older than Redis 6.2 or not a Redis server, or this
    /// process cannot serve what the queue holds (a cron schedule without
    /// the cargo feature `cron`).
    Unsupported(String),
    /// A schedule that cannot be: a zero period, a bad cron expression or an
    /// unknown `CRON_TZ` zone (named), or a name taken by an entry that is
    /// not a schedule's tick.
    InvalidSchedule(String),
    /// A key limit that cannot be: a rate whose period is zero; nothing was
    /// written.
    InvalidLimit(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis error: {e}"),
            Error::Encode(e) => write!(f, "value does not serialize to JSON: {e}"),
            Error::InvalidId(why) => write!(f, "invalid id: {why}"),
            Error::InvalidName(why) => write!(f, "invalid queue name: {why}"),
            Error::Unsupported(why) => write!(f, "unsupported: {why}"),
            Error::InvalidSchedule(why) => write!(f, "invalid schedule: {why}"),
            Error::InvalidLimit(why) => write!(f, "invalid key limit: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Encode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::Redis(e)
    }
}

impl From<crate::durable::ops::Unsettled> for Error {
    fn from(e: crate::durable::ops::Unsettled) -> Error {
        match e {
            crate::durable::ops::Unsettled::Invalid(why) => Error::InvalidSchedule(why),
            crate::durable::ops::Unsettled::Unsupported(why) => Error::Unsupported(why),
        }
    }
}

impl Error {
    /// The same error, for another caller of a request made for several
    /// (a batch of inserts).
    pub(crate) fn again(&self) -> Error {
        match self {
            Error::Redis(e) => Error::Redis(e.clone()),
            Error::Encode(e) => Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "encode",
                e.to_string(),
            ))),
            Error::InvalidId(why) => Error::InvalidId(why.clone()),
            Error::InvalidName(why) => Error::InvalidName(why.clone()),
            Error::Unsupported(why) => Error::Unsupported(why.clone()),
            Error::InvalidSchedule(why) => Error::InvalidSchedule(why.clone()),
            Error::InvalidLimit(why) => Error::InvalidLimit(why.clone()),
        }
    }

    /// Whether waiting and asking again can fix this error: the connection
    /// was lost, refused or timed out, or the server said so (loading its
    /// data, busy with another script, out of memory for now, read-only or
    /// down during a failover). A reply that does not parse, a key of the
    /// wrong type or failed authentication are not.
    pub(crate) fn is_transient(&self) -> bool {
        let Error::Redis(e) = self else {
            return false;
        };
        const WAIT_AND_RETRY: [&str; 7] = [
            "LOADING",
            "BUSY",
            "OOM",
            "READONLY",
            "TRYAGAIN",
            "MASTERDOWN",
            "CLUSTERDOWN",
        ];
        if e.code().is_some_and(|code| WAIT_AND_RETRY.contains(&code)) {
            return true;
        }
        e.kind() != redis::ErrorKind::AuthenticationFailed
            && (e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout())
    }
}

impl Error {
    /// Whether the request may have reached the server and run although no
    /// reply came: its reply timed out, or the connection broke after it was
    /// sent.
    pub(crate) fn is_in_doubt(&self) -> bool {
        let Error::Redis(e) = self else {
            return false;
        };
        !e.is_connection_refusal()
            && (e.is_timeout() || e.is_connection_dropped() || e.is_io_error())
    }
}

/// Checks an id against the rules every store keeps.
pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    crate::durable::rules::id_problem(id).map_or(Ok(()), |why| Err(Error::InvalidId(why)))
}

/// Checks a queue name against the rules every store keeps.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    crate::durable::rules::name_problem(name).map_or(Ok(()), |why| Err(Error::InvalidName(why)))
}
