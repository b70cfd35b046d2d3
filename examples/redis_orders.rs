//! The order-timeout shop of `order_timeouts.rs`, made durable with
//! `punctual::redis::RedisQueue`: the timeouts live in Redis, so they outlive
//! any process, and a worker that dies mid-job loses nothing.
//!
//! The shop inserts every order under its own id (`order-<n>`) with its
//! payment timeout (400 ms to 2 s here); paying removes the order's timeout
//! by that id. A payment and an expiry can race (the customer pays while a
//! worker already holds the order's timeout, which `remove` cannot stop),
//! so the shop's books decide: each side changes an order only while it is
//! unpaid, under the books' lock (a database would do it with a conditional
//! `UPDATE`). Two expiry workers, A and B, stand in for two processes: each
//! builds its own `RedisQueue` handle and they share nothing in-process. They
//! take expired orders under a 1 s lease, release the stock, and ack.
//! Worker A is killed (its task aborted) right after taking its second
//! order, before acking it: that order stays leased for the rest of the
//! lease, then worker B gets it again, as attempt 2.
//!
//! Run it against a local server (the default URL is
//! `redis://127.0.0.1:6379/`; set `REDIS_URL` for another):
//!
//! ```text
//! redis-server &    # if none is running
//! cargo run --features redis --example redis_orders
//! ```
//!
//! On a managed Redis, with TLS and an ACL user (the rules a user needs are
//! in the `punctual::redis` docs):
//!
//! ```text
//! REDIS_URL='rediss://user:password@host:6380/' \
//!     cargo run --features redis-tls --example redis_orders
//! ```
//!
//! It uses a queue named after its process id and purges it at the end, so
//! it never touches other data. The run takes about three seconds.

use punctual::redis::{Delivery, Error, RedisQueue, client};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep, sleep_until};

/// How long a worker holds an order it took before it is offered again.
const LEASE: Duration = Duration::from_millis(1_000);
/// How long releasing an expired order's stock takes.
const RELEASE_STOCK: Duration = Duration::from_millis(100);
/// Time between two orders.
const ORDER_EVERY: Duration = Duration::from_millis(80);
/// The run gives up (and says so) after this long.
const GIVE_UP: Duration = Duration::from_secs(15);

enum Pays {
    /// Pays this long after placing the order.
    After(u64),
    Never,
}

/// Order n+1: its payment timeout (ms) and when the customer pays.
const ORDERS: [(u64, Pays); 10] = [
    (400, Pays::After(650)), // pays 250 ms too late
    (1_800, Pays::After(600)),
    (700, Pays::Never),
    (1_200, Pays::Never),
    (500, Pays::After(200)),
    (900, Pays::Never),
    (2_000, Pays::After(1_500)),
    (1_000, Pays::Never),
    (600, Pays::Never),
    (1_500, Pays::Never),
];

/// The order an entry stands for.
#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    number: u64,
    euros: u32,
}

/// Where an order stands in the shop's books.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Unpaid,
    Paid,
    Expired,
}

/// The shop's books (its database): what the summary reports.
#[derive(Default)]
struct Ledger {
    status: HashMap<String, Status>,
    paid: Vec<String>,
    refused: Vec<String>,
    expired_by_a: Vec<String>,
    expired_by_b: Vec<String>,
    /// The order worker A held when it was killed.
    orphaned: Option<String>,
    /// Orders delivered with attempt > 1: (id, attempt, worker).
    redelivered: Vec<(String, u32, char)>,
}

/// The timeline: every line stamped with ms since the start.
#[derive(Clone)]
struct Clock(Instant);

impl Clock {
    fn log(&self, who: &str, what: impl AsRef<str>) {
        println!(
            "[{:>5} ms] {who:<9} {}",
            self.0.elapsed().as_millis(),
            what.as_ref()
        );
    }
}

/// How long after its deadline (by the server's clock, which is this
/// machine's for a local server) an entry was delivered.
#[allow(clippy::disallowed_methods)] // a real wall clock against Redis's
fn lateness(delivery: &Delivery<Order>) -> Duration {
    SystemTime::now()
        .duration_since(delivery.deadline())
        .unwrap_or_default()
}

