//! Waiters that are kept but not polled.
//!
//! A `TakeStream` kept across `select!` iterations never strands another
//! consumer: its `next()` future gives the stream's place up when it loses
//! the race and is dropped. A `take` future (or a stream polled through
//! `StreamExt::next`) that was polled and is then kept without being polled
//! may hold the leader's timer or the hand-off wake-up: the rule documented
//! on `take` is to keep polling it or drop it, and dropping it hands the
//! duty on at once.

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
async fn a_stream_leader_whose_next_is_dropped_hands_the_timer_on() {
    let q = DelayQueue::new();
    q.insert(1, MS * 50);
    let mut stream = q.stream();
    let mut next = task::spawn(stream.next());
    assert_pending!(next.poll()); // the leader, timed for 50 ms
    let mut other = task::spawn(q.take());
    assert_pending!(other.poll()); // a follower
    drop(next); // lost a select!; the stream is kept
    assert!(other.is_woken(), "leadership is handed on at once");
    assert_pending!(other.poll());
    advance(MS * 50).await;
    assert!(other.is_woken());
    assert_ready_eq!(other.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_select_loop_over_a_kept_stream_sees_every_entry_in_order() {
    let q = DelayQueue::new();
    let mut stream = q.stream();
    let mut ticks = tokio::time::interval(MS * 3);
    for i in 0..6u32 {
        q.insert(i, MS * (i * 2 + 1));
    }
    let (mut got, mut tick_count) = (Vec::new(), 0);
    while got.len() < 6 {
        tokio::select! {
            Some(value) = stream.next() => got.push(value),
            _ = ticks.tick() => tick_count += 1,
        }
    }
    assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
    assert!(tick_count >= 3, "both branches ran: {tick_count} ticks");
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

/// The same rule for a stream polled through `StreamExt::next`, whose
/// future does not know the stream: the stream keeps its place until it is
/// polled again or dropped.
#[tokio::test(start_paused = true)]
async fn a_stream_polled_through_stream_ext_keeps_its_place_until_dropped() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut stream = q.stream();
    let mut next = task::spawn(futures::StreamExt::next(&mut stream));
    assert_pending!(next.poll()); // the leader
    drop(next);
    let mut other = task::spawn(q.take());
    assert_pending!(other.poll());
    advance(MS * 10).await;
    assert!(!other.is_woken(), "the kept stream still holds the timer");
    drop(stream);
    assert!(other.is_woken(), "dropping the stream hands the duty on");
    assert_ready_eq!(other.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stream_waits_for_an_insert_into_an_empty_queue() {
    let q = DelayQueue::new();
    let mut stream = q.stream();
    let mut next = task::spawn(stream.next());
    assert_pending!(next.poll());
    q.insert("x", MS * 3);
    assert!(
        next.is_woken(),
        "an insert into an empty queue wakes a waiter"
    );
    assert_pending!(next.poll());
    advance(MS * 3).await;
    assert!(next.is_woken());
    assert_eq!(assert_ready!(next.poll()), Some("x"));
}
