//! Workload 10 (feature `redis-cluster`): the durable `Worker` draining
//! three queues on a 3-primary Redis Cluster, one queue per primary, against
//! the same three queues on one server, in the same run.
//!
//! Each side inserts `N` entries due at once into each of its three
//! queues, then starts one worker per queue (concurrency 8) and times the
//! aggregate drain until all `3 N` are acked. The cost per job is the CPU
//! time of this process plus that of every server (`INFO cpu`) over the
//! drain, divided by `3 N`: the bar is that the cluster costs at most 1.3x
//! the single server per job. On this machine every server and the client
//! share the same cores, so the wall-clock drain says little about a
//! cluster's scaling; the CPU cost per job is what compares.

use crate::redis_cluster::RedisCluster;
use crate::{client_cpu, fmt_num};
use punctual::durable::{Job, Worker};
use punctual::redis::RedisQueue;
use punctual::redis::client as rc;
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;

/// Entries per queue.
const N: u64 = 10_000;
const QUEUES: usize = 3;
const CONCURRENCY: usize = 8;
const RUNS: usize = 5;

struct Run {
    jobs_per_s: f64,
    cpu_us_per_job: f64,
    server_cpu_us_per_job: f64,
    /// Time inside commands (commandstats): wall time, so a server
    /// preempted mid-command on a shared core counts the wait too.
    command_us_per_job: f64,
    commands_per_job: f64,
}

async fn info(url: &str, section: &str) -> String {
    let client = rc::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("info connection");
    rc::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .expect("INFO")
}

async fn reset_stats(urls: &[String]) {
    for url in urls {
        let client = rc::Client::open(url.as_str()).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let _: () = rc::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .expect("CONFIG RESETSTAT");
    }
}

/// Calls and µs inside commands, summed over the servers at `urls`.
async fn commands(urls: &[String]) -> (f64, f64) {
    let (mut calls, mut usec) = (0.0, 0.0);
    for url in urls {
        for line in info(url, "commandstats").await.lines() {
            let Some((_, stats)) = line.split_once(':') else {
                continue;
            };
            for field in stats.split(',') {
                match field.split_once('=') {
                    Some(("calls", n)) => calls += n.parse::<f64>().unwrap_or(0.0),
                    Some(("usec", n)) => usec += n.parse::<f64>().unwrap_or(0.0),
                    _ => {}
                }
            }
        }
    }
    (calls, usec)
}

/// User + system CPU seconds of the servers at `urls`.
async fn servers_cpu(urls: &[String]) -> f64 {
    let mut total = 0.0;
    for url in urls {
        let client = rc::Client::open(url.as_str()).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("info connection");
        let info: String = rc::cmd("INFO")
            .arg("cpu")
            .query_async(&mut conn)
            .await
            .expect("INFO cpu");
        total += info
            .lines()
            .filter_map(|line| {
                let (key, value) = line.split_once(':')?;
                matches!(key, "used_cpu_sys" | "used_cpu_user")
                    .then(|| value.trim().parse::<f64>().ok())
                    .flatten()
            })
            .sum::<f64>();
    }
    total
}