async fn open(url: &str, name: &str) -> Result<RedisQueue<Order>, Error> {
    RedisQueue::builder(name)
        .url(url)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(250))
        .build()
        .await
}

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let name = format!("redis-orders-{}", std::process::id());
    let clock = Clock(Instant::now());

    // No server: say so and stop (one quick `PING`, where building a queue
    // would retry the connection for a few seconds first).
    if let Err(why) = ping(&url).await {
        return no_server(&url, &why);
    }
    let shop = match open(&url, &name).await {
        Ok(queue) => queue,
        Err(error) => return no_server(&url, &error.to_string()),
    };
    clock.log(
        "shop",
        format!(
            "opens: queue `{name}` on {}, lease {LEASE:?}, workers A and B",
            without_password(&url)
        ),
    );

    let ledger = Arc::new(Mutex::new(Ledger::default()));

    // Two workers, each with a handle of its own, as two processes would.
    let (Ok(queue_a), Ok(queue_b)) = (open(&url, &name).await, open(&url, &name).await) else {
        return no_server(&url, "a worker could not connect");
    };
    let (killed_tx, killed_rx) = oneshot::channel();
    let worker_a = tokio::spawn(worker(
        'A',
        queue_a,
        clock.clone(),
        Arc::clone(&ledger),
        Some(killed_tx),
    ));
    let worker_b = tokio::spawn(worker(
        'B',
        queue_b,
        clock.clone(),
        Arc::clone(&ledger),
        None,
    ));

    // The supervisor: kills A (as `kill -9` would) when it asks for it.
    let supervisor = {
        let (clock, ledger) = (clock.clone(), Arc::clone(&ledger));
        let abort_a = worker_a.abort_handle();
        tokio::spawn(async move {
            if let Ok(id) = killed_rx.await {
                abort_a.abort();
                clock.log(
                    "kill -9",
                    format!("worker A is gone, holding {id} (leased, not acked)"),
                );
                ledger.lock().unwrap().orphaned = Some(id);
            }
        })
    };

    // Customers place orders; some pay, each on their own schedule.
    let mut customers = Vec::new();
    for (n, (timeout, pays)) in ORDERS.iter().enumerate() {
        let number = n as u64 + 1;
        let id = format!("order-{number}");
        let order = Order {
            number,
            euros: 20 + 7 * number as u32,
        };
        let timeout = Duration::from_millis(*timeout);
        ledger
            .lock()
            .unwrap()
            .status
            .insert(id.clone(), Status::Unpaid);
        match shop.insert_with_id(&id, &order, timeout).await {
            Ok(true) => {}
            Ok(false) => return failed(&shop, &format!("{id} was already in the queue")).await,
            Err(error) => return failed(&shop, &format!("insert {id}: {error}")).await,
        }
        clock.log(
            "shop",
            format!(
                "{id} placed ({} €), unpaid it expires at +{} ms",
                order.euros,
                (clock.0.elapsed() + timeout).as_millis()
            ),
        );
        if let Pays::After(ms) = *pays {
            let pay_at = Instant::now() + Duration::from_millis(ms);
            let (shop, clock, ledger) = (shop.clone(), clock.clone(), Arc::clone(&ledger));
            customers.push(tokio::spawn(async move {
                sleep_until(pay_at).await;
                // The books decide: paid only if still unpaid.
                let paid = {
                    let mut l = ledger.lock().unwrap();
                    let unpaid = l.status.get(&id) == Some(&Status::Unpaid);
                    if unpaid {
                        l.status.insert(id.clone(), Status::Paid);
                        l.paid.push(id.clone());
                    } else {
                        l.refused.push(id.clone());
                    }
                    unpaid
                };
                if paid {
                    // Then the timeout goes. A worker may hold it already:
                    // it will find the order paid and leave it alone.
                    let removed = shop.remove(&id).await?;
                    clock.log(
                        "customer",
                        format!("pays {id}: in time, timeout removed = {removed}"),
                    );
                } else {
                    clock.log(
                        "customer",
                        format!("pays {id}: refused, the order already expired"),
                    );
                }
                Ok::<(), Error>(())
            }));
        }
        sleep(ORDER_EVERY).await;
    }
    for customer in customers {
        if let Ok(Err(error)) = customer.await {
            return failed(&shop, &format!("remove: {error}")).await;
        }
    }

    // Wait until every order is settled and the queue is empty.
    let give_up = Instant::now() + GIVE_UP;
    loop {
        let settled = {
            let l = ledger.lock().unwrap();
            l.paid.len() + l.expired_by_a.len() + l.expired_by_b.len()
        };
        let empty = match shop.stats().await {
            Ok(s) => s.pending + s.due + s.leased + s.dead == 0,
            Err(error) => return failed(&shop, &format!("stats: {error}")).await,
        };
        if settled == ORDERS.len() && empty {
            break;
        }
        if Instant::now() > give_up {
            return failed(&shop, "orders left unsettled after 15 s").await;
        }
        sleep(Duration::from_millis(50)).await;
    }
    if !worker_a.is_finished() {
        // A never took a second order: kill it anyway, idle.
        worker_a.abort();
        clock.log("kill -9", "worker A is gone (idle: it held no order)");
    }
    worker_b.abort();
    supervisor.abort();
    let elapsed = clock.0.elapsed();
    if let Err(error) = shop.purge().await {
        eprintln!("could not purge queue `{name}`: {error}");
    }

    let l = ledger.lock().unwrap();
    let placed = ORDERS.len();
    let expired = l.expired_by_a.len() + l.expired_by_b.len();
    println!("\n--- summary after {} ms ---", elapsed.as_millis());
    println!("orders placed:            {placed}");
    println!("paid in time:             {} {:?}", l.paid.len(), l.paid);
    println!(
        "late payments refused:    {} {:?}",
        l.refused.len(),
        l.refused
    );
    println!(
        "expired by worker A:      {} {:?}",
        l.expired_by_a.len(),
        l.expired_by_a
    );
    println!(
        "expired by worker B:      {} {:?}",
        l.expired_by_b.len(),
        l.expired_by_b
    );
    match &l.orphaned {
        Some(id) => {
            let again = l.redelivered.iter().find(|(r, _, _)| r == id);
            match again {
                Some((_, attempt, by)) => println!(
                    "redelivered after A died: {id}, expired by worker {by} on attempt {attempt}"
                ),
                None => println!("redelivered after A died: {id} was NOT redelivered"),
            }
        }
        None => println!("redelivered after A died: none (A held no order when it died)"),
    }
    let lost = placed - l.paid.len() - expired;
    if lost == 0 {
        println!("lost:                     none (placed = paid + expired, queue empty)");
        ExitCode::SUCCESS
    } else {
        println!("lost:                     {lost}");
        ExitCode::FAILURE
    }
}

