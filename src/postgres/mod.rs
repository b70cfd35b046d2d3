//! The delay queue kept in PostgreSQL (cargo feature `postgres`), for
//! services that have a database and no Redis, with what Redis cannot
//! give: an insert inside the caller's own transaction.
//!
//! [`PgQueue<T>`] has every method of
//! `punctual::redis::RedisQueue<T>` with the same semantics
//! (ids, FIFO on equal deadlines, leases with recoverable claims, dead
//! letters, stats, purge, `insert_many`, schedules, the durable
//! [`Worker`](crate::durable::Worker)), the database's clock
//! (`clock_timestamp()`) deciding what is due, plus
//! [`insert_in`](PgQueue::insert_in),
//! [`insert_with_id_in`](PgQueue::insert_with_id_in) and
//! [`remove_in`](PgQueue::remove_in) inside the caller's transaction.
//!
//! ```no_run
//! use punctual::postgres::PgQueue;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), punctual::postgres::Error> {
//! let unpaid: PgQueue<u64> = PgQueue::connect("postgres://localhost/shop", "unpaid").await?;
//! unpaid.insert_with_id("order-17", &17, Duration::from_secs(30 * 60)).await?;
//!
//! // In any process, on any replica:
//! let order = unpaid.take().await?;
//! println!("order {} expired", order.value());
//! order.ack().await?;
//! # Ok(()) }
//! ```
//!
//! # Results, wait and cancel
//!
//! A result is a row of `results` written by the statement of the finish
//! it records (the delete of acked entries, the move to the dead letters,
//! the cancel), for the handle's `keep_results` (none without it: nothing
//! is written); a row past its `until` is not read, and the statements that
//! write results delete a few of those each. Requeuing a dead letter
//! deletes its result.
//!
//! [`wait`](PgQueue::wait) looks up the id in one statement (the result,
//! or whether a live entry has it), which also records in `waits` that the
//! id is looked for; a finish of such an id notifies `f<id>` on the queue's
//! channel, heard by the handle's one `LISTEN` connection and pushed to
//! every waiter of the handle (one lookup answers every waiter of an id).
//! A finish looks at `waits` with one index probe and notifies nothing
//! while no one waits. A push lost (the listener reconnecting, or a finish
//! committed beside the lookup that recorded the wait) costs at most the
//! poll interval.
//!
//! [`cancel`](PgQueue::cancel) deletes the entry at once, pending, due or
//! leased, and keeps its result `Cancelled`: a holder's ack, retry or
//! extension finds no lease (`Ok(false)`), and a row of `cancels` tells its
//! next extension that it was cancelled; the statement notifies `c`, on
//! which every worker of the queue extends at once, so a running handler
//! learns of it within a round trip. A tick's cancel places its successor
//! as its ack would: the schedule goes on. A cancel and an ack of the same
//! entry lock its row: one of them finds it, the other does not.
//!
//! # Health
//!
//! A worker refreshes its record (a row of `workers`) with each heartbeat,
//! in the statement that extends its leases (`beat`), and leaves a
//! tombstone at shutdown; its claims name it in their token, so a leased
//! entry's [`EntryInfo::worker`](crate::durable::EntryInfo) and
//! `started_at` (the claim's time) come with the entry's row. The
//! per-minute history is one upsert per statement that inserts or
//! finishes, in a row of the writing backend, so no transaction waits for
//! another's counts; rows older than a day are deleted as new ones come.
//! [`latency`](PgQueue::latency) is the queue's head (one index probe of
//! the plain entries, one of the special ones) if it is due. A paused
//! schedule's pending tick is parked past every real time (no claim
//! reaches it; its instant is kept), and put back at its instant when
//! resumed.
//!
//! # Transactions
//!
//! An entry inserted with [`insert_in`](PgQueue::insert_in) exists if and
//! only if the caller's transaction commits: "create the order and its
//! 30-minute expiry, or neither", with no outbox and no timer for an order
//! that was rolled back. Waiting consumers are woken at the commit (the
//! notification is sent by the inserting transaction), not before.
//! [`remove_in`](PgQueue::remove_in) likewise: "mark the order paid and
//! cancel its expiry".
//!
//! # How it works
//!
//! Every operation is one statement calling a PL/pgSQL function that
//! `build()` installs in the queue's schema (default `punctual`); the SQL is
//! `src/postgres/sql/schema.sql`, so a service in another language can share
//! the queue by calling the same functions. A claim takes due rows in
//! order with `FOR UPDATE SKIP LOCKED`, so consumers never wait on each
//! other, and leases them in the same statement: a leased row's `run_at` is
//! the end of its lease, so a lease that runs out makes the row due again
//! with nothing to move. A worker keeps one claim and one request of
//! finishes (acks, retries, dead letters) in flight side by side, each its
//! own transaction, so the places a claim fills never wait behind the
//! finishes of the runs that ended meanwhile. A claim returns at most
//! 16 MiB of values (at least one entry); more due entries come with the
//! next claim.
//!
//! Waiting consumers of one built handle (and its clones) share one waiter:
//! the leader sleeps until the head's deadline as the database reported it,
//! or until a notification (`LISTEN` on a channel of the queue, `NOTIFY`
//! sent by inserts, resets, retries, requeues and shortened leases due
//! before the first entry not yet due: a due head may be leased by a
//! claim running beside the write, whose consumer cannot see the write)
//! announces an earlier head, and asks again at least every
//! `poll_interval`. An idle queue costs one query per `poll_interval` per
//! built handle, and one connection of the pool held for `LISTEN` while
//! consumers wait. A due entry whose row another transaction holds locked
//! (an open `remove_in`, another consumer's claim) is skipped, not waited
//! for; since that transaction may end without a notification (a
//! rollback), consumers ask again every 200 ms (or `poll_interval`, if
//! shorter) while it lasts.
//!
//! Single inserts ([`insert`](PgQueue::insert),
//! [`insert_at`](PgQueue::insert_at),
//! [`insert_with_id`](PgQueue::insert_with_id); not the `_in` ones, which
//! run in the caller's transaction) made on one built handle while another
//! of them is on its way wait for it and go together, up to 256 in one
//! statement (the `insert` function for each, in the order of the calls)
//! and so one transaction, each caller with its own answer; a producer that
//! awaits each insert sends each alone, as before. If that statement fails
//! with the database's own error, nothing of it applied and each insert is
//! sent again alone, to get its own answer; a lost connection is every
//! one's error. Why, as measured (one producer with 256 inserts
//! in flight over a pool of 10): one transaction per insert ran at 0.46 to
//! 0.86 times a bare `INSERT` of the same row (its head lookup and the
//! PL/pgSQL call), held every connection of the pool, and a worker on the
//! same handle waited 70 to 220 ms for one per claim. `NOTIFY` is also
//! costly under concurrency, as suspected: a transaction that notifies
//! takes a lock at commit that every such transaction of the server waits
//! for, and `pgbench` with 10 clients ran the bare `INSERT` at 2,900 to
//! 4,400 per second and the same `INSERT` with a `pg_notify` at 500 to 680.
//! But an insert here notifies only when it makes a new head, and 8 of
//! 20,000 did in that workload; batched, a batch notifies at most once.
//! Batched, the same producer inserts 12,000 to 19,000 entries a second,
//! 2.8 to 3.3 times the bare `INSERT`'s rate beside it. A worker starts at
//! most its free places per claim and a claim (a PL/pgSQL statement and a
//! durable commit) takes a millisecond or more, so a worker with
//! `concurrency(8)` starts no more than 5,000 to 7,500 jobs a second on
//! the bench's 2-core machine (its drain); entries that come due faster
//! wait in a backlog, and their lateness is that backlog's: more places
//! (or more workers) are the remedy.
//!
//! # Keys, priorities and unique windows
//!
//! What [`InsertOptions`](crate::durable::InsertOptions) and
//! [`KeyLimit`](crate::durable::KeyLimit) say is decided in the same
//! statements as everything else (`insert_plans`, `claim`, the finishes),
//! so every consumer in every process follows it. An entry with a key or
//! a priority other than 0 is *special*; a queue while none of its due
//! entries is special claims exactly as before keys existed (one index
//! probe tells, and the walk of the plain entries in due order follows).
//! Otherwise the claim (`claim_fair`) visits the priority levels that have
//! due entries, highest first, and within a level takes one entry of each
//! key before a second of any (an entry without a key is a key of its own),
//! skipping the keys their limits refuse. It reads a *window* of the
//! level's first due entries (`max + 8`, or `2 * max + 16` where keys have
//! limits and may refuse some): when that holds every due entry of the
//! level, the claim's order is the window's; else its first entry of each
//! key gives the first round's order as far as it goes, and only when one
//! key's backlog fills the window does the claim look beyond, by a loose
//! index scan of the queue's keys (one probe per key, never per entry),
//! each later round then costing one probe per key that gave an entry. So
//! a key with 10,000 due entries does not cost a claim 10,000 rows, and a
//! queue of many keys costs a claim one probe per key only when a few
//! keys' backlogs come first. The window's entries are chosen in memory,
//! and locked and leased in one statement.
//!
//! A key's limit (its own row of `key_limits`, else the default's, key
//! `*`) is checked under a transaction-level advisory lock of the key,
//! taken with `pg_try_advisory_xact_lock` and held to the commit: the
//! claim counts the key's entries leased now (lease not run out) and, for
//! a rate, the starts `key_starts` keeps within the last `per`, then leases
//! while the counts plus what it took stay below the limit. A claim that
//! finds the key's lock held by another claim skips the key (and, if it
//! filled fewer places than it had, asks again within 200 ms): claims never
//! wait on each other, and no number of them in any number of processes
//! leases past a limit, since each counts only after the one before it
//! committed. A key already full is skipped without taking its lock
//! (counted once without it), and a claim locks only the keys it is about
//! to take from: at most one lock per entry it takes. A
//! finish that frees a place of a key that was at its concurrency (an ack,
//! a retry, a dead letter, a give-back, a remove) announces it when the key
//! has entries waiting, and a claim that refused a key for its rate reports
//! the time its window opens as its head: consumers waiting on a key wake
//! then, never at their poll interval, and never ask in a loop.
//!
//! A unique window is a row of `uniques` written when an entry that has
//! one is acked or removed, or as a dead letter removed, cleared or
//! trimmed by retention (not when it dies: the dead letter holds its id).
//! Every insert of a caller's id (`insert_with_id`, batched or not,
//! `insert_with_id_in`, `insert_with`) looks for the window after its row
//! went in, so an ack committing beside it is seen: the insert first waits
//! for the ack's row. Closed windows are deleted lazily (the next insert of
//! the id, and each new window deletes the queue's closed ones).
//!
//! # Tables
//!
//! | table | row | columns |
//! |---|---|---|
//! | `<schema>.entries` | one entry of any queue of the schema | `queue`, `id` (primary key); `seq` (insertion order); `run_at` (ms since the epoch, database clock: the due time while pending, the lease end while leased, `NULL` while dead); `value` (JSON text, serde_json); `attempt`; `token` and `since` (the claim holding the lease, and when it was made); `deadline` (when the current delivery was due); `tick` (a schedule's tick: its instant); `reason`, `died_at` (dead letters); `priority` (0 by default); `key` (or `NULL`); `max_attempts` (its own, or `NULL`: the queue's); `unique_ms` (its unique window, or `NULL`) |
//! | `<schema>.schedules` | one recurring schedule | `queue`, `name` (primary key); `rec` (`e,<period ms>,<policy>` or `c,<cron expression>`); `value` |
//! | `<schema>.given_up` | the token of a claim its handle gave up on or sent again, kept an hour | `token` (primary key); `at` (when) |
//! | `<schema>.queues` | one queue's own state | `queue` (primary key); `paused_at` (since when it is paused, or `NULL`) |
//! | `<schema>.key_limits` | one key's limit (`*`: the default) | `queue`, `key` (primary key); `lim` (`<concurrency>,<rate max>,<rate per ms>`, each empty for no bound) |
//! | `<schema>.key_starts` | the recent starts of a key with a rate | `queue`, `key` (primary key); `starts` (ms, ascending: at most the rate's `max`, none older than its `per` when written) |
//! | `<schema>.uniques` | an id kept taken after its entry finished | `queue`, `id` (primary key); `until` (ms) |
//! | `<schema>.results` | what became of a finished entry, for `keep_results` | `queue`, `id` (primary key); `state` (`d` done, `x` dead, `c` cancelled); `at` (ms); `attempts`; `output` (JSON, or `NULL`); `reason`; `until` (ms: not read after it) |
//! | `<schema>.waits` | an id a [`wait`](PgQueue::wait) looks for | `queue`, `id` (primary key); `until` (ms) |
//! | `<schema>.cancels` | a lease revoked by [`cancel`](PgQueue::cancel), for its holder's next extension | `queue`, `id` (primary key); `token`; `until` (ms) |
//! | `<schema>.workers` | a worker's record | `queue`, `id` (primary key); `record` (JSON); `first`, `last` (ms: first and last heard of); `expires` (ms: three refresh periods after `last`); `gone` (shut down: kept a minute) |
//! | `<schema>.schedule_runs` | a schedule's last run, written by the finish of its tick | `queue`, `name` (primary key); `last_run` (ms: when its last finished tick was claimed); `last_outcome` (`d` done, `x` dead, `c` cancelled) |
//! | `<schema>.minutes` | the counts of one minute, by the backend that wrote them | `queue`, `at` (ms), `shard` (backend pid) (primary key); `inserted`, `done`, `failed`, `dead` |
//! | `<schema>.meta` | the schema's version | `version` |
//!
//! `entries` also has `trace` (the inserting span's trace context),
//! `errors` (its last 10 failed attempts, JSON `[[attempt, at, reason],
//! ...]`) and `schedule` (a dead tick's schedule); `schedules` also has
//! `paused`.
//!
//! The schema's version is 8: VERSION 8 added the tables `results`,
//! `waits`, `cancels`, `workers`, `schedule_runs` and `minutes`, the
//! columns `trace`, `errors`, `schedule` of `entries` and `paused` of
//! `schedules` (no rewrite of either table); the upgrade
//! from VERSION 7 (or older) keeps every entry, lease and schedule. The
//! functions' new parameters have defaults, so a client of another
//! language that calls `insert`, `insert_many`, `insert_plans`, `claim` or
//! `finish` as VERSION 7 had them goes on working. VERSION 7 added the columns `priority`,
//! `key`, `max_attempts`, `unique_ms` (no rewrite of the table) and the
//! tables of keys and windows, and replaced the index of live entries in
//! due order (`entries_due`) by `entries_plain` (the plain ones) beside
//! partial indexes that only special entries enter (`entries_special` in
//! due order, `entries_level` by priority, `entries_keys` by key,
//! `entries_held` the leased ones by key): a queue without keys or
//! priorities writes no more index entries than before. The upgrade from
//! VERSION 6 builds `entries_plain` under the install's lock (the writers
//! of the table wait for it) and keeps every entry, lease and schedule.
//!
//! A page of [`entries`](PgQueue::entries) is one call of `page`, one index
//! range scan from the cursor on, or two merged: `entries_plain` and
//! `entries_special` for the due and the pending entries (the latter
//! stepping over the leased rows among them), `entries_leased` (a partial
//! index of the leased rows) and `entries_dead`.
//! A claim takes a shared advisory lock that [`pause`](PgQueue::pause)
//! takes exclusively, then reads the queue's `paused_at`: once `pause`
//! returns, no claim hands anything out.
//!
//! Generated ids are `#` followed by a number from the sequence
//! `<schema>.seq`. The `LISTEN` channel of a queue is `punctual_` followed by
//! the MD5 of `<schema>.<name>` in hex; its payload is the new head's due
//! time.
//!
//! # TLS
//!
//! With the cargo feature `postgres-tls` (it implies `postgres`) the
//! queue connects over TLS as the URL's `sslmode` says (libpq's names;
//! `PGSSLMODE` when the URL has none), by sqlx's rustls backend with the
//! ring provider (no OpenSSL):
//!
//! | `sslmode` | encrypted | certificate checked | host name checked |
//! |---|---|---|---|
//! | `disable` | no | | |
//! | `prefer` (the default) | when the server offers it | no | no |
//! | `require` | yes | no | no |
//! | `verify-ca` | yes | yes | yes, for now (below) |
//! | `verify-full` | yes | yes | yes |
//!
//! A certificate is trusted when it chains to one of the platform's root
//! certificates or to one in the file the URL's `sslrootcert` names (or
//! `PGSSLROOTCERT`). When `SSL_CERT_FILE` (a PEM bundle) or `SSL_CERT_DIR`
//! is set, its certificates stand in for the platform's, as with OpenSSL.
//! For a managed server (RDS, Cloud SQL, Azure, Neon), give the provider's
//! CA bundle and check the name:
//!
//! ```no_run
//! use punctual::postgres::PgQueue;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), punctual::postgres::Error> {
//! let orders: PgQueue<u64> = PgQueue::connect(
//!     "postgres://app:secret@db.example.com:5432/shop\
//!      ?sslmode=verify-full&sslrootcert=/etc/ssl/provider-ca.pem",
//!     "orders",
//! )
//! .await?;
//! # Ok(()) }
//! ```
//!
//! `build()` then fails at once, saying what to change, when the server's
//! certificate is not trusted or names another host, when the server
//! refuses an unencrypted connection (`pg_hba.conf` with `hostssl` lines
//! only: the message names the cargo feature or the `sslmode` missing),
//! and when the URL asks for TLS in a build without `postgres-tls`. sqlx
//! 0.8, with rustls 0.23.24 or later, checks the host name under
//! `verify-ca` as well (launchbadge/sqlx#3793): connect by a name the
//! certificate lists. A client certificate goes in `sslcert` and
//! `sslkey`. A pool given to [`PgQueueBuilder::pool`] keeps its own
//! settings (`PgConnectOptions::ssl_mode`, `ssl_root_cert`), and with this
//! feature its TLS connections work the same way.
//!
//! # Failures
//!
//! Producer and inspection calls return `Err` when the database cannot be
//! reached; every operation is one statement in one transaction, so nothing
//! is half written. A connection that breaks after a statement was sent
//! leaves its outcome unknown: an `Err` from a producer call may still have
//! been applied, so retry with [`insert_with_id`](PgQueue::insert_with_id)
//! where a duplicate matters. Consumers handle it for you: a claim whose
//! reply was lost is sent again with the same token and returns what it
//! leased, and one given up on (a dropped `take`, or a `take_timeout`
//! whose claim is still unanswered a second after its timeout) is given
//! back by the handle's next claim or finish, without counting an attempt.
//! That give-back may run on another connection of the pool before the
//! claim itself lands: it waits for the claim if the claim is running, and
//! it records the claim's token in `given_up`, so a claim that lands later
//! leases nothing. A claim sent again does the same: it waits for its first
//! sending if that still runs, and marks the token.
//!
//! Every call is bounded: it waits at most
//! [`response_timeout`](PgQueueBuilder::response_timeout) (default 10 s)
//! for a connection of the pool, then as long for the statement's answer.
//! A statement with no answer in time fails (in doubt: it may have run) and
//! its connection is closed, never pooled again, so a link gone silent
//! (a NAT that dropped its state, a black-holed route) costs one timeout,
//! not a hung consumer. Every idle connection of the pool is closed with
//! it (as after a wait for a connection that ran out), since it may have
//! gone silent too: the calls after that timeout open new connections, so
//! whatever the size of the pool the queue works again one timeout and a
//! connect after the silence, not one timeout per pooled connection later
//! (a healthy connection closed with them costs a connect). A worker also
//! gives up a claim, an extension or a request of finishes that gets no
//! reply within a lease (at least a second), if that comes first. `take*`
//! and the worker ride through a restart of the server and through silent
//! connections (with capped back-off, reported through `tracing`).
//!
//! # Table bloat
//!
//! Every claim, ack and retry writes a new row version, and a busy queue
//! leaves dead tuples behind quickly (a claim and its ack are two). The
//! default autovacuum keeps up with a few thousand jobs per second; for
//! more, lower `autovacuum_vacuum_scale_factor` on `<schema>.entries` (say
//! to 0.01) so vacuum runs by row count rather than table size, and keep
//! long transactions short: one open transaction holds back vacuum for
//! every table.
//!
//! # Durability
//!
//! An insert that returned `Ok` is committed: it survives a crash of the
//! server under PostgreSQL's default `synchronous_commit = on`, and so do
//! the acks, retries, dead letters and give-backs a consumer or worker
//! sends, removals, schedules and every other call that changes what the
//! queue holds.
//!
//! So does every claim: a handler starts only after the claim that leased
//! its entry is on disk. (Claims once committed without waiting for the
//! disk; a crash of the server could then forget a lease whose handler was
//! already running, and the entry was due again at once: two consumers ran
//! it side by side.)

mod builder;
mod delivery;
mod discover;
mod durable;
mod error;
mod inner;
mod operations;
mod options;
mod queue;
mod results;
mod schedules;
mod sql;
mod tls;
mod wait;

pub use crate::durable::ScheduleInfo;
pub use ::sqlx;
pub use builder::PgQueueBuilder;
pub use delivery::Delivery;
pub use discover::queue_names;
pub use error::Error;
pub use queue::PgQueue;

/// Counts of a queue's entries by state, from [`PgQueue::stats`]: the
/// store-neutral [`QueueStats`](crate::durable::QueueStats).
pub type PgStats = crate::durable::QueueStats;

/// An entry that was given up on, from [`PgQueue::dead_letters`]: the
/// store-neutral [`DeadLetter`](crate::durable::DeadLetter).
pub type DeadLetter<T> = crate::durable::DeadLetter<T>;
