//! What `stats`, `entries` and `entry` show once entries have
//! keys and priorities (Redis keeps those in other sorted sets), one body
//! per behaviour on every store: every entry exactly once, in delivery
//! order, in every state, also while entries move between pages; and
//! plain entries beside ones with options, each delivered once.

mod common;

use common::wait::{HOUR, ms, wall};
use punctual::durable::{EntryInfo, EntryState, InsertOptions, KeyLimit};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Every entry of `state`, walking pages of `limit`, with `between` run
/// after each page.
macro_rules! walk {
    ($q:expr, $state:expr, $limit:expr, $between:expr) => {{
        let mut all = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = $q.entries($state, cursor.as_ref(), $limit).await.unwrap();
            pages += 1;
            assert!(pages < 10_000, "endless pages");
            all.extend(page.entries);
            $between(pages).await;
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        all
    }};
}

fn ids<T>(entries: &[EntryInfo<T>]) -> Vec<String> {
    entries.iter().map(|e| e.id.clone()).collect()
}

/// The order a page of `state` lists: by due time (lease end, death), FIFO
/// on ties; checks it and returns whether it holds.
fn ordered<T>(entries: &[EntryInfo<T>], state: EntryState) -> bool {
    let at = |e: &EntryInfo<T>| match state {
        EntryState::Leased => e.lease_until.unwrap(),
        EntryState::Dead => e.died_at.unwrap(),
        _ => e.due,
    };
    entries.windows(2).all(|w| at(&w[0]) <= at(&w[1]))
}

common::stores::on_every_store! {
    /// Plain entries and entries with keys and priorities in every state
    /// (pending, due, leased, a lease that ran out, dead): `stats` counts
    /// each once, each state's pages list each once in order, `entry`
    /// shows each in its state with its key and priority.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_entry_once_in_stats_pages_and_entry() {
        let store = Store::start();
        let q: Q<u32> = store.builder("pages").lease(ms(400)).max_attempts(1).build().await.unwrap();
        let now = wall();
        let mut batch = Vec::new();
        let mut want: HashMap<String, (Option<String>, i16)> = HashMap::new();
        for n in 0..40_u32 {
            let id = format!("e{n:02}");
            let key = (n % 3 == 0).then(|| format!("k{}", n % 2));
            let priority = if n % 5 == 0 { 2 } else { 0 };
            // Ties: four entries share each due time.
            let at = if n < 24 {
                now - Duration::from_secs(u64::from(10 - n / 4))
            } else {
                now + HOUR + Duration::from_secs(u64::from(n / 4))
            };
            let mut options = InsertOptions::new().id(&id).at(at).priority(priority);
            if let Some(k) = &key {
                options = options.key(k);
            }
            want.insert(id.clone(), (key, priority));
            batch.push((n, options));
        }
        q.insert_many_with(&batch).await.unwrap();
        // 4 dead (priority 9: taken first), 6 leased (kept), 4 leased and
        // let run out.
        let mut dying_batch = Vec::new();
        for n in 0..4_u32 {
            let id = format!("d{n}");
            let key = (n % 2 == 0).then(|| "k0".to_owned());
            let mut options = InsertOptions::new().id(&id).priority(9).at(now - HOUR);
            if let Some(k) = &key {
                options = options.key(k);
            }
            want.insert(id, (key, 9));
            dying_batch.push((50 + n, options));
        }
        q.insert_many_with(&dying_batch).await.unwrap();
        let dying = q.take_many(4).await.unwrap();
        assert_eq!(dying.len(), 4, "{STORE}");
        for d in dying {
            assert!(d.retry(Duration::ZERO).await.unwrap());
        }
        let kept = q.take_many(6).await.unwrap();
        let lapsed = q.take_many(4).await.unwrap();
        tokio::time::sleep(ms(250)).await;
        let mut kept_on = Vec::new();
        for mut d in kept {
            assert!(d.extend(HOUR).await.unwrap());
            kept_on.push(d);
        }
        drop(lapsed);
        tokio::time::sleep(ms(250)).await;
        // The dying ones are buried by the next claim (past one attempt);
        // what it takes besides is kept leased.
        q.set_default_key_limit(KeyLimit { concurrency: Some(0), rate: None }).await.unwrap();
        for mut d in q.take_many(4).await.unwrap() {
            assert!(d.extend(HOUR).await.unwrap());
            kept_on.push(d);
        }
        let stats = q.stats().await.unwrap();
        let mut seen = BTreeSet::new();
        let mut total = 0;
        for state in [EntryState::Pending, EntryState::Due, EntryState::Leased, EntryState::Dead] {
            let all: Vec<EntryInfo<u32>> = walk!(q, state, 3, |_| async {});
            assert!(ordered(&all, state), "{STORE}: {state:?} out of order: {:?}", ids(&all));
            for e in &all {
                assert_eq!(e.state, state, "{STORE}: {}", e.id);
                assert!(seen.insert(e.id.clone()), "{STORE}: {} listed twice", e.id);
                let (key, priority) = &want[&e.id];
                assert_eq!((&e.key, e.priority), (key, *priority), "{STORE}: {}", e.id);
                let one = q.entry(&e.id).await.unwrap().unwrap();
                assert_eq!((one.state, &one.key, one.priority), (state, key, *priority), "{STORE}: {}", e.id);
            }
            let counted = match state {
                EntryState::Pending => stats.pending,
                EntryState::Due => stats.due,
                EntryState::Leased => stats.leased,
                EntryState::Dead => stats.dead,
            };
            assert_eq!(all.len() as u64, counted, "{STORE}: {state:?}: pages {:?} vs {stats:?}", ids(&all));
            total += all.len();
        }
        assert_eq!(total, 44, "{STORE}: {stats:?}");
        assert_eq!(stats.leased, kept_on.len() as u64, "{STORE}: {stats:?}");
        assert!(stats.dead >= 4 && stats.leased > 0 && stats.pending > 0 && stats.due > 0, "{STORE}: {stats:?}");
        drop(kept_on);
    }

    /// Walking the pending pages (3 at a time) of 60 entries with keys,
    /// priorities and none, sharing due times, while between pages entries
    /// are inserted, removed, replaced and moved: every entry that stays
    /// pending at its due time is listed once, none twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pages_see_staying_entries_once_while_others_move() {
        let store = Store::start();
        let q: Q<u32> = store.builder("moving-pages").lease(HOUR).build().await.unwrap();
        let base = wall() + HOUR;
        let at = |n: u32| base + Duration::from_secs(u64::from(n / 5));
        let mut batch = Vec::new();
        for n in 0..60_u32 {
            let mut options = InsertOptions::new().id(&format!("p{n:02}")).at(at(n));
            match n % 4 {
                0 => options = options.key("a"),
                1 => options = options.priority(3),
                2 => options = options.key("b").priority(-1),
                _ => {}
            }
            batch.push((n, options));
        }
        q.insert_many_with(&batch).await.unwrap();
        // Those the walk changes (every seventh), each in its own way.
        let moving: Vec<u32> = (0..60).filter(|n| n % 7 == 3).collect();
        let staying: BTreeSet<String> =
            (0..60).filter(|n| !moving.contains(n)).map(|n| format!("p{n:02}")).collect();
        let q2 = q.clone();
        let all: Vec<EntryInfo<u32>> = walk!(q, EntryState::Pending, 3, |page: usize| {
            let q = q2.clone();
            let moving = moving.clone();
            async move {
                let Some(&n) = moving.get(page) else { return };
                let id = format!("p{n:02}");
                match page % 4 {
                    0 => assert!(q.remove(&id).await.unwrap()),
                    1 => assert!(q.reset(&id, HOUR * 3).await.unwrap()),
                    2 => assert!(q.insert_with(&n, &InsertOptions::new().id(&id).replace(true).key("c").at(at(n) - Duration::from_secs(30))).await.unwrap().is_some()),
                    _ => assert!(q.insert_with(&(1000 + n), &InsertOptions::new().key("a").at(at(0))).await.unwrap().is_some()),
                }
            }
        });
        let mut listed: HashMap<String, usize> = HashMap::new();
        for e in &all {
            *listed.entry(e.id.clone()).or_default() += 1;
        }
        let twice: Vec<&String> = listed.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id).collect();
        assert!(twice.is_empty(), "{STORE}: listed twice: {twice:?}");
        let missed: Vec<&String> = staying.iter().filter(|id| !listed.contains_key(*id)).collect();
        assert!(missed.is_empty(), "{STORE}: staying entries missed: {missed:?}");
    }
}

