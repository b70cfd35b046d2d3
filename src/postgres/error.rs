//! The error type of the PostgreSQL queue.

use std::fmt;

/// Error returned by [`PgQueue`](super::PgQueue) operations.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The database answered with an error or could not be reached.
    Database(sqlx::Error),
    /// The value could not be serialized to JSON; nothing was sent.
    Encode(serde_json::Error),
    /// An id that is empty, longer than 512 bytes or holds a NUL character
    /// (PostgreSQL text cannot); nothing was sent.
    InvalidId(String),
    /// A queue name that is empty, longer than 512 bytes, contains `{` or
    /// `}` (refused as on Redis, so one name works on both stores) or a NUL
    /// character; or a schema name that is not a plain SQL identifier.
    InvalidName(String),
    /// The server is older than PostgreSQL 12, or this process cannot
    /// serve what the queue holds (a cron schedule without the cargo
    /// feature `cron`).
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
            Error::Database(e) => write!(f, "database error: {e}"),
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
            Error::Database(e) => Some(e),
            Error::Encode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Error {
        Error::Database(e)
    }
}

/// SQLSTATE classes and codes after which waiting and asking again can
/// help: connection exceptions, a server shutting down or starting up, too
/// many connections, serialization failures and deadlocks, out of memory
/// or disk for now.
const TRANSIENT: [&str; 10] = [
    "08", "57P01", "57P02", "57P03", "53300", "53200", "53100", "40001", "40P01", "55P03",
];

impl From<crate::durable::ops::Unsettled> for Error {
    fn from(e: crate::durable::ops::Unsettled) -> Error {
        match e {
            crate::durable::ops::Unsettled::Invalid(why) => Error::InvalidSchedule(why),
            crate::durable::ops::Unsettled::Unsupported(why) => Error::Unsupported(why),
        }
    }
}

impl Error {
    /// Whether waiting and asking again can fix this error: the connection
    /// was lost or refused, the pool had no connection in time, or the
    /// server said so (shutting down, starting up, too many connections, a
    /// serialization failure). Bad SQL state, a failed login or a reply
    /// that does not parse are not.
    pub(crate) fn is_transient(&self) -> bool {
        let Error::Database(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|code| TRANSIENT.iter().any(|t| code.starts_with(t))),
            _ => false,
        }
    }

    /// Whether the statement may have run although no reply came: the
    /// connection broke after it was sent (the commit may have happened).
    pub(crate) fn is_in_doubt(&self) -> bool {
        matches!(
            self,
            Error::Database(
                sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed | sqlx::Error::Protocol(_)
            )
        )
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

/// Checks a schema name: a plain SQL identifier (letters, digits and `_`,
/// not starting with a digit, at most 63 bytes), used quoted.
pub(crate) fn check_schema(schema: &str) -> Result<(), Error> {
    let plain = !schema.is_empty()
        && schema.len() <= 63
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        Ok(())
    } else {
        Err(Error::InvalidName(format!(
            "schema {schema:?}: a schema is 1 to 63 ASCII letters, digits or `_`, \
             not starting with a digit"
        )))
    }
}
