//! A worker that dies by panic anyway is replaced, never counted as a
//! normal exit.
//!
//! User code runs inside `catch_unwind`, so the one way left to kill a
//! worker is a `tracing` subscriber that panics while the worker reports a
//! job's panic. Alone in its test binary: `tracing` caches each callsite's
//! interest process-wide.

use punctual::Scheduler;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::timeout;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

/// Panics on the "job panicked" report; counts the other error events.
#[derive(Default)]
struct Hostile {
    replaced: AtomicUsize,
}

struct Message(String);
impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for &'static Hostile {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0 == "job panicked" {
            panic!("the subscriber refuses to log");
        }
        if message.0.contains("replaces it") {
            self.replaced.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_worker_killed_by_a_panic_is_replaced_and_its_job_resolves() {
    let hostile: &'static Hostile = Box::leak(Box::default());
    tracing::subscriber::with_default(hostile, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let scheduler = Scheduler::new(1);
            let doomed = scheduler
                .schedule(MS, async { panic!("job fails") })
                .unwrap();
            let later = scheduler.schedule(MS * 5, async { "served" }).unwrap();
            // The worker dies reporting the first panic; the job still
            // resolves, and the replacement serves the next job.
            let err = timeout(HOUR, doomed).await.expect("handle never resolved");
            assert!(err.unwrap_err().is_panic());
            let served = timeout(HOUR, later).await.expect("no worker left");
            assert_eq!(served.unwrap(), "served");
            assert!(
                !scheduler.is_terminated(),
                "a dead worker counted as an exit"
            );
            let stats = scheduler.stats();
            assert_eq!((stats.running, stats.panicked, stats.completed), (0, 1, 1));
            scheduler.shutdown();
            timeout(HOUR, scheduler.terminated()).await.unwrap();
        });
    });
    assert_eq!(hostile.replaced.load(Ordering::SeqCst), 1);
}
