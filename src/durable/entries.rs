//! Looking into a durable queue: its entries by state, a page at a time
//! ([`EntryState`], [`EntryInfo`], [`Page`], [`Cursor`]).

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

/// The state of a durable queue's entry, as `stats()` counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryState {
    /// Not yet due.
    Pending,
    /// Due and not leased (an entry whose lease ran out counts here).
    Due,
    /// Leased to a consumer until its lease end.
    Leased,
    /// In the dead letters.
    Dead,
}

impl EntryState {
    /// The state's name in lower case (`pending`, `due`, `leased`, `dead`),
    /// as the JSON of `punctual-admin` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Pending => "pending",
            EntryState::Due => "due",
            EntryState::Leased => "leased",
            EntryState::Dead => "dead",
        }
    }

    fn code(self) -> char {
        match self {
            EntryState::Pending => 'p',
            EntryState::Due => 'd',
            EntryState::Leased => 'l',
            EntryState::Dead => 'x',
        }
    }

    fn of_code(code: &str) -> Option<EntryState> {
        Some(match code {
            "p" => EntryState::Pending,
            "d" => EntryState::Due,
            "l" => EntryState::Leased,
            "x" => EntryState::Dead,
            _ => return None,
        })
    }
}

impl fmt::Display for EntryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EntryState {
    type Err = InvalidCursor;

    /// `pending`, `due`, `leased` or `dead`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(EntryState::Pending),
            "due" => Ok(EntryState::Due),
            "leased" => Ok(EntryState::Leased),
            "dead" => Ok(EntryState::Dead),
            other => Err(InvalidCursor(format!(
                "{other:?} is not a state (pending, due, leased or dead)"
            ))),
        }
    }
}

/// One entry of a durable queue as an operator sees it, from `entries()`
/// and `entry()`.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryInfo<T> {
    /// The entry's id (a schedule's tick: the schedule's name).
    pub id: String,
    /// Its state when it was read.
    pub state: EntryState,
    /// When it is or was due, by the store's clock (a tick: its instant;
    /// a leased or dead entry: when its last delivery was due).
    pub due: SystemTime,
    /// When its lease runs out; `Leased` only.
    pub lease_until: Option<SystemTime>,
    /// When it went to the dead letters; `Dead` only.
    pub died_at: Option<SystemTime>,
    /// Deliveries counted so far.
    pub attempt: u32,
    /// A tick: its schedule's name.
    pub schedule: Option<String>,
    /// The reason of its last failed attempt, kept across retries (a dead
    /// letter: why it died).
    pub last_error: Option<String>,
    /// The value, or `None` when the stored value does not decode as `T`.
    pub value: Option<T>,
    /// The key whose limits it runs under, if it has one.
    pub key: Option<String>,
    /// Its priority (higher first among due entries; 0 by default).
    pub priority: i16,
    /// `Leased`: when this delivery began (its claim), by the store's clock.
    pub started_at: Option<SystemTime>,
    /// `Leased`: the id of the worker that holds it
    /// ([`WorkerInfo::id`](super::WorkerInfo::id)), where a worker took it.
    pub worker: Option<String>,
    /// Its last failed attempts (at most 10), oldest first.
    pub errors: Vec<super::AttemptError>,
}

/// One page of `entries()`: the entries, and where the next page starts
/// (`None` on the last page).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// At most the `limit` asked for (and at most 1000), in delivery order.
    pub entries: Vec<EntryInfo<T>>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// Where a walk through one state's entries goes on: after the last entry
/// of a page. Opaque; it reads and parses back as text (`Display`,
/// `FromStr`) for URLs and the command line. A cursor belongs to one state
/// of one queue: another queue's, or another state's, is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor(String);

/// Why a text is not a [`Cursor`] (or not a state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCursor(String);

impl fmt::Display for InvalidCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidCursor {}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Cursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        At::parse(s)?;
        Ok(Cursor(s.to_owned()))
    }
}

