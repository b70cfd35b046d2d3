//! [`Job`]: what a worker's handler gets for one delivery.

use std::fmt;
use std::future::Future;
use std::time::SystemTime;

/// One delivery of a durable entry, handed to a
/// [`Worker`](super::Worker)'s handler. The worker holds (and extends) its
/// lease while the handler runs and finishes it by the handler's outcome.
pub struct Job<T> {
    pub(crate) id: String,
    pub(crate) value: T,
    pub(crate) attempt: u32,
    pub(crate) deadline: SystemTime,
    pub(crate) schedule: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) priority: i16,
    /// Turns true when the entry is cancelled while this run holds it.
    pub(crate) cancel: tokio::sync::watch::Receiver<bool>,
}

impl<T: fmt::Debug> fmt::Debug for Job<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("value", &self.value)
            .field("attempt", &self.attempt)
            .field("deadline", &self.deadline)
            .field("schedule", &self.schedule)
            .field("key", &self.key)
            .field("priority", &self.priority)
            .finish()
    }
}

impl<T> Job<T> {
    /// The entry's id (a schedule's tick: the schedule's name).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The entry's value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The value, by value.
    pub fn into_value(self) -> T {
        self.value
    }

    /// Which delivery of the entry this is: 1 on the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the entry was due, by the store's clock; for a schedule's tick,
    /// its instant, the same on every attempt.
    pub fn deadline(&self) -> SystemTime {
        self.deadline
    }

    /// The schedule's name, if this is one of its ticks.
    pub fn schedule(&self) -> Option<&str> {
        self.schedule.as_deref()
    }

    /// The key whose limits it runs under, if it was inserted with one
    /// ([`InsertOptions::key`](super::InsertOptions::key)).
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Its priority ([`InsertOptions::priority`](super::InsertOptions::priority);
    /// 0 by default).
    pub fn priority(&self) -> i16 {
        self.priority
    }

    /// Resolves when the entry is cancelled (`cancel(id)`) while this run
    /// holds it, before the worker stops the run: the handler is not polled
    /// again once the worker knows (as for a lost lease), so what must
    /// happen on a cancel (stop a process it started, release a resource)
    /// goes in a task that awaits this future. Never resolves otherwise
    /// (select it against the task's own end).
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::durable::{Job, Outcome};
    ///
    /// async fn render(job: Job<String>) -> Outcome {
    ///     let cancelled = job.cancelled();
    ///     let work = tokio::spawn(async move { /* render job.value() */ });
    ///     let abort = work.abort_handle();
    ///     // Stops the work when the job is cancelled, from outside the handler.
    ///     tokio::spawn(async move {
    ///         cancelled.await;
    ///         abort.abort();
    ///     });
    ///     match work.await {
    ///         Ok(()) => Outcome::Done,
    ///         Err(e) => Outcome::retry(e),
    ///     }
    /// }
    /// # let _ = render;
    /// ```
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut cancel = self.cancel.clone();
        async move {
            if cancel.wait_for(|cancelled| *cancelled).await.is_err() {
                // The run ended without a cancel: never.
                std::future::pending::<()>().await;
            }
        }
    }
}
