#![cfg(feature = "redis")]
//! `RedisQueue` as an ACL user (Redis 6 users, checked on Redis 7): the
//! rules the crate documents are enough to run a queue, and `build()`
//! fails naming what is missing when they are not all granted.

mod common;

use common::redis_queue::{HOUR, WAIT, ms, next, within};
use common::redis_server::RedisServer;
use punctual::durable::{Job, Worker};
use punctual::redis::{Error, RedisQueue, RedisStats};
use std::time::Duration;

/// The commands of the documented ACL line (the `punctual::redis` module docs).
const COMMANDS: &str = "-@all +evalsha +script|load +time +type +del +get +set +incr \
     +hset +hget +hmget +hdel +hexists +hgetall \
     +zadd +zrem +zrange +zrangebyscore +zscore +zcard +zcount \
     +publish +subscribe +ping +info";

/// Creates user `user` (password `pw`) with access to queue `name`'s keys
/// and channel (when `channel`) and `commands`.
fn add_user(server: &RedisServer, user: &str, name: &str, channel: bool, commands: &str) {
    let keys = format!("~punctual:{{{name}}}:*");
    let chan = format!("&punctual:{{{name}}}:wake");
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw", &keys];
    if channel {
        args.push(&chan);
    }
    args.extend(commands.split_whitespace());
    assert_eq!(server.cli(&args), "OK");
}

fn url(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port())
}

async fn build(server: &RedisServer, user: &str, name: &str) -> Result<RedisQueue<u64>, Error> {
    RedisQueue::builder(name)
        .url(&url(server, user, "pw"))
        .lease(ms(300))
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_rules_runs_the_queue_and_a_worker() {
    let server = RedisServer::start();
    add_user(&server, "orders", "orders", true, COMMANDS);
    let q = build(&server, "orders", "orders").await.expect("build");

    // A waiting consumer is woken by the announcement (the poll interval
    // is a minute): publish and subscribe work for this user.
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take().await }
    });
    tokio::time::sleep(ms(200)).await;
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    let d = within("a take woken by the announcement", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.id(), "a");
    assert!(d.retry(Duration::ZERO).await.unwrap());
    let d = next(&q).await;
    assert_eq!(d.attempt(), 2);
    assert!(d.ack().await.unwrap());

    // Every other operation.
    q.insert(&2, HOUR).await.unwrap();
    assert!(q.reset("a", HOUR).await.is_ok());
    assert_eq!(q.stats().await.unwrap().pending, 1);
    assert!(q.dead_letters(10).await.unwrap().is_empty());
    q.schedule_every("tick", HOUR, Default::default(), &7)
        .await
        .unwrap();
    assert_eq!(q.schedules().await.unwrap().len(), 1);
    q.purge().await.unwrap();
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());

    let values: Vec<(u64, Duration)> = (0..10).map(|i| (i, ms(i))).collect();
    q.insert_many(&values).await.unwrap();
    let worker = Worker::builder(q.clone())
        .concurrency(2)
        .spawn(|_job: Job<u64>| async { Ok::<(), String>(()) });
    common::redis_queue::eventually("the worker acks 10", || {
        let done = worker.stats().completed == 10;
        async move { done }
    })
    .await;
    assert_eq!(worker.shutdown(ms(100)).await.completed, 10);

    // Every connection of the queue (pub/sub included) is this user's.
    let list = server.cli(&["CLIENT", "LIST"]);
    let mine: Vec<&str> = list
        .lines()
        .filter(|l| l.contains(" user=orders "))
        .collect();
    assert!(mine.iter().any(|l| l.contains(" flags=P ")), "{list}");
}

#[tokio::test]
async fn a_user_missing_a_command_the_scripts_run_fails_build_naming_it() {
    let server = RedisServer::start();
    let without_zadd = COMMANDS.replace(" +zadd", "");
    add_user(&server, "nozadd", "q", true, &without_zadd);
    let err = build(&server, "nozadd", "q").await.expect_err("no zadd");
    let message = err.to_string();
    assert!(
        message.contains("may not run zadd on punctual:{q}:schedule"),
        "{message}"
    );
    assert!(!message.contains("zrem"), "{message}");

    let without_incr_and_script_load = COMMANDS.replace(" +incr", "").replace(" +script|load", "");
    add_user(&server, "twogone", "q", true, &without_incr_and_script_load);
    let message = build(&server, "twogone", "q")
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("script load"), "{message}");
    assert!(message.contains("incr on punctual:{q}:seq"), "{message}");
}

#[tokio::test]
async fn a_user_that_may_not_run_scripts_fails_build_naming_evalsha() {
    let server = RedisServer::start();
    add_user(
        &server,
        "noeval",
        "q",
        true,
        &COMMANDS.replace(" +evalsha", ""),
    );
    let message = build(&server, "noeval", "q").await.unwrap_err().to_string();
    assert!(message.contains("'evalsha'"), "{message}");
}

#[tokio::test]
async fn a_user_without_the_queues_keys_fails_build() {
    let server = RedisServer::start();
    // The keys of another queue only.
    add_user(&server, "other", "other", true, COMMANDS);
    let err = build(&server, "other", "q")
        .await
        .expect_err("foreign keys");
    let message = err.to_string();
    assert!(
        message.contains("may not access the queue's keys")
            && message.contains("grant ~punctual:{q}:*"),
        "{message}"
    );
}

#[tokio::test]
async fn a_wrong_password_fails_build() {
    let server = RedisServer::start();
    add_user(&server, "orders", "q", true, COMMANDS);
    let err = RedisQueue::<u64>::builder("q")
        .url(&url(&server, "orders", "wrong"))
        .build()
        .await
        .expect_err("wrong password");
    let message = err.to_string();
    assert!(
        message.contains("Password authentication failed"),
        "{message}"
    );
}

#[tokio::test]
async fn a_user_without_channel_rights_builds_and_finds_entries_by_polling() {
    let server = RedisServer::start();
    add_user(&server, "nochan", "q", false, COMMANDS);
    let q: RedisQueue<u64> = RedisQueue::builder("q")
        .url(&url(&server, "nochan", "pw"))
        .poll_interval(ms(50))
        .build()
        .await
        .expect("channel rights are optional");
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take_timeout(WAIT).await }
    });
    tokio::time::sleep(ms(100)).await;
    q.insert_with_id("a", &1, Duration::ZERO).await.unwrap();
    let d = waiting.await.unwrap().unwrap().expect("found by polling");
    assert_eq!(d.id(), "a");
    assert!(d.ack().await.unwrap());
}
