//! The durable `Worker`'s drain on Redis with keys and key limits, beside
//! the plain drain in the same run (a queue whose entries have
//! keys, each key limited, against one without).
//!
//! Each round, on a fresh queue of one local redis-server (persistence
//! off): `LIMITS_N` (50,000) entries due at once, put in before the clock
//! starts, drained by a `Worker` with `concurrency(8)` and a handler that
//! returns at once, in three variants, in turns:
//!
//! - `plain`: `insert_many`, no options (the path of a queue without keys);
//! - `keys`: `insert_many_with`, the entries spread over `LIMITS_KEYS`
//!   (100) keys round-robin, no limits;
//! - `limited`: the same keys, each with its own limit of concurrency
//!   `LIMITS_CONCURRENCY` (2).
//!
//! Prints one line per variant and round, `<variant> <jobs/s>`, then the
//! medians and their ratios to `plain`. With `LIMITS_STATS=1`, each line
//! also gives the server's commands per job during the drain (scripts and
//! the commands they ran, from `INFO commandstats`), the busiest first.
//!
//! `cargo bench --features redis --bench limits`; `LIMITS_RUNS` (5);
//! `LIMITS_VARIANTS` (`plain,keys,limited`) picks and orders the variants
//! (`plain` alone builds and runs at commits before keys existed in the
//! Redis store, for a drain across commits).

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;

mod support;

use std::time::Duration;

use punctual::durable::{InsertOptions, KeyLimit, Worker};
use punctual::redis::RedisQueue;
use redis_server::RedisServer;
use support::{acked, env_u64};
use tokio::time::Instant;

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Plain,
    Keys,
    Limited,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Keys => "keys",
            Variant::Limited => "limited",
        }
    }
}

/// The server's calls and µs per command since its last `CONFIG
/// RESETSTAT`, the most called first.
fn command_calls(server: &RedisServer) -> Vec<(String, u64, u64)> {
    let mut calls: Vec<(String, u64, u64)> = server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let mut fields = rest.split(',');
            let calls = fields.next()?.parse().ok()?;
            let usec = fields.next()?.strip_prefix("usec=")?.parse().ok()?;
            Some((name.to_owned(), calls, usec))
        })
        .collect();
    calls.sort_by_key(|c| std::cmp::Reverse(c.1));
    calls
}

async fn drain(server: &RedisServer, name: &str, variant: Variant, n: u64) -> (f64, String) {
    let url = server.url();
    let url = url.as_str();
    let q: RedisQueue<u64> = RedisQueue::builder(name)
        .url(url)
        .build()
        .await
        .expect("connect");
    q.purge().await.expect("purge");
    let keys = env_u64("LIMITS_KEYS", 100);
    if variant == Variant::Limited {
        let limit = KeyLimit {
            concurrency: Some(u32::try_from(env_u64("LIMITS_CONCURRENCY", 2)).unwrap()),
            rate: None,
        };
        for k in 0..keys {
            q.set_key_limit(&format!("k{k}"), limit)
                .await
                .expect("set_key_limit");
        }
    }
    if variant == Variant::Plain {
        let all: Vec<(u64, Duration)> = (0..n).map(|i| (i, Duration::ZERO)).collect();
        for chunk in all.chunks(1000) {
            q.insert_many(chunk).await.expect("insert_many");
        }
    } else {
        let all: Vec<(u64, InsertOptions)> = (0..n)
            .map(|i| (i, InsertOptions::new().key(&format!("k{}", i % keys))))
            .collect();
        for chunk in all.chunks(1000) {
            q.insert_many_with(chunk).await.expect("insert_many_with");
        }
    }
    let stats = std::env::var("LIMITS_STATS").is_ok();
    if stats {
        server.cli(&["CONFIG", "RESETSTAT"]);
    }
    let start = Instant::now();
    let worker = Worker::builder(q.clone())
        .concurrency(8)
        .spawn(|_job| async { Ok::<(), String>(()) });
    let took = acked(&worker, n, start).await;
    let mut per_job = String::new();
    if stats {
        let calls = command_calls(server);
        let total: u64 = calls.iter().map(|c| c.1).sum();
        // Scripts' µs include the commands they ran.
        let scripts: u64 = calls.iter().filter(|c| c.0 == "evalsha").map(|c| c.2).sum();
        per_job = format!(
            " {:.2} commands/job, scripts {:.1} µs/job:",
            total as f64 / n as f64,
            scripts as f64 / n as f64
        );
        for (name, count, _) in calls.iter().take(12) {
            per_job.push_str(&format!(" {name} {:.2}", *count as f64 / n as f64));
        }
    }
    worker.shutdown(Duration::from_secs(1)).await;
    q.purge().await.expect("purge");
    (n as f64 / took.as_secs_f64(), per_job)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = RedisServer::start_in_memory();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let variants: Vec<Variant> = std::env::var("LIMITS_VARIANTS")
        .unwrap_or_else(|_| "plain,keys,limited".into())
        .split(',')
        .map(|v| match v {
            "plain" => Variant::Plain,
            "keys" => Variant::Keys,
            "limited" => Variant::Limited,
            other => panic!("no variant {other}"),
        })
        .collect();
    let n = env_u64("LIMITS_N", 50_000);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    runtime.block_on(async {
        for run in 0..env_u64("LIMITS_RUNS", 5) {
            for (i, &variant) in variants.iter().enumerate() {
                let (rate, per_job) = drain(&server, &format!("limits-{run}"), variant, n).await;
                println!("{} {rate:.0}{per_job}", variant.name());
                rates[i].push(rate);
            }
        }
    });
    let medians: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
    let plain = variants
        .iter()
        .position(|&v| v == Variant::Plain)
        .map(|i| medians[i]);
    for (variant, m) in variants.iter().zip(&medians) {
        match plain {
            Some(plain) => println!("median {} {m:.0} ({:.2}x plain)", variant.name(), m / plain),
            None => println!("median {} {m:.0}", variant.name()),
        }
    }
}
