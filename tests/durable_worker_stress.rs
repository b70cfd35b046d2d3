#![cfg(any(feature = "redis", feature = "postgres"))]
//! Stress for the durable `Worker` on every store: several workers with
//! handles of their own share one queue on a multi-thread runtime while
//! entries keep arriving; handlers succeed, fail, panic and take a little
//! time at random (a fixed seed per entry and attempt); one worker is shut
//! down with no grace mid-run and another started. At the end every entry
//! has ended exactly once: acked after exactly one run that returned `Ok`,
//! or in the dead letters after `MAX_ATTEMPTS` failed attempts; no two runs
//! of an entry overlapped; no worker ran more than its concurrency at once;
//! and the workers' counters agree with the ledger.
//!
//! Real time (the store's clock decides what is due); every wait is
//! bounded (`common::wait::WAIT`).

mod common;

use common::wait::{eventually, ms};
use punctual::durable::{Backoff, Job, Worker};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::sleep;

const ENTRIES: u64 = 4000;
const MAX_ATTEMPTS: u32 = 3;
const CONCURRENCY: usize = 8;

/// What one attempt of entry `n` does, from a hash of both: 0 ok, 1 error,
/// 2 panic; and how long it takes first (0 to 3 ms).
fn fate(n: u64, attempt: u32) -> (u8, Duration) {
    let mut x = n
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(attempt).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    x ^= x >> 31;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 29;
    let roll = x % 100;
    let what = match roll {
        0..=11 => 1,
        12..=14 => 2,
        _ => 0,
    };
    (what, Duration::from_micros((x >> 8) % 3000))
}

/// What the handlers saw, shared by every worker.
#[derive(Default)]
struct Ledger {
    /// Runs that returned `Ok`, per entry value.
    oks: BTreeMap<u64, usize>,
    /// Entries running now (a second run of one is an overlap).
    running: BTreeSet<u64>,
    overlaps: Vec<u64>,
}

/// A worker whose runs are recorded in `ledger`, counting its own runs in
/// flight in `mine` (the most it saw at once in `peak`).
fn spawn<Q: punctual::durable::Durable<Item = u64>>(
    q: Q,
    ledger: &Arc<Mutex<Ledger>>,
    peak: &Arc<AtomicUsize>,
) -> Worker {
    let mine = Arc::new(AtomicUsize::new(0));
    let (ledger, peak) = (Arc::clone(ledger), Arc::clone(peak));
    Worker::builder(q)
        .concurrency(CONCURRENCY)
        .backoff(Backoff::fixed(ms(5)))
        .spawn(move |job: Job<u64>| {
            let (ledger, peak, mine) = (Arc::clone(&ledger), Arc::clone(&peak), Arc::clone(&mine));
            async move {
                let n = *job.value();
                let now = mine.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                {
                    let mut l = ledger.lock().unwrap();
                    if !l.running.insert(n) {
                        l.overlaps.push(n);
                    }
                }
                // Leaves the books however the run ends (an abort drops it).
                struct Out(Arc<Mutex<Ledger>>, Arc<AtomicUsize>, u64);
                impl Drop for Out {
                    fn drop(&mut self) {
                        self.1.fetch_sub(1, Ordering::SeqCst);
                        self.0.lock().unwrap().running.remove(&self.2);
                    }
                }
                let out = Out(Arc::clone(&ledger), Arc::clone(&mine), n);
                let (what, took) = fate(n, job.attempt());
                sleep(took).await;
                match what {
                    0 => {
                        *ledger.lock().unwrap().oks.entry(n).or_default() += 1;
                        drop(out);
                        Ok(())
                    }
                    1 => Err(format!("fails {n} at attempt {}", job.attempt())),
                    _ => panic!("panics {n} at attempt {}", job.attempt()),
                }
            }
        })
}

common::stores::on_every_store! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn workers_joining_and_leaving_end_every_entry_exactly_once() {
        let store = Store::start();
        let open = || async {
            store
                .builder("stress")
                .lease(Duration::from_secs(30))
                .max_attempts(MAX_ATTEMPTS)
                .poll_interval(ms(50))
                .build()
                .await
                .expect("connect")
        };
        let producer: Q<u64> = open().await;
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut completed = 0;
        let mut workers = vec![
            spawn(open().await, &ledger, &peak),
            spawn(open().await, &ledger, &peak),
            spawn(open().await, &ledger, &peak),
        ];

        // Entries arrive while the workers run: batches due now, single
        // ones due up to 200 ms out.
        let mut n = 0;
        while n < ENTRIES {
            if n % 200 == 0 {
                let values: Vec<(u64, Duration)> = (n..(n + 100).min(ENTRIES))
                    .map(|v| (v, Duration::ZERO))
                    .collect();
                producer.insert_many(&values).await.unwrap();
                n += values.len() as u64;
            } else {
                producer.insert(&n, ms(n % 200)).await.unwrap();
                n += 1;
            }
            if n == ENTRIES / 2 {
                // One leaves with no grace (what it holds goes back), one
                // joins.
                let gone = workers.remove(0);
                completed += gone.shutdown(Duration::ZERO).await.completed;
                workers.push(spawn(open().await, &ledger, &peak));
            }
        }

        let dead_count = || async { producer.dead_letters(ENTRIES as usize).await.unwrap().len() };
        eventually("every entry acked or dead", || {
            let ledger = Arc::clone(&ledger);
            let producer = producer.clone();
            async move {
                let s = producer.stats().await.unwrap();
                let oks = ledger.lock().unwrap().oks.len() as u64;
                s.pending == 0 && s.leased == 0 && s.dead + oks >= ENTRIES
            }
        })
        .await;
        for worker in workers {
            completed += worker.shutdown(ms(500)).await.completed;
        }
        let dead: BTreeSet<u64> = producer
            .dead_letters(ENTRIES as usize)
            .await
            .unwrap()
            .into_iter()
            .map(|d| {
                assert_eq!(d.attempts, MAX_ATTEMPTS, "{d:?}");
                d.value.expect("a u64")
            })
            .collect();
        assert_eq!(dead.len(), dead_count().await);
        let s = producer.stats().await.unwrap();
        assert_eq!((s.pending, s.leased, s.dead), (0, 0, dead.len() as u64), "{s:?}");
        let l = ledger.lock().unwrap();
        eprintln!(
            "{STORE}: {} acked, {} dead, {completed} completed by the workers",
            l.oks.len(),
            dead.len()
        );
        assert!(l.overlaps.is_empty(), "runs of one entry overlapped: {:?}", l.overlaps);
        assert!(l.running.is_empty(), "runs still in the books: {:?}", l.running);
        let twice: Vec<_> = l.oks.iter().filter(|(_, runs)| **runs > 1).collect();
        assert!(twice.is_empty(), "entries that ran to Ok more than once: {twice:?}");
        let both: Vec<_> = dead.iter().filter(|n| l.oks.contains_key(n)).collect();
        assert!(both.is_empty(), "entries both acked and dead: {both:?}");
        let ended: BTreeSet<u64> = l.oks.keys().copied().chain(dead.iter().copied()).collect();
        assert_eq!(ended, (0..ENTRIES).collect::<BTreeSet<u64>>(), "every entry ended");
        // Every run that returned `Ok` was acked (a run stopped by the
        // shutdown with no grace was given back, not acked, and ran again).
        assert_eq!(completed, l.oks.len() as u64);
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak <= CONCURRENCY, "a worker ran {peak} handlers at once");
    }
}
