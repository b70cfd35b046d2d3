//! What a Redis write costs the server, per call, on a single node: the
//! server's own time per `EVALSHA` (`INFO commandstats`, reset before each
//! phase), which leaves out the client, the network and the runtime, so a
//! script's cost can be compared across commits within noise. Written to
//! build at older commits too (it uses only what the crate has had since
//! the worker came): build this file at the commit before a change and at
//! the change, and run the two binaries in turns.
//!
//! Phases, on a fresh queue of a fresh local redis-server (persistence
//! off), each printed as `<phase> <µs per script call> <script calls> <µs
//! per request>` (a script may carry many requests: inserts made together,
//! finishes riding on a claim):
//! - `insert`: `REQUEST_COST_N` (20,000) `insert` calls, 64 in flight;
//! - `drain`: a `Worker` with `concurrency(8)` and a handler that returns
//!   at once runs them all (claims with finishes, and finishes);
//! - `remove`: as many `insert`s, then one `remove` each (the removes only
//!   are counted).
//!
//! `cargo bench --features redis --bench request_cost`; `REQUEST_COST_RUNS`
//! (default 3).

#[allow(dead_code)] // the tests use the rest of it
#[path = "../tests/common/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use futures::{StreamExt, stream};
use punctual::durable::Worker;
use punctual::redis::RedisQueue;
use redis_server::RedisServer;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `(µs per call, calls)` of `EVALSHA` since the last reset, then resets.
fn script_cost(server: &RedisServer) -> (f64, u64) {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "INFO", "commandstats"])
        .output()
        .expect("redis-cli");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or("cmdstat_evalsha:calls=0,usec_per_call=0");
    let field = |name: &str| -> f64 {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let cost = (field("usec_per_call"), field("calls") as u64);
    reset(server);
    cost
}

fn reset(server: &RedisServer) {
    std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "CONFIG", "RESETSTAT"])
        .output()
        .expect("redis-cli");
}

async fn run(server: &RedisServer, run: u64, n: u64) {
    let q: RedisQueue<u64> = RedisQueue::builder(&format!("cost-{run}"))
        .url(&server.url())
        .build()
        .await
        .expect("connect");
    q.purge().await.expect("purge");
    reset(server);

    stream::iter(0..n)
        .for_each_concurrent(64, |i| {
            let q = q.clone();
            async move {
                q.insert(&i, Duration::ZERO).await.expect("insert");
            }
        })
        .await;
    let (us, calls) = script_cost(server);
    println!("insert {us:.2} {calls} {:.2}", us * calls as f64 / n as f64);

    let worker = Worker::builder(q.clone())
        .concurrency(8)
        .spawn(|_job| async { Ok::<(), String>(()) });
    while worker.stats().completed < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    worker.shutdown(Duration::from_secs(1)).await;
    let (us, calls) = script_cost(server);
    println!("drain {us:.2} {calls} {:.2}", us * calls as f64 / n as f64);

    let mut ids = Vec::with_capacity(n as usize);
    for i in 0..n {
        ids.push(
            q.insert(&i, Duration::from_secs(3600))
                .await
                .expect("insert"),
        );
    }
    reset(server);
    stream::iter(ids)
        .for_each_concurrent(64, |id| {
            let q = q.clone();
            async move {
                assert!(q.remove(&id).await.expect("remove"));
            }
        })
        .await;
    let (us, calls) = script_cost(server);
    println!("remove {us:.2} {calls} {:.2}", us * calls as f64 / n as f64);
    q.purge().await.expect("purge");
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
    runtime.block_on(async {
        for r in 0..env("REQUEST_COST_RUNS", 3) {
            run(&server, r, env("REQUEST_COST_N", 20_000)).await;
        }
    });
}
