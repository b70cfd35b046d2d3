//! Jobs as real workloads need them, one body per behaviour on every store:
//! priorities under a backlog, keys with concurrency and rate limits (never
//! exceeded, never holding up other keys, fair per claim), unique windows,
//! replace (debounce), per-entry max attempts, `insert_many_with` all or
//! none, and what deliveries and entries say of their key and priority.

mod common;

use common::wait::{
    HOUR, OpenInParent, WAIT, child_command, child_role, eventually, finish, ms, wall, within,
};
use punctual::durable::{EntryState, InsertOptions, Job, KeyLimit, Outcome, Rate, Worker};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A job's key and priority, as its handler saw them.
type Shown = (Option<String>, i16);

fn key(k: &str) -> InsertOptions {
    InsertOptions::new().key(k)
}

fn concurrency(n: u32) -> KeyLimit {
    KeyLimit {
        concurrency: Some(n),
        rate: None,
    }
}

common::stores::on_every_store! {
    /// Among due entries a claim takes the highest priority first, equal
    /// priorities in due order; priority never makes an entry due sooner,
    /// and a retry keeps it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn higher_priorities_go_first_through_a_backlog() {
        let store = Store::start();
        let q: Q<String> = store.builder("prio").lease(HOUR).build().await.unwrap();
        let backlog: Vec<(String, InsertOptions)> =
            (0..50).map(|n| (format!("newsletter {n}"), InsertOptions::new())).collect();
        q.insert_many_with(&backlog).await.unwrap();
        for n in 0..3 {
            let urgent = InsertOptions::new().priority(10).id(&format!("reset {n}"));
            assert!(q.insert_with(&format!("reset {n}"), &urgent).await.unwrap().is_some());
        }
        let low = InsertOptions::new().priority(-5);
        q.insert_with(&"cleanup".into(), &low).await.unwrap();
        let later = InsertOptions::new().priority(100).delay(HOUR);
        q.insert_with(&"tomorrow".into(), &later).await.unwrap();

        let first = q.take_many(4).await.unwrap();
        let values: Vec<&str> = first.iter().map(|d| d.value().as_str()).collect();
        assert_eq!(values, ["reset 0", "reset 1", "reset 2", "newsletter 0"], "{STORE}");
        assert_eq!(first[0].priority(), 10);
        assert_eq!(first[3].priority(), 0);
        // A retried urgent entry is urgent again.
        let mut first = first.into_iter();
        let retried = first.next().unwrap();
        assert!(retried.retry(Duration::ZERO).await.unwrap());
        let again = q.take().await.unwrap();
        assert_eq!((again.value().as_str(), again.priority()), ("reset 0", 10), "{STORE}");
        let mut rest = Vec::new();
        while let Some(d) = q.try_take().await.unwrap() {
            rest.push(d.value().clone());
        }
        assert_eq!(rest.len(), 50, "{STORE}: the 49 left of the backlog and the low one");
        assert_eq!(rest.last().map(String::as_str), Some("cleanup"), "{STORE}: lowest last");
        assert!(!rest.iter().any(|v| v == "tomorrow"), "{STORE}: priority made it due early");
    }

    /// One key holding 10,000 due entries does not delay another key's one
    /// past a claim: a claim takes one entry of each key before a second
    /// of any, and a claim of one takes the first in due order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_keys_backlog_never_delays_another_keys_entry() {
        let store = Store::start();
        let q: Q<u32> = store.builder("fair").lease(HOUR).build().await.unwrap();
        for chunk in 0..10 {
            let batch: Vec<(u32, InsertOptions)> =
                (0..1000).map(|n| (chunk * 1000 + n, key("tenant-a"))).collect();
            q.insert_many_with(&batch).await.unwrap();
        }
        q.insert_with(&99_999, &key("tenant-b")).await.unwrap();
        q.insert_with(&77_777, &InsertOptions::new()).await.unwrap();
        let one = q.take_many(1).await.unwrap();
        assert_eq!(*one[0].value(), 0, "{STORE}: a claim of one takes the first due");
        let claim = q.take_many(3).await.unwrap();
        let mut values: Vec<u32> = claim.iter().map(|d| *d.value()).collect();
        values.sort_unstable();
        assert_eq!(values, [1, 77_777, 99_999], "{STORE}: one of each key, the keyless one its own key");
        let keys: Vec<Option<&str>> = claim.iter().map(|d| d.key()).collect();
        assert!(keys.contains(&Some("tenant-b")) && keys.contains(&None));
        // Then tenant a's backlog, in order.
        let next = q.take_many(3).await.unwrap();
        let values: Vec<u32> = next.iter().map(|d| *d.value()).collect();
        assert_eq!(values, [2, 3, 4], "{STORE}");
    }

    /// 20 consumers (5 workers of 4 places) never run more entries of a
    /// key at once than its concurrency, counted in the handler; a key at
    /// its limit never holds up the others (keyless entries and another
    /// key run beside it); the default limit applies to keys without their
    /// own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_keys_concurrency_is_never_exceeded_by_any_number_of_consumers() {
        let store = Store::start();
        let q: Q<String> = store.open("limited").await;
        assert!(q.set_key_limit("provider", concurrency(2)).await.unwrap());
        assert!(q.set_default_key_limit(concurrency(1)).await.unwrap());
        let mut batch: Vec<(String, InsertOptions)> = Vec::new();
        for n in 0..30 {
            batch.push(("provider".into(), key("provider")));
            if n < 10 {
                batch.push(("account".into(), key("account-7")));
                batch.push((format!("free {n}"), InsertOptions::new()));
            }
        }
        q.insert_many_with(&batch).await.unwrap();
        let running: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let most: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let done = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..5 {
            let (running, most, done) = (running.clone(), most.clone(), done.clone());
            workers.push(Worker::builder(q.clone()).concurrency(4).spawn(move |job: Job<String>| {
                let (running, most, done) = (running.clone(), most.clone(), done.clone());
                async move {
                    let name = job.value().clone();
                    {
                        let mut running = running.lock().unwrap();
                        let now = running.entry(name.clone()).or_default();
                        *now += 1;
                        let mut most = most.lock().unwrap();
                        let top = most.entry(name.clone()).or_default();
                        *top = (*top).max(*now);
                    }
                    // A run stopped early (its lease lost on a loaded
                    // machine) stops counting when its future is dropped.
                    struct Leaves(Arc<Mutex<HashMap<String, usize>>>, String);
                    impl Drop for Leaves {
                        fn drop(&mut self) {
                            *self.0.lock().unwrap().get_mut(&self.1).unwrap() -= 1;
                        }
                    }
                    let _leaves = Leaves(running.clone(), name.clone());
                    tokio::time::sleep(ms(20)).await;
                    done.fetch_add(1, Ordering::SeqCst);
                    Outcome::Done
                }
            }));
        }
        eventually("every entry ran", || async { done.load(Ordering::SeqCst) == 50 }).await;
        let most = most.lock().unwrap().clone();
        assert_eq!(most["provider"], 2, "{STORE}: provider ran {} at once", most["provider"]);
        assert_eq!(most["account"], 1, "{STORE}: the default limit let {} run", most["account"]);
        let free = most.iter().filter(|(k, _)| k.starts_with("free")).count();
        assert_eq!(free, 10);
        for worker in workers {
            worker.shutdown(ms(100)).await;
        }
        assert_eq!(q.stats().await.unwrap(), Stats::default());
    }

    /// A worker waiting on a key's limit starts the next entry of the key
    /// as soon as a place frees (an ack announces it), not at its poll
    /// interval (30 s here).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_place_that_frees_wakes_a_waiting_worker() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("wake-on-free")
            .poll_interval(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        q.set_key_limit("sync", concurrency(1)).await.unwrap();
        q.insert_many_with(&[(1, key("sync")), (2, key("sync"))]).await.unwrap();
        let starts: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
        let worker = Worker::builder(q.clone()).concurrency(2).spawn({
            let starts = starts.clone();
            move |job: Job<u32>| {
                starts.lock().unwrap().push((*job.value(), Instant::now()));
                async { tokio::time::sleep(ms(200)).await; Outcome::Done }
            }
        });
        eventually("both ran", || async { starts.lock().unwrap().len() == 2 }).await;
        let starts = starts.lock().unwrap().clone();
        let gap = starts[1].1 - starts[0].1;
        assert!(gap >= ms(190), "{STORE}: the second began {gap:?} after the first, beside it");
        assert!(gap < ms(2000), "{STORE}: the second waited {gap:?} for a place");
        worker.shutdown(ms(500)).await;
    }

    /// A key's rate counts deliveries begun in the last `per` on the
    /// store's clock (retries included), and a waiting consumer takes the
    /// next entry when the window opens, not at its poll interval.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_keys_rate_holds_deliveries_to_its_window() {
        let store = Store::start();
        let q: Q<u32> = store
            .builder("rated")
            .lease(HOUR)
            .poll_interval(Duration::from_secs(30))
            .build()
            .await
            .unwrap();
        let per = ms(600);
        let limit = KeyLimit { concurrency: None, rate: Some(Rate { max: 2, per }) };
        assert!(q.set_key_limit("api", limit).await.unwrap());
        let batch: Vec<(u32, InsertOptions)> = (0..5).map(|n| (n, key("api"))).collect();
        q.insert_many_with(&batch).await.unwrap();
        q.insert_with(&100, &InsertOptions::new()).await.unwrap();
        let first = q.take_many(10).await.unwrap();
        let mut values: Vec<u32> = first.iter().map(|d| *d.value()).collect();
        values.sort_unstable();
        assert_eq!(values, [0, 1, 100], "{STORE}: two of the key, and the keyless one");
        let began = wall();
        // The window is full: the next take waits for it to open.
        let third = within("the third delivery", q.take()).await.unwrap();
        let waited = wall().duration_since(began).unwrap_or_default();
        assert_eq!(*third.value(), 2);
        assert!(waited >= ms(450), "{STORE}: the third began {waited:?} into a window of {per:?}");
        assert!(waited < ms(5000), "{STORE}: the third waited {waited:?}, a poll interval");
        // A retry is a delivery too: it counts in the window (and goes
        // behind the entries due before it).
        assert!(third.retry(Duration::ZERO).await.unwrap());
        let fourth = within("the fourth delivery", q.take()).await.unwrap();
        assert_eq!(*fourth.value(), 3);
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: two began in this window");
    }

    /// With `unique_for`, the id stays taken for the window after the
    /// entry is acked: `insert_with` and `insert_with_id` of it are
    /// refused, then accepted once the window passed. A dead letter's
    /// window starts when it is removed, not when it died.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_unique_window_keeps_the_id_taken_after_the_entry_finishes() {
        let store = Store::start();
        let q: Q<u32> = store.builder("unique").max_attempts(1).build().await.unwrap();
        let window = ms(800);
        let digest = InsertOptions::new().id("digest:alice").unique_for(window);
        assert_eq!(q.insert_with(&1, &digest).await.unwrap().as_deref(), Some("digest:alice"));
        assert_eq!(q.insert_with(&2, &digest).await.unwrap(), None, "{STORE}: pending");
        let taken = q.take().await.unwrap();
        assert_eq!(*taken.value(), 1);
        assert!(taken.ack().await.unwrap());
        let acked = Instant::now();
        assert_eq!(q.insert_with(&3, &digest).await.unwrap(), None, "{STORE}: the window is open");
        assert!(!q.insert_with_id("digest:alice", &3, ms(0)).await.unwrap());
        assert!(acked.elapsed() < window, "too slow to check the window");
        tokio::time::sleep(window + ms(100)).await;
        assert!(q.insert_with_id("digest:alice", &4, HOUR).await.unwrap(), "{STORE}: after the window");
        assert!(q.remove("digest:alice").await.unwrap());

        // Dead: the id is taken while the dead letter is kept, and for the
        // window after it is removed.
        let once = InsertOptions::new().id("dies").unique_for(window);
        q.insert_with(&5, &once).await.unwrap();
        let dying = q.take().await.unwrap();
        assert!(dying.retry(Duration::ZERO).await.unwrap());
        // Its next delivery would pass the queue's one attempt: dead.
        assert!(q.try_take().await.unwrap().is_none());
        assert_eq!(q.stats().await.unwrap().dead, 1, "{STORE}");
        tokio::time::sleep(window + ms(100)).await;
        assert_eq!(q.insert_with(&6, &once).await.unwrap(), None, "{STORE}: the dead letter holds it");
        assert!(q.remove("dies").await.unwrap());
        assert_eq!(q.insert_with(&7, &once).await.unwrap(), None, "{STORE}: removed just now");
        tokio::time::sleep(window + ms(100)).await;
        assert!(q.insert_with(&8, &once).await.unwrap().is_some(), "{STORE}");
    }

    /// `replace` debounces: a pending entry of the id (due or not) takes
    /// the new value, due time, priority and key, attempts reset; a leased
    /// entry is never replaced, nor a dead one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replace_moves_a_pending_entry_and_never_a_leased_one() {
        let store = Store::start();
        let q: Q<String> = store.builder("debounce").lease(HOUR).build().await.unwrap();
        let edit = |n: u32| {
            InsertOptions::new()
                .id("reindex")
                .replace(true)
                .delay(ms(300))
                .priority(n as i16)
                .key(&format!("doc-{n}"))
        };
        for n in 0..5 {
            assert_eq!(q.insert_with(&format!("edit {n}"), &edit(n)).await.unwrap().as_deref(), Some("reindex"));
        }
        let stats = q.stats().await.unwrap();
        assert_eq!((stats.pending, stats.due), (1, 0), "{STORE}: one entry");
        let info = q.entry("reindex").await.unwrap().unwrap();
        assert_eq!((info.value.as_deref(), info.priority, info.key.as_deref()), (Some("edit 4"), 4, Some("doc-4")));
        let taken = within("the debounced entry", q.take()).await.unwrap();
        assert_eq!((taken.value().as_str(), taken.attempt(), taken.key()), ("edit 4", 1, Some("doc-4")));
        // Leased: refused, and the lease holder's ack still counts.
        assert_eq!(q.insert_with(&"edit 5".into(), &edit(5)).await.unwrap(), None, "{STORE}");
        assert!(taken.ack().await.unwrap());
        assert!(q.insert_with(&"edit 6".into(), &edit(6)).await.unwrap().is_some());
    }

    /// `insert_many_with` is one step: a bad entry fails the call and
    /// nothing is inserted; within one call, an id an earlier entry took is
    /// refused unless it has `replace`.
    #[tokio::test]
    async fn insert_many_with_is_all_or_none_and_answers_each_entry() {
        let store = Store::start();
        let q: Q<u32> = store.open("many").await;
        let bad = vec![(1, key("ok")), (2, InsertOptions::new().unique_for(HOUR))];
        let err = q.insert_many_with(&bad).await.unwrap_err();
        assert!(matches!(&err, Error::InvalidId(why) if why.contains("unique_for")), "{STORE}: {err}");
        assert!(matches!(q.insert_many_with(&[(1, key(""))]).await, Err(Error::InvalidId(_))));
        assert_eq!(q.stats().await.unwrap(), Stats::default(), "{STORE}: nothing inserted");
        let with_id = |id: &str| InsertOptions::new().id(id).delay(HOUR);
        let answers = q
            .insert_many_with(&[
                (1, with_id("a")),
                (2, with_id("a")),
                (3, with_id("b")),
                (4, with_id("b").replace(true)),
                (5, InsertOptions::new().delay(HOUR)),
            ])
            .await
            .unwrap();
        assert_eq!(answers[..4], [Some("a".into()), None, Some("b".into()), Some("b".into())], "{STORE}");
        assert!(answers[4].is_some());
        assert_eq!(q.stats().await.unwrap().pending, 3);
        assert_eq!(q.entry("b").await.unwrap().unwrap().value, Some(4));
        assert!(q.insert_many_with(&[]).await.unwrap().is_empty());
    }

    /// An entry's own `max_attempts` replaces the queue's: 1 dies after one
    /// failed delivery where the queue allows 10; 0 never dies where the
    /// queue allows 1.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entrys_max_attempts_replaces_the_queues() {
        let store = Store::start();
        let q: Q<String> = store.builder("attempts").max_attempts(1).build().await.unwrap();
        q.insert_with(&"never".into(), &InsertOptions::new().id("never").max_attempts(0)).await.unwrap();
        let strict: Q<String> = store.builder("attempts-10").max_attempts(10).build().await.unwrap();
        strict.insert_with(&"once".into(), &InsertOptions::new().id("once").max_attempts(1)).await.unwrap();
        let once = strict.take().await.unwrap();
        assert!(once.retry(Duration::ZERO).await.unwrap());
        assert!(strict.try_take().await.unwrap().is_none(), "{STORE}: delivered past its own limit");
        eventually("dead", || async { strict.stats().await.unwrap().dead == 1 }).await;
        for attempt in 1..=4 {
            let d = within("never dies", q.take()).await.unwrap();
            assert_eq!(d.attempt(), attempt);
            assert!(d.retry(Duration::ZERO).await.unwrap());
        }
        assert_eq!(q.stats().await.unwrap().dead, 0, "{STORE}");
    }

    /// Limits are kept in the store and read back; the default is listed
    /// under `*`; bad keys and zero periods are refused.
    #[tokio::test]
    async fn key_limits_are_set_listed_and_removed() {
        let store = Store::start();
        let q: Q<u32> = store.open("limits").await;
        let other: Q<u32> = store.open("limits").await;
        let rate = KeyLimit { concurrency: Some(3), rate: Some(Rate { max: 10, per: Duration::from_secs(1) }) };
        assert!(q.set_key_limit("b", rate).await.unwrap());
        assert!(q.set_key_limit("a", concurrency(1)).await.unwrap());
        assert!(!q.set_key_limit("a", concurrency(1)).await.unwrap());
        assert!(q.set_key_limit("a", concurrency(2)).await.unwrap());
        assert!(q.set_default_key_limit(KeyLimit::default()).await.unwrap());
        let mut limits = other.key_limits().await.unwrap();
        limits.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            limits,
            [("*".to_owned(), KeyLimit::default()), ("a".to_owned(), concurrency(2)), ("b".to_owned(), rate)],
            "{STORE}: every handle sees them"
        );
        assert!(q.remove_key_limit("*").await.unwrap());
        assert!(!q.remove_key_limit("*").await.unwrap());
        assert!(matches!(q.set_key_limit("", rate).await, Err(Error::InvalidId(_))));
        let zero = KeyLimit { concurrency: None, rate: Some(Rate { max: 1, per: Duration::ZERO }) };
        assert!(matches!(q.set_key_limit("z", zero).await, Err(Error::InvalidLimit(_))));
        assert_eq!(q.key_limits().await.unwrap().len(), 2);
    }

    /// What an entry's info, a delivery and a job say of its key and
    /// priority; a concurrency of 0 holds a key's entries until it changes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_and_jobs_show_their_key_and_priority() {
        let store = Store::start();
        let q: Q<u32> = store.open("shown").await;
        q.set_key_limit("held", concurrency(0)).await.unwrap();
        let options = InsertOptions::new().id("e").key("held").priority(-7);
        q.insert_with(&1, &options).await.unwrap();
        q.insert_with(&2, &InsertOptions::new().id("plain").delay(HOUR)).await.unwrap();
        let info = q.entry("e").await.unwrap().unwrap();
        assert_eq!((info.key.as_deref(), info.priority, info.state), (Some("held"), -7, EntryState::Due));
        let plain = q.entry("plain").await.unwrap().unwrap();
        assert_eq!((plain.key, plain.priority), (None, 0));
        let page = q.entries(EntryState::Due, None, 10).await.unwrap();
        assert_eq!(page.entries[0].key.as_deref(), Some("held"));
        assert!(q.try_take().await.unwrap().is_none(), "{STORE}: a held key's entry was taken");
        let seen: Arc<Mutex<Option<Shown>>> = Arc::default();
        let worker = Worker::builder(q.clone()).spawn({
            let seen = seen.clone();
            move |job: Job<u32>| {
                *seen.lock().unwrap() = Some((job.key().map(str::to_owned), job.priority()));
                async { Outcome::Done }
            }
        });
        tokio::time::sleep(ms(200)).await;
        assert!(seen.lock().unwrap().is_none(), "{STORE}: ran while held");
        q.remove_key_limit("held").await.unwrap();
        eventually("run once released", || async { seen.lock().unwrap().is_some() }).await;
        assert_eq!(*seen.lock().unwrap(), Some((Some("held".to_owned()), -7)));
        worker.shutdown(ms(100)).await;
    }
}

