//! Bounded delay queues: `bounded`, `try_insert`, `try_insert_at`, `Full`.

use punctual::{DelayQueue, Full};
use std::time::Duration;
use tokio::time::{Instant, advance};

const S: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn try_insert_at_the_bound_gives_the_value_back_and_changes_nothing() {
    let queue = DelayQueue::bounded(2);
    let a = queue.try_insert("a", S * 2).unwrap();
    let b = queue.try_insert("b", S).unwrap();
    let head = queue.peek_deadline();

    assert_eq!(queue.try_insert("c", Duration::ZERO), Err(Full("c")));
    assert_eq!(queue.try_insert_at("d", Instant::now() - S), Err(Full("d")));

    assert_eq!(queue.len(), 2);
    assert_eq!(queue.peek_deadline(), head);
    assert!(queue.contains(a) && queue.contains(b));
    assert_eq!(queue.try_take(), None, "the refused entries were due");
    advance(S * 2).await;
    assert_eq!(queue.drain_expired(usize::MAX), vec!["b", "a"]);
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_bound() {
    let queue = DelayQueue::bounded(1);
    let other = queue.clone();
    queue.try_insert(1, S).unwrap();
    assert_eq!(other.try_insert(2, S), Err(Full(2)));
}

#[tokio::test(start_paused = true)]
async fn taking_frees_a_place_at_once() {
    let queue = DelayQueue::bounded(1);
    queue.try_insert(1, S).unwrap();
    assert_eq!(queue.take().await, 1);
    assert!(queue.try_insert(2, S).is_ok());
    advance(S).await;
    assert_eq!(queue.try_take(), Some(2));
    assert!(queue.try_insert(3, S).is_ok());
    assert_eq!(queue.take_timeout(S * 2).await, Some(3));
    assert!(queue.try_insert(4, Duration::ZERO).is_ok());
}

#[tokio::test(start_paused = true)]
async fn removing_draining_and_clearing_free_places_at_once() {
    let queue = DelayQueue::bounded(2);
    let key = queue.try_insert(1, S).unwrap();
    queue.try_insert(2, Duration::ZERO).unwrap();
    assert_eq!(queue.try_insert(3, S), Err(Full(3)));

    assert_eq!(queue.remove(key), Some(1));
    let key = queue.try_insert(3, S).unwrap();
    assert_eq!(queue.try_insert(4, S), Err(Full(4)));

    assert_eq!(queue.drain_expired(1), vec![2]);
    queue.try_insert(4, S).unwrap();
    assert_eq!(queue.try_insert(5, S), Err(Full(5)));

    queue.clear();
    assert!(!queue.contains(key));
    queue.try_insert(5, S).unwrap();
    queue.try_insert(6, S).unwrap();
    assert_eq!(queue.try_insert(7, S), Err(Full(7)));
}

#[tokio::test(start_paused = true)]
async fn stream_frees_places_as_it_yields() {
    let queue = DelayQueue::bounded(1);
    let mut stream = queue.stream();
    queue.try_insert(1, S).unwrap();
    assert_eq!(stream.next().await, Some(1));
    assert!(queue.try_insert(2, S).is_ok());
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "use `try_insert` to get the value back instead")]
async fn insert_at_the_bound_panics_naming_try_insert() {
    let queue = DelayQueue::bounded(1);
    queue.insert(1, S);
    queue.insert(2, S);
}

#[tokio::test(start_paused = true)]
async fn insert_at_the_bound_panics_with_the_bound_and_keeps_the_queue() {
    let queue = DelayQueue::bounded(1);
    queue.insert_at(1, Instant::now() + S);
    let q = queue.clone();
    let panic = std::panic::catch_unwind(move || q.insert_at(2, Instant::now())).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert_eq!(
        message,
        "`insert` on a DelayQueue bounded to 1 entries that is full: \
         use `try_insert` to get the value back instead"
    );
    assert_eq!(queue.len(), 1);
    advance(S).await;
    assert_eq!(queue.try_take(), Some(1));
}

#[test]
#[should_panic(expected = "the bound `max_pending` must be at least 1, got 0")]
fn bounded_zero_panics() {
    let _ = DelayQueue::<()>::bounded(0);
}

#[test]
fn unbounded_try_insert_never_fails() {
    let queue = DelayQueue::new();
    for i in 0..1000 {
        assert!(queue.try_insert(i, S).is_ok());
    }
    assert_eq!(queue.len(), 1000);
}

#[test]
fn full_is_send_and_sync_when_its_value_is() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Full<String>>();
    send_sync::<DelayQueue<String>>();
}

#[test]
fn full_is_a_lowercase_error_without_debug_on_the_value() {
    struct Opaque;
    let full = Full(Opaque);
    assert_eq!(full.to_string(), "delay queue is full");
    assert_eq!(format!("{full:?}"), "Full(..)");
    let boxed: Box<dyn std::error::Error> = Box::new(Full(Opaque));
    assert_eq!(boxed.to_string(), "delay queue is full");
    assert!(matches!(full.into_inner(), Opaque));
}
