//! The scheduler's error types.

use std::any::Any;
use std::fmt;

/// Why a job could not be scheduled.
///
/// When several reasons apply, [`Shutdown`](ScheduleError::Shutdown) wins,
/// then a bad argument (`ZeroPeriod`, `InvalidCron`), then `Full`.
///
/// # Examples
///
/// ```
/// use punctual::{ScheduleError, Scheduler};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::new(1);
/// let zero = scheduler.schedule_at_fixed_rate(Duration::ZERO, Duration::ZERO, || async {});
/// assert_eq!(zero.unwrap_err(), ScheduleError::ZeroPeriod);
///
/// scheduler.shutdown();
/// let late = scheduler.schedule(Duration::ZERO, async {});
/// assert_eq!(late.unwrap_err(), ScheduleError::Shutdown);
/// # }
/// ```
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum ScheduleError {
    /// The scheduler was shut down; it accepts no new jobs.
    Shutdown,
    /// A periodic job was given a zero period or delay.
    ZeroPeriod,
    /// The scheduler already has [`max_pending`](crate::Builder::max_pending)
    /// jobs pending.
    Full,
    /// `Scheduler::schedule_cron` (cargo feature `cron`) was given an
    /// expression it cannot parse, an unknown `CRON_TZ=` time zone, or an
    /// expression that names no instant from now on; the string says why.
    InvalidCron(String),
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Shutdown => f.write_str("scheduler is shut down"),
            ScheduleError::ZeroPeriod => {
                f.write_str("period of a periodic job must be greater than zero")
            }
            ScheduleError::Full => f.write_str("scheduler has its maximum of pending jobs"),
            ScheduleError::InvalidCron(why) => write!(f, "invalid cron expression: {why}"),
        }
    }
}

impl std::error::Error for ScheduleError {}

/// Why a job did not produce its output; what awaiting a
/// [`JobHandle`](crate::JobHandle) yields instead of it.
///
/// # Examples
///
/// ```
/// use punctual::Scheduler;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let scheduler = Scheduler::new(1);
/// let job = scheduler.schedule(Duration::from_secs(1), async { panic!("boom") }).unwrap();
/// let err = job.await.unwrap_err();
/// assert!(err.is_panic());
/// assert_eq!(err.to_string(), "job panicked: boom");
/// # }
/// ```
pub enum JobError {
    /// The job was cancelled or aborted, by its handle, a shutdown policy or
    /// `shutdown_now`.
    Cancelled,
    /// The job panicked; the payload is the value the panic carried.
    Panicked(Box<dyn Any + Send + 'static>),
}

impl JobError {
    /// Whether the job was cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::JobError;
    ///
    /// assert!(JobError::Cancelled.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JobError::Cancelled)
    }

    /// Whether the job panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::JobError;
    ///
    /// assert!(JobError::Panicked(Box::new("boom")).is_panic());
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self, JobError::Panicked(_))
    }

    /// The panic payload, or the error itself back if the job was cancelled;
    /// pass the payload to [`std::panic::resume_unwind`] to propagate the
    /// panic.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::JobError;
    ///
    /// let payload = JobError::Panicked(Box::new("boom")).try_into_panic().unwrap();
    /// assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    /// assert!(JobError::Cancelled.try_into_panic().is_err());
    /// ```
    pub fn try_into_panic(self) -> Result<Box<dyn Any + Send + 'static>, JobError> {
        match self {
            JobError::Panicked(payload) => Ok(payload),
            cancelled => Err(cancelled),
        }
    }
}

/// The message of a panic payload, when it is a string.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Cancelled => f.write_str("Cancelled"),
            JobError::Panicked(payload) => match panic_message(payload.as_ref()) {
                Some(message) => f.debug_tuple("Panicked").field(&message).finish(),
                None => f.debug_tuple("Panicked").field(&"..").finish(),
            },
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Cancelled => f.write_str("job was cancelled"),
            JobError::Panicked(payload) => match panic_message(payload.as_ref()) {
                Some(message) => write!(f, "job panicked: {message}"),
                None => f.write_str("job panicked"),
            },
        }
    }
}

impl std::error::Error for JobError {}
