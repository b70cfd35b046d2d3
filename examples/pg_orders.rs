//! Durable jobs on PostgreSQL: a shop that expires unpaid orders, with the
//! expiry written in the same transaction as the order.
//!
//! - Each order and its 2-second expiry are inserted in one transaction
//!   (`insert_in`): both or neither. One order's transaction is rolled back,
//!   and its expiry never fires.
//! - Paying an order marks it paid and removes its expiry in one
//!   transaction (`remove_in`).
//! - Two replicas (two built queue handles, as two processes would have)
//!   run a `Worker` each; the expiry handler fails now and then (a flaky
//!   payment provider) and is retried with backoff.
//! - Both replicas declare the same fixed-rate schedule; it runs once per
//!   tick, not once per replica.
//!
//! Run it against a local server (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`):
//!
//! ```text
//! cargo run --features postgres --example pg_orders
//! ```
//!
//! It works in a schema of its own (`punctual_example`) and a table
//! `example_orders`, both dropped at the end. It exits with an error if an
//! order expired twice, a paid or rolled-back order expired, or a tick ran
//! twice.

use punctual::MissedTicks;
use punctual::durable::{Backoff, Worker};
use punctual::postgres::sqlx::{self, PgPool};
use punctual::postgres::{Error, PgQueue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SCHEMA: &str = "punctual_example";

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Task {
    /// Expire order `id` unless it was paid.
    Expire { order: i64 },
    /// The fixed-rate schedule: clean up abandoned carts.
    Sweep,
}

/// What the handlers did, by replica.
#[derive(Default)]
struct Log {
    expired: BTreeMap<i64, u32>,
    ticks: BTreeMap<u128, u32>,
    retries: u32,
}

#[tokio::main]
async fn main() -> Result<ExitCode, Error> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let pool = PgPool::connect(&url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, state text NOT NULL)",
    )
    .execute(&pool)
    .await?;

    // Two replicas: each builds its own handle, sharing the database.
    let replica = |_name: &str| {
        PgQueue::<Task>::builder("orders")
            .pool(pool.clone())
            .schema(SCHEMA)
            .lease(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(200))
            .build()
    };
    let a = replica("a").await?;
    let b = replica("b").await?;
    a.purge().await?;

    // Both declare the schedule; the second call changes nothing.
    let every = Duration::from_millis(500);
    println!(
        "a declares sweep: created = {}",
        a.schedule_every("sweep", every, MissedTicks::Skip, &Task::Sweep)
            .await?
    );
    println!(
        "b declares sweep: created = {}",
        b.schedule_every("sweep", every, MissedTicks::Skip, &Task::Sweep)
            .await?
    );

    // Orders 1..=4, each with its expiry in the same transaction.
    let mut orders = Vec::new();
    for _ in 0..4 {
        let mut tx = pool.begin().await?;
        let id: i64 =
            sqlx::query_scalar("INSERT INTO example_orders (state) VALUES ('unpaid') RETURNING id")
                .fetch_one(&mut *tx)
                .await?;
        a.insert_with_id_in(
            &mut tx,
            &format!("expire-{id}"),
            &Task::Expire { order: id },
            Duration::from_secs(2),
        )
        .await?;
        tx.commit().await?;
        orders.push(id);
    }
    // An order whose transaction fails: neither the order nor its expiry exist.
    let mut tx = pool.begin().await?;
    let doomed: i64 =
        sqlx::query_scalar("INSERT INTO example_orders (state) VALUES ('unpaid') RETURNING id")
            .fetch_one(&mut *tx)
            .await?;
    a.insert_with_id_in(
        &mut tx,
        &format!("expire-{doomed}"),
        &Task::Expire { order: doomed },
        Duration::from_secs(2),
    )
    .await?;
    tx.rollback().await?;
    println!(
        "order {doomed} rolled back: its expiry is {:?}",
        a.deadline(&format!("expire-{doomed}")).await?
    );

    // Order 2 is paid in time: the state and the expiry's removal commit together.
    let paid = orders[1];
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE example_orders SET state = 'paid' WHERE id = $1")
        .bind(paid)
        .execute(&mut *tx)
        .await?;
    let removed = a.remove_in(&mut tx, &format!("expire-{paid}")).await?;
    tx.commit().await?;
    println!("order {paid} paid: expiry removed = {removed}");

    let log = Arc::new(Mutex::new(Log::default()));
    let spawn = |queue: PgQueue<Task>, name: &'static str| {
        let log = Arc::clone(&log);
        let pool = pool.clone();
        Worker::builder(queue)
            .concurrency(4)
            .backoff(Backoff::fixed(Duration::from_millis(300)))
            .spawn(move |job| {
                let log = Arc::clone(&log);
                let pool = pool.clone();
                async move {
                    match job.value() {
                        Task::Expire { order } => {
                            // The payment provider is flaky: every order's first try fails.
                            if job.attempt() == 1 {
                                log.lock().unwrap().retries += 1;
                                return Err(format!("provider timed out for order {order}"));
                            }
                            let state: String = sqlx::query_scalar(
                                "UPDATE example_orders SET state = 'expired' WHERE id = $1 AND state = 'unpaid' RETURNING state",
                            )
                            .bind(order)
                            .fetch_one(&pool)
                            .await
                            .map_err(|e| e.to_string())?;
                            println!("{name}: order {order} {state} (attempt {})", job.attempt());
                            *log.lock().unwrap().expired.entry(*order).or_default() += 1;
                        }
                        Task::Sweep => {
                            let instant = job
                                .deadline()
                                .duration_since(std::time::UNIX_EPOCH)
                                .unwrap_or_default()
                                .as_millis();
                            println!("{name}: sweep tick {instant}");
                            *log.lock().unwrap().ticks.entry(instant).or_default() += 1;
                        }
                    }
                    Ok::<(), String>(())
                }
            })
    };
    let workers = [spawn(a.clone(), "a"), spawn(b.clone(), "b")];
    tokio::time::sleep(Duration::from_secs(4)).await;
    for worker in workers {
        worker.shutdown(Duration::from_secs(1)).await;
    }

    let ok = check(&log.lock().unwrap(), &orders, paid, doomed);
    a.purge().await?;
    sqlx::query("DROP TABLE example_orders")
        .execute(&pool)
        .await?;
    sqlx::query(&format!("DROP SCHEMA {SCHEMA} CASCADE"))
        .execute(&pool)
        .await?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints the summary; whether every order and tick ran as it should.
fn check(log: &Log, orders: &[i64], paid: i64, doomed: i64) -> bool {
    let mut ok = true;
    for id in orders {
        let runs = log.expired.get(id).copied().unwrap_or(0);
        let want = u32::from(*id != paid);
        if runs != want {
            println!("order {id}: expired {runs} times, expected {want}");
            ok = false;
        }
    }
    if log.expired.contains_key(&doomed) || log.ticks.values().any(|&n| n != 1) {
        println!("a rolled-back order expired, or a tick ran twice");
        ok = false;
    }
    println!(
        "summary: {} orders expired, {} retries, {} sweep ticks (each once: {})",
        log.expired.len(),
        log.retries,
        log.ticks.len(),
        log.ticks.values().all(|&n| n == 1)
    );
    ok
}
