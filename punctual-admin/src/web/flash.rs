//! The line a page shows after a button did something ("Requeued dead-1:
//! due now."): written by the server, kept here a few minutes under a
//! random key, and named in the redirect's `?done=KEY`. A `done` that is
//! not a key of ours shows nothing, so no link can make the dashboard
//! show a text of its author's choosing as a success banner.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long a line is kept for its page.
const KEEP: Duration = Duration::from_secs(300);

/// The most lines kept at once (the oldest go first).
const AT_MOST: usize = 1024;

/// The lines written for the pages after buttons.
#[derive(Debug, Default)]
pub(crate) struct Flashes {
    lines: Mutex<VecDeque<(String, String, Instant)>>,
    made: AtomicU64,
    keys: std::hash::RandomState,
}

impl Flashes {
    /// Keeps `line` and returns its key.
    pub(crate) fn put(&self, line: String) -> String {
        let mut hasher = self.keys.build_hasher();
        hasher.write_u64(self.made.fetch_add(1, Ordering::Relaxed));
        let mut second = self.keys.build_hasher();
        second.write_u64(hasher.finish());
        let key = format!("{:016x}{:016x}", hasher.finish(), second.finish());
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.retain(|(_, _, at)| at.elapsed() < KEEP);
        while lines.len() >= AT_MOST {
            lines.pop_front();
        }
        lines.push_back((key.clone(), line, Instant::now()));
        key
    }

    /// The line kept under `key`, if it is one of ours and not too old.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .iter()
            .find(|(k, _, at)| k == key && at.elapsed() < KEEP)
            .map(|(_, line, _)| line.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_of_ours_give_a_line() {
        let f = Flashes::default();
        let a = f.put("Requeued dead-1.".into());
        let b = f.put("Paused orders.".into());
        assert_ne!(a, b);
        assert_eq!(f.get(&a).as_deref(), Some("Requeued dead-1."));
        assert_eq!(f.get(&b).as_deref(), Some("Paused orders."));
        assert_eq!(f.get("Deleted everything."), None);
        assert_eq!(f.get(""), None);
    }
}
