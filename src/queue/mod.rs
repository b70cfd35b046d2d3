//! The async, multi-consumer delay queue.
//!
//! How it is built, file by file:
//!
//! - `timers.rs`: the core. Every entry has a slot (`slot.rs`) that holds
//!   its deadline, sequence number and value and records where the entry
//!   is. Entries more than a tick (2^20 ns, about 1 ms) ahead sit in
//!   `wheel.rs`, a hierarchical timing wheel (8 levels of 64 buckets, each
//!   bucket a `Vec` of slot indices, nothing ticking: a bucket is opened
//!   only when its time has come or a waiting leader needs the exact head).
//!   Removing a far entry by key touches its slot and nothing else: its
//!   index stays in the bucket, dead, and is skipped when the bucket is
//!   read; a bucket with more dead indices than live ones compacts itself a
//!   few indices per later removal. An opened tick is sorted and consumed
//!   as a run; entries inserted already due are batched, sorted and merged
//!   into it, or go to a small 4-ary heap (`heap.rs`). Every entry on the
//!   near side is due before every entry in the wheel, so the order stays
//!   exact to the nanosecond, FIFO on ties. Keys carry a generation and the
//!   queue's identity. No async; the clock is passed in (`take` keeps its
//!   last reading, so draining due entries reads it once).
//!   `assert_invariants()` runs after every mutation in debug builds (below
//!   1,024 slots), and a property test checks the core against a `BTreeMap`
//!   model with deadlines from the past to years ahead.
//! - `state.rs`, `wait.rs`: Leader-Follower on a `tokio::sync::Notify`. One
//!   function reacts to "the earliest deadline may have changed" (insert,
//!   remove, reset, clear): it compares the change with what the leader's
//!   timer is armed for, so no mutation looks up the head. Hand-off on
//!   cancellation lives in a drop guard. `model_check.rs` explores every
//!   interleaving of that hand-off (three consumers, an earlier insert,
//!   dropped consumers, time passing) over the real state transitions.

mod full;
mod heap;
#[cfg(test)]
mod model_check;
mod slot;
mod state;
mod stream;
mod timers;
mod wait;
mod wheel;

pub use full::Full;
pub use stream::{StreamNext, TakeStream};

use state::{Change, Shared, Wake};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use timers::{HeadId, SlotKey, Timers};
use tokio::time::Instant;

/// A queue of values that each become available at a deadline, shared by any
/// number of producers and consumers.
///
/// Values come out in deadline order; values with equal deadlines come out in
/// insertion order. Every insertion returns a [`Key`] that can later
/// [`remove`](DelayQueue::remove) the value or [`reset`](DelayQueue::reset)
/// its deadline: O(1) while the entry is more than a tick (about a
/// millisecond) away, O(log m) among the `m` entries about to come due.
///
/// `DelayQueue` is a handle: [`Clone`] gives another handle to the *same*
/// queue (no `T: Clone` needed), so producers and consumers on different tasks
/// each hold one.
///
/// Consumers wait with [`take`](DelayQueue::take): at most one of them (the
/// *leader*) holds a timer for the earliest deadline, the others wait without
/// one, and the queue hands leadership on whenever the earliest deadline
/// changes or the leader leaves, so no due value is ever left waiting while a
/// consumer is parked.
///
/// All times are [`tokio::time::Instant`], so paused test time
/// (`tokio::time::pause`) drives the queue.
///
/// # Examples
///
/// ```
/// use punctual::DelayQueue;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = DelayQueue::new();
/// let unpaid = queue.insert("order 17", Duration::from_secs(30 * 60));
/// queue.insert("order 18", Duration::from_secs(30 * 60));
///
/// // Order 17 is paid: its timeout will never fire.
/// assert_eq!(queue.remove(unpaid), Some("order 17"));
///
/// // Half an hour later, order 18 expires.
/// assert_eq!(queue.take().await, "order 18");
/// assert!(queue.is_empty());
/// # }
/// ```
pub struct DelayQueue<T> {
    shared: Arc<Shared<T>>,
    /// The most entries it may hold (`bounded`), shared by every clone.
    bound: Option<usize>,
}

