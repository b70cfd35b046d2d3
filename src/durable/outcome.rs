//! [`Outcome`]: what a worker's handler says of a job.

use std::fmt::Display;

use serde::Serialize;
use std::time::Duration;

/// What a [`Worker`](super::Worker)'s handler says of a job: done, try
/// again, not now, or never.
///
/// A handler returns anything that converts into an `Outcome`; a
/// `Result<(), E>` with `E: Display` does (`Ok` is [`Done`](Outcome::Done),
/// `Err(e)` a [`Retry`](Outcome::Retry) with `e`'s `Display` as its
/// reason), so handlers written for `Ok`/`Err` compile unchanged.
///
/// | outcome | the entry | counts as an attempt | `WorkerStats` |
/// |---|---|---|---|
/// | `Done` | acked (a tick: its successor inserted) | yes | `completed` |
/// | `Retry` | due again after `after`, or the backoff; dead once attempts reach `max_attempts` | yes | `failed` (and `dead`) |
/// | `Snooze` | due again after the delay, the next delivery with the same `attempt()`; never dead | no | none |
/// | `Discard` | to the dead letters now, with the reason, attempts left or not | yes | `failed` and `dead` |
/// | `Output` ([`done_with`](Outcome::done_with)) | acked, as `Done`; the output kept in its result | yes | `completed` |
///
/// A snoozed or retried tick keeps its instant ([`Job::deadline`](super::Job::deadline));
/// a discarded tick goes to the dead letters and its schedule goes on.
///
/// # Examples
///
/// ```
/// use punctual::durable::Outcome;
/// use std::time::Duration;
///
/// fn send(status: u16) -> Outcome {
///     match status {
///         200 => Outcome::Done,
///         // The address bounced: retrying will not help.
///         550 => Outcome::discard("mailbox does not exist"),
///         // Rate limited: the server says when.
///         429 => Outcome::retry_after("rate limited", Duration::from_secs(30)),
///         // Not our turn yet: no attempt is spent.
///         423 => Outcome::Snooze(Duration::from_secs(60)),
///         other => Outcome::retry(format_args!("status {other}")),
///     }
/// }
/// assert_eq!(send(200), Outcome::Done);
/// assert_eq!(Outcome::from(Err::<(), _>("boom")), Outcome::retry("boom"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Done: the entry is acked (what `Ok(())` means).
    Done,
    /// A failed attempt: due again after `after` (`None`: the worker's
    /// [`Backoff`](super::Backoff)), or to the dead letters with `reason`
    /// once its attempts reached the queue's `max_attempts`.
    Retry {
        /// Why it failed; a dead letter's reason.
        reason: String,
        /// Replaces the backoff's delay for this retry.
        after: Option<Duration>,
    },
    /// Not now: due again after the delay. Not an attempt: the next
    /// delivery reports the same [`attempt()`](super::Job::attempt), and a
    /// snooze never sends an entry to the dead letters.
    Snooze(Duration),
    /// Never: to the dead letters now with `reason`, attempts left or not.
    Discard {
        /// Why; the dead letter's reason.
        reason: String,
    },
    /// Done, with an output kept in the job's
    /// [`JobResult`](super::JobResult) (where the queue keeps results):
    /// what [`done_with`](Outcome::done_with) makes.
    Output(serde_json::Value),
}

impl Outcome {
    /// A failed attempt, retried after the worker's backoff.
    pub fn retry(reason: impl Display) -> Self {
        Outcome::Retry {
            reason: reason.to_string(),
            after: None,
        }
    }

    /// A failed attempt, retried after `after` instead of the backoff.
    pub fn retry_after(reason: impl Display, after: Duration) -> Self {
        Outcome::Retry {
            reason: reason.to_string(),
            after: Some(after),
        }
    }

    /// To the dead letters now, with `reason`.
    pub fn discard(reason: impl Display) -> Self {
        Outcome::Discard {
            reason: reason.to_string(),
        }
    }

    /// Done, with `output` kept in the job's [`JobResult`](super::JobResult)
    /// for whoever reads or awaits it (`result`, `wait`), where the queue
    /// keeps results (`keep_results`). An output that does not serialize
    /// to JSON is kept as its error's text (the job is done all the same).
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::durable::Outcome;
    ///
    /// let outcome = Outcome::done_with(&vec!["a.pdf", "b.pdf"]);
    /// assert_eq!(outcome, Outcome::Output(serde_json::json!(["a.pdf", "b.pdf"])));
    /// ```
    pub fn done_with(output: &impl Serialize) -> Self {
        Outcome::Output(serde_json::to_value(output).unwrap_or_else(|e| {
            serde_json::Value::String(format!("output does not serialize: {e}"))
        }))
    }
}

impl<E: Display> From<Result<(), E>> for Outcome {
    /// `Ok(())` is [`Done`](Outcome::Done), `Err(e)` a
    /// [`Retry`](Outcome::Retry) after the backoff, with `e`'s `Display`.
    fn from(result: Result<(), E>) -> Self {
        match result {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::retry(e),
        }
    }
}