/// An expiry worker: takes expired orders, releases their stock, acks. With
/// `kill`, it asks to be killed right after taking its second order.
async fn worker(
    me: char,
    queue: RedisQueue<Order>,
    clock: Clock,
    ledger: Arc<Mutex<Ledger>>,
    mut kill: Option<oneshot::Sender<String>>,
) {
    let who = format!("worker {me}");
    let mut taken = 0;
    loop {
        let delivery = match queue.take().await {
            Ok(delivery) => delivery,
            Err(error) => {
                clock.log(&who, format!("stops: {error}"));
                return;
            }
        };
        taken += 1;
        let id = delivery.id().to_owned();
        let attempt = delivery.attempt();
        let late = lateness(&delivery).as_millis();
        if attempt > 1 {
            ledger
                .lock()
                .unwrap()
                .redelivered
                .push((id.clone(), attempt, me));
        }
        if taken == 2 {
            if let Some(kill) = kill.take() {
                clock.log(
                    &who,
                    format!("takes {id} (attempt {attempt}, {late} ms late) ... and crashes"),
                );
                let _ = kill.send(id);
                // Hold the lease until the supervisor aborts this task.
                match std::future::pending::<std::convert::Infallible>().await {}
            }
        }
        let how = if attempt > 1 {
            format!("attempt {attempt}: its lease ran out, {late} ms ago")
        } else {
            format!("attempt {attempt}, {late} ms late")
        };
        // The books decide: expired only if still unpaid (the customer may
        // have paid since this timeout was taken).
        let expired = {
            let mut l = ledger.lock().unwrap();
            let unpaid = l.status.get(&id) == Some(&Status::Unpaid);
            if unpaid {
                l.status.insert(id.clone(), Status::Expired);
                if me == 'A' {
                    l.expired_by_a.push(id.clone());
                } else {
                    l.expired_by_b.push(id.clone());
                }
            }
            unpaid
        };
        if expired {
            clock.log(
                &who,
                format!(
                    "{id} expired ({how}), releasing {} € of stock",
                    delivery.value().euros
                ),
            );
            sleep(RELEASE_STOCK).await;
        } else {
            clock.log(
                &who,
                format!("{id} is no longer unpaid ({how}): left alone"),
            );
        }
        // Done either way; `Ok(false)`: the timeout was removed meanwhile.
        match delivery.ack().await {
            Ok(_) => {}
            Err(error) => clock.log(&who, format!("{id}: ack failed: {error}")),
        }
    }
}

/// Whether a Redis server answers `PING` at `url`, within two seconds.
async fn ping(url: &str) -> Result<(), String> {
    let client = client::Client::open(url).map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(Duration::from_secs(2), async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        client::cmd("PING").query_async::<String>(&mut conn).await
    });
    match answer.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("no answer within 2 s".to_owned()),
    }
}

/// `url` with its password (if any) replaced by `***`, for printing.
fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if scheme < at => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

fn no_server(url: &str, why: &str) -> ExitCode {
    let url = &without_password(url);
    eprintln!(
        "this example needs a running redis-server at {url}: start one with `redis-server` \
         or set REDIS_URL ({why})"
    );
    ExitCode::from(1)
}

async fn failed(shop: &RedisQueue<Order>, why: &str) -> ExitCode {
    eprintln!("redis_orders failed: {why}");
    let _ = shop.purge().await;
    ExitCode::FAILURE
}
