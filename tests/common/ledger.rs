//! Exactly-once bookkeeping for the queue's stress tests: every value is
//! delivered or removed once, and all of them settle.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

/// How often each of `0..total` was delivered and removed.
pub struct Ledger {
    delivered: Vec<AtomicU8>,
    removed: Vec<AtomicU8>,
    settled: AtomicUsize,
}

impl Ledger {
    pub fn new(total: usize) -> Self {
        Ledger {
            delivered: (0..total).map(|_| AtomicU8::new(0)).collect(),
            removed: (0..total).map(|_| AtomicU8::new(0)).collect(),
            settled: AtomicUsize::new(0),
        }
    }

    /// A consumer got `v`.
    pub fn delivered(&self, v: usize) {
        self.delivered[v].fetch_add(1, Ordering::Relaxed);
        self.settled.fetch_add(1, Ordering::Release);
    }

    /// A producer removed `v` (`remove` returned it).
    pub fn removed(&self, v: usize) {
        self.removed[v].fetch_add(1, Ordering::Relaxed);
        self.settled.fetch_add(1, Ordering::Release);
    }

    /// Values delivered or removed so far.
    pub fn settled(&self) -> usize {
        self.settled.load(Ordering::Acquire)
    }

    /// Awaits the producers; then, while the consumers keep taking, waits
    /// until every value settled (polling every 5 ms) or `limit` passed;
    /// then sets `stop` and awaits the consumers. Panics, showing `queue`,
    /// unless every value settled: nothing stranded.
    pub async fn settle(
        &self,
        producers: Vec<JoinHandle<()>>,
        stop: &AtomicBool,
        consumers: Vec<JoinHandle<()>>,
        limit: Duration,
        queue: &dyn Debug,
    ) {
        for p in producers {
            p.await.unwrap();
        }
        let total = self.delivered.len();
        let all = timeout(limit, async {
            while self.settled() < total {
                sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .is_ok();
        stop.store(true, Ordering::Release);
        for c in consumers {
            c.await.unwrap();
        }
        assert!(
            all,
            "stranded: {} of {total} settled, {queue:?}",
            self.settled()
        );
    }

    /// Asserts that every value was delivered or removed exactly once, and
    /// returns how many were delivered.
    pub fn assert_exactly_once(&self) -> usize {
        let mut delivered = 0;
        for v in 0..self.delivered.len() {
            let d = self.delivered[v].load(Ordering::Relaxed);
            let r = self.removed[v].load(Ordering::Relaxed);
            assert_eq!(
                d + r,
                1,
                "value {v}: delivered {d} times, removed {r} times"
            );
            delivered += usize::from(d);
        }
        delivered
    }
}