/// A cursor's content: after (`score`, `tie`) in `state` of the queue
/// `queue` names. `tie` orders entries of one score: a sequence number, or
/// a Redis sorted set's member. `queue` is the queue's whole identity
/// ([`At::queue`]), carried as it is rather than hashed, so no two queues
/// share one (a hash of a few bytes could be made to collide by trying
/// names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct At {
    pub(crate) state: EntryState,
    pub(crate) score: u64,
    pub(crate) tie: String,
    queue: String,
    /// Made by `entries_newest` (walks its state's order backwards).
    newest: bool,
}

/// `bytes` as lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lower-case or upper-case hex `text`, if it is hex.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl At {
    /// The identity of queue `name` of store `store` held by `instance`:
    /// what tells it from every other queue, in every process. `instance`
    /// names the store instance: the memory queue object, the Redis
    /// queue's own id kept with its keys, the PostgreSQL server, database
    /// and schema.
    pub(crate) fn queue(store: &str, name: &str, instance: &str) -> String {
        format!("{store}\0{name}\0{instance}")
    }

    /// A cursor after (`score`, `tie`) in `state` of the queue whose
    /// identity is `queue`.
    pub(crate) fn cursor(queue: &str, state: EntryState, score: u64, tie: &str) -> Cursor {
        Self::cursor_to(queue, state, false, score, tie)
    }

    /// As [`cursor`](Self::cursor), for a walk newest first.
    pub(crate) fn cursor_newest(queue: &str, state: EntryState, score: u64, tie: &str) -> Cursor {
        Self::cursor_to(queue, state, true, score, tie)
    }

    fn cursor_to(queue: &str, state: EntryState, newest: bool, score: u64, tie: &str) -> Cursor {
        // Newest first: the state's code in upper case.
        let code = if newest {
            state.code().to_ascii_uppercase()
        } else {
            state.code()
        };
        Cursor(format!(
            "2{code}.{score}.{}.{}",
            hex(tie.as_bytes()),
            hex(queue.as_bytes())
        ))
    }

    fn parse(s: &str) -> Result<At, InvalidCursor> {
        let bad = || InvalidCursor(format!("{s:?} is not a cursor"));
        let mut parts = s.split('.');
        let head = parts.next().ok_or_else(bad)?;
        let code = head.strip_prefix('2').ok_or_else(bad)?;
        let newest = code.chars().all(|c| c.is_ascii_uppercase());
        let state = EntryState::of_code(&code.to_ascii_lowercase()).ok_or_else(bad)?;
        let score = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let tie = parts.next().and_then(unhex).ok_or_else(bad)?;
        let queue = parts.next().and_then(unhex).ok_or_else(bad)?;
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(At {
            state,
            score,
            tie: String::from_utf8(tie).map_err(|_| bad())?,
            queue: String::from_utf8(queue).map_err(|_| bad())?,
            newest,
        })
    }

    /// The instance part of `cursor`'s queue identity, if that identity
    /// starts with `prefix` (`At::queue(store, name, "")`): for a store
    /// that checks the instance itself.
    pub(crate) fn instance_in(cursor: &Cursor, prefix: &str) -> Option<String> {
        let at = At::parse(&cursor.0).ok()?;
        at.queue.strip_prefix(prefix).map(str::to_owned)
    }

    /// What `cursor` says, if it is one of `state` of the queue whose
    /// identity is `queue`; else why not.
    pub(crate) fn of(cursor: &Cursor, queue: &str, state: EntryState) -> Result<At, String> {
        Self::of_to(cursor, queue, state, false)
    }

    /// As [`of`](Self::of), for a walk newest first.
    pub(crate) fn of_newest(cursor: &Cursor, queue: &str, state: EntryState) -> Result<At, String> {
        Self::of_to(cursor, queue, state, true)
    }

    fn of_to(cursor: &Cursor, queue: &str, state: EntryState, newest: bool) -> Result<At, String> {
        let at = At::parse(&cursor.0).map_err(|e| e.0)?;
        if at.newest != newest {
            let (made, used) = if at.newest {
                ("entries_newest", "entries")
            } else {
                ("entries", "entries_newest")
            };
            return Err(format!(
                "cursor {cursor} walks the pages of `{made}`, not of `{used}`"
            ));
        }
        if at.queue != queue {
            return Err(format!("cursor {cursor} is another queue's"));
        }
        if at.state != state {
            return Err(format!(
                "cursor {cursor} walks the {} entries, not the {state} ones",
                at.state
            ));
        }
        Ok(at)
    }
}

