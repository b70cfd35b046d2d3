//! Bounded waits on real time, and child processes that open their
//! parent's queue, for test bodies that run on every durable store
//! (`on_every_store!`), whatever cargo features are on.
//!
//! The store's clock decides what is due and when a lease runs out; the
//! servers run on this machine, so [`wall`] reads their clock. Waits are
//! bounded by a generous [`WAIT`] (never reached when green).
//!
//! A child is the test binary run again on one test (`--exact`, see
//! [`test_name`]) with the env vars of [`ChildEnv::child_env`]: the store's
//! kind, its URL and (PostgreSQL) the parent's schema. The child test returns
//! at once unless [`child_role`] finds it is a child of its own store; it
//! opens the parent's queues with [`OpenInParent::in_parents_store`].

use std::future::Future;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Bound for anything that is expected to happen (never reached when green).
pub const WAIT: Duration = Duration::from_secs(10);
/// A delay no test reaches: the entry stays pending.
pub const HOUR: Duration = Duration::from_secs(3600);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The wall clock of this machine, which is also the store server's clock.
#[allow(clippy::disallowed_methods)] // the store decides with the real clock
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// `fut`, or a panic naming `what` if it takes longer than `WAIT`.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {WAIT:?}"))
}

/// Polls `check` until it holds; panics naming `what` after `WAIT`.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < give_up, "{what}: not true after {WAIT:?}");
        tokio::time::sleep(ms(20)).await;
    }
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

/// The name `--exact` selects for test `name` of the module at `module`
/// (a `module_path!()`, whose first segment is the test binary's crate).
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// This test binary, to run test `test` of module `module` (a
/// `module_path!()`) alone as a child with role `role` on `store`; stdout and
/// stderr piped (read them with [`finish`]).
pub fn child_command(module: &str, test: &str, role: &str, store: &impl ChildEnv) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            &test_name(module, test),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, role)
        .envs(store.child_env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The child's role (each test file names its own).
pub const CHILD: &str = "PUNCTUAL_TEST_CHILD";
/// The store the child runs on: the `STORE` of its `on_every_store!` module.
pub const CHILD_STORE: &str = "PUNCTUAL_TEST_STORE";
/// The URL of the parent's store.
pub const CHILD_URL: &str = "PUNCTUAL_TEST_STORE_URL";
/// PostgreSQL: the schema of the parent's queues.
pub const CHILD_SCHEMA: &str = "PUNCTUAL_TEST_PG_SCHEMA";

/// The env vars a child needs to open the parent's queues.
pub trait ChildEnv {
    fn child_env(&self) -> Vec<(&'static str, String)>;
}

#[cfg(feature = "redis")]
impl ChildEnv for super::stores::redis::Store {
    fn child_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (CHILD_STORE, super::stores::redis::STORE.to_owned()),
            (CHILD_URL, self.url()),
        ]
    }
}

#[cfg(feature = "postgres")]
impl ChildEnv for super::stores::pg::Store {
    fn child_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (CHILD_STORE, super::stores::pg::STORE.to_owned()),
            (CHILD_URL, self.url()),
            (CHILD_SCHEMA, self.schema.clone()),
        ]
    }
}

/// In a child of store `store`: its role and the store's URL; `None` in the
/// parent (or in a child of another store).
pub fn child_role(store: &str) -> Option<(String, String)> {
    if std::env::var(CHILD_STORE).ok()? != store {
        return None;
    }
    Some((std::env::var(CHILD).ok()?, std::env::var(CHILD_URL).ok()?))
}

/// The child-side opener: a builder pointed at the parent's store.
pub trait OpenInParent: Sized {
    /// The URL (and schema) of the child's env vars.
    fn in_parents_store(self) -> Self;
}

#[cfg(feature = "redis")]
impl<T> OpenInParent for punctual::redis::RedisQueueBuilder<T> {
    fn in_parents_store(self) -> Self {
        self.url(&std::env::var(CHILD_URL).expect("a child"))
    }
}

#[cfg(feature = "postgres")]
impl<T> OpenInParent for punctual::postgres::PgQueueBuilder<T> {
    fn in_parents_store(self) -> Self {
        self.url(&std::env::var(CHILD_URL).expect("a child"))
            .schema(&std::env::var(CHILD_SCHEMA).expect("a PostgreSQL child"))
    }
}
