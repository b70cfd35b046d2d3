#![cfg(feature = "redis-cluster")]
//! `RedisQueue` on a Redis Cluster (feature `redis-cluster`), started by
//! the test on loopback ports: queues on nodes other than the seed, spread
//! over the three primaries, with workers and schedules; a failover of the
//! primary that holds a queue while consumers wait; a migration of a
//! queue's slot while a worker runs.

mod common;

use common::redis_cluster::RedisCluster;
use common::redis_queue::{eventually, ms, next, within};
use punctual::MissedTicks;
use punctual::durable::{Job, Worker};
use punctual::redis::{RedisQueue, RedisStats};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn schedule_key(name: &str) -> String {
    format!("punctual:{{{name}}}:schedule")
}

async fn open(seeds: &[&str], name: &str, lease: Duration) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .cluster(seeds)
        .lease(lease)
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
        .expect("build on the cluster")
}

async fn until_completed(worker: &Worker, n: u64) {
    eventually(&format!("the worker completes {n}"), || {
        let done = worker.stats().completed >= n;
        async move { done }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_spread_over_the_masters_and_work_through_a_seed_elsewhere() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap();
    let names = cluster.names_on_each_master("spread");
    let seed_url = cluster.url(0);
    let seed = [seed_url.as_str()];
    let mut owners = HashSet::new();
    let mut queues = Vec::new();
    for name in &names {
        let slot = cluster.slot(&schedule_key(name));
        let owner = cluster.owner(slot);
        owners.insert(owner.port);
        let q = open(&seed, name, Duration::from_secs(10)).await;

        // Order, through redirects from the seed.
        q.insert_many(&[(3, ms(30)), (2, ms(20)), (1, ms(10))])
            .await
            .unwrap();
        for want in 1..=3 {
            let d = next(&q).await;
            assert_eq!(*d.value(), want, "queue {name}");
            assert!(d.ack().await.unwrap());
        }
        // A waiting consumer is woken by the announcement, which the
        // queue's primary publishes and the cluster forwards to the seed
        // (the poll interval is a minute).
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.take().await }
        });
        tokio::time::sleep(ms(200)).await;
        q.insert_with_id("woken", &4, Duration::ZERO).await.unwrap();
        let d = within("a take woken on a cluster", waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.id(), "woken");
        assert!(d.ack().await.unwrap());

        // The keys live on the slot's primary, and nowhere else.
        q.insert_with_id("kept", &5, Duration::from_secs(3600))
            .await
            .unwrap();
        for node in &cluster.nodes {
            let count: u64 = node
                .cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
                .parse()
                .unwrap();
            assert_eq!(count > 0, node.port() == owner.port, "queue {name}");
        }
        assert!(q.remove("kept").await.unwrap());
        queues.push(q);
    }
    assert_eq!(owners.len(), 3, "one queue per primary");
    assert!(
        owners
            .iter()
            .filter(|&&p| p != cluster.nodes[0].port())
            .count()
            >= 2
    );

    // A worker on each queue, and a schedule on one of them.
    let ticks = Arc::new(Mutex::new(0u32));
    let mut workers = Vec::new();
    for q in &queues {
        let values: Vec<(u64, Duration)> = (0..30).map(|i| (i, ms(i))).collect();
        q.insert_many(&values).await.unwrap();
        let ticks = Arc::clone(&ticks);
        workers.push(
            Worker::builder(q.clone())
                .concurrency(4)
                .spawn(move |job: Job<u64>| {
                    if job.schedule() == Some("every-100ms") {
                        *ticks.lock().unwrap() += 1;
                    }
                    async { Ok::<(), String>(()) }
                }),
        );
    }
    queues[1]
        .schedule_every("every-100ms", ms(100), MissedTicks::Skip, &9)
        .await
        .unwrap();
    for worker in &workers {
        until_completed(worker, 30).await;
    }
    eventually("the schedule ticks three times", || {
        let n = *ticks.lock().unwrap();
        async move { n >= 3 }
    })
    .await;
    assert!(queues[1].unschedule("every-100ms").await.unwrap());
    for worker in workers {
        worker.shutdown(ms(200)).await;
    }
    for q in &queues {
        assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    }

    // An ACL user on every node, with the documented rules: `cluster|slots`
    // is what a cluster adds, and `build()` names it when it is missing.
    let rules = "~punctual:* &punctual:* -@all +evalsha +script|load +time +type +del +get \
                 +set +incr +hset +hget +hmget +hdel +hexists +hgetall +zadd +zrem +zrange \
                 +zrangebyscore +zscore +zcard +zcount +publish +subscribe +ping +info";
    for node in &cluster.nodes {
        for (user, extra) in [("full", "+cluster|slots"), ("noslots", "")] {
            let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
            args.extend(rules.split_whitespace());
            if !extra.is_empty() {
                args.push(extra);
            }
            assert_eq!(node.cli(&args), "OK");
        }
    }
    let port = cluster.nodes[0].port();
    let user_seed = format!("redis://full:pw@127.0.0.1:{port}/");
    let q = open(&[user_seed.as_str()], &names[2], Duration::from_secs(10)).await;
    q.insert_with_id("as-user", &1, Duration::ZERO)
        .await
        .unwrap();
    let d = next(&q).await;
    assert_eq!(d.id(), "as-user");
    assert!(d.ack().await.unwrap());
    let no_slots = format!("redis://noslots:pw@127.0.0.1:{port}/");
    let err = RedisQueue::<u64>::builder(&names[2])
        .cluster(&[no_slots.as_str()])
        .build()
        .await
        .expect_err("a user without cluster|slots");
    assert!(err.to_string().contains("cluster|slots"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_of_the_queues_primary_loses_nothing_acked_and_takes_ride_through() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .unwrap();
    let name = cluster.names_on_each_master("failover").remove(1);
    let slot = cluster.slot(&schedule_key(&name));
    let primary = cluster.owner(slot);
    let replica = cluster
        .topology(0)
        .into_iter()
        .find(|n| n.replica_of.as_deref() == Some(&primary.id))
        .expect("the primary has a replica");
    // Seed on a node that plays no part in the failover.
    let seed_url = cluster
        .nodes
        .iter()
        .find(|n| n.port() != primary.port && n.port() != replica.port)
        .unwrap()
        .url();
    let seed = [seed_url.as_str()];
    let q = open(&seed, &name, Duration::from_secs(2)).await;

    const TOTAL: u64 = 120;
    let acked = Arc::new(Mutex::new(HashSet::<String>::new()));
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let q = q.clone();
        let acked = Arc::clone(&acked);
        consumers.push(tokio::spawn(async move {
            while (acked.lock().unwrap().len() as u64) < TOTAL {
                let Ok(Some(d)) = q.take_timeout(ms(500)).await else {
                    continue;
                };
                let id = d.id().to_owned();
                assert!(
                    !acked.lock().unwrap().contains(&id),
                    "{id} came back after its ack"
                );
                if let Ok(true) = d.ack().await {
                    acked.lock().unwrap().insert(id);
                }
            }
        }));
    }
    let insert = |i: u64| {
        let q = q.clone();
        async move {
            // Retried until Ok: an insert with an id never duplicates.
            eventually("an insert", || {
                let q = q.clone();
                async move {
                    match q.insert_with_id(&format!("e{i}"), &i, ms(i % 7 * 50)).await {
                        Ok(_) => true,
                        Err(e) => {
                            eprintln!("insert e{i}: {e}");
                            false
                        }
                    }
                }
            })
            .await;
        }
    };
    for i in 0..TOTAL / 2 {
        insert(i).await;
    }
    // The replica takes over (CLUSTER FAILOVER waits until it has caught
    // up, then swaps the roles) while consumers wait and take.
    assert_eq!(
        cluster.node(replica.port).cli(&["CLUSTER", "FAILOVER"]),
        "OK"
    );
    for i in TOTAL / 2..TOTAL {
        insert(i).await;
        tokio::time::sleep(ms(5)).await;
    }
    let cluster = Arc::new(cluster);
    let c = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || {
        c.wait_until("the replica serves the slot", |c| {
            c.owner(slot).port == replica.port
        })
    })
    .await
    .unwrap();
    for consumer in consumers {
        within("the consumers ack every entry", consumer)
            .await
            .unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let want: HashSet<String> = (0..TOTAL).map(|i| format!("e{i}")).collect();
    assert_eq!(acked, want);
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_under_a_running_worker_acks_every_entry_exactly_once() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
            .await
            .unwrap(),
    );
    let names = cluster.names_on_each_master("migrate");
    let name = names[0].clone();
    let slot = cluster.slot(&schedule_key(&name));
    let source = cluster.owner(slot);
    let target = cluster
        .topology(0)
        .into_iter()
        .find(|n| n.master && n.id != source.id)
        .unwrap();
    let seed_url = cluster.url(0);
    let q = open(&[seed_url.as_str()], &name, Duration::from_secs(20)).await;

    const TOTAL: u64 = 300;
    let runs = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
    let values: Vec<(u64, Duration)> = (0..TOTAL).map(|i| (i, ms(i * 4))).collect();
    q.insert_many(&values).await.unwrap();
    let worker = Worker::builder(q.clone()).concurrency(4).spawn({
        let runs = Arc::clone(&runs);
        move |job: Job<u64>| {
            *runs.lock().unwrap().entry(*job.value()).or_default() += 1;
            async {
                tokio::time::sleep(ms(2)).await;
                Ok::<(), String>(())
            }
        }
    });
    eventually("the worker is under way", || {
        let started = worker.stats().completed > 20;
        async move { started }
    })
    .await;

    // The migration, as `redis-cli --cluster reshard` does it.
    let c = Arc::clone(&cluster);
    let (source_id, target_id, target_port) = (source.id.clone(), target.id.clone(), target.port);
    let moved = tokio::task::spawn_blocking(move || {
        let s = slot.to_string();
        let src = c.node(source.port);
        let dst = c.node(target_port);
        assert_eq!(
            dst.cli(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &source_id]),
            "OK"
        );
        assert_eq!(
            src.cli(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &target_id]),
            "OK"
        );
        let mut moved = 0;
        loop {
            let keys = src.cli(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = target_port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(&keys);
            assert_eq!(src.cli(&args), "OK");
            moved += keys.len();
        }
        for node in &c.nodes {
            let _ = node.cli(&["CLUSTER", "SETSLOT", &s, "NODE", &target_id]);
        }
        moved
    })
    .await
    .unwrap();
    assert!(moved > 0, "the queue's keys moved");
    let c = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || {
        c.wait_until("the target serves the slot", |c| {
            c.owner(slot).port == target_port
        })
    })
    .await
    .unwrap();

    until_completed(&worker, TOTAL).await;
    let stats = worker.shutdown(ms(200)).await;
    assert_eq!(stats.completed, TOTAL);
    assert_eq!(stats.lost, 0);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, TOTAL);
    assert!(runs.values().all(|&n| n == 1), "ran twice: {runs:?}");
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());
    // The queue's keys (its sequence counter at least) are on the target.
    let keys_on_target: u64 = cluster
        .node(target_port)
        .cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
        .parse()
        .unwrap();
    assert!(keys_on_target > 0);
}

