//! Durable jobs on PostgreSQL: a shop that expires unpaid orders, with the
//! expiry written in the same transaction as the order.
//!
//! - Each order and its 2-second expiry are inserted in one transaction
//!   (`insert_in`): both or neither. One order's transaction is rolled back,
//!   and its expiry never fires.
//! - Paying an order marks it paid and removes its expiry in one
//!   transaction (`remove_in`), and only if it is still unpaid.
//! - The race: one order is paid while its expiry handler already runs.
//!   `remove_in` cannot stop a handler already under way, so the handler
//!   expires an order only if it is still unpaid, in one conditional
//!   `UPDATE` that succeeds whether or not it changed the row: an order
//!   paid meanwhile is left alone, and the job is done (no error, so no
//!   retry).
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
//! order expired twice, a paid or rolled-back order expired, an order ended
//! neither paid nor expired, or a tick ran twice.

use punctual::MissedTicks;
use punctual::durable::{Backoff, Worker};
use punctual::postgres::sqlx::{self, PgPool};
use punctual::postgres::{Error, PgQueue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

const SCHEMA: &str = "punctual_example";
/// How long the expiry handler of the order paid in the race waits on the
/// (slow) payment provider before it writes.
const SLOW_PROVIDER: Duration = Duration::from_millis(300);

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
        "CREATE TABLE IF NOT EXISTS example_orders (id bigserial PRIMARY KEY, status text NOT NULL)",
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
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO example_orders (status) VALUES ('unpaid') RETURNING id",
        )
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
        sqlx::query_scalar("INSERT INTO example_orders (status) VALUES ('unpaid') RETURNING id")
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

    // Order 2 is paid in time: the status and the expiry's removal commit together.
    let paid = orders[1];
    println!("order {paid} paid in time: {}", pay(&pool, &a, paid).await?);

    // Order 3 is paid while its expiry handler runs (after the handler's
    // first attempt failed): both sides write only if the order is unpaid.
    let race = orders[2];
    let started = Arc::new(Notify::new());

    let log = Arc::new(Mutex::new(Log::default()));
    let spawn = |queue: PgQueue<Task>, name: &'static str| {
        let log = Arc::clone(&log);
        let pool = pool.clone();
        let started = Arc::clone(&started);
        Worker::builder(queue)
            .concurrency(4)
            .backoff(Backoff::fixed(Duration::from_millis(300)))
            .spawn(move |job| {
                let log = Arc::clone(&log);
                let pool = pool.clone();
                let started = Arc::clone(&started);
                async move {
                    match *job.value() {
                        Task::Expire { order } => {
                            // The payment provider is flaky: every order's first try fails.
                            if job.attempt() == 1 {
                                log.lock().unwrap().retries += 1;
                                return Err(format!("provider timed out for order {order}"));
                            }
                            if order == race {
                                // The customer pays now, while this handler runs.
                                started.notify_one();
                                tokio::time::sleep(SLOW_PROVIDER).await;
                            }
                            // Expire the order only if it is still unpaid. When it was
                            // paid meanwhile, no row changes and the job is done all the
                            // same: Ok, not an error, so it is not retried.
                            let expired = sqlx::query(
                                "UPDATE example_orders SET status = 'expired' WHERE id = $1 AND status = 'unpaid'",
                            )
                            .bind(order)
                            .execute(&pool)
                            .await
                            .map_err(|e| e.to_string())?
                            .rows_affected()
                                == 1;
                            if expired {
                                println!("{name}: order {order} expired (attempt {})", job.attempt());
                                *log.lock().unwrap().expired.entry(order).or_default() += 1;
                            } else {
                                println!("{name}: order {order} is no longer unpaid: left alone");
                            }
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    if tokio::time::timeout(Duration::from_secs(4), started.notified())
        .await
        .is_ok()
    {
        println!(
            "order {race} paid while its expiry handler runs: {}",
            pay(&pool, &a, race).await?
        );
    }
    tokio::time::sleep_until(deadline).await;
    for worker in workers {
        worker.shutdown(Duration::from_secs(1)).await;
    }

    let statuses: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, status FROM example_orders ORDER BY id")
            .fetch_all(&pool)
            .await?;
    let ok = check(
        &log.lock().unwrap(),
        &statuses,
        &orders,
        &[paid, race],
        doomed,
    );
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

/// Pays `order` if it is still unpaid, removing its expiry in the same
/// transaction; whether it was paid (`false`: it had expired first).
async fn pay(pool: &PgPool, expiries: &PgQueue<Task>, order: i64) -> Result<bool, Error> {
    let mut tx = pool.begin().await?;
    let paid = sqlx::query(
        "UPDATE example_orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'",
    )
    .bind(order)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if paid {
        // `true` if the expiry was still there. Its handler may be running
        // already (it was for the race order): that handler's own
        // conditional UPDATE leaves a paid order alone.
        expiries
            .remove_in(&mut tx, &format!("expire-{order}"))
            .await?;
    }
    tx.commit().await?;
    Ok(paid)
}

/// Prints the summary; whether every order and tick ran as it should.
fn check(log: &Log, statuses: &[(i64, String)], orders: &[i64], paid: &[i64], doomed: i64) -> bool {
    let mut ok = true;
    for id in orders {
        let runs = log.expired.get(id).copied().unwrap_or(0);
        let (want_runs, want_status) = if paid.contains(id) {
            (0, "paid")
        } else {
            (1, "expired")
        };
        let status = statuses
            .iter()
            .find(|(row, _)| row == id)
            .map_or("missing", |(_, status)| status.as_str());
        if runs != want_runs || status != want_status {
            println!("order {id}: {status}, expired {runs} times; expected {want_status}");
            ok = false;
        }
    }
    if statuses.iter().any(|(row, _)| *row == doomed) || log.expired.contains_key(&doomed) {
        println!("the rolled-back order exists or expired");
        ok = false;
    }
    if log.ticks.values().any(|&n| n != 1) {
        println!("a tick ran twice");
        ok = false;
    }
    println!(
        "summary: {} orders expired, {} paid, {} retries, {} sweep ticks (each once: {})",
        log.expired.len(),
        statuses.iter().filter(|(_, s)| s == "paid").count(),
        log.retries,
        log.ticks.len(),
        log.ticks.values().all(|&n| n == 1)
    );
    ok
}
