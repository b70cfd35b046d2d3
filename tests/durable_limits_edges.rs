//! Key limits (concurrency and rate), one body per behaviour on
//! every store: limits under many consumers whose `take` futures are
//! cancelled at random, leases running out while a key is at its limit,
//! limits changed or removed while entries run, the default `*` beside a
//! key's own, concurrency 0, rate 0, tiny and huge periods, give-backs at
//! shutdown.

mod common;

use common::Rng;
use common::wait::{HOUR, WAIT, eventually, ms, wall, within};
use punctual::durable::{InsertOptions, Job, KeyLimit, Outcome, Rate, Worker};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

fn key(k: &str) -> InsertOptions {
    InsertOptions::new().key(k)
}

fn concurrency(n: u32) -> KeyLimit {
    KeyLimit {
        concurrency: Some(n),
        rate: None,
    }
}

fn rate(max: u32, per: Duration) -> KeyLimit {
    KeyLimit {
        concurrency: None,
        rate: Some(Rate { max, per }),
    }
}

common::stores::on_every_store! {
    /// A key's own limit, even one with no bound (`KeyLimit::default()`),
    /// replaces the default `*`; a key without its own runs under `*`;
    /// entries without a key are never limited.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_keys_own_unbounded_limit_replaces_the_default() {
        let store = Store::start();
        let q: Q<u32> = store.builder("own-vs-default").lease(HOUR).build().await.unwrap();
        q.set_default_key_limit(concurrency(1)).await.unwrap();
        q.set_key_limit("vip", KeyLimit::default()).await.unwrap();
        let mut batch = Vec::new();
        for n in 0..3 {
            batch.push((n, key("vip")));
            batch.push((10 + n, key("plain-tenant")));
            batch.push((20 + n, InsertOptions::new()));
        }
        q.insert_many_with(&batch).await.unwrap();
        let got = q.take_many(20).await.unwrap();
        let mut values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
        values.sort_unstable();
        assert_eq!(values, [0, 1, 2, 10, 20, 21, 22], "{STORE}: vip unbounded, the tenant at *'s 1");
    }

    /// A key's rate with a period far beyond any clock (`Duration::MAX`,
    /// "at most N ever") holds its entries and nothing else: the queue
    /// keeps claiming its other entries.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rate_with_a_huge_period_holds_its_key_and_nothing_else() {
        let store = Store::start();
        let q: Q<u32> = store.builder("huge-period").lease(HOUR).build().await.unwrap();
        q.set_key_limit("once", rate(1, Duration::MAX)).await.unwrap();
        q.insert_many_with(&[(1, key("once")), (2, key("once")), (3, InsertOptions::new())])
            .await
            .unwrap();
        let got = q.take_many(10).await.unwrap();
        let mut values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
        values.sort_unstable();
        assert_eq!(values, [1, 3], "{STORE}");
        // The key's second entry waits; the queue goes on.
        q.insert_with(&4, &InsertOptions::new()).await.unwrap();
        let next = q.try_take().await.unwrap().map(|d| *d.value());
        assert_eq!(next, Some(4), "{STORE}");
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}");
    }

    /// The same with a period just inside a signed 64-bit count of ms
    /// (when the window opens is past any clock).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rate_with_a_period_near_i64_max_ms_holds_its_key_and_nothing_else() {
        let store = Store::start();
        let q: Q<u32> = store.builder("long-period").lease(HOUR).build().await.unwrap();
        q.set_key_limit("long", rate(1, Duration::from_millis(i64::MAX as u64 - 1))).await.unwrap();
        q.insert_many_with(&[(5, key("long")), (6, key("long"))]).await.unwrap();
        let got = q.take_many(10).await.unwrap();
        let values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
        assert_eq!(values, [5], "{STORE}");
        q.insert_with(&7, &InsertOptions::new()).await.unwrap();
        assert_eq!(q.try_take().await.unwrap().map(|d| *d.value()), Some(7), "{STORE}");
        // A claim that finds nothing to take reports when the window opens.
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}");
        q.insert_with(&8, &InsertOptions::new()).await.unwrap();
        assert_eq!(q.try_take().await.unwrap().map(|d| *d.value()), Some(8), "{STORE}");
    }

    /// A rate of 1 per millisecond (and a period under a millisecond,
    /// which counts as one) lets a key's 30 entries through in a few
    /// milliseconds each, never two begun in one millisecond.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tiny_period_lets_a_key_through_quickly() {
        let store = Store::start();
        let q: Q<u32> = store.builder("tiny-period").lease(HOUR).build().await.unwrap();
        q.set_key_limit("fast", rate(1, Duration::from_nanos(10))).await.unwrap();
        let batch: Vec<(u32, InsertOptions)> = (0..30).map(|n| (n, key("fast"))).collect();
        q.insert_many_with(&batch).await.unwrap();
        let started = Instant::now();
        let mut seen = Vec::new();
        while seen.len() < 30 {
            let got = within("the next of the fast key", q.take_many(5)).await.unwrap();
            assert_eq!(got.len(), 1, "{STORE}: one claim began {} of a key at 1/ms", got.len());
            seen.push(*got[0].value());
        }
        assert_eq!(seen, (0..30).collect::<Vec<_>>(), "{STORE}");
        assert!(started.elapsed() < Duration::from_secs(5), "{STORE}: {:?}", started.elapsed());
    }

    /// A claim that spends a key's rate (it takes the last delivery the
    /// window allows and leaves the key's next due entry waiting) reports
    /// when the window opens: the same consumer's next `take` gets that
    /// entry then, not at its poll interval (30 s here).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_claim_that_spends_a_rate_reports_when_its_window_opens() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("spent-in-one-claim")
            .lease(HOUR)
            .poll_interval(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        q.set_key_limit("api", rate(1, ms(600))).await.unwrap();
        let batch: Vec<(u32, InsertOptions)> = (1..=4).map(|n| (n, key("api"))).collect();
        q.insert_many_with(&batch).await.unwrap();
        for n in 1..=4 {
            let began = Instant::now();
            let got = tokio::time::timeout(Duration::from_secs(5), q.take_many(10)).await;
            let waited = began.elapsed();
            let got = got.unwrap_or_else(|_| {
                panic!("{STORE}: entry {n}: the window opened after 600 ms, nothing taken after {waited:?}")
            });
            assert_eq!(got.unwrap().iter().map(|d| *d.value()).collect::<Vec<_>>(), [n], "{STORE}");
            if n > 1 {
                assert!(waited >= ms(400) && waited < Duration::from_secs(3), "{STORE}: entry {n} after {waited:?}");
            }
        }
    }

    /// A rate of 0 holds the key's entries (other keys flow), and a waiting
    /// `take` gets one as soon as the rate is raised.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rate_of_zero_holds_until_raised() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("rate-zero")
            .lease(HOUR)
            .poll_interval(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        q.set_key_limit("shut", rate(0, ms(100))).await.unwrap();
        q.insert_many_with(&[(1, key("shut")), (2, key("open"))]).await.unwrap();
        let got = q.take_many(5).await.unwrap();
        assert_eq!(got.iter().map(|d| *d.value()).collect::<Vec<_>>(), [2], "{STORE}");
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.take().await.map(|d| *d.value()) }
        });
        tokio::time::sleep(ms(300)).await;
        assert!(!waiting.is_finished(), "{STORE}: taken while its rate was 0");
        let raised = Instant::now();
        q.set_key_limit("shut", rate(5, ms(100))).await.unwrap();
        let got = within("the raised key's entry", waiting).await.unwrap().unwrap();
        assert_eq!(got, 1);
        assert!(raised.elapsed() < Duration::from_secs(3), "{STORE}: {:?}", raised.elapsed());
    }

    /// A key's concurrency lowered while its entries run: no new entry of
    /// it starts until fewer than the new limit run; removed: the rest run
    /// at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_limit_lowered_or_removed_while_entries_run() {
        let store = Store::start();
        let q: Q<u32> = store.builder("changed").lease(HOUR).build().await.unwrap();
        q.set_key_limit("k", concurrency(3)).await.unwrap();
        let batch: Vec<(u32, InsertOptions)> = (0..8).map(|n| (n, key("k"))).collect();
        q.insert_many_with(&batch).await.unwrap();
        let mut running = q.take_many(10).await.unwrap();
        assert_eq!(running.len(), 3, "{STORE}");
        q.set_key_limit("k", concurrency(1)).await.unwrap();
        running.pop().unwrap().ack().await.unwrap();
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: 2 run, the limit is 1");
        running.pop().unwrap().ack().await.unwrap();
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: 1 runs, the limit is 1");
        running.pop().unwrap().ack().await.unwrap();
        let one = q.take_many(10).await.unwrap();
        assert_eq!(one.len(), 1, "{STORE}: none ran, the limit is 1");
        assert!(q.remove_key_limit("k").await.unwrap());
        let rest = q.take_many(10).await.unwrap();
        assert_eq!(rest.len(), 4, "{STORE}: unlimited now");
    }

    /// A lease that runs out while its key is at its concurrency frees the
    /// place for the key's next entry; the holder that comes back late
    /// cannot make the key run more than its limit at once by extending.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_extend_never_makes_a_key_exceed_its_concurrency() {
        let store = Store::start();
        let q: Q<u32> = store.builder("late-extend").lease(ms(300)).build().await.unwrap();
        q.set_key_limit("one", concurrency(1)).await.unwrap();
        q.insert_many_with(&[(1, key("one")), (2, key("one"))]).await.unwrap();
        let mut first = q.take().await.unwrap();
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: the key is at its limit");
        tokio::time::sleep(ms(450)).await;
        // The first lease ran out: the key's place is free again.
        let second = within("the key's place after the lease ran out", q.take()).await.unwrap();
        assert!(second.lease_until() > wall());
        let extended = first.extend(HOUR).await.unwrap();
        assert!(
            !extended || second.lease_until() <= wall(),
            "{STORE}: two entries of a key with concurrency 1 leased at once ({}, {})",
            first.value(),
            second.value()
        );
    }

    /// A worker's shutdown gives back the entry it held: its key's place
    /// is free again at once (not after the lease), so the next consumer
    /// takes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shutdown_frees_the_places_it_held() {
        let store = Store::start();
        let q: Q<u32> = store.builder("shutdown-frees").lease(HOUR).build().await.unwrap();
        q.set_key_limit("one", concurrency(1)).await.unwrap();
        q.insert_many_with(&[(1, key("one")), (2, key("one"))]).await.unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let worker = Worker::builder(q.clone()).concurrency(4).spawn({
            let started = started.clone();
            move |_job: Job<u32>| {
                started.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(HOUR).await;
                    Outcome::Done
                }
            }
        });
        eventually("a run", || async { started.load(Ordering::SeqCst) == 1 }).await;
        worker.shutdown(ms(50)).await;
        let got = within("an entry of the key after shutdown", q.take_many(5)).await.unwrap();
        assert_eq!(got.len(), 1, "{STORE}: the key's place was kept after the give-back");
    }

    /// Many consumers in many tasks, their `take` futures cancelled at
    /// random (a claim may land with nobody to read its reply: its lease
    /// runs out), never hold more live leases of a key than its
    /// concurrency; every entry is acked once; afterwards the keys run as
    /// many at once as their limits say (no place leaked).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cancelled_takes_never_exceed_nor_leak_a_keys_places() {
        let store = Store::start();
        let q: Q<u32> = store.builder("cancel-churn").lease(ms(400)).build().await.unwrap();
        let limits = [("a", 1_usize), ("b", 2), ("c", 3)];
        for (k, n) in limits {
            q.set_key_limit(k, concurrency(n as u32)).await.unwrap();
        }
        let mut batch = Vec::new();
        for n in 0..90_u32 {
            let options = match n % 4 {
                0 => key("a"),
                1 => key("b"),
                2 => key("c"),
                _ => InsertOptions::new().priority((n % 3) as i16),
            };
            batch.push((n, options));
        }
        q.insert_many_with(&batch).await.unwrap();
        let held: Arc<Mutex<HashMap<String, Vec<SystemTime>>>> = Arc::default();
        let worst: Arc<Mutex<Vec<String>>> = Arc::default();
        let acked: Arc<Mutex<Vec<u32>>> = Arc::default();
        let claims = Arc::new(AtomicUsize::new(0));
        let cancelled = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..10_u64 {
            let (q, held, worst, acked) = (q.clone(), held.clone(), worst.clone(), acked.clone());
            let (claims, cancelled) = (claims.clone(), cancelled.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(0x9e37_79b9 + t);
                let deadline = Instant::now() + Duration::from_secs(12);
                while acked.lock().unwrap().len() < 90 && Instant::now() < deadline {
                    let max = 1 + rng.below(3) as usize;
                    // Two takes in three are cut short at random (a claim's
                    // round trip here is 2 to 50 ms), the others wait.
                    let patience = if rng.below(3) == 0 { WAIT } else { ms(rng.below(60)) };
                    let Ok(got) = tokio::time::timeout(patience, q.take_many(max)).await else {
                        cancelled.fetch_add(1, Ordering::Relaxed);
                        continue; // cancelled mid-claim
                    };
                    claims.fetch_add(1, Ordering::Relaxed);
                    let got = got.unwrap();
                    let now = wall();
                    for d in &got {
                        if let Some(k) = d.key() {
                            let mut held = held.lock().unwrap();
                            let live = held.entry(k.to_owned()).or_default();
                            live.retain(|until| *until > now);
                            live.push(d.lease_until());
                            let most = limits.iter().find(|(name, _)| *name == k).unwrap().1;
                            if live.len() > most {
                                worst.lock().unwrap().push(format!("{k}: {} live leases", live.len()));
                            }
                        }
                    }
                    tokio::time::sleep(ms(rng.below(4))).await;
                    for d in got {
                        let (value, k, until) = (*d.value(), d.key().map(str::to_owned), d.lease_until());
                        if let Some(k) = k {
                            let mut held = held.lock().unwrap();
                            let live = held.get_mut(&k).unwrap();
                            if let Some(at) = live.iter().position(|u| *u == until) {
                                live.remove(at);
                            }
                        }
                        if d.ack().await.unwrap() {
                            acked.lock().unwrap().push(value);
                        }
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let worst = worst.lock().unwrap().clone();
        assert!(worst.is_empty(), "{STORE}: {worst:?}");
        let mut acked = acked.lock().unwrap().clone();
        acked.sort_unstable();
        let once: Vec<u32> = (0..90).collect();
        assert_eq!(
            acked,
            once,
            "{STORE}: each entry acked once ({} claims answered, {} cancelled)",
            claims.load(Ordering::Relaxed),
            cancelled.load(Ordering::Relaxed)
        );
        // No place leaked: each key runs as many as its limit at once.
        let mut batch = Vec::new();
        for (k, n) in limits {
            for _ in 0..n + 1 {
                batch.push((1000, key(k)));
            }
        }
        q.insert_many_with(&batch).await.unwrap();
        let got = q.take_many(50).await.unwrap();
        let mut per_key: HashMap<String, usize> = HashMap::new();
        for d in &got {
            *per_key.entry(d.key().unwrap().to_owned()).or_default() += 1;
        }
        let expected: HashMap<String, usize> =
            limits.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
        assert_eq!(per_key, expected, "{STORE}: places left after the churn");
    }

    /// Retries count in a key's rate window, and so do deliveries whose
    /// lease ran out (a redelivery is a delivery begun).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redeliveries_after_a_lease_ran_out_count_in_the_rate() {
        let store = Store::start();
        let q: Q<u32> = store.builder("rate-redelivery").lease(ms(200)).build().await.unwrap();
        q.set_key_limit("api", rate(2, Duration::from_secs(5))).await.unwrap();
        q.insert_with(&1, &key("api")).await.unwrap();
        let first = q.take().await.unwrap();
        drop(first); // never acked: its lease runs out
        tokio::time::sleep(ms(300)).await;
        let second = q.take_many(5).await.unwrap();
        assert_eq!(second.iter().map(|d| d.attempt()).collect::<Vec<_>>(), [2], "{STORE}");
        drop(second);
        tokio::time::sleep(ms(300)).await;
        let third = q.take_timeout(ms(500)).await.unwrap();
        assert!(third.is_none(), "{STORE}: 3 deliveries began within the window of 2");
    }
}

/// Ensures unused imports stay quiet when a feature is off.
#[allow(dead_code)]
fn _unused(_: HashSet<u8>, _: Duration) -> Duration {
    WAIT
}
