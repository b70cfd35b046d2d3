//! Bad input never panics and has a documented, checked result.

use punctual::DelayQueue;
use std::time::Duration;
use tokio::time::{Instant, advance};
use tokio_test::task::spawn;
use tokio_test::{assert_pending, assert_ready_eq};

const MS: Duration = Duration::from_millis(1);
const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// The earliest of a few instants before now that the platform can represent
/// (a monotonic clock cannot go back before boot).
fn far_past(now: Instant) -> Instant {
    [
        YEAR * 10,
        YEAR,
        Duration::from_secs(86_400),
        Duration::from_secs(60),
        MS,
    ]
    .into_iter()
    .find_map(|back| now.checked_sub(back))
    .unwrap_or(now)
}

#[tokio::test(start_paused = true)]
async fn duration_max_saturates_to_never_due() {
    let q = DelayQueue::new();
    let key = q.insert(1, Duration::MAX);
    let deadline = q.deadline(key).unwrap();
    assert!(deadline > Instant::now() + YEAR * 29, "saturates far ahead");
    assert_eq!(q.take_timeout(Duration::from_secs(3600)).await, None);
    assert!(q.reset(key, Duration::MAX));
    assert_eq!(q.try_take(), None);
    assert_eq!(q.remove(key), Some(1));
}

#[tokio::test(start_paused = true)]
async fn take_timeout_duration_max_waits_without_panicking() {
    let q = DelayQueue::new();
    let mut waiter = spawn(q.take_timeout(Duration::MAX));
    assert_pending!(waiter.poll());
    q.insert(7, MS);
    advance(MS).await;
    assert_ready_eq!(waiter.poll(), Some(7));
}

#[tokio::test(start_paused = true)]
async fn instants_in_the_past_are_due_at_once_in_deadline_order() {
    let q = DelayQueue::new();
    let now = Instant::now();
    let oldest = far_past(now);
    q.insert_at("recent", now - Duration::ZERO);
    q.insert_at("oldest", oldest);
    let key = q.insert_at("middle", oldest + (now - oldest) / 2);
    assert_eq!(q.deadline(key), Some(oldest + (now - oldest) / 2));
    assert_eq!(q.drain_expired(10), vec!["oldest", "middle", "recent"]);
}

#[tokio::test(start_paused = true)]
async fn instants_far_in_the_future_keep_their_exact_deadline() {
    let q = DelayQueue::new();
    let far = Instant::now() + YEAR * 200;
    let farther = far + Duration::from_nanos(1);
    let b = q.insert_at('b', farther);
    let a = q.insert_at('a', far);
    assert_eq!(q.deadline(a), Some(far));
    assert_eq!(q.deadline(b), Some(farther));
    assert_eq!(q.peek_deadline(), Some(far));
    assert_eq!(q.take_timeout(YEAR).await, None);
}

#[tokio::test(start_paused = true)]
async fn instants_beyond_292_years_are_clamped_not_rejected() {
    let q = DelayQueue::new();
    let beyond = Instant::now() + YEAR * 1000;
    let key = q.insert_at('z', beyond);
    q.insert_at('a', Instant::now() + YEAR * 200);
    let clamped = q.deadline(key).unwrap();
    assert!(clamped > Instant::now() + YEAR * 292, "{clamped:?}");
    assert!(clamped <= beyond);
    assert!(q.reset_at(key, beyond));
    assert_eq!(q.remove(key), Some('z'));
}

#[tokio::test(start_paused = true)]
async fn stale_keys_are_harmless() {
    let q = DelayQueue::new();
    let taken = q.insert("taken", Duration::ZERO);
    assert_eq!(q.take().await, "taken");
    let removed = q.insert("removed", MS);
    q.remove(removed);
    // These two reuse the freed slots.
    let live_a = q.insert("a", MS * 5);
    let live_b = q.insert("b", MS * 6);
    for stale in [taken, removed] {
        assert_eq!(q.remove(stale), None);
        assert!(!q.reset(stale, MS));
        assert!(!q.reset_at(stale, Instant::now()));
        assert_eq!(q.deadline(stale), None);
        assert!(!q.contains(stale));
    }
    assert_eq!(q.deadline(live_a), Some(Instant::now() + MS * 5));
    assert_eq!(q.deadline(live_b), Some(Instant::now() + MS * 6));
    assert_eq!(q.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn keys_from_another_queue_are_harmless() {
    let ours = DelayQueue::new();
    let theirs = DelayQueue::new();
    // Same slot and generation in both queues: only the identity differs.
    let our_key = ours.insert(1, MS);
    let their_key = theirs.insert(2, MS);
    assert_ne!(our_key, their_key);
    assert_eq!(ours.remove(their_key), None);
    assert!(!ours.reset(their_key, MS * 9));
    assert!(!ours.contains(their_key));
    assert_eq!(ours.deadline(their_key), None);
    assert_eq!(ours.deadline(our_key), Some(Instant::now() + MS));
    assert_eq!(theirs.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn drain_expired_zero_removes_nothing() {
    let q = DelayQueue::new();
    q.insert(1, Duration::ZERO);
    assert!(q.drain_expired(0).is_empty());
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn clear_while_consumers_wait_keeps_them_waiting() {
    let q = DelayQueue::new();
    q.insert(0, MS * 10);
    let mut waiters: Vec<_> = (0..3).map(|_| spawn(q.take())).collect();
    for w in &mut waiters {
        assert_pending!(w.poll());
    }
    q.clear();
    advance(MS * 20).await;
    for w in &mut waiters {
        assert_pending!(w.poll());
    }
    for i in 1..=3 {
        q.insert(i, MS);
    }
    advance(MS).await;
    // Each taker hands the duty on to the next waiter; follow the chain.
    let mut got = Vec::new();
    for _ in 0..10 {
        for w in &mut waiters {
            if w.is_woken() {
                if let std::task::Poll::Ready(v) = w.poll() {
                    got.push(v);
                }
            }
        }
    }
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn dropping_values_may_use_the_queue() {
    struct Reenters(DelayQueue<Reenters>);
    impl Drop for Reenters {
        fn drop(&mut self) {
            // Would deadlock if values were dropped under the queue's lock.
            let _ = self.0.len();
        }
    }
    let q = DelayQueue::new();
    q.insert(Reenters(q.clone()), MS);
    let key = q.insert(Reenters(q.clone()), MS);
    drop(q.remove(key));
    q.clear();
    assert!(q.is_empty());
}
