//! A `PgQueue` whose pooled connections are all black-holed at once (a NAT,
//! load balancer or firewall that dropped its state: no FIN, no RST, just
//! silence; new connections work) recovers within one `response_timeout`
//! plus a connect, whatever the size of its pool (each dead idle
//! connection once cost the next call another full timeout in turn, so a
//! pool of 10 took ten timeouts to recover).
//!
//! Real time: the network decides. A fault proxy (`tests/common/proxy.rs`)
//! stands between the queue and the local server; entries are inserted past
//! it, on a direct handle. Each test has a schema of its own in this
//! binary's database.

#![cfg(feature = "postgres")]

mod common;

use common::pg::{PgDb, admin_port, proxied_url};
use common::proxy::Proxy;
use punctual::durable::Worker;
use punctual::postgres::PgQueue;
use punctual::postgres::sqlx::postgres::PgPoolOptions;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};

/// The queue's `response_timeout`.
const TIMEOUT: Duration = Duration::from_secs(2);
/// What recovery may take beyond one `response_timeout`: a connect, a
/// `poll_interval` of a waiting consumer, and slack.
const SLACK: Duration = Duration::from_secs(1);
/// How long a test goes on waiting past the bound, to report how late
/// recovery came instead of only that it did not come in time.
const REPORT: Duration = Duration::from_secs(4);
const POLL: Duration = Duration::from_millis(200);
const POOL: usize = 10;
const HOUR: Duration = Duration::from_secs(3600);

fn schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("bh{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A handle on `name` past the proxy: on the builder's own pool of 10, or
/// with `user_pool` on a pool of 10 made with sqlx's defaults (it tests each
/// idle connection with a round trip before handing it out, a round trip
/// with no bound but the queue's).
async fn via(proxy: &Proxy, db: &PgDb, schema: &str, name: &str, user_pool: bool) -> PgQueue<u64> {
    let url = proxied_url(proxy.port(), db.name());
    let builder = PgQueue::builder(name)
        .url(&url)
        .schema(schema)
        .poll_interval(POLL)
        .response_timeout(TIMEOUT);
    let builder = if user_pool {
        let pool = PgPoolOptions::new()
            .max_connections(POOL as u32)
            .connect_lazy(&url)
            .unwrap();
        builder.pool(pool)
    } else {
        builder
    };
    builder.build().await.expect("build past the proxy")
}

/// A handle on `name` straight to the server.
async fn direct(db: &PgDb, schema: &str, name: &str) -> PgQueue<u64> {
    PgQueue::builder(name)
        .url(&db.url())
        .schema(schema)
        .build()
        .await
        .expect("build")
}

/// Opens every connection of the pool: calls made together, until the
/// proxy holds `POOL` connections.
async fn warm(queue: &PgQueue<u64>, proxy: &Proxy) {
    for _ in 0..20 {
        let calls: Vec<_> = (0..POOL)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move { queue.stats().await })
            })
            .collect();
        for call in calls {
            call.await.unwrap().expect("stats");
        }
        if proxy.open() >= POOL {
            return;
        }
    }
    panic!("the pool opened {} connections, not {POOL}", proxy.open());
}

/// Black-holes a warmed pool under a waiting `take` and a producer: the
/// first insert that returns `Ok` and the delivery of an entry due just
/// after the black hole both come within one response timeout plus
/// [`SLACK`].
async fn recovers_within_one_timeout(user_pool: bool) {
    let db = PgDb::new();
    let schema = schema();
    let name = "blackhole";
    let direct = direct(&db, &schema, name).await;
    let proxy = Proxy::start(admin_port());
    let via = via(&proxy, &db, &schema, name, user_pool).await;
    warm(&via, &proxy).await;
    let taker = tokio::spawn({
        let via = via.clone();
        async move {
            let d = via.take().await;
            (Instant::now(), d)
        }
    });
    // The take has claimed once (nothing due) and its listener holds one
    // connection of the pool; the others are idle.
    sleep(Duration::from_millis(500)).await;
    assert_eq!(proxy.open(), POOL, "every connection of the pool is open");
    proxy.black_hole_open();
    let holed = Instant::now();
    assert!(
        direct
            .insert_with_id("due", &7, Duration::from_millis(100))
            .await
            .unwrap()
    );

    let give_up = holed + TIMEOUT + SLACK + REPORT;
    let mut failed = 0;
    let first_ok = loop {
        match timeout(TIMEOUT + SLACK, via.insert(&1, HOUR)).await {
            Ok(Ok(_)) => break holed.elapsed(),
            Ok(Err(_)) => failed += 1,
            Err(_) => panic!("an insert outlived its response timeout"),
        }
        assert!(
            Instant::now() < give_up,
            "no insert got through {:?} after the black hole ({failed} failed)",
            holed.elapsed()
        );
    };
    assert!(
        first_ok <= TIMEOUT + SLACK,
        "the first insert to get through came {first_ok:?} after the black hole \
         ({failed} failed before it)"
    );

    let (at, delivery) = timeout(give_up.saturating_duration_since(Instant::now()), taker)
        .await
        .unwrap_or_else(|_| panic!("the waiting take got nothing in {:?}", holed.elapsed()))
        .unwrap();
    let delivery = delivery.expect("take rides through");
    assert_eq!(delivery.id(), "due");
    let took = at - holed;
    assert!(
        took <= TIMEOUT + SLACK,
        "the waiting take delivered {took:?} after the black hole"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_black_holed_pool_of_the_builder_recovers_within_one_response_timeout() {
    recovers_within_one_timeout(false).await;
}

/// The same on a pool the service passed in (`PgQueueBuilder::pool`), which
/// the queue did not configure.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_black_holed_pool_of_the_user_recovers_within_one_response_timeout() {
    recovers_within_one_timeout(true).await;
}

/// A worker waiting on a black-holed pool starts a job due just after the
/// black hole within one response timeout plus [`SLACK`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_on_a_black_holed_pool_starts_its_job_within_one_response_timeout() {
    let db = PgDb::new();
    let schema = schema();
    let name = "blackhole-worker";
    let direct = direct(&db, &schema, name).await;
    let proxy = Proxy::start(admin_port());
    let via = via(&proxy, &db, &schema, name, false).await;
    warm(&via, &proxy).await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(via.clone())
        .concurrency(4)
        .spawn(move |job| {
            let _ = started_tx.send((Instant::now(), job.id().to_owned()));
            async { Ok::<(), String>(()) }
        });
    sleep(Duration::from_millis(500)).await;
    assert_eq!(proxy.open(), POOL, "every connection of the pool is open");
    proxy.black_hole_open();
    let holed = Instant::now();
    assert!(
        direct
            .insert_with_id("due", &7, Duration::from_millis(100))
            .await
            .unwrap()
    );
    let (at, id) = timeout(TIMEOUT + SLACK + REPORT, started.recv())
        .await
        .unwrap_or_else(|_| panic!("the worker started nothing in {:?}", holed.elapsed()))
        .expect("the worker runs");
    assert_eq!(id, "due");
    let took = at - holed;
    assert!(
        took <= TIMEOUT + SLACK,
        "the worker started its job {took:?} after the black hole"
    );
    worker.shutdown(Duration::from_secs(1)).await;
}
