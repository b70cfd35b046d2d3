//! One test at least for each rule of `DelayQueue` in API.md.

use punctual::DelayQueue;
use std::time::Duration;
use tokio::time::{Instant, advance};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn take_returns_entries_in_deadline_order() {
    let q = DelayQueue::new();
    for v in [30u64, 10, 20] {
        q.insert(v, MS * v as u32);
    }
    let start = Instant::now();
    assert_eq!(q.take().await, 10);
    assert_eq!(start.elapsed(), MS * 10);
    assert_eq!(q.take().await, 20);
    assert_eq!(q.take().await, 30);
    assert_eq!(start.elapsed(), MS * 30);
}

#[tokio::test(start_paused = true)]
async fn equal_deadlines_come_out_fifo() {
    let q = DelayQueue::new();
    let deadline = Instant::now() + MS * 5;
    for i in 0..100 {
        q.insert_at(i, deadline);
    }
    advance(MS * 5).await;
    assert_eq!(q.drain_expired(usize::MAX), (0..100).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn insert_is_insert_at_now_plus_delay() {
    let q = DelayQueue::new();
    let key = q.insert((), Duration::from_secs(7));
    assert_eq!(
        q.deadline(key),
        Some(Instant::now() + Duration::from_secs(7))
    );
}

#[tokio::test(start_paused = true)]
async fn try_take_returns_only_due_entries() {
    let q = DelayQueue::new();
    assert_eq!(q.try_take(), None::<u8>);
    q.insert(1, MS * 10);
    assert_eq!(q.try_take(), None);
    advance(MS * 9).await;
    assert_eq!(q.try_take(), None);
    advance(MS).await;
    assert_eq!(q.try_take(), Some(1));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn take_waits_for_an_insert_into_an_empty_queue() {
    let q = DelayQueue::new();
    let consumer = tokio::spawn({
        let q = q.clone();
        async move { (q.take().await, Instant::now()) }
    });
    tokio::task::yield_now().await;
    advance(Duration::from_secs(1)).await;
    let inserted = Instant::now();
    q.insert("x", MS * 3);
    let (value, at) = consumer.await.unwrap();
    assert_eq!(value, "x");
    assert_eq!(at, inserted + MS * 3);
}

#[tokio::test(start_paused = true)]
async fn take_timeout_returns_none_when_nothing_comes_due() {
    let q = DelayQueue::new();
    q.insert(1, MS * 100);
    let start = Instant::now();
    assert_eq!(q.take_timeout(MS * 50).await, None);
    assert_eq!(start.elapsed(), MS * 50);
    assert_eq!(q.len(), 1, "the entry is still queued");
    assert_eq!(q.take_timeout(MS * 60).await, Some(1));
    assert_eq!(start.elapsed(), MS * 100);
}

#[tokio::test(start_paused = true)]
async fn take_timeout_zero_returns_only_a_due_entry() {
    let q = DelayQueue::new();
    q.insert(1, MS);
    assert_eq!(q.take_timeout(Duration::ZERO).await, None);
    advance(MS).await;
    assert_eq!(q.take_timeout(Duration::ZERO).await, Some(1));
}

#[tokio::test(start_paused = true)]
async fn drain_expired_respects_max_and_order() {
    let q = DelayQueue::new();
    for v in [5u32, 1, 4, 2, 3, 9] {
        q.insert(v, MS * v);
    }
    advance(MS * 5).await;
    assert_eq!(q.drain_expired(0), Vec::<u32>::new());
    assert_eq!(q.drain_expired(3), vec![1, 2, 3]);
    assert_eq!(q.drain_expired(10), vec![4, 5]);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn drain_expired_that_finds_nothing_allocates_nothing() {
    // A polling loop that mostly finds nothing must not pay for room it
    // does not use (and hand it back), least of all for large values.
    let q: DelayQueue<[u8; 4096]> = DelayQueue::new();
    q.insert([0; 4096], Duration::from_secs(3600));
    for max in [1, 100, usize::MAX] {
        assert_eq!(q.drain_expired(max).capacity(), 0, "max {max}");
    }
}

#[tokio::test(start_paused = true)]
async fn remove_returns_the_value_once() {
    let q = DelayQueue::new();
    let a = q.insert("a", MS);
    let b = q.insert("b", MS * 2);
    assert_eq!(q.remove(a), Some("a"));
    assert_eq!(q.remove(a), None);
    assert!(!q.contains(a));
    assert!(q.contains(b));
    assert_eq!(q.take().await, "b");
    assert_eq!(q.remove(b), None, "a taken key is stale");
}

#[tokio::test(start_paused = true)]
async fn reset_keeps_the_key_and_moves_the_deadline() {
    let q = DelayQueue::new();
    let a = q.insert("a", MS * 10);
    q.insert("b", MS * 20);
    assert!(q.reset(a, MS * 30));
    assert_eq!(q.deadline(a), Some(Instant::now() + MS * 30));
    assert_eq!(q.take().await, "b");
    assert_eq!(q.take().await, "a");
    assert!(!q.reset(a, MS), "a taken key is stale");
}

#[tokio::test(start_paused = true)]
async fn reset_orders_behind_entries_with_the_same_deadline() {
    let q = DelayQueue::new();
    let deadline = Instant::now() + MS * 10;
    let first = q.insert_at(1, deadline);
    q.insert_at(2, deadline);
    q.insert_at(3, deadline);
    assert!(q.reset_at(first, deadline));
    advance(MS * 10).await;
    assert_eq!(q.drain_expired(usize::MAX), vec![2, 3, 1]);
}

#[tokio::test(start_paused = true)]
async fn peek_deadline_len_and_is_empty_track_the_queue() {
    let q = DelayQueue::new();
    assert_eq!(q.peek_deadline(), None);
    assert!(q.is_empty());
    let late = q.insert(1, MS * 9);
    let early = q.insert(2, MS * 3);
    assert_eq!(q.len(), 2);
    assert_eq!(q.peek_deadline(), q.deadline(early));
    q.remove(early);
    assert_eq!(q.peek_deadline(), q.deadline(late));
}

#[tokio::test(start_paused = true)]
async fn clear_empties_and_makes_keys_stale() {
    let q = DelayQueue::new();
    let old: Vec<_> = (0..10).map(|i| q.insert(i, MS)).collect();
    q.clear();
    assert!(q.is_empty());
    let new: Vec<_> = (0..10).map(|i| q.insert(i + 100, MS)).collect();
    for key in &old {
        assert!(
            !new.contains(key),
            "keys after clear differ from earlier ones"
        );
        assert!(!q.contains(*key));
        assert_eq!(q.remove(*key), None);
        assert_eq!(q.deadline(*key), None);
        assert!(!q.reset(*key, MS));
    }
    assert_eq!(q.len(), 10);
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_queue() {
    let q = DelayQueue::new();
    let other = q.clone();
    let key = other.insert(5, MS);
    assert!(q.contains(key));
    assert_eq!(q.take().await, 5);
    assert!(other.is_empty());
}

#[tokio::test(start_paused = true)]
async fn default_is_an_empty_queue() {
    let q: DelayQueue<String> = DelayQueue::default();
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn each_entry_goes_to_exactly_one_consumer() {
    let q = DelayQueue::new();
    let consumers: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(v) = q.take_timeout(Duration::from_secs(1)).await {
                    got.push(v);
                }
                got
            })
        })
        .collect();
    for i in 0..200u32 {
        q.insert(i, MS * (i % 17));
    }
    let mut all = Vec::new();
    for c in consumers {
        all.extend(c.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (0..200).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn stream_yields_in_deadline_order_and_shares_with_take() {
    let q = DelayQueue::new();
    for v in [3u32, 1, 2, 4] {
        q.insert(v, MS * v);
    }
    let mut stream = q.stream();
    assert_eq!(stream.next().await, Some(1));
    assert_eq!(q.take().await, 2);
    assert_eq!(stream.next().await, Some(3));
    assert_eq!(stream.next().await, Some(4));
    // Never ends: an empty queue just keeps the stream pending.
    let next = tokio::time::timeout(Duration::from_secs(3600), stream.next()).await;
    assert!(next.is_err());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_stream_mid_wait_loses_nothing() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut stream = q.stream();
    let early = tokio::time::timeout(MS * 5, stream.next()).await;
    assert!(early.is_err());
    drop(stream);
    assert_eq!(q.take().await, 1);
}

#[tokio::test(start_paused = true)]
async fn debug_does_not_need_debug_payload() {
    struct Opaque;
    let q = DelayQueue::new();
    q.insert(Opaque, MS);
    let text = format!("{q:?} {:?}", q.stream());
    assert!(text.contains("len: 1"), "{text}");
}
