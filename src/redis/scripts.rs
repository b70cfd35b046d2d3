//! The server-side Lua scripts: every operation on a queue is one of them,
//! in `scripts/<operation>.lua`, each opening with its KEYS, ARGV and reply.
//!
//! Each script gets the queue's sixteen keys in the order of [`Keys`] and reads
//! the clock with `TIME`, so every process agrees on what is due. A script
//! that fails half way leaves its first writes in place, so each one checks
//! the type of every key it writes before its first write: the hot ones
//! (insert, claim, finish) by reads they need anyway, by writing the one
//! key they do not read first, or, once per batch, with `TYPE`; the others
//! every key. `build` checks every key once.
//!
//! Every write but `extend` and `purge` takes a request identity
//! (`scripts/lib/requests.lua`): on a cluster a second execution of the
//! same request answers from what the first kept (`requests` is read before
//! any write, which checks its type); on a single server the identity is
//! empty and the scripts skip all of it.

use std::sync::LazyLock;

use redis::Script;

/// Names of one queue's keys, all under the hash tag `{name}`.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `schedule`, `entries`, `leases`, `dead`, `seq`, `schedules`,
    /// `given_up`, `requests`, `special`, `ready`, `held`, `limits`,
    /// `unique`, `kept`, `marks`, `workers`, in the order the scripts
    /// expect them as `KEYS[1..=16]`.
    pub(crate) all: [String; 16],
    /// The pub/sub channel announcing a new head.
    pub(crate) channel: String,
    /// The pub/sub channel announcing finishes whose results are kept, and
    /// cancels of leased entries.
    pub(crate) done: String,
}

impl Keys {
    pub(crate) fn new(name: &str) -> Keys {
        let key = |suffix: &str| format!("punctual:{{{name}}}:{suffix}");
        Keys {
            all: [
                key("schedule"),
                key("entries"),
                key("leases"),
                key("dead"),
                key("seq"),
                key("schedules"),
                key("given_up"),
                key("requests"),
                key("special"),
                key("ready"),
                key("held"),
                key("limits"),
                key("unique"),
                key("kept"),
                key("marks"),
                key("workers"),
            ],
            channel: key("wake"),
            done: key("done"),
        }
    }
}

/// A script: the prelude, the helpers it uses (from `scripts/lib/`), then
/// its own file. Each script takes only the helpers it uses, since defining
/// them is part of every call's cost.
macro_rules! lua {
    ($name:literal $(, $lib:literal)*) => {
        concat!(
            include_str!("scripts/lib/prelude.lua"),
            $(include_str!(concat!("scripts/lib/", $lib, ".lua")),)*
            include_str!(concat!("scripts/", $name, ".lua"))
        )
    };
}

/// The scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) insert: Script,
    pub(crate) claim: Script,
    pub(crate) finish: Script,
    pub(crate) extend: Script,
    pub(crate) remove: Script,
    pub(crate) reset: Script,
    pub(crate) deadline: Script,
    pub(crate) stats: Script,
    pub(crate) dead_letters: Script,
    pub(crate) requeue_dead: Script,
    pub(crate) purge: Script,
    pub(crate) check: Script,
    pub(crate) rights: Script,
    pub(crate) schedule: Script,
    pub(crate) schedules: Script,
    pub(crate) now: Script,
    pub(crate) entries: Script,
    pub(crate) entry: Script,
    pub(crate) pause: Script,
    pub(crate) paused: Script,
    pub(crate) dead_all: Script,
    pub(crate) limit: Script,
    pub(crate) limits: Script,
    pub(crate) result: Script,
    pub(crate) cancel: Script,
    pub(crate) workers: Script,
    pub(crate) leave: Script,
    pub(crate) history: Script,
    pub(crate) latency: Script,
    pub(crate) pause_schedule: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    insert: Script::new(lua!("insert", "now_ms", "index", "place", "requests")),
    claim: Script::new(lua!(
        "claim", "now_ms", "index", "place", "held", "ticks", "finish", "requests"
    )),
    finish: Script::new(lua!(
        "finish", "now_ms", "index", "place", "held", "ticks", "finish", "requests"
    )),
    extend: Script::new(lua!("extend", "now_ms", "index", "place", "held")),
    remove: Script::new(lua!("remove", "check_all", "now_ms", "index", "requests")),
    reset: Script::new(lua!(
        "reset",
        "check_all",
        "now_ms",
        "index",
        "place",
        "requests"
    )),
    deadline: Script::new(lua!("deadline", "check_all")),
    stats: Script::new(lua!("stats", "check_all", "now_ms")),
    dead_letters: Script::new(lua!("dead_letters", "check_all")),
    requeue_dead: Script::new(lua!(
        "requeue_dead",
        "check_all",
        "now_ms",
        "index",
        "place",
        "requests"
    )),
    purge: Script::new(lua!("purge", "check_all")),
    check: Script::new(lua!("check", "check_all")),
    rights: Script::new(lua!("rights")),
    schedule: Script::new(lua!(
        "schedule",
        "check_all",
        "now_ms",
        "index",
        "place",
        "ticks",
        "requests"
    )),
    schedules: Script::new(lua!("schedules", "check_all")),
    now: Script::new(lua!("now", "now_ms")),
    entries: Script::new(lua!("entries", "check_all", "now_ms")),
    entry: Script::new(lua!("entry", "check_all", "now_ms")),
    pause: Script::new(lua!("pause", "check_all", "now_ms", "requests")),
    paused: Script::new(lua!("paused", "check_all")),
    dead_all: Script::new(lua!(
        "dead_all",
        "check_all",
        "now_ms",
        "index",
        "place",
        "requests"
    )),
    limit: Script::new(lua!("limit", "check_all", "now_ms", "requests")),
    limits: Script::new(lua!("limits", "check_all")),
    result: Script::new(lua!("result", "check_all", "now_ms")),
    cancel: Script::new(lua!(
        "cancel",
        "check_all",
        "now_ms",
        "index",
        "place",
        "ticks",
        "requests"
    )),
    workers: Script::new(lua!("workers", "check_all", "now_ms")),
    leave: Script::new(lua!("leave")),
    history: Script::new(lua!("history", "check_all", "now_ms")),
    latency: Script::new(lua!("latency", "check_all", "now_ms", "place")),
    pause_schedule: Script::new(lua!(
        "pause_schedule",
        "check_all",
        "now_ms",
        "place",
        "requests"
    )),
});
