//! Claim order with priorities and keys, one body per behaviour
//! on every store, checked against a model of the contract: the highest
//! priority first; within a priority, rounds of one entry per key (a
//! keyless entry a key of its own), the first round in (due, FIFO) order of
//! each key's first due entry, each later round the next due entry of each
//! key that gave one, in (due, FIFO) order; keys at their limits skipped.

mod common;

use common::Rng;
use common::wait::{HOUR, ms, wall};
use punctual::durable::{InsertOptions, KeyLimit};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// One entry of the model: (priority, key, due ms ago, insertion order,
/// value).
#[derive(Clone, Debug)]
struct Model {
    priority: i16,
    key: Option<String>,
    due: SystemTime,
    seq: usize,
    value: u32,
}

/// The values a claim of `n` takes from `left` (due by now), with each
/// key's concurrency left in `places` (absent: unlimited), by the
/// contract; taken ones are removed from `left`.
fn claim(left: &mut Vec<Model>, n: usize, places: &mut HashMap<String, usize>) -> Vec<u32> {
    let mut out = Vec::new();
    let mut levels: Vec<i16> = left.iter().map(|m| m.priority).collect();
    levels.sort_unstable_by(|a, b| b.cmp(a));
    levels.dedup();
    for level in levels {
        // Each key's entries at this level, in (due, seq) order; keyless
        // entries are groups of one.
        let mut groups: BTreeMap<String, Vec<Model>> = BTreeMap::new();
        for m in left.iter().filter(|m| m.priority == level) {
            let g = match &m.key {
                Some(k) => format!("k:{k}"),
                None => format!("#{}", m.seq),
            };
            groups.entry(g).or_default().push(m.clone());
        }
        for g in groups.values_mut() {
            g.sort_by_key(|m| (m.due, m.seq));
        }
        let mut next: HashMap<String, usize> = groups.keys().map(|g| (g.clone(), 0)).collect();
        let mut round: Vec<String> = groups.keys().cloned().collect();
        while !round.is_empty() {
            let mut cands: Vec<(SystemTime, usize, String)> = round
                .iter()
                .filter_map(|g| {
                    let m = groups[g].get(next[g])?;
                    Some((m.due, m.seq, g.clone()))
                })
                .collect();
            cands.sort();
            let mut gave = Vec::new();
            for (_, _, g) in cands {
                if out.len() >= n {
                    break;
                }
                let m = &groups[&g][next[&g]];
                if let Some(k) = &m.key {
                    if let Some(p) = places.get_mut(k) {
                        if *p == 0 {
                            continue;
                        }
                        *p -= 1;
                    }
                }
                out.push(m.value);
                *next.get_mut(&g).unwrap() += 1;
                gave.push(g);
            }
            if out.len() >= n {
                break;
            }
            round = gave;
        }
        if out.len() >= n {
            break;
        }
    }
    left.retain(|m| !out.contains(&m.value));
    out
}

fn entries(seed: u64, n: u32, base: SystemTime) -> (Vec<Model>, Vec<(u32, InsertOptions)>) {
    let mut rng = Rng(seed);
    let mut model = Vec::new();
    let mut batch = Vec::new();
    for value in 0..n {
        let priority = [-2_i16, 0, 0, 3][rng.below(4) as usize];
        let key = ["", "", "a", "b", "c", "d"][rng.below(6) as usize];
        let due = base - Duration::from_millis(1000 * rng.below(8));
        let mut options = InsertOptions::new().at(due).priority(priority);
        if !key.is_empty() {
            options = options.key(key);
        }
        model.push(Model {
            priority,
            key: (!key.is_empty()).then(|| key.to_owned()),
            due,
            seq: value as usize,
            value,
        });
        batch.push((value, options));
    }
    (model, batch)
}

