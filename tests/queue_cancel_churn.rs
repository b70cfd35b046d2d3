//! Timeouts armed far ahead and mostly cancelled again, from several
//! producers on the multi-thread runtime, while consumers take the few that
//! expire: the wheel's removed entries leave dead indices behind, buckets
//! compact themselves while they are cascaded and opened, and still every
//! value is delivered or removed exactly once, none before its deadline and
//! none ahead of an earlier one that was already queued, and nothing is
//! stranded.

mod common;

use common::Rng;
use common::ledger::Ledger;
use punctual::DelayQueue;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};

const PRODUCERS: usize = 4;
const PER_PRODUCER: usize = 2_500;
const CONSUMERS: usize = 8;
const TOTAL: usize = PRODUCERS * PER_PRODUCER;
/// Timeouts a producer keeps armed at most; small enough that the queue's
/// debug invariant check (up to 1,024 slots) runs after every mutation.
const WINDOW: usize = 200;

/// When each value's insert returned, in ns after `base`, plus one; 0 until
/// its producer got to record it.
struct Inserted {
    at: Vec<AtomicU64>,
    base: Instant,
}

impl Inserted {
    fn stamp(&self, at: Instant) -> u64 {
        at.duration_since(self.base).as_nanos() as u64 + 1
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mostly_cancelled_far_timeouts_settle_exactly_once_and_in_order() {
    let q: DelayQueue<(usize, Instant)> = DelayQueue::new();
    let ledger = Arc::new(Ledger::new(TOTAL));
    let inserted = Arc::new(Inserted {
        at: (0..TOTAL).map(|_| AtomicU64::new(0)).collect(),
        base: Instant::now(),
    });
    let stop = Arc::new(AtomicBool::new(false));

    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let (q, ledger, stop) = (q.clone(), ledger.clone(), stop.clone());
            let inserted = inserted.clone();
            tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1));
                // The deadline of this consumer's last value, and when the
                // take that returned it began.
                let mut last: Option<(Instant, u64)> = None;
                while !stop.load(Ordering::Acquire) {
                    let patience = Duration::from_micros(rng.below(5_000));
                    let began = inserted.stamp(Instant::now());
                    if let Ok((v, deadline)) = timeout(patience, q.take()).await {
                        assert!(
                            Instant::now() >= deadline,
                            "value {v} came before its deadline"
                        );
                        // An earlier deadline after a later one is fine only
                        // if that value was not yet queued when the take of
                        // the later one began (a producer preempted between
                        // reading the clock and inserting, say).
                        if let Some((last_deadline, last_began)) = last {
                            let queued = inserted.at[v].load(Ordering::Acquire);
                            assert!(
                                deadline >= last_deadline || queued == 0 || queued > last_began,
                                "consumer {c}: value {v} came after a later deadline, \
                                 though it was queued before that one was taken"
                            );
                        }
                        last = Some((deadline, began));
                        ledger.delivered(v);
                    }
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, ledger, inserted) = (q.clone(), ledger.clone(), inserted.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (p as u64 + 1));
                let mut armed = VecDeque::with_capacity(WINDOW + 1);
                for i in 0..PER_PRODUCER {
                    let v = p * PER_PRODUCER + i;
                    // 30-150 ms ahead: level 1 and 2 buckets of the wheel,
                    // cascaded and opened while the test runs.
                    let deadline =
                        Instant::now() + Duration::from_micros(30_000 + rng.below(120_000));
                    armed.push_back((v, q.insert_at((v, deadline), deadline)));
                    let now = inserted.stamp(Instant::now());
                    inserted.at[v].store(now, Ordering::Release);
                    // Most timeouts are cancelled: the newest (a request
                    // that finished at once), the oldest, or any.
                    if rng.below(10) < 9 || armed.len() > WINDOW {
                        let at = match rng.below(3) {
                            0 => armed.len() - 1,
                            1 => 0,
                            _ => rng.below(armed.len() as u64) as usize,
                        };
                        let (victim, key) = armed.remove(at).expect("an armed timeout");
                        if q.remove(key).is_some() {
                            ledger.removed(victim);
                        }
                    }
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                    if i % 64 == 0 {
                        sleep(Duration::from_millis(1)).await;
                    }
                }
            })
        })
        .collect();
    ledger
        .settle(producers, &stop, consumers, Duration::from_secs(20), &q)
        .await;
    let delivered = ledger.assert_exactly_once();
    assert!(q.is_empty());
    // Both paths were exercised. How many expire before their producer
    // cancels them depends on the machine's load (a tenth to a half here).
    assert!(
        delivered > 100 && TOTAL - delivered > TOTAL / 4,
        "{delivered} of {TOTAL} expired"
    );
}