common::stores::on_durable_stores! {
    /// The child side of the processes test: a worker of 5 places whose
    /// handler prints when each run of a key's entry starts and ends (wall
    /// clock, ms); as the "victim", its first run never ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limited_worker_child() {
        let Some((role, _)) = child_role(STORE) else {
            return; // only as a child
        };
        let q: Q<u32> = Q::builder("processes")
            .in_parents_store()
            .lease(ms(1000))
            .poll_interval(ms(50))
            .build()
            .await
            .unwrap();
        // The victim runs one entry (its only place), and holds it.
        let places = if role == "victim" { 1 } else { 5 };
        // Each printed run on a line of its own (not after the harness's
        // "test ... "), so the parent reads every one.
        println!();
        let _worker = Worker::builder(q).concurrency(places).spawn(move |job: Job<u32>| {
            let victim = role == "victim";
            async move {
                let at = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
                println!("start {} {}", job.value(), at(wall()));
                if victim {
                    println!("holding {}", job.value());
                    tokio::time::sleep(HOUR).await;
                }
                tokio::time::sleep(ms(100)).await;
                println!("end {} {}", job.value(), at(wall()));
                Outcome::Done
            }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
    }

    /// 20 consumers in 4 processes run the 40 entries of a key whose
    /// concurrency is 2: never more than 2 at once, counted from what each
    /// handler printed, while a process killed (SIGKILL) in a run keeps its
    /// place until its lease runs out (not before), and then its entry runs
    /// elsewhere.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn processes_never_exceed_a_keys_concurrency_even_when_one_is_killed() {
        let store = Store::start();
        let q: Q<u32> = store.builder("processes").lease(ms(1000)).build().await.unwrap();
        q.set_key_limit("k", concurrency(2)).await.unwrap();
        let batch: Vec<(u32, InsertOptions)> = (0..40).map(|n| (n, key("k"))).collect();
        q.insert_many_with(&batch).await.unwrap();
        let mut victim = child_command(module_path!(), "limited_worker_child", "victim", &store)
            .spawn()
            .unwrap();
        // The victim takes its place first: wait until one entry is leased.
        eventually("the victim holds a place", || async { q.stats().await.unwrap().leased >= 1 }).await;
        tokio::time::sleep(ms(300)).await;
        // Its place is held until its lease, extended while it lived, runs
        // out: not before the lease end read now.
        let leased = q.entries(EntryState::Leased, None, 10).await.unwrap();
        let held_until = leased.entries[0].lease_until.unwrap();
        let killed_at = wall();
        victim.kill().unwrap();
        let (_, victim_out, _) = finish(&mut victim, WAIT);
        assert!(victim_out.contains("holding"), "{STORE}: the victim ran nothing:\n{victim_out}");
        let mut children: Vec<_> = (0..4)
            .map(|_| child_command(module_path!(), "limited_worker_child", "worker", &store).spawn().unwrap())
            .collect();
        eventually("every entry ran", || async {
            let stats = q.stats().await.unwrap();
            stats.pending + stats.due + stats.leased == 0
        })
        .await;
        let mut runs: Vec<(u128, i32)> = Vec::new();
        let mut out = String::new();
        for child in &mut children {
            child.kill().unwrap();
            out.push_str(&finish(child, WAIT).1);
        }
        let ms_of = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
        // The victim's run holds its place from its start until its lease,
        // extended while it lived, runs out.
        let victim_start: u128 = victim_out
            .lines()
            .find_map(|l| l.strip_prefix("start ")?.split(' ').nth(1)?.parse().ok())
            .unwrap();
        runs.push((victim_start, 1));
        runs.push((ms_of(held_until), -1));
        for line in out.lines() {
            let mut parts = line.split(' ');
            let (kind, at) = (parts.next(), parts.nth(1).and_then(|t| t.parse::<u128>().ok()));
            match (kind, at) {
                (Some("start"), Some(at)) => runs.push((at, 1)),
                (Some("end"), Some(at)) => runs.push((at, -1)),
                _ => {}
            }
        }
        let starts = runs.iter().filter(|r| r.1 == 1).count();
        assert!(starts > 40, "{STORE}: {starts} runs began (the victim's entry twice)");
        // Ends first on ties: a place freed and taken in one millisecond.
        runs.sort_by_key(|&(at, delta)| (at, delta));
        let (mut now, mut most) = (0, 0);
        for (_, delta) in &runs {
            now += delta;
            most = most.max(now);
        }
        assert!(most <= 2, "{STORE}: {most} runs of the key at once:\n{out}");
        let first_after_kill = runs.iter().filter(|r| r.1 == 1 && r.0 > ms_of(killed_at)).count();
        assert!(first_after_kill >= 40, "{STORE}");
    }
}
