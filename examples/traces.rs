//! One trace from the request that inserts a job to the worker that runs
//! it (cargo feature `opentelemetry`): the insert is made inside the
//! request's span, the entry keeps its context, and the worker's
//! `punctual.run` span takes it as its parent, so both spans print with the
//! same trace id. Here on a `MemoryQueue` in two tasks; on Redis or
//! PostgreSQL the producer and the worker may be two processes.
//!
//! ```sh
//! cargo run --example traces --features opentelemetry
//! ```

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use punctual::durable::{Job, Worker};
use punctual::memory::MemoryQueue;
use std::time::Duration;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::main]
async fn main() {
    // Spans go to stdout as the OpenTelemetry SDK exports them.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("shop")));
    tracing::subscriber::set_global_default(subscriber).expect("one subscriber");

    let emails: MemoryQueue<u64> = MemoryQueue::new("emails");

    // The worker, in a task of its own.
    let worker = Worker::builder(emails.clone()).spawn(|job: Job<u64>| async move {
        tracing::info!(order = *job.value(), "sending the confirmation");
        Ok::<(), String>(())
    });

    // The producer: a request handler that inserts the job in its span.
    let producer = tokio::spawn({
        let emails = emails.clone();
        async move {
            let request = tracing::info_span!("POST /orders", order = 17);
            async move {
                emails
                    .insert(&17, Duration::from_millis(10))
                    .await
                    .expect("inserted");
            }
            .instrument(request)
            .await;
        }
    });
    producer.await.expect("the producer");

    tokio::time::sleep(Duration::from_millis(100)).await;
    let stats = worker.shutdown(Duration::from_secs(1)).await;
    assert_eq!(stats.completed, 1);
    provider.shutdown().expect("spans flushed");
    // Both spans above share one trace id: `POST /orders` is the parent of
    // `punctual.run`.
}
