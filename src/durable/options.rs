//! What an insert may say beyond "this value, due then" ([`InsertOptions`]),
//! and the limits a key's entries run under ([`KeyLimit`], [`Rate`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::rules::id_problem;

/// How an entry is inserted by `insert_with` and `insert_many_with` (on
/// every store, and on [`Durable`](super::Durable)): when it is due, under
/// which id, how urgent it is, which key's limits it runs under, how many
/// attempts it gets, and what happens when its id is taken.
///
/// `InsertOptions::new()` (or `default()`) is an insert as `insert` makes
/// it: due now, a new id, priority 0, no key, the queue's `max_attempts`.
///
/// | option | the entry |
/// |---|---|
/// | [`delay`](Self::delay), [`at`](Self::at) | due then (the later call wins) |
/// | [`id`](Self::id) | under the caller's id, as `insert_with_id`: refused (`None`) while an entry has it |
/// | [`priority`](Self::priority) | among due entries, higher first; never due sooner |
/// | [`key`](Self::key) | runs under the key's [`KeyLimit`], and fairly beside other keys |
/// | [`max_attempts`](Self::max_attempts) | its own limit instead of the queue's (0: never dead) |
/// | [`unique_for`](Self::unique_for) | its id stays taken this long after it finishes |
/// | [`replace`](Self::replace) | a pending entry of its id takes the new value (debounce) |
///
/// # Examples
///
/// ```
/// use punctual::durable::InsertOptions;
/// use punctual::memory::MemoryQueue;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), punctual::memory::Error> {
/// let mail: MemoryQueue<String> = MemoryQueue::new("mail");
/// // A password reset goes before the newsletter backlog.
/// let urgent = InsertOptions::new().priority(10).key("smtp");
/// mail.insert_with(&"reset for alice".into(), &urgent).await?;
/// // At most one digest per user per hour: the id stays taken for an hour
/// // after the digest is sent.
/// let digest = InsertOptions::new().id("digest:alice").unique_for(Duration::from_secs(3600));
/// assert!(mail.insert_with(&"digest".into(), &digest).await?.is_some());
/// assert!(mail.insert_with(&"digest".into(), &digest).await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InsertOptions {
    due: Due,
    id: Option<String>,
    priority: i16,
    key: Option<String>,
    max_attempts: Option<u32>,
    unique_for: Option<Duration>,
    replace: bool,
}

/// When an entry is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// This long after now, on the store's clock.
    In(Duration),
    /// At this time.
    At(SystemTime),
}

impl Default for Due {
    fn default() -> Self {
        Due::In(Duration::ZERO)
    }
}

impl InsertOptions {
    /// Due now, under a new id, priority 0, no key, the queue's
    /// `max_attempts`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Due `delay` from now, on the store's clock (replaces an earlier
    /// [`at`](Self::at)).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.due = Due::In(delay);
        self
    }

    /// Due at `at` (a time before the Unix epoch counts as the epoch;
    /// replaces an earlier [`delay`](Self::delay)).
    #[must_use]
    pub fn at(mut self, at: SystemTime) -> Self {
        self.due = Due::At(at);
        self
    }

    /// The caller's id, as `insert_with_id` takes it (the id rules apply):
    /// while an entry has this id (pending, leased or dead), the insert is
    /// refused, unless [`replace`](Self::replace) says otherwise.
    #[must_use]
    pub fn id(mut self, id: &str) -> Self {
        self.id = Some(id.to_owned());
        self
    }

    /// How urgent it is: among due entries a claim takes the highest
    /// priority first (equal priorities in due order, FIFO on ties).
    /// Default 0. Priority never makes an entry due sooner, and a retry
    /// keeps it.
    #[must_use]
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// The key it runs under (a tenant, an account, a provider; the id
    /// rules apply): the key's [`KeyLimit`] bounds how many of its entries
    /// run at once and how many start per period, and among due entries of
    /// equal priority a claim takes one entry of each key before a second
    /// of any, so one key's backlog never holds up another's entry.
    #[must_use]
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_owned());
        self
    }

    /// How many deliveries it gets before the dead letters, instead of the
    /// queue's `max_attempts`; 0: never dead.
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Keeps the id taken for `window` after the entry finishes (acked;
    /// removed; a dead letter removed, cleared or cancelled): an insert of
    /// that id meanwhile is refused (`None`, or `false` from
    /// `insert_with_id`). Needs [`id`](Self::id).
    #[must_use]
    pub fn unique_for(mut self, window: Duration) -> Self {
        self.unique_for = Some(window);
        self
    }

    /// With `true`, a pending entry of this id (due or not, not leased,
    /// not dead) takes this insert's value, due time, priority, key and
    /// options, its attempts reset: the last of a burst of inserts wins
    /// (debounce). A leased entry is never replaced. Needs
    /// [`id`](Self::id).
    #[must_use]
    pub fn replace(mut self, on: bool) -> Self {
        self.replace = on;
        self
    }

    /// The options checked and made plain for a store, with the value's
    /// JSON; `Err` says what is wrong (an `InvalidId` error's text).
    pub(crate) fn plan(&self, json: String) -> Result<Plan, String> {
        if let Some(id) = &self.id {
            if let Some(why) = id_problem(id) {
                return Err(why);
            }
        } else if self.unique_for.is_some() {
            return Err("`unique_for` needs an id: set `InsertOptions::id`".into());
        } else if self.replace {
            return Err("`replace` needs an id: set `InsertOptions::id`".into());
        }
        if let Some(key) = &self.key {
            if let Some(why) = id_problem(key) {
                return Err(format!("a key follows the id rules: {why}"));
            }
        }
        Ok(Plan {
            id: self.id.clone(),
            json,
            due: match self.due {
                Due::In(delay) => When::In(millis(delay)),
                Due::At(at) => When::At(ms_since_epoch(at)),
            },
            priority: self.priority,
            key: self.key.clone(),
            max_attempts: self.max_attempts,
            unique_ms: self.unique_for.map(|w| millis(w).max(1)),
            replace: self.replace,
            trace: super::trace::current(),
        })
    }
}