/// Identifies one insertion into one [`DelayQueue`].
///
/// A key stays valid until its value is taken or removed. After that, and for
/// keys of other queues, every method that accepts a key returns `None` or
/// `false` and touches nothing: keys carry a generation and the queue's
/// identity, so they never alias a later entry.
///
/// # Examples
///
/// ```
/// use punctual::DelayQueue;
/// use std::time::Duration;
///
/// let orders = DelayQueue::new();
/// let key = orders.insert("order 1", Duration::from_secs(60));
/// assert_eq!(orders.remove(key), Some("order 1"));
///
/// // The slot is reused, but the old key cannot reach the new entry.
/// let new_key = orders.insert("order 2", Duration::from_secs(60));
/// assert_ne!(key, new_key);
/// assert_eq!(orders.remove(key), None);
/// assert!(orders.contains(new_key));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Key {
    slot: u32,
    generation: u32,
    queue: u64,
}

impl Key {
    /// The index of the entry's slot: a hint for [`DelayQueue::warm`].
    pub(crate) fn slot_index(self) -> u32 {
        self.slot
    }

    fn slot_key(self) -> SlotKey {
        SlotKey {
            index: self.slot,
            generation: self.generation,
        }
    }
}

/// How far ahead a deadline too large to represent is placed: the same
/// "practically never" horizon Tokio's own `sleep` saturates to.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `now + delay`, saturating to a far-future instant instead of panicking.
pub(crate) fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

