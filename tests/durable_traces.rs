//! Traces from insert to run (feature `opentelemetry`), one body on every
//! store: the worker's `punctual.run` span has the inserting span as its
//! parent, on every attempt, whichever insert made the entry; a schedule's
//! tick starts a trace of its own. Spans are read back from the SDK's
//! in-memory exporter.

#![cfg(feature = "opentelemetry")]

mod common;

use common::wait::{eventually, ms};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use punctual::MissedTicks;
use punctual::durable::{InsertOptions, Job, Outcome, Worker};
use std::time::Duration;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// An exporter and a subscriber that sends every span to it, set for this
/// thread (the tests run on a current-thread runtime: every task too).
fn traced() -> (
    InMemorySpanExporter,
    SdkTracerProvider,
    tracing::subscriber::DefaultGuard,
) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let guard = tracing::subscriber::set_default(subscriber);
    (exporter, provider, guard)
}

fn spans(exporter: &InMemorySpanExporter, name: &str) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|span| span.name == name)
        .collect()
}

common::stores::on_every_store! {
    /// Entries inserted in a request's span (by `insert`, `insert_with_id`,
    /// `insert_many`, `insert_with`) run in `punctual.run` spans whose
    /// parent is that request's span, on the first attempt and the retry.
    #[tokio::test]
    async fn a_run_is_a_child_of_the_span_that_inserted_it() {
        let (exporter, provider, _guard) = traced();
        let store = Store::start();
        let q: Q<u32> = store.open("traced").await;
        let request = tracing::info_span!("request");
        async {
            q.insert(&1, Duration::ZERO).await.unwrap();
            q.insert_with_id("second", &2, Duration::ZERO).await.unwrap();
            q.insert_many(&[(3, Duration::ZERO)]).await.unwrap();
            q.insert_with(&4, &InsertOptions::new().key("k")).await.unwrap();
        }
        .instrument(request)
        .await;
        let worker = Worker::builder(q.clone()).spawn(|job: Job<u32>| async move {
            if job.attempt() == 1 && *job.value() == 1 {
                Outcome::retry_after("once more", Duration::ZERO)
            } else {
                Outcome::Done
            }
        });
        eventually("five runs", || async { spans(&exporter, "punctual.run").len() == 5 }).await;
        worker.shutdown(ms(100)).await;
        let requests = spans(&exporter, "request");
        assert_eq!(requests.len(), 1);
        let request = &requests[0].span_context;
        for run in spans(&exporter, "punctual.run") {
            assert_eq!(run.span_context.trace_id(), request.trace_id(), "{STORE}: another trace");
            assert_eq!(run.parent_span_id, request.span_id(), "{STORE}: another parent");
            assert!(run.parent_span_is_remote);
        }
        provider.shutdown().unwrap();
    }

    /// A tick was inserted by no one's request: its run starts its own
    /// trace; an insert outside any span gives a run without a parent.
    #[tokio::test]
    async fn a_tick_starts_a_trace_of_its_own() {
        let (exporter, provider, _guard) = traced();
        let store = Store::start();
        let q: Q<u32> = store.open("ticking").await;
        let request = tracing::info_span!("request");
        q.schedule_every("beat", ms(100), MissedTicks::Skip, &0)
            .instrument(request)
            .await
            .unwrap();
        q.insert(&1, Duration::ZERO).await.unwrap();
        let worker = Worker::builder(q.clone()).spawn(|_job: Job<u32>| async { Outcome::Done });
        eventually("two runs", || async { spans(&exporter, "punctual.run").len() >= 2 }).await;
        worker.shutdown(ms(100)).await;
        for run in spans(&exporter, "punctual.run") {
            assert_eq!(run.parent_span_id, SpanId::INVALID, "{STORE}: a run with a parent");
        }
        provider.shutdown().unwrap();
    }
}
