//! Poll-level checks of Leader-Follower: who is woken, and when.

use punctual::DelayQueue;
use std::time::Duration;
use tokio::time::advance;
use tokio_test::task::spawn;
use tokio_test::{assert_pending, assert_ready_eq};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn insert_earlier_deadline_wakes_leader() {
    let q = DelayQueue::new();
    q.insert("late", MS * 100);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    q.insert("early", MS * 10);
    assert!(leader.is_woken());
    assert_pending!(leader.poll());
    advance(MS * 10).await;
    assert!(leader.is_woken());
    assert_ready_eq!(leader.poll(), "early");
}

#[tokio::test(start_paused = true)]
async fn insert_later_deadline_leaves_leader_asleep() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    q.insert(2, MS * 20);
    assert!(!leader.is_woken());
}

#[tokio::test(start_paused = true)]
async fn insert_into_empty_queue_wakes_a_waiter() {
    let q = DelayQueue::new();
    let mut waiter = spawn(q.take());
    assert_pending!(waiter.poll());
    q.insert(1, MS * 10);
    assert!(waiter.is_woken());
    assert_pending!(waiter.poll());
    advance(MS * 10).await;
    assert_ready_eq!(waiter.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn followers_are_not_woken_by_the_deadline() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    let mut follower = spawn(q.take());
    assert_pending!(leader.poll());
    assert_pending!(follower.poll());
    advance(MS * 10).await;
    assert!(leader.is_woken());
    assert!(!follower.is_woken(), "only the leader holds a timer");
    assert_ready_eq!(leader.poll(), 1);
    assert!(!follower.is_woken(), "nothing left: nobody to hand on to");
}

#[tokio::test(start_paused = true)]
async fn remove_of_head_rearms_leader() {
    let q = DelayQueue::new();
    let head = q.insert(1, MS * 10);
    q.insert(2, MS * 50);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    assert_eq!(q.remove(head), Some(1));
    assert!(leader.is_woken());
    assert_pending!(leader.poll());
    advance(MS * 10).await;
    assert!(!leader.is_woken(), "the old deadline's timer is gone");
    advance(MS * 40).await;
    assert!(leader.is_woken());
    assert_ready_eq!(leader.poll(), 2);
}

#[tokio::test(start_paused = true)]
async fn remove_of_non_head_leaves_leader_asleep() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let other = q.insert(2, MS * 50);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    q.remove(other);
    assert!(!leader.is_woken());
}

#[tokio::test(start_paused = true)]
async fn reset_of_head_to_later_rearms_leader() {
    let q = DelayQueue::new();
    let head = q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    assert!(q.reset(head, MS * 30));
    assert!(leader.is_woken());
    assert_pending!(leader.poll());
    advance(MS * 10).await;
    assert!(!leader.is_woken());
    advance(MS * 20).await;
    assert_ready_eq!(leader.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn reset_to_the_head_wakes_leader() {
    let q = DelayQueue::new();
    q.insert(1, MS * 50);
    let other = q.insert(2, MS * 60);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    assert!(q.reset(other, MS * 5));
    assert!(leader.is_woken());
    assert_pending!(leader.poll());
    advance(MS * 5).await;
    assert_ready_eq!(leader.poll(), 2);
}

#[tokio::test(start_paused = true)]
async fn clear_rearms_leader_and_waiters_keep_waiting() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    assert_pending!(leader.poll());
    q.clear();
    assert!(leader.is_woken());
    assert_pending!(leader.poll());
    advance(MS * 100).await;
    assert!(!leader.is_woken(), "nothing to time after clear");
    q.insert(2, MS);
    advance(MS).await;
    assert_ready_eq!(leader.poll(), 2);
}

#[tokio::test(start_paused = true)]
async fn dropped_leader_hands_leadership_on() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    let mut follower = spawn(q.take());
    assert_pending!(leader.poll());
    assert_pending!(follower.poll());
    drop(leader);
    assert!(follower.is_woken());
    assert_pending!(follower.poll());
    advance(MS * 10).await;
    assert!(follower.is_woken());
    assert_ready_eq!(follower.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn dropped_follower_wakes_nobody() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    let mut follower = spawn(q.take());
    assert_pending!(leader.poll());
    assert_pending!(follower.poll());
    drop(follower);
    assert!(!leader.is_woken());
}

#[tokio::test(start_paused = true)]
async fn take_returning_with_entries_left_wakes_one_waiter() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    q.insert(2, MS * 20);
    let mut leader = spawn(q.take());
    let mut second = spawn(q.take());
    let mut third = spawn(q.take());
    assert_pending!(leader.poll());
    assert_pending!(second.poll());
    assert_pending!(third.poll());
    advance(MS * 10).await;
    assert_ready_eq!(leader.poll(), 1);
    assert!(second.is_woken(), "a successor must time entry 2");
    assert!(!third.is_woken(), "one waiter, not all");
    assert_pending!(second.poll());
    advance(MS * 10).await;
    assert_ready_eq!(second.poll(), 2);
}

#[tokio::test(start_paused = true)]
async fn woken_waiter_dropped_before_running_passes_the_wakeup_on() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    q.insert(2, MS * 20);
    let mut leader = spawn(q.take());
    let mut woken = spawn(q.take());
    let mut third = spawn(q.take());
    assert_pending!(leader.poll());
    assert_pending!(woken.poll());
    assert_pending!(third.poll());
    advance(MS * 10).await;
    assert_ready_eq!(leader.poll(), 1);
    assert!(woken.is_woken());
    drop(woken);
    assert!(third.is_woken(), "the wake-up is passed on");
    assert_pending!(third.poll());
    advance(MS * 10).await;
    assert_ready_eq!(third.poll(), 2);
}

#[tokio::test(start_paused = true)]
async fn leader_woken_by_its_timer_and_dropped_hands_on() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    let mut leader = spawn(q.take());
    let mut follower = spawn(q.take());
    assert_pending!(leader.poll());
    assert_pending!(follower.poll());
    advance(MS * 10).await;
    assert!(leader.is_woken());
    drop(leader);
    assert!(follower.is_woken());
    assert_ready_eq!(follower.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn take_timeout_leader_giving_up_hands_on() {
    let q = DelayQueue::new();
    q.insert(1, MS * 50);
    let mut impatient = spawn(q.take_timeout(MS * 10));
    let mut patient = spawn(q.take());
    assert_pending!(impatient.poll());
    assert_pending!(patient.poll());
    advance(MS * 10).await;
    assert_ready_eq!(impatient.poll(), None);
    assert!(patient.is_woken());
    assert_pending!(patient.poll());
    advance(MS * 40).await;
    assert_ready_eq!(patient.poll(), 1);
}

#[tokio::test(start_paused = true)]
async fn two_due_entries_reach_two_waiters() {
    let q = DelayQueue::new();
    q.insert(1, MS * 10);
    q.insert(2, MS * 10);
    let mut a = spawn(q.take());
    let mut b = spawn(q.take());
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    advance(MS * 10).await;
    assert_ready_eq!(a.poll(), 1);
    assert!(b.is_woken());
    assert_ready_eq!(b.poll(), 2);
}