impl<T> DelayQueue<T> {
    /// Creates an empty queue.
    ///
    /// Needs no runtime: only waiting (`take`, `take_timeout`, `stream`)
    /// needs Tokio's time driver.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    ///
    /// let queue: DelayQueue<u32> = DelayQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Creates an empty queue with room for `capacity` entries before it
    /// reallocates.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    ///
    /// let queue: DelayQueue<u32> = DelayQueue::with_capacity(1024);
    /// assert_eq!(queue.len(), 0);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        DelayQueue {
            shared: Arc::new(Shared::new(capacity)),
            bound: None,
        }
    }

    /// Creates an empty queue that holds at most `max_pending` entries, due
    /// or not (Netty's `maxPendingTimeouts`): back-pressure for producers
    /// fed from the network.
    ///
    /// At the bound, [`try_insert`](DelayQueue::try_insert) and
    /// [`try_insert_at`](DelayQueue::try_insert_at) give the value back in
    /// [`Full`] and change nothing, while [`insert`](DelayQueue::insert) and
    /// [`insert_at`](DelayQueue::insert_at) panic. Taking, removing or
    /// clearing entries frees their places at once.
    ///
    /// # Panics
    ///
    /// Panics if `max_pending` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::{DelayQueue, Full};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timeouts = DelayQueue::bounded(2);
    /// timeouts.try_insert("a", Duration::from_secs(1)).unwrap();
    /// timeouts.try_insert("b", Duration::from_secs(2)).unwrap();
    /// assert_eq!(timeouts.try_insert("c", Duration::from_secs(3)), Err(Full("c")));
    ///
    /// assert_eq!(timeouts.take().await, "a"); // frees a place
    /// assert!(timeouts.try_insert("c", Duration::from_secs(3)).is_ok());
    /// # }
    /// ```
    #[track_caller]
    pub fn bounded(max_pending: usize) -> Self {
        assert!(
            max_pending > 0,
            "the bound `max_pending` must be at least 1, got 0"
        );
        DelayQueue {
            bound: Some(max_pending),
            ..Self::new()
        }
    }

    /// Inserts `value`, due `delay` from now. Same as
    /// `insert_at(value, Instant::now() + delay)`, except that a `delay` too
    /// large to add to now (up to [`Duration::MAX`]) never panics: the entry is
    /// placed about 30 years ahead, which in practice means never due.
    ///
    /// Never blocks. If the new entry becomes the earliest, a waiting
    /// consumer is woken to time it.
    ///
    /// # Panics
    ///
    /// Panics if the queue is [bounded](DelayQueue::bounded) and full; use
    /// [`try_insert`](DelayQueue::try_insert) on a bounded queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let key = queue.insert("retry", Duration::from_millis(250));
    /// assert!(queue.contains(key));
    /// assert_eq!(queue.take().await, "retry");
    /// # }
    /// ```
    #[track_caller]
    pub fn insert(&self, value: T, delay: Duration) -> Key {
        self.unwrap_inserted(self.try_insert(value, delay))
    }

    /// Inserts `value`, due at `deadline`. A deadline in the past is due at
    /// once, and still comes out in deadline order.
    ///
    /// Deadlines are kept to the nanosecond within 292 years of the queue's
    /// creation (or last [`clear`](DelayQueue::clear)); a deadline further
    /// away is clamped to that horizon rather than rejected.
    ///
    /// Never blocks.
    ///
    /// # Panics
    ///
    /// Panics if the queue is [bounded](DelayQueue::bounded) and full; use
    /// [`try_insert_at`](DelayQueue::try_insert_at) on a bounded queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// let key = queue.insert_at("session expired", deadline);
    /// assert_eq!(queue.deadline(key), Some(deadline));
    /// # }
    /// ```
    #[track_caller]
    pub fn insert_at(&self, value: T, deadline: Instant) -> Key {
        self.unwrap_inserted(self.try_insert_at(value, deadline))
    }

    /// The key of an `insert`, or its panic on a full bounded queue.
    #[track_caller]
    fn unwrap_inserted(&self, inserted: Result<Key, Full<T>>) -> Key {
        match inserted {
            Ok(key) => key,
            Err(_) => panic!(
                "`insert` on a DelayQueue bounded to {} entries that is full: \
                 use `try_insert` to get the value back instead",
                self.bound.unwrap_or(usize::MAX)
            ),
        }
    }

    /// Inserts `value`, due `delay` from now, unless the queue is
    /// [bounded](DelayQueue::bounded) and full. Same as
    /// [`insert`](DelayQueue::insert) otherwise (a huge `delay` saturates).
    ///
    /// On an unbounded queue this never fails.
    ///
    /// # Errors
    ///
    /// [`Full`] with `value` if the queue holds its bound of entries; the
    /// queue is unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::{DelayQueue, Full};
    /// use std::time::Duration;
    ///
    /// let queue = DelayQueue::bounded(1);
    /// let key = queue.try_insert("ping", Duration::from_secs(5)).unwrap();
    /// assert_eq!(queue.try_insert("pong", Duration::from_secs(5)), Err(Full("pong")));
    /// queue.remove(key);
    /// assert!(queue.try_insert("pong", Duration::from_secs(5)).is_ok());
    /// ```
    pub fn try_insert(&self, value: T, delay: Duration) -> Result<Key, Full<T>> {
        let now = Instant::now();
        // The deadline is computed in ticks under the lock: cheaper than
        // building it as an `Instant` first, and the same (see
        // `Timers::insert_after`).
        self.try_insert_with(value, |timers, value| {
            timers.insert_after(value, now, delay)
        })
    }

    /// Inserts `value`, due at `deadline`, unless the queue is
    /// [bounded](DelayQueue::bounded) and full. Same as
    /// [`insert_at`](DelayQueue::insert_at) otherwise.
    ///
    /// # Errors
    ///
    /// [`Full`] with `value` if the queue holds its bound of entries; the
    /// queue is unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// let queue = DelayQueue::bounded(1);
    /// let at = Instant::now() + Duration::from_secs(1);
    /// assert!(queue.try_insert_at(1, at).is_ok());
    /// assert_eq!(queue.try_insert_at(2, at).unwrap_err().0, 2);
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn try_insert_at(&self, value: T, deadline: Instant) -> Result<Key, Full<T>> {
        self.try_insert_with(value, |timers, value| timers.insert(value, deadline))
    }

    /// The body of every insert: `insert` files `value` in the timers.
    #[inline]
    fn try_insert_with(
        &self,
        value: T,
        insert: impl FnOnce(&mut Timers<T>, T) -> (SlotKey, HeadId),
    ) -> Result<Key, Full<T>> {
        let mut state = self.shared.lock();
        // Checked under the lock, so concurrent producers cannot overshoot.
        if self.bound.is_some_and(|max| state.timers.len() >= max) {
            drop(state);
            return Err(Full(value));
        }
        let (slot, id) = insert(&mut state.timers, value);
        let key = Key {
            slot: slot.index,
            generation: slot.generation,
            queue: state.id,
        };
        let wake = state.head_may_change(Change::Added(id));
        self.shared.unlock_and_wake(state, wake);
        Ok(key)
    }

    /// Removes and returns the earliest entry if it is due, without waiting
    /// (JDK `poll()`).
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// queue.insert("later", Duration::from_secs(1));
    /// assert_eq!(queue.try_take(), None);
    ///
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(queue.try_take(), Some("later"));
    /// # }
    /// ```
    pub fn try_take(&self) -> Option<T> {
        let mut state = self.shared.lock();
        let value = state.timers.pop_due_by(Instant::now);
        self.shared.unlock_and_wake(state, Wake::NONE);
        value
    }

    /// Waits until the earliest entry is due, then removes and returns it
    /// (JDK `take()`).
    ///
    /// Any number of consumers may wait at once; each entry goes to exactly
    /// one of them. Only one waiting consumer (the leader) holds a timer.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe. An entry is only removed in the same step
    /// that returns it, so dropping the future at its await point loses no
    /// entry. If the dropped future was the leader, or had been woken and not
    /// yet run, another waiting consumer is woken to take over.
    ///
    /// Keep polling a `take` future once it has been polled, or drop it: a
    /// future that is kept but not polled may hold the leader's timer or the
    /// wake-up meant to hand that duty on, and other consumers waiting in
    /// `take` are then served only once it is polled again or dropped. In a
    /// `select!` loop, create the future inside the loop (a losing branch is
    /// dropped), or keep a [`stream`](DelayQueue::stream) and race its
    /// [`next()`](TakeStream::next), which gives its place up when it loses.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let consumer = tokio::spawn({
    ///     let queue = queue.clone();
    ///     async move { queue.take().await }
    /// });
    /// queue.insert("wake up", Duration::from_secs(60));
    /// assert_eq!(consumer.await.unwrap(), "wake up");
    /// # }
    /// ```
    pub async fn take(&self) -> T {
        loop {
            if let Some(value) = wait::take_until(&self.shared, None, |_| {}).await {
                return value;
            }
        }
    }

    /// Like [`take`](DelayQueue::take), but `claim` sees the entry under the
    /// queue's lock in the same step that removes it: whoever holds the
    /// queue's lock never finds the entry both gone and unclaimed. `claim`
    /// must be quick and must not use the queue.
    pub(crate) async fn take_claimed(&self, mut claim: impl FnMut(&T)) -> T {
        loop {
            if let Some(value) = wait::take_until(&self.shared, None, &mut claim).await {
                return value;
            }
        }
    }

    /// Like [`take`](DelayQueue::take), but gives up after `timeout` and
    /// returns `None` if no entry came due in time (JDK `poll(timeout)`).
    ///
    /// `Duration::ZERO` returns an entry only if one is already due;
    /// `Duration::MAX` never panics and waits practically forever.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, exactly like [`take`](DelayQueue::take).
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// queue.insert("late", Duration::from_secs(10));
    /// assert_eq!(queue.take_timeout(Duration::from_secs(1)).await, None);
    /// assert_eq!(queue.take_timeout(Duration::from_secs(60)).await, Some("late"));
    /// # }
    /// ```
    pub async fn take_timeout(&self, timeout: Duration) -> Option<T> {
        let limit = deadline_after(Instant::now(), timeout);
        wait::take_until(&self.shared, Some(limit), |_| {}).await
    }

    /// Removes and returns, in deadline order, up to `max` entries that are
    /// already due (JDK `drainTo(c, max)`). `max == 0` returns an empty
    /// vector.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// for (i, ms) in [30, 10, 20, 99].into_iter().enumerate() {
    ///     queue.insert(i, Duration::from_millis(ms));
    /// }
    /// tokio::time::advance(Duration::from_millis(50)).await;
    /// assert_eq!(queue.drain_expired(2), vec![1, 2]);
    /// assert_eq!(queue.drain_expired(usize::MAX), vec![0]);
    /// # }
    /// ```
    pub fn drain_expired(&self, max: usize) -> Vec<T> {
        let mut out = Vec::new();
        if max == 0 {
            return out;
        }
        let now = Instant::now();
        let mut state = self.shared.lock();
        while out.len() < max {
            match state.timers.pop_due(now) {
                Some(value) => out.push(value),
                None => break,
            }
        }
        self.shared.unlock_and_wake(state, Wake::NONE);
        out
    }

    /// Removes the entry inserted as `key` and returns its value, or `None`
    /// if it was already taken or removed, or if `key` belongs to another
    /// queue. O(1) for an entry in the timing wheel, O(log m) among the `m`
    /// entries about to come due.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// let queue = DelayQueue::new();
    /// let key = queue.insert("timeout", Duration::from_secs(30));
    /// assert_eq!(queue.remove(key), Some("timeout"));
    /// assert_eq!(queue.remove(key), None); // stale: harmless
    /// ```
    pub fn remove(&self, key: Key) -> Option<T> {
        let mut state = self.shared.lock();
        if key.queue != state.id {
            return None;
        }
        let (value, id) = state.timers.remove(key.slot_key())?;
        let wake = state.head_may_change(Change::Removed(id));
        self.shared.unlock_and_wake(state, wake);
        Some(value)
    }

    /// Reads the slot at `index` (a [`Key::slot_index`], perhaps stale) and
    /// calls `also` in one critical section, so that the cache misses of
    /// both reads are in flight at once rather than one after the other: the
    /// next lock or unlock waits for every read before it. Changes nothing.
    ///
    /// A caller about to read some cold memory of its own (`also`) and then
    /// remove an entry by key pays about one miss instead of two.
    pub(crate) fn warm(&self, index: u32, also: impl FnOnce() -> u64) {
        let state = self.shared.lock();
        let read = (state.timers.touch(index), also());
        drop(state);
        std::hint::black_box(read);
    }

    /// Moves the entry inserted as `key` to `now + delay`, keeping its key
    /// (a `delay` too large saturates as in [`insert`](DelayQueue::insert)).
    /// Returns `false`, touching nothing, for a stale or foreign key.
    ///
    /// The entry then orders as if inserted now: behind entries that already
    /// have the same deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let session = queue.insert("idle session", Duration::from_secs(60));
    /// // Activity: push the idle timeout back.
    /// assert!(queue.reset(session, Duration::from_secs(120)));
    /// assert_eq!(queue.take_timeout(Duration::from_secs(90)).await, None);
    /// # }
    /// ```
    pub fn reset(&self, key: Key, delay: Duration) -> bool {
        self.reset_at(key, deadline_after(Instant::now(), delay))
    }

    /// Moves the entry inserted as `key` to `deadline`, keeping its key.
    /// Returns `false`, touching nothing, for a stale or foreign key.
    ///
    /// If the entry becomes the earliest, a waiting consumer is woken exactly
    /// as by [`insert`](DelayQueue::insert).
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let key = queue.insert("job", Duration::from_secs(60));
    /// let sooner = Instant::now() + Duration::from_secs(1);
    /// assert!(queue.reset_at(key, sooner));
    /// assert_eq!(queue.deadline(key), Some(sooner));
    /// # }
    /// ```
    pub fn reset_at(&self, key: Key, deadline: Instant) -> bool {
        let mut state = self.shared.lock();
        if key.queue != state.id {
            return false;
        }
        let Some((old, new)) = state.timers.reset(key.slot_key(), deadline) else {
            return false;
        };
        let wake = state.head_may_change(Change::Moved(old, new));
        self.shared.unlock_and_wake(state, wake);
        true
    }

    /// The deadline of the entry inserted as `key`, or `None` for a stale or
    /// foreign key.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// let key = queue.insert((), Duration::from_secs(3));
    /// assert_eq!(queue.deadline(key), Some(Instant::now() + Duration::from_secs(3)));
    /// # }
    /// ```
    pub fn deadline(&self, key: Key) -> Option<Instant> {
        let state = self.shared.lock();
        if key.queue != state.id {
            return None;
        }
        state.timers.deadline(key.slot_key())
    }

    /// Whether the entry inserted as `key` is still queued.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// let queue = DelayQueue::new();
    /// let key = queue.insert(1, Duration::ZERO);
    /// assert!(queue.contains(key));
    /// queue.remove(key);
    /// assert!(!queue.contains(key));
    /// ```
    pub fn contains(&self, key: Key) -> bool {
        let state = self.shared.lock();
        key.queue == state.id && state.timers.contains(key.slot_key())
    }

    /// The earliest deadline in the queue, due or not.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// let queue = DelayQueue::new();
    /// assert_eq!(queue.peek_deadline(), None);
    /// let key = queue.insert('a', Duration::from_secs(1));
    /// assert_eq!(queue.peek_deadline(), queue.deadline(key));
    /// ```
    pub fn peek_deadline(&self) -> Option<Instant> {
        self.shared.lock().timers.peek_deadline()
    }

    /// The number of queued entries, due or not.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// let queue = DelayQueue::new();
    /// queue.insert('a', Duration::from_secs(1));
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.lock().timers.len()
    }

    /// Whether the queue holds no entries.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    ///
    /// let queue: DelayQueue<()> = DelayQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.shared.lock().timers.is_empty()
    }

    /// Removes every entry. Consumers waiting in `take` keep waiting for the
    /// next insert; every key issued so far becomes stale, and keys issued
    /// later differ from all of them.
    ///
    /// The removed values are dropped after the queue's lock is released, so
    /// their `Drop` may use the queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// let queue = DelayQueue::new();
    /// let key = queue.insert("gone", Duration::from_secs(1));
    /// queue.clear();
    /// assert!(queue.is_empty());
    /// assert!(!queue.contains(key));
    /// ```
    pub fn clear(&self) {
        // Built before locking: nothing is allocated under the lock.
        let fresh = timers::Timers::with_capacity(0);
        let mut state = self.shared.lock();
        // A fresh identity makes every earlier key foreign, so slots can be
        // reused from generation zero without aliasing.
        let old = std::mem::replace(&mut state.timers, fresh);
        state.id = state::next_queue_id();
        let wake = if old.is_empty() {
            Wake::NONE
        } else {
            state.head_may_change(Change::Many)
        };
        self.shared.unlock_and_wake(state, wake);
        drop(old);
    }

    /// Removes every entry for which `pred(value, deadline)` holds, in no
    /// particular order; the others keep their keys. O(n). The predicate runs
    /// under the queue's lock: it must not use the queue.
    pub(crate) fn remove_if(&self, pred: impl FnMut(&T, Instant) -> bool) -> Vec<T> {
        let mut state = self.shared.lock();
        let removed = state.timers.remove_if(pred);
        let wake = if removed.is_empty() {
            Wake::NONE
        } else {
            state.head_may_change(Change::Many)
        };
        self.shared.unlock_and_wake(state, wake);
        removed
    }

    /// Returns a [`Stream`](futures::Stream) of this queue's values, in
    /// deadline order as they come due. It shares the queue with `take` and
    /// other streams (each entry goes to exactly one consumer) and never
    /// ends.
    ///
    /// A stream may be kept across `select!` iterations: when its
    /// [`next()`](TakeStream::next) loses the race, the stream gives its
    /// place among the waiting consumers up (see [`TakeStream`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// use punctual::DelayQueue;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = DelayQueue::new();
    /// queue.insert(2, Duration::from_secs(2));
    /// queue.insert(1, Duration::from_secs(1));
    /// let firsts: Vec<i32> = queue.stream().take(2).collect().await;
    /// assert_eq!(firsts, vec![1, 2]);
    /// # }
    /// ```
    pub fn stream(&self) -> TakeStream<T> {
        TakeStream::new(self.clone())
    }
}

impl<T> Clone for DelayQueue<T> {
    fn clone(&self) -> Self {
        DelayQueue {
            shared: Arc::clone(&self.shared),
            bound: self.bound,
        }
    }
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut state = self.shared.lock();
        f.debug_struct("DelayQueue")
            .field("len", &state.timers.len())
            .field("bound", &self.bound)
            .field("next_deadline", &state.timers.peek_deadline())
            .field("waiting", &state.parked)
            .finish()
    }
}
