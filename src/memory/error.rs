//! The error type of the memory queue.

use std::fmt;

/// Error returned by [`MemoryQueue`](super::MemoryQueue) operations: the
/// variants of the other stores' errors that can happen without a server.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The value could not be serialized to JSON; nothing was written.
    Encode(serde_json::Error),
    /// An id that is empty, longer than 512 bytes or holds a NUL character
    /// (the rule of every store); nothing was written.
    InvalidId(String),
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
            Error::Encode(e) => write!(f, "value does not serialize to JSON: {e}"),
            Error::InvalidId(why) => write!(f, "invalid id: {why}"),
            Error::InvalidSchedule(why) => write!(f, "invalid schedule: {why}"),
            Error::InvalidLimit(why) => write!(f, "invalid key limit: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Encode(e) => Some(e),
            _ => None,
        }
    }
}

/// Checks an id against the rules every store keeps.
pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    crate::durable::rules::id_problem(id).map_or(Ok(()), |why| Err(Error::InvalidId(why)))
}