/// The score of a paused schedule's pending tick (*parked*): after every
/// real due time (those are at most 2^52 ms on from now), exact in a Redis
/// score. PostgreSQL parks at a later score still; any score from this one
/// on is a parked tick's.
pub(crate) const PARKED: u64 = 9_000_000_000_000_000;

/// One entry as a store reads it, before its value is decoded.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) state: EntryState,
    /// Its place in its state's order: its due time (pending, due), lease
    /// end (leased) or time of death (dead), in ms.
    pub(crate) score: u64,
    /// When its last delivery was due, if it had one; a parked tick's
    /// (pending, score `PARKED` or later): its instant.
    pub(crate) deadline: Option<u64>,
    pub(crate) attempt: u32,
    pub(crate) tick: bool,
    pub(crate) reason: Option<String>,
    /// The stored JSON.
    pub(crate) value: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) priority: i16,
}

impl Row {
    /// The entry as an operator sees it.
    pub(crate) fn info<T: serde::de::DeserializeOwned>(self) -> EntryInfo<T> {
        let at = |ms: u64| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        let last = self.deadline.unwrap_or(self.score);
        EntryInfo {
            state: self.state,
            due: at(match self.state {
                // A parked tick is due at its instant once resumed.
                EntryState::Pending if self.score >= PARKED => last,
                EntryState::Pending | EntryState::Due => self.score,
                EntryState::Leased | EntryState::Dead => last,
            }),
            lease_until: (self.state == EntryState::Leased).then(|| at(self.score)),
            died_at: (self.state == EntryState::Dead).then(|| at(self.score)),
            attempt: self.attempt,
            schedule: self.tick.then(|| self.id.clone()),
            last_error: self.reason,
            value: self
                .value
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok()),
            id: self.id,
            key: self.key,
            priority: self.priority,
            started_at: None,
            worker: None,
            errors: Vec::new(),
        }
    }
}

/// The most entries one page holds.
pub(crate) const MAX_PAGE: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_belong_to_one_state_of_one_queue() {
        let jobs = At::queue("memory", "jobs", "a1");
        let c = At::cursor(&jobs, EntryState::Due, 1_700_000_000_000, "#12 é");
        let text = c.to_string();
        let back: Cursor = text.parse().unwrap();
        assert_eq!(back, c);
        let at = At::of(&back, &jobs, EntryState::Due).unwrap();
        assert_eq!((at.score, at.tie.as_str()), (1_700_000_000_000, "#12 é"));
        for other in [
            At::queue("memory", "other", "a1"),
            At::queue("redis", "jobs", "a1"),
            At::queue("memory", "jobs", "a2"),
            // The parts cannot run into each other.
            At::queue("memory", "jobs\0a1", ""),
        ] {
            assert!(At::of(&back, &other, EntryState::Due).is_err(), "{other:?}");
        }
        assert!(At::of(&back, &jobs, EntryState::Dead).is_err());
        for bad in [
            "",
            "x",
            "2d.1.00",
            "2q.1.00.00",
            "2d.x.00.00",
            "2d.1.0.00",
            "2d.1.00.0",
            "2d.1.00.00.00",
            // The hashed form of earlier releases.
            "1d.1.00.00000000",
        ] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
    }
}
