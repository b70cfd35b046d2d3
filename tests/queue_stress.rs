//! Many consumers on the multi-thread runtime, random removes, and `take`
//! futures dropped at random: every value is delivered or removed exactly
//! once, and nothing is stranded.

mod common;

use common::Rng;
use common::ledger::Ledger;
use punctual::DelayQueue;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::{sleep, timeout};

const PRODUCERS: usize = 4;
const PER_PRODUCER: usize = 3_000;
const CONSUMERS: usize = 96;
const TOTAL: usize = PRODUCERS * PER_PRODUCER;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_consumers_with_random_cancellation_deliver_everything_once() {
    let q: DelayQueue<usize> = DelayQueue::new();
    let ledger = Arc::new(Ledger::new(TOTAL));
    let stop = Arc::new(AtomicBool::new(false));
    let cancelled_takes = Arc::new(AtomicUsize::new(0));

    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let (q, ledger, stop, cancelled) = (
                q.clone(),
                ledger.clone(),
                stop.clone(),
                cancelled_takes.clone(),
            );
            tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1));
                let mut stream = q.stream();
                while !stop.load(Ordering::Acquire) {
                    let patience = Duration::from_micros(rng.below(3_000));
                    let got = match rng.below(4) {
                        0 => q.take_timeout(patience).await,
                        1 => timeout(patience, stream.next()).await.ok().flatten(),
                        _ => tokio::select! {
                            v = q.take() => Some(v),
                            _ = sleep(patience) => None,
                        },
                    };
                    match got {
                        Some(v) => ledger.delivered(v),
                        None => {
                            cancelled.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, ledger) = (q.clone(), ledger.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (p as u64 + 1));
                let mut keys = Vec::with_capacity(PER_PRODUCER);
                for i in 0..PER_PRODUCER {
                    let v = p * PER_PRODUCER + i;
                    let delay = Duration::from_micros(rng.below(20_000));
                    keys.push((v, q.insert(v, delay)));
                    if rng.below(5) == 0 {
                        let (victim, key) = keys[rng.below(keys.len() as u64) as usize];
                        if q.remove(key).is_some() {
                            ledger.removed(victim);
                        }
                    }
                    if rng.below(8) == 0 {
                        let (_, key) = keys[rng.below(keys.len() as u64) as usize];
                        q.reset(key, Duration::from_micros(rng.below(20_000)));
                    }
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    // Nothing stranded: all of it settles while consumers keep waiting,
    // long before this generous bound.
    ledger
        .settle(producers, &stop, consumers, Duration::from_secs(20), &q)
        .await;
    ledger.assert_exactly_once();
    assert!(q.is_empty());
    assert!(
        cancelled_takes.load(Ordering::Relaxed) > 0,
        "the test must exercise dropped take futures"
    );
}