/// When a planned entry is due: in ms from now, or at ms since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    In(u64),
    At(u64),
}

impl When {
    /// The time, ms since the epoch, given the store's clock `now`.
    pub(crate) fn at(self, now: u64) -> u64 {
        match self {
            When::In(delay) => now.saturating_add(delay),
            When::At(at) => at,
        }
    }
}

/// One entry to insert, checked: what every store's insert takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) id: Option<String>,
    pub(crate) json: String,
    pub(crate) due: When,
    pub(crate) priority: i16,
    pub(crate) key: Option<String>,
    pub(crate) max_attempts: Option<u32>,
    /// The unique window, in ms (at least 1).
    pub(crate) unique_ms: Option<u64>,
    pub(crate) replace: bool,
    /// The inserting span's trace context (feature `opentelemetry`).
    pub(crate) trace: Option<String>,
}

impl Plan {
    /// An entry as `insert`, `insert_at` and `insert_with_id` make it.
    pub(crate) fn plain(id: Option<&str>, json: String, due: When) -> Plan {
        Plan {
            id: id.map(str::to_owned),
            json,
            due,
            priority: 0,
            key: None,
            max_attempts: None,
            unique_ms: None,
            replace: false,
            trace: super::trace::current(),
        }
    }

    /// Whether it needs more than a plain insert: a priority, a key, its
    /// own attempts, a unique window or a replace.
    #[allow(dead_code)] // (for the stores across a network)
    pub(crate) fn is_plain(&self) -> bool {
        self.priority == 0
            && self.key.is_none()
            && self.max_attempts.is_none()
            && self.unique_ms.is_none()
            && !self.replace
    }
}

/// How many entries of one key may run at once and start per period; set
/// with `set_key_limit(key, limit)` (or `set_default_key_limit` for every
/// key without its own), on every store and on
/// [`Durable`](super::Durable). `None` is no bound.
///
/// Decided in the store's claim step: no number of consumers in any number
/// of processes starts an entry whose key is at its concurrency (its
/// entries leased now) or whose rate is spent (deliveries of the key begun
/// within the last `per`, retries included, on the store's clock). Such an
/// entry waits without counting an attempt and never holds up the entries
/// behind it; a worker waiting on it wakes when a place of its key frees
/// (an ack, a retry, a dead letter, a lease that ran out) or its window
/// opens, not at its poll interval. A concurrency of 0 (or a rate of 0 per
/// period) holds the key's entries until the limit changes.
///
/// # Examples
///
/// ```
/// use punctual::durable::{KeyLimit, Rate};
/// use std::time::Duration;
///
/// // At most 5 calls at once to the payment provider, 100 a minute.
/// let provider = KeyLimit {
///     concurrency: Some(5),
///     rate: Some(Rate { max: 100, per: Duration::from_secs(60) }),
/// };
/// // One sync per account at a time.
/// let account = KeyLimit { concurrency: Some(1), rate: None };
/// # let _ = (provider, account);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyLimit {
    /// The most entries of the key leased at once.
    pub concurrency: Option<u32>,
    /// The most deliveries of the key begun per period.
    pub rate: Option<Rate>,
}

