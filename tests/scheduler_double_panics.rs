//! Double panics must never abort the process: a user value whose `Drop`
//! panics while another panic unwinds, or a subscriber that panics on
//! every error event.
//!
//! Each scenario runs in a child process (this same test binary, re-run on
//! one test with `PUNCTUAL_TEST_CHILD` set), because an abort cannot be caught in
//! process. The parent asserts the child exits cleanly.

use punctual::Scheduler;
use std::time::Duration;
use tokio::time::timeout;

const PATIENCE: Duration = Duration::from_secs(10);

/// Runs `name` in a child process and asserts it did not abort.
fn in_child(name: &str, scenario: impl FnOnce()) {
    if std::env::var_os("PUNCTUAL_TEST_CHILD").is_some() {
        scenario();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("PUNCTUAL_TEST_CHILD", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child `{name}` failed ({:?}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Panics when dropped, unconditionally (like a drop bomb or an
/// `assert!` in `Drop` that does not check `thread::panicking()`).
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("PanicOnDrop dropped");
    }
}

/// A periodic job's closure panics when called. The closure also owns a
/// value whose `Drop` panics. Both panics are user panics the scheduler
/// promises to contain ("User values are contained"); calling the closure
/// by value (`Work::start(self)`) makes its `Drop` run during the unwind of
/// the first panic, a double panic, and the process aborts.
#[test]
fn a_panicking_periodic_closure_with_a_panicking_drop_does_not_abort() {
    in_child(
        "a_panicking_periodic_closure_with_a_panicking_drop_does_not_abort",
        || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async {
                let scheduler = Scheduler::new(1);
                let bomb = PanicOnDrop;
                let job = scheduler
                    .schedule_at_fixed_rate(
                        Duration::from_millis(1),
                        Duration::from_millis(1),
                        move || -> std::future::Ready<()> {
                            let _ = &bomb;
                            panic!("the closure fails");
                        },
                    )
                    .unwrap();
                let err = timeout(PATIENCE, job).await.unwrap().unwrap_err();
                assert!(err.is_panic());
                scheduler.shutdown();
                timeout(PATIENCE, scheduler.terminated()).await.unwrap();
            });
        },
    );
}

mod hostile {
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// A subscriber that panics on every error event (a "fail the test on
    /// any error log" layer). API.md: a worker that unwinds because a
    /// subscriber panicked is replaced; the job resolves `Panicked`.
    pub struct PanicsOnErrors;

    impl Subscriber for PanicsOnErrors {
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
                panic!("error event refused");
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

/// The subscriber panics while the worker reports a job's panic, so the
/// worker unwinds (the documented way to kill one). Unwinding, its
/// `ExitGuard::drop` logs "a new worker replaces it" at error level: the
/// subscriber panics again, inside a `Drop` during unwinding, and the
/// process aborts instead of replacing the worker.
#[test]
fn a_subscriber_that_panics_on_every_error_does_not_abort_the_process() {
    in_child(
        "a_subscriber_that_panics_on_every_error_does_not_abort_the_process",
        || {
            tracing::subscriber::with_default(hostile::PanicsOnErrors, || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let scheduler = Scheduler::new(1);
                    let doomed = scheduler
                        .schedule(Duration::from_millis(1), async { panic!("job fails") })
                        .unwrap();
                    let later = scheduler
                        .schedule(Duration::from_millis(5), async { "served" })
                        .unwrap();
                    let err = timeout(PATIENCE, doomed).await.unwrap().unwrap_err();
                    assert!(err.is_panic());
                    let served = timeout(PATIENCE, later).await.expect("no worker left");
                    assert_eq!(served.unwrap(), "served");
                });
            });
        },
    );
}