common::stores::on_every_store! {
    /// Claims of assorted sizes over a mix of priorities, keys, keyless
    /// entries (plain and with a priority) and equal due times take what
    /// the contract says, claim by claim.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_follow_the_contracts_order() {
        let store = Store::start();
        for seed in [7_u64, 99, 2024] {
            let q: Q<u32> = store.builder(&format!("order-{seed}")).lease(HOUR).build().await.unwrap();
            let base = wall() - Duration::from_secs(60);
            let (mut left, batch) = entries(seed, 80, base);
            q.insert_many_with(&batch).await.unwrap();
            let mut unlimited = HashMap::new();
            let mut held = Vec::new();
            for (i, n) in [1_usize, 3, 1, 7, 2, 10, 1, 5, 20, 4, 40].into_iter().cycle().enumerate() {
                if left.is_empty() {
                    break;
                }
                let want = claim(&mut left, n, &mut unlimited);
                let got = q.take_many(n).await.unwrap();
                let mut got_values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
                let mut want_sorted = want.clone();
                if n > 1 {
                    got_values.sort_unstable();
                    want_sorted.sort_unstable();
                }
                assert_eq!(got_values, want_sorted, "{STORE}: seed {seed}, claim {i} of {n}");
                held.extend(got);
            }
        }
    }

    /// The same with limits: key `a` has 1 place (then 0 once taken), `b`
    /// 2; `c` and `d` none. Each claim's choice skips the full keys and
    /// takes the next eligible entries instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_skip_full_keys_as_the_contract_says() {
        let store = Store::start();
        for seed in [5_u64, 31] {
            let q: Q<u32> = store.builder(&format!("limited-{seed}")).lease(HOUR).build().await.unwrap();
            q.set_key_limit("a", KeyLimit { concurrency: Some(1), rate: None }).await.unwrap();
            q.set_key_limit("b", KeyLimit { concurrency: Some(2), rate: None }).await.unwrap();
            let base = wall() - Duration::from_secs(60);
            let (mut left, batch) = entries(seed, 60, base);
            q.insert_many_with(&batch).await.unwrap();
            let mut places: HashMap<String, usize> = [("a".to_owned(), 1), ("b".to_owned(), 2)].into();
            let mut held = Vec::new();
            for (i, n) in [1_usize, 4, 2, 9, 1, 30].into_iter().enumerate() {
                let want = claim(&mut left, n, &mut places);
                let got = if want.is_empty() {
                    q.try_take().await.unwrap().into_iter().collect()
                } else {
                    q.take_many(n).await.unwrap()
                };
                let mut got_values: Vec<u32> = got.iter().map(|d| *d.value()).collect();
                let mut want = want;
                got_values.sort_unstable();
                want.sort_unstable();
                assert_eq!(got_values, want, "{STORE}: seed {seed}, claim {i} of {n}");
                held.extend(got);
            }
        }
    }

    /// Within a key, a claim takes its earliest due entry, whatever the
    /// insertion order: a key whose first-inserted entry is not due yet
    /// still gives its due ones, earliest first, and a retried entry goes
    /// behind the key's entries due before its new due time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_keys_due_entries_come_earliest_first_whatever_the_insert_order() {
        let store = Store::start();
        let q: Q<u32> = store.builder("within-a-key").lease(HOUR).build().await.unwrap();
        let now = wall();
        let at = |secs_ago: u64| InsertOptions::new().key("k").at(now - Duration::from_secs(secs_ago));
        q.insert_with(&0, &InsertOptions::new().key("k").delay(HOUR)).await.unwrap();
        q.insert_many_with(&[(1, at(1)), (2, at(5)), (3, at(3))]).await.unwrap();
        q.insert_with(&9, &InsertOptions::new().at(now - Duration::from_secs(2))).await.unwrap();
        let first = q.take_many(1).await.unwrap();
        assert_eq!(*first[0].value(), 2, "{STORE}: the key's earliest");
        let next = q.take_many(2).await.unwrap();
        let mut values: Vec<u32> = next.iter().map(|d| *d.value()).collect();
        values.sort_unstable();
        assert_eq!(values, [3, 9], "{STORE}: then the key's next and the keyless one");
        // Retried now: behind entry 1 (due a second ago).
        let retried = next.into_iter().find(|d| *d.value() == 3).unwrap();
        assert!(retried.retry(Duration::ZERO).await.unwrap());
        let order: Vec<u32> = {
            let mut v = Vec::new();
            for _ in 0..2 {
                v.push(*q.take_many(1).await.unwrap()[0].value());
            }
            v
        };
        assert_eq!(order, [1, 3], "{STORE}");
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: entry 0 is not due");
    }

    /// Thousands of keys, each with a due entry, and a claim of many: one
    /// entry per key in due order, and every key's entry taken exactly once
    /// across claims.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thousands_of_keys_are_each_taken_once_in_due_order() {
        let store = Store::start();
        let q: Q<u32> = store.builder("many-keys").lease(HOUR).build().await.unwrap();
        q.set_default_key_limit(KeyLimit { concurrency: Some(1), rate: None }).await.unwrap();
        let base = wall() - Duration::from_secs(600);
        let mut batch = Vec::new();
        for n in 0..3000_u32 {
            let options = InsertOptions::new()
                .key(&format!("tenant-{n}"))
                .at(base + Duration::from_millis(u64::from(n)));
            batch.push((n, options.clone()));
            // A second entry of the key: held by the key's one place.
            batch.push((10_000 + n, options));
        }
        for chunk in batch.chunks(2000) {
            q.insert_many_with(chunk).await.unwrap();
        }
        let mut taken = Vec::new();
        let mut held = Vec::new();
        loop {
            let got = q.take_many(700).await.unwrap();
            taken.extend(got.iter().map(|d| *d.value()));
            let full = got.len() == 700;
            held.extend(got);
            if !full {
                break;
            }
        }
        assert_eq!(taken, (0..3000).collect::<Vec<_>>(), "{STORE}: one per key, in due order");
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: every key is at its limit");
        let _ = ms(0);
    }
}
