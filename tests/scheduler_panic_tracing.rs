//! A panic is recorded as a `tracing` error event: a stopped periodic job is
//! never silent.
//!
//! Alone in its test binary: `tracing` caches each callsite's interest, and a
//! test panicking on another thread with no subscriber could race this one's
//! thread-local subscriber.

use punctual::Scheduler;
use std::sync::Mutex;
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

const MS: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Errors(Mutex<Vec<String>>);

struct Text<'a>(&'a mut String);
impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl Subscriber for &'static Errors {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::ERROR {
            let mut text = String::new();
            event.record(&mut Text(&mut text));
            self.0.lock().unwrap().push(text);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_periodic_panic_emits_an_error_event() {
    let errors: &'static Errors = Box::leak(Box::default());
    tracing::subscriber::with_default(errors, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let scheduler = Scheduler::new(1);
            let job = scheduler
                .schedule_at_fixed_rate(MS, MS, || async { panic!("disk full") })
                .unwrap();
            assert!(job.await.unwrap_err().is_panic());
        });
    });
    let errors = errors.0.lock().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("disk full"), "{}", errors[0]);
    assert!(errors[0].contains("will not run again"), "{}", errors[0]);
}