common::stores::on_durable_stores! {
    /// Entries written by an older version (plain: no key, no priority) in
    /// every state, then entries with options beside them: each is
    /// delivered once, plain and special in due order within priority 0,
    /// and `stats` agrees with the pages throughout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn old_plain_entries_and_new_special_ones_together() {
        let store = Store::start();
        let q: Q<u32> = store.builder("old-and-new").lease(ms(300)).build().await.unwrap();
        let now = wall();
        // As an older version wrote them: plain entries (the same records).
        for n in 0..6_u32 {
            q.insert_at(&n, now - Duration::from_secs(u64::from(20 - 2 * n))).await.unwrap();
        }
        let leased = q.take_many(2).await.unwrap(); // 0, 1: their leases run out
        drop(leased);
        tokio::time::sleep(ms(400)).await;
        // New: keyed and prioritized entries between the old ones' due times.
        for n in 0..6_u32 {
            let options = InsertOptions::new()
                .key(&format!("k{}", n % 2))
                .at(now - Duration::from_secs(u64::from(19 - 2 * n)));
            q.insert_with(&(100 + n), &options).await.unwrap();
        }
        q.insert_with(&200, &InsertOptions::new().priority(1).at(now - Duration::from_secs(1))).await.unwrap();
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.due, stats.leased), (13, 0), "{STORE}: {stats:?}");
        let due: Vec<EntryInfo<u32>> = walk!(q, EntryState::Due, 4, |_| async {});
        assert_eq!(due.len(), 13, "{STORE}: {:?}", ids(&due));
        let mut order = Vec::new();
        while let Some(d) = q.try_take().await.unwrap() {
            order.push(*d.value());
            assert!(d.ack().await.unwrap());
        }
        // Priority 1 first; then level 0 by due time: the old 0 and 1 came
        // back at their lease ends (now), so after the rest.
        assert_eq!(order, [200, 100, 101, 2, 102, 3, 103, 4, 104, 5, 105, 0, 1], "{STORE}");
        assert_eq!(q.stats().await.unwrap(), Stats::default(), "{STORE}");
    }
}
