//! `insert` and `insert_at` on a full bounded queue panic at the caller's
//! line, not inside the crate (`#[track_caller]` all the way down). Alone in
//! its binary: it installs a panic hook, which is global to the process.

use punctual::DelayQueue;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

type Location = Option<(String, u32)>;

/// Runs `f`, which must panic; returns where it panicked.
fn panic_location(f: impl FnOnce()) -> Location {
    let seen: Arc<Mutex<Location>> = Arc::default();
    let hook_seen = seen.clone();
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        *hook_seen.lock().unwrap() = info.location().map(|at| (at.file().to_owned(), at.line()));
    }));
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    assert!(outcome.is_err(), "expected a panic");
    seen.lock().unwrap().clone()
}

#[test]
fn a_full_bounded_queue_panics_at_the_callers_insert() {
    let queue = DelayQueue::bounded(1);
    queue.insert(1, Duration::from_secs(1));

    let line = line!() + 2;
    let at = panic_location(|| {
        queue.insert(2, Duration::from_secs(1));
    });
    assert_eq!(at, Some((file!().to_owned(), line)));

    let line = line!() + 2;
    let at = panic_location(|| {
        queue.insert_at(2, Instant::now());
    });
    assert_eq!(at, Some((file!().to_owned(), line)));
}
