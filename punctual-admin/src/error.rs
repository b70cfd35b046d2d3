//! What can go wrong in an operation, sorted by what a face does about it:
//! the CLI's exit code, the HTTP status.

use std::fmt;

/// An operation's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpError {
    /// The queue, entry or schedule does not exist (exit 1, 404).
    NotFound(String),
    /// A bad argument: a malformed cursor or state, an id or key the
    /// stores refuse, a key limit they refuse, a queue name that several
    /// stores hold (exit 2, 400).
    Invalid(String),
    /// The store failed or could not be reached (exit 2, 502).
    Store(String),
    /// The store does not do that (yet): the library answered
    /// `Unsupported` (exit 2, 501).
    Unsupported(String),
}

impl OpError {
    /// The command line's exit code.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            OpError::NotFound(_) => 1,
            OpError::Invalid(_) | OpError::Store(_) | OpError::Unsupported(_) => 2,
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            OpError::NotFound(m)
            | OpError::Invalid(m)
            | OpError::Store(m)
            | OpError::Unsupported(m) => m,
        }
    }

    /// A store's error: the caller's mistakes (an id, name or cursor the
    /// store refuses) apart from the store's own failures.
    fn of_store(invalid: bool, unsupported: bool, error: &dyn fmt::Display) -> OpError {
        if unsupported {
            OpError::Unsupported(format!("this store cannot do that yet ({error})"))
        } else if invalid {
            OpError::Invalid(error.to_string())
        } else {
            OpError::Store(error.to_string())
        }
    }

    pub(crate) fn memory(e: punctual::memory::Error) -> OpError {
        use punctual::memory::Error as E;
        let invalid = matches!(
            e,
            E::InvalidId(_) | E::InvalidSchedule(_) | E::InvalidLimit(_)
        );
        OpError::of_store(invalid, false, &e)
    }

    pub(crate) fn redis(e: punctual::redis::Error) -> OpError {
        use punctual::redis::Error as E;
        let invalid = matches!(
            e,
            E::InvalidId(_) | E::InvalidName(_) | E::InvalidSchedule(_) | E::InvalidLimit(_)
        );
        let unsupported = matches!(e, E::Unsupported(_));
        OpError::of_store(invalid, unsupported, &e)
    }

    pub(crate) fn postgres(e: punctual::postgres::Error) -> OpError {
        use punctual::postgres::Error as E;
        let invalid = matches!(
            e,
            E::InvalidId(_) | E::InvalidName(_) | E::InvalidSchedule(_) | E::InvalidLimit(_)
        );
        let unsupported = matches!(e, E::Unsupported(_));
        OpError::of_store(invalid, unsupported, &e)
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for OpError {}
