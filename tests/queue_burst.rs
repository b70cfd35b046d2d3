//! A burst: a million entries due within a few milliseconds, taken by 256
//! consumers on the multi-thread runtime. Every entry is delivered exactly
//! once, and no consumer ever sees a later deadline before an earlier one:
//! all entries are queued before the first take, so the queue must hand them
//! out in exact `(deadline, insertion)` order, and each consumer's share is a
//! subsequence of that order.

use punctual::DelayQueue;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tokio::time::{Instant, timeout};

const ENTRIES: usize = 1_000_000;
const CONSUMERS: usize = 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_million_entries_due_together_reach_256_consumers_once_and_in_order() {
    let queue = DelayQueue::with_capacity(ENTRIES);
    let start = Instant::now();
    // Deadlines spread over 0-4 ms (about four wheel ticks), many equal,
    // inserted out of order; the value is the entry's rank in deadline then
    // insertion order, so "in order" means "increasing values".
    let micros = |i: usize| ((i * 7_919) % 4_000) as u64;
    let mut ranked: Vec<(u64, usize)> = (0..ENTRIES).map(|i| (micros(i), i)).collect();
    ranked.sort_unstable();
    let mut rank = vec![0usize; ENTRIES];
    for (r, &(_, i)) in ranked.iter().enumerate() {
        rank[i] = r;
    }
    for (i, &r) in rank.iter().enumerate() {
        queue.insert_at(r, start + Duration::from_micros(micros(i)));
    }
    drop(rank);

    let seen: Arc<Vec<AtomicU8>> = Arc::new((0..ENTRIES).map(|_| AtomicU8::new(0)).collect());
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (queue, seen) = (queue.clone(), seen.clone());
            tokio::spawn(async move {
                let mut last = None;
                let mut out_of_order = 0usize;
                let mut taken = 0usize;
                // Stops once the queue stays empty for a while: by then every
                // entry has long been due.
                while let Some(value) = queue.take_timeout(Duration::from_millis(200)).await {
                    seen[value].fetch_add(1, Ordering::Relaxed);
                    if last.is_some_and(|last| value < last) {
                        out_of_order += 1;
                    }
                    last = Some(value);
                    taken += 1;
                }
                (taken, out_of_order)
            })
        })
        .collect();

    let mut taken = 0;
    for consumer in consumers {
        let (count, out_of_order) = timeout(Duration::from_secs(120), consumer)
            .await
            .expect("a consumer is stuck")
            .unwrap();
        assert_eq!(out_of_order, 0, "a consumer got a later deadline first");
        taken += count;
    }
    assert_eq!(taken, ENTRIES);
    let twice = seen
        .iter()
        .filter(|n| n.load(Ordering::Relaxed) != 1)
        .count();
    assert_eq!(twice, 0, "entries delivered other than exactly once");
    assert!(queue.is_empty());
}
