//! The server-side Lua scripts: every operation on a queue is one of them,
//! in `scripts/<operation>.lua`, each opening with its KEYS, ARGV and reply.
//!
//! Each script gets the queue's eight keys in the order of [`Keys`] and reads
//! the clock with `TIME`, so every process agrees on what is due. A script
//! that fails half way leaves its first writes in place, so each one checks
//! the type of every key it writes before its first write: the hot ones
//! (insert, claim, ack) only those, by a read they need anyway or a `TYPE`;
//! the others every key. `build` checks every key once.

use std::sync::LazyLock;

use redis::Script;

/// Names of one queue's keys, all under the hash tag `{name}`.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `schedule`, `ids`, `values`, `attempts`, `leases`, `dead`, `reasons`,
    /// `seq`, in the order the scripts expect them as `KEYS[1..=8]`.
    pub(crate) all: [String; 8],
    /// The pub/sub channel announcing a new head.
    pub(crate) channel: String,
}

impl Keys {
    pub(crate) fn new(name: &str) -> Keys {
        let key = |suffix: &str| format!("punctual:{{{name}}}:{suffix}");
        Keys {
            all: [
                key("schedule"),
                key("ids"),
                key("values"),
                key("attempts"),
                key("leases"),
                key("dead"),
                key("reasons"),
                key("seq"),
            ],
            channel: key("wake"),
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
    pub(crate) ack: Script,
    pub(crate) retry: Script,
    pub(crate) extend: Script,
    pub(crate) bury: Script,
    pub(crate) remove: Script,
    pub(crate) reset: Script,
    pub(crate) deadline: Script,
    pub(crate) stats: Script,
    pub(crate) dead_letters: Script,
    pub(crate) requeue_dead: Script,
    pub(crate) purge: Script,
    pub(crate) check: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    insert: Script::new(lua!("insert", "now_ms", "schedule")),
    claim: Script::new(lua!("claim", "now_ms")),
    ack: Script::new(lua!("ack", "held")),
    retry: Script::new(lua!("retry", "held", "now_ms", "schedule")),
    extend: Script::new(lua!("extend", "held", "now_ms")),
    bury: Script::new(lua!("bury", "held", "now_ms")),
    remove: Script::new(lua!("remove", "check_all")),
    reset: Script::new(lua!("reset", "check_all", "now_ms", "schedule")),
    deadline: Script::new(lua!("deadline", "check_all")),
    stats: Script::new(lua!("stats", "check_all", "now_ms")),
    dead_letters: Script::new(lua!("dead_letters", "check_all")),
    requeue_dead: Script::new(lua!("requeue_dead", "check_all", "now_ms", "schedule")),
    purge: Script::new(lua!("purge", "check_all")),
    check: Script::new(lua!("check", "check_all")),
});