/// Keys with limits, priorities, unique windows and a replace on a
/// cluster, through a seed on another primary: the rules hold, and every
/// key of the queue (the five that options use included) lies in the
/// queue's slot, on its primary, and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_keep_every_key_of_the_queue_in_its_slot() {
    use punctual::durable::{InsertOptions, KeyLimit, Rate};
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap();
    let names = cluster.names_on_each_master("options");
    let name = &names[1];
    let slot = cluster.slot(&schedule_key(name));
    let owner = cluster.owner(slot);
    let seed_url = cluster.url(0);
    let q = open(&[seed_url.as_str()], name, Duration::from_secs(10)).await;

    let one = KeyLimit {
        concurrency: Some(1),
        rate: Some(Rate {
            max: 100,
            per: Duration::from_secs(60),
        }),
    };
    assert!(q.set_key_limit("tenant-a", one).await.unwrap());
    assert!(
        q.set_default_key_limit(KeyLimit {
            concurrency: Some(2),
            rate: None
        })
        .await
        .unwrap()
    );
    let mut batch: Vec<(u64, InsertOptions)> = (0..5)
        .map(|n| (n, InsertOptions::new().key("tenant-a")))
        .collect();
    batch.push((10, InsertOptions::new().key("tenant-b").priority(5)));
    batch.push((20, InsertOptions::new()));
    batch.push((
        30,
        InsertOptions::new()
            .id("digest")
            .unique_for(Duration::from_secs(3600)),
    ));
    batch.push((
        40,
        InsertOptions::new()
            .id("later")
            .delay(Duration::from_secs(3600))
            .replace(true),
    ));
    let ids = q.insert_many_with(&batch).await.unwrap();
    assert!(ids.iter().all(Option::is_some));
    let debounced = InsertOptions::new()
        .id("later")
        .delay(Duration::from_secs(7200))
        .replace(true)
        .key("x");
    assert_eq!(
        q.insert_with(&41, &debounced).await.unwrap().as_deref(),
        Some("later")
    );

    // The highest priority first, one of tenant-a (its concurrency), the
    // keyless ones.
    let taken = q.take_many(10).await.unwrap();
    let values: Vec<u64> = taken.iter().map(|d| *d.value()).collect();
    assert_eq!(values, [10, 0, 20, 30], "queue {name}");
    assert_eq!((taken[0].key(), taken[0].priority()), (Some("tenant-b"), 5));
    for d in taken {
        assert!(d.ack().await.unwrap());
    }
    assert!(
        q.insert_with(&31, &InsertOptions::new().id("digest"))
            .await
            .unwrap()
            .is_none(),
        "its window is open"
    );
    let next = q.take_many(10).await.unwrap();
    assert_eq!(next.iter().map(|d| *d.value()).collect::<Vec<_>>(), [1]);

    // Every key of the queue, on its primary and in its slot: held (the
    // lease), limits, ready, special, unique among them.
    let pattern = format!("punctual:{{{name}}}:*");
    let keys = cluster.node(owner.port).cli(&["KEYS", &pattern]);
    let keys: HashSet<&str> = keys.lines().collect();
    for suffix in [
        "entries", "leases", "seq", "requests", "special", "ready", "held", "limits", "unique",
    ] {
        assert!(
            keys.contains(format!("punctual:{{{name}}}:{suffix}").as_str()),
            "{suffix} missing: {keys:?}"
        );
    }
    for key in &keys {
        assert_eq!(cluster.slot(key), slot, "{key} lies in another slot");
    }
    for node in &cluster.nodes {
        if node.port() != owner.port {
            assert_eq!(
                node.cli(&["KEYS", &pattern]),
                "",
                "keys of {name} on another node"
            );
        }
    }
    for d in next {
        assert!(d.ack().await.unwrap());
    }
    q.purge().await.unwrap();
    assert_eq!(cluster.node(owner.port).cli(&["KEYS", &pattern]), "");
}