/// At most `max` deliveries begun within any `per` (a delivery begun
/// exactly `per` ago no longer counts). Millisecond resolution; `per` is
/// at least 1 ms, and a longer one than 2^52 ms (about 142,000 years, as
/// `Duration::MAX`) is kept as that: "at most `max`, ever".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Deliveries per period.
    pub max: u32,
    /// The period.
    pub per: Duration,
}

/// The key under which `key_limits()` lists the default limit.
pub(crate) const DEFAULT_KEY: &str = "*";

impl KeyLimit {
    /// The limit checked for a store: `Err` names what is wrong. Its text
    /// form, as every store keeps it: `<concurrency>,<rate max>,<rate per
    /// ms>`, each empty for no bound.
    pub(crate) fn encode(&self) -> Result<String, String> {
        if let Some(rate) = self.rate {
            if rate.per.is_zero() {
                return Err("a rate's `per` must be longer than zero".into());
            }
        }
        let opt = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        Ok(format!(
            "{},{},{}",
            opt(self.concurrency.map(u64::from)),
            opt(self.rate.map(|r| u64::from(r.max))),
            opt(self.rate.map(|r| millis(r.per).max(1))),
        ))
    }

    /// The limit a store kept as `encode` made it.
    #[allow(dead_code)] // (for the stores across a network)
    pub(crate) fn decode(text: &str) -> Option<KeyLimit> {
        let mut parts = text.splitn(3, ',');
        let mut next = || -> Option<Option<u64>> {
            let part = parts.next()?;
            if part.is_empty() {
                Some(None)
            } else {
                part.parse().ok().map(Some)
            }
        };
        let concurrency = next()?;
        let max = next()?;
        let per = next()?;
        Some(KeyLimit {
            concurrency: concurrency.map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
            rate: match (max, per) {
                (Some(max), Some(per)) => Some(Rate {
                    max: u32::try_from(max).unwrap_or(u32::MAX),
                    per: Duration::from_millis(per),
                }),
                _ => None,
            },
        })
    }
}

/// Checks a key given to `set_key_limit` and the like (the default's name,
/// `*`, included).
pub(crate) fn key_problem(key: &str) -> Option<String> {
    id_problem(key).map(|why| format!("a key follows the id rules: {why}"))
}

/// `d` in whole milliseconds, saturating at the longest span the stores
/// keep (2^52 ms, about 142,000 years).
fn millis(d: Duration) -> u64 {
    super::ops::millis(d)
}

/// `at` in ms since the Unix epoch (0 before it), saturating.
fn ms_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_back() {
        for limit in [
            KeyLimit::default(),
            KeyLimit {
                concurrency: Some(0),
                rate: None,
            },
            KeyLimit {
                concurrency: Some(5),
                rate: Some(Rate {
                    max: 100,
                    per: Duration::from_secs(60),
                }),
            },
            KeyLimit {
                concurrency: None,
                rate: Some(Rate {
                    max: 0,
                    per: Duration::from_millis(1),
                }),
            },
        ] {
            assert_eq!(KeyLimit::decode(&limit.encode().unwrap()), Some(limit));
        }
        let zero = KeyLimit {
            concurrency: None,
            rate: Some(Rate {
                max: 1,
                per: Duration::ZERO,
            }),
        };
        assert!(zero.encode().is_err());
        assert_eq!(KeyLimit::decode("x"), None);
    }

    #[test]
    fn options_need_an_id_for_uniqueness_and_replace() {
        let json = || "1".to_owned();
        assert!(
            InsertOptions::new()
                .unique_for(Duration::from_secs(1))
                .plan(json())
                .unwrap_err()
                .contains("unique_for")
        );
        assert!(
            InsertOptions::new()
                .replace(true)
                .plan(json())
                .unwrap_err()
                .contains("replace")
        );
        assert!(InsertOptions::new().key("").plan(json()).is_err());
        assert!(InsertOptions::new().id("a\0").plan(json()).is_err());
        let plan = InsertOptions::new()
            .id("a")
            .replace(true)
            .unique_for(Duration::from_micros(10))
            .priority(-3)
            .at(UNIX_EPOCH + Duration::from_secs(2))
            .plan(json())
            .unwrap();
        assert_eq!(plan.due, When::At(2000));
        assert_eq!(plan.unique_ms, Some(1));
        assert!(!plan.is_plain());
        assert!(InsertOptions::new().plan(json()).unwrap().is_plain());
        assert_eq!(
            InsertOptions::new()
                .delay(Duration::from_secs(1))
                .at(UNIX_EPOCH)
                .plan(json())
                .unwrap()
                .due,
            When::At(0)
        );
    }
}
