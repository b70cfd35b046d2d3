//! What a Prometheus scrape returns after a few jobs on PostgreSQL.
//!
//! The crate records through the `metrics` facade (cargo feature
//! `metrics`): install any recorder, here `metrics-exporter-prometheus`,
//! and the counters, histograms and gauges of punctual appear beside the
//! service's own. In a service the exporter would serve them on
//! `/metrics`; this example prints one scrape.
//!
//! Run it with `cargo run --features metrics,postgres --example metrics`
//! against the server at `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`).

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use punctual::durable::{Outcome, Worker};
use punctual::postgres::PgQueue;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let jobs: PgQueue<u32> = PgQueue::builder("metrics-example")
        .url(&url)
        .max_attempts(2)
        .build()
        .await?;
    jobs.purge().await?;

    let worker = Worker::builder(jobs.clone()).spawn(|job| async move {
        tokio::time::sleep(Duration::from_millis(u64::from(*job.value()) * 10)).await;
        match *job.value() {
            // Fails twice: dead after its second attempt.
            3 => Outcome::retry("the mail server said no"),
            7 => Outcome::discard("no such address"),
            _ => Outcome::Done,
        }
    });
    for n in 0..10 {
        jobs.insert(&n, Duration::ZERO).await?;
    }
    // Two seconds: the failed job's retry comes after about one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = worker.shutdown(Duration::from_secs(5)).await;
    println!("# worker: {stats:?}\n");

    let scrape = prometheus.render();
    for line in scrape
        .lines()
        .filter(|l| l.contains("punctual") || l.starts_with("# TYPE"))
    {
        println!("{line}");
    }
    jobs.purge().await?;
    Ok(())
}
