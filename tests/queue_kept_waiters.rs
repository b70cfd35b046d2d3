//! Waiters that are kept but not polled.
//!
//! A `TakeStream` kept across `select!` iterations never strands another
//! consumer: it waits with its own timer, outside the Leader-Follower
//! hand-off. A `take` future that was polled and is then kept without being
//! polled may hold the leader's timer or the hand-off wake-up: the rule
//! documented on `take` is to keep polling it or drop it, and dropping it
//! hands the duty on at once.

use futures::StreamExt;
use punctual::DelayQueue;
use std::time::Duration;
use tokio::time::advance;
use tokio_test::task;
use tokio_test::{assert_pending, assert_ready, assert_ready_eq};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn a_kept_stream_whose_next_lost_a_select_never_strands_a_take() {
    let q = DelayQueue::new();
    let mut stream = q.stream();
    // The stream's `next()` is polled once and loses the race; the stream
    // is kept, and not polled again while the loop body is busy.
    tokio::select! {
        biased;
        _ = std::future::ready(()) => {}
        _ = stream.next() => unreachable!("nothing is queued"),
    }
    let mut next = task::spawn(stream.next());
    assert_pending!(next.poll());
    drop(next);

    let mut consumer = task::spawn(q.take());
    assert_pending!(consumer.poll());
    q.insert(1, MS * 10);
    q.insert(2, MS * 20);
    assert!(consumer.is_woken(), "the consumer times the new head");
    assert_pending!(consumer.poll());
    advance(MS * 10).await;
    assert!(consumer.is_woken(), "the consumer's own timer fired");
    assert_ready_eq!(consumer.poll(), 1);

    // Back to the stream: it gets what is left, in order.
    advance(MS * 10).await;
    assert_eq!(stream.next().await, Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_kept_stream_never_holds_the_hand_off_when_the_head_moves() {
    let q = DelayQueue::new();
    q.insert(1, MS * 50);
    let mut stream = q.stream();
    let mut next = task::spawn(stream.next());
    assert_pending!(next.poll());
    drop(next); // kept, not polled

    let mut a = task::spawn(q.take());
    let mut b = task::spawn(q.take());
    assert_pending!(a.poll()); // leader, timed for 50 ms
    assert_pending!(b.poll());
    // An earlier head: the hand-off wake-up must reach a `take`, not the
    // idle stream.
    q.insert(0, MS * 5);
    assert!(a.is_woken() || b.is_woken());
    let (first, second) = if a.is_woken() { (a, b) } else { (b, a) };
    let (mut first, mut second) = (first, second);
    assert_pending!(first.poll());
    advance(MS * 5).await;
    assert_ready_eq!(first.poll(), 0);
    advance(MS * 45).await;
    assert!(
        second.is_woken(),
        "the duty passed on to the other consumer"
    );
    assert_ready_eq!(second.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn many_streams_each_get_their_share_in_order() {
    let q = DelayQueue::new();
    let mut streams: Vec<_> = (0..4).map(|_| q.stream()).collect();
    for i in 0..8u32 {
        q.insert(i, MS * (i % 4 + 1));
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        for stream in &mut streams {
            got.push(stream.next().await.unwrap());
        }
    }
    assert_eq!(got, vec![0, 4, 1, 5, 2, 6, 3, 7]);
    assert!(q.is_empty());
}

/// The documented rule for `take`: a polled `take` future that is kept but
/// not polled can hold the leader's timer; others are served once it is
/// dropped (or polled again).
#[tokio::test(start_paused = true)]
async fn a_kept_unpolled_take_delays_others_until_it_is_dropped() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut idle = task::spawn(q.take());
    assert_pending!(idle.poll()); // the leader
    let mut other = task::spawn(q.take());
    assert_pending!(other.poll()); // a follower, untimed
    advance(MS * 10).await;
    assert!(idle.is_woken(), "the leader's timer fired");
    assert!(!other.is_woken(), "followers wait for the leader");
    drop(idle);
    assert!(
        other.is_woken(),
        "dropping the kept future hands the duty on"
    );
    assert_ready_eq!(other.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stream_waits_for_an_insert_into_an_empty_queue() {
    let q = DelayQueue::new();
    let mut stream = q.stream();
    let mut next = task::spawn(stream.next());
    assert_pending!(next.poll());
    q.insert("x", MS * 3);
    assert!(next.is_woken(), "the head moved forward");
    assert_pending!(next.poll());
    advance(MS * 3).await;
    assert!(next.is_woken());
    assert_eq!(assert_ready!(next.poll()), Some("x"));
}