/// Fills `queues`, drains them with one worker each; `servers` are every
/// server's URL, for their CPU time.
async fn drain(queues: Vec<RedisQueue<u64>>, servers: &[String]) -> Run {
    for queue in &queues {
        queue.purge().await.expect("purge");
        let entries: Vec<(u64, Duration)> = (0..N).map(|n| (n, Duration::ZERO)).collect();
        for chunk in entries.chunks(500) {
            queue.insert_many(chunk).await.expect("insert_many");
        }
    }
    let total = N * queues.len() as u64;
    reset_stats(servers).await;
    let server_before = servers_cpu(servers).await;
    let client_before = client_cpu();
    let start = Instant::now();
    let workers: Vec<Worker> = queues
        .iter()
        .map(|queue| {
            Worker::builder(queue.clone())
                .concurrency(CONCURRENCY)
                .spawn(|_job: Job<u64>| async { Ok::<(), Infallible>(()) })
        })
        .collect();
    tokio::time::timeout(crate::WORKLOAD_TIMEOUT, async {
        while workers.iter().map(|w| w.stats().completed).sum::<u64>() < total {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the workers drain in time");
    let took = start.elapsed();
    let client_after = client_cpu();
    let server_cpu = servers_cpu(servers).await - server_before;
    let (calls, usec) = commands(servers).await;
    for worker in workers {
        let stats = worker.shutdown(Duration::from_secs(1)).await;
        assert_eq!(stats.failed + stats.lost, 0, "{stats:?}");
    }
    for queue in &queues {
        let left = queue.stats().await.expect("stats");
        assert_eq!(left, Default::default(), "left {left:?}");
    }
    let client = client_before
        .zip(client_after)
        .map_or(0.0, |(before, after)| (after - before).as_secs_f64());
    Run {
        jobs_per_s: total as f64 / took.as_secs_f64(),
        cpu_us_per_job: (client + server_cpu) * 1e6 / total as f64,
        server_cpu_us_per_job: server_cpu * 1e6 / total as f64,
        command_us_per_job: usec / total as f64,
        commands_per_job: calls / total as f64,
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

pub(crate) async fn bench(single_url: &str) {
    println!("\n10. Worker on a 3-primary cluster (one queue per primary) vs one server, 3 queues");
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    let cluster_urls: Vec<String> = (0..cluster.nodes.len()).map(|i| cluster.url(i)).collect();
    let seed = cluster_urls[0].clone();
    let names = cluster.names_on_each_master("bench");
    let (mut single, mut clustered) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        let mut queues = Vec::new();
        for k in 0..QUEUES {
            queues.push(
                RedisQueue::builder(&format!("csingle-{run}-{k}"))
                    .url(single_url)
                    .build()
                    .await
                    .expect("single-server queue"),
            );
        }
        let s = drain(queues, &[single_url.to_owned()]).await;
        let mut queues = Vec::new();
        for name in &names {
            queues.push(
                RedisQueue::builder(name)
                    .cluster(&[seed.as_str()])
                    .build()
                    .await
                    .expect("cluster queue"),
            );
        }
        let c = drain(queues, &cluster_urls).await;
        println!(
            "  run {run}: single {} jobs/s, {} CPU µs/job; cluster {} jobs/s, {} CPU µs/job",
            fmt_num(s.jobs_per_s, 0),
            fmt_num(s.cpu_us_per_job, 1),
            fmt_num(c.jobs_per_s, 0),
            fmt_num(c.cpu_us_per_job, 1),
        );
        single.push(s);
        clustered.push(c);
    }
    let med = |runs: &[Run], f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let ratio = med(&clustered, |r| r.cpu_us_per_job) / med(&single, |r| r.cpu_us_per_job);
    println!(
        "\n## Worker drain, 3 queues x {N} due at once, concurrency {CONCURRENCY} each (median of {RUNS})\n"
    );
    println!("| | one server | 3-primary cluster | cluster / one server |");
    println!("|---|---:|---:|---:|");
    for (name, f, decimals) in [
        (
            "aggregate jobs/s",
            (|r: &Run| r.jobs_per_s) as fn(&Run) -> f64,
            0,
        ),
        (
            "CPU µs/job (client + servers)",
            |r: &Run| r.cpu_us_per_job,
            1,
        ),
        (
            "server CPU µs/job (all nodes)",
            |r: &Run| r.server_cpu_us_per_job,
            1,
        ),
        (
            "µs/job inside commands (commandstats; wall time, so preemption counts)",
            |r: &Run| r.command_us_per_job,
            1,
        ),
        ("server commands/job", |r: &Run| r.commands_per_job, 2),
    ] {
        let (s, c) = (med(&single, f), med(&clustered, f));
        println!(
            "| {name} | {} | {} | {:.2}x |",
            fmt_num(s, decimals),
            fmt_num(c, decimals),
            c / s
        );
    }
    println!(
        "\ncost per job, cluster / one server: {ratio:.2}x (bar: at most 1.30x): {}",
        if ratio <= 1.3 { "met" } else { "NOT met" }
    );
}
