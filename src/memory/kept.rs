//! What a memory queue keeps of entries that finished: their results (for
//! `keep_results`), the marks of cancelled leases (so their holders learn
//! of the cancel at their next extension), and the ids that finished in the
//! step under way (pushed to waiters once the lock is let go).
//!
//! Ground rules. Part of `State`, behind its lock. Results and marks
//! expire on the queue's clock and are forgotten lazily, by the next write
//! that looks (no sweeper).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::durable::Finished;

/// One kept result.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(crate) state: Finished,
    pub(crate) at: u64,
    pub(crate) attempts: u32,
    /// JSON.
    pub(crate) output: Option<Arc<str>>,
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Results {
    kept: HashMap<String, (Kept, u64)>,
    until: BTreeSet<(u64, String)>,
    /// Cancelled leases: id -> (the token that held it, until when it may
    /// still be extended: its lease end then).
    marks: HashMap<String, (Arc<str>, u64)>,
    /// The ids that left the live entries in this step (acked, dead,
    /// cancelled, removed), for `wait`.
    pub(crate) finished: Vec<String>,
}

impl Results {
    /// Keeps `kept` as entry `id`'s result until `now + keep` (`keep` 0:
    /// nothing is kept).
    pub(crate) fn keep(&mut self, id: &str, kept: Kept, keep: u64, now: u64) {
        self.forget_expired(now);
        if keep == 0 {
            return;
        }
        let until = now.saturating_add(keep);
        if let Some((_, old)) = self.kept.insert(id.to_owned(), (kept, until)) {
            self.until.remove(&(old, id.to_owned()));
        }
        self.until.insert((until, id.to_owned()));
    }

    /// Entry `id`'s result, if kept at `now`.
    pub(crate) fn get(&self, id: &str, now: u64) -> Option<&Kept> {
        self.kept
            .get(id)
            .filter(|(_, until)| *until > now)
            .map(|(kept, _)| kept)
    }

    /// Forgets entry `id`'s result (a dead letter requeued: its next finish
    /// is the one to wait for).
    pub(crate) fn forget(&mut self, id: &str) {
        if let Some((_, until)) = self.kept.remove(id) {
            self.until.remove(&(until, id.to_owned()));
        }
    }

    fn forget_expired(&mut self, now: u64) {
        while let Some(first) = self.until.first() {
            if first.0 > now {
                break;
            }
            let (_, id) = self.until.pop_first().expect("looked at");
            self.kept.remove(&id);
        }
    }

    /// The lease of `id` held by `token` was cancelled; its holder may learn
    /// it until `until`.
    pub(crate) fn mark(&mut self, id: &str, token: Arc<str>, until: u64, now: u64) {
        self.marks.retain(|_, (_, until)| *until > now);
        self.marks.insert(id.to_owned(), (token, until));
    }

    /// Whether the lease of `id` held by `token` was cancelled.
    pub(crate) fn cancelled(&self, id: &str, token: &str, now: u64) -> bool {
        self.marks
            .get(id)
            .is_some_and(|(held, until)| &**held == token && *until >= now)
    }
}
