//! The error of an insert into a bounded queue that is full.

use std::fmt;

/// The error of [`DelayQueue::try_insert`](crate::DelayQueue::try_insert)
/// and [`try_insert_at`](crate::DelayQueue::try_insert_at) on a
/// [bounded](crate::DelayQueue::bounded) queue at its bound: the value comes
/// back, and the queue is unchanged.
///
/// # Examples
///
/// ```
/// use punctual::{DelayQueue, Full};
/// use std::time::Duration;
///
/// let queue = DelayQueue::bounded(1);
/// queue.try_insert("first", Duration::from_secs(1)).unwrap();
/// let Full(value) = queue.try_insert("second", Duration::from_secs(1)).unwrap_err();
/// assert_eq!(value, "second");
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// The value that could not be inserted.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::Full;
    ///
    /// assert_eq!(Full(7).into_inner(), 7);
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("delay queue is full")
    }
}

impl<T> std::error::Error for Full<T> {}
