//! Helpers shared by the `RedisQueue` integration tests (`tests/redis_*.rs`).
//!
//! Times are real: the Redis server's clock decides what is due and when a
//! lease runs out, so waits are bounded by a generous [`WAIT`] and time
//! checks have [`SLACK`].

use super::redis_server::RedisServer;
use punctual::redis::{Delivery, RedisQueue, RedisQueueBuilder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::io::Read;
use std::process::{Child, ExitStatus};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Bound for anything that is expected to happen (never reached when green).
pub const WAIT: Duration = Duration::from_secs(10);
/// The lease of the queues that [`builder`] and [`open`] make.
pub const LEASE: Duration = Duration::from_millis(300);
/// The poll interval of the queues that [`builder`] and [`open`] make.
pub const POLL: Duration = Duration::from_millis(50);
/// A delay no test reaches: the entry stays pending.
pub const HOUR: Duration = Duration::from_secs(3600);
/// Slack on time checks: the server keeps milliseconds, rounded down.
pub const SLACK: Duration = Duration::from_millis(5);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The wall clock of this machine, which is also the Redis server's clock.
#[allow(clippy::disallowed_methods)] // Redis decides with the real clock
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// A builder for queue `name` on `server`, with [`LEASE`] and [`POLL`].
pub fn builder<T>(server: &RedisServer, name: &str) -> RedisQueueBuilder<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    RedisQueue::builder(name)
        .url(&server.url())
        .lease(LEASE)
        .poll_interval(POLL)
}

/// Queue `name` on `server`, as [`builder`] configures it.
pub async fn open<T>(server: &RedisServer, name: &str) -> RedisQueue<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    builder(server, name).build().await.expect("connect")
}

/// Queue `name` of `u64` on `server` with the given lease and max attempts,
/// polling every 50 ms.
pub async fn queue(
    server: &RedisServer,
    name: &str,
    lease: Duration,
    max_attempts: u32,
) -> RedisQueue<u64> {
    RedisQueue::builder(name)
        .url(&server.url())
        .lease(lease)
        .max_attempts(max_attempts)
        .poll_interval(ms(50))
        .build()
        .await
        .expect("connect")
}

/// `fut`, or a panic naming `what` if it takes longer than `WAIT`.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {WAIT:?}"))
}

/// The next delivery, or a panic if none comes within `WAIT`.
pub async fn next<T>(q: &RedisQueue<T>) -> Delivery<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    q.take_timeout(WAIT)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no delivery within {WAIT:?}"))
}

/// Polls `check` until it holds; panics naming `what` after `WAIT`.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < give_up,
            "{what}: not true after {WAIT:?}"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// Asserts `lo - SLACK <= t <= hi + SLACK`.
pub fn assert_between(t: SystemTime, lo: SystemTime, hi: SystemTime, what: &str) {
    assert!(
        t + SLACK >= lo && t <= hi + SLACK,
        "{what}: {t:?} not within [{lo:?}, {hi:?}]"
    );
}

/// Waits (at most `patience`) for `child` to exit; its status, stdout and
/// stderr. Kills it and panics if it takes longer.
pub fn finish(child: &mut Child, patience: Duration) -> (ExitStatus, String, String) {
    fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    }
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > patience {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "child still running after {patience:?}:\n{}\n{}",
                stdout.join().unwrap(),
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, stdout.join().unwrap(), stderr.join().unwrap())
}

/// The SHA1 of the claim script as `src/redis/scripts.rs` assembles it (a
/// proxy matches a claim by it: a request carries the script's SHA only).
pub fn claim_sha() -> String {
    lua_sha(
        "claim",
        &[
            "now_ms", "index", "place", "held", "ticks", "finish", "requests",
        ],
    )
}

/// The SHA1 of script `name` as `src/redis/scripts.rs`'s `lua!` composes
/// it: the prelude, then `libs` (under `lib/`), then the script.
pub fn lua_sha(name: &str, libs: &[&str]) -> String {
    let mut files = vec!["lib/prelude.lua".to_owned()];
    files.extend(libs.iter().map(|l| format!("lib/{l}.lua")));
    files.push(format!("{name}.lua"));
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    script_sha(&files)
}

/// The SHA1 of the script made of `files` (under `src/redis/scripts/`), in
/// order, as `src/redis/scripts.rs` puts them together.
pub fn script_sha(files: &[&str]) -> String {
    use std::io::Write;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/redis/scripts/");
    let mut text = Vec::new();
    for f in files {
        text.extend(std::fs::read(format!("{dir}{f}")).unwrap());
    }
    let mut sha = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sha.stdin.take().unwrap().write_all(&text).unwrap();
    let out = sha.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..40].to_owned()
}
