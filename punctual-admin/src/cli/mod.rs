//! The command line: `punctual-admin [--redis [LABEL=]URL]... [--postgres
//! [LABEL=]URL [--schema S]]... COMMAND`, each command one call of the
//! operations layer, printed for people or, with `--json`, as one JSON
//! document (an error too, a bad argument included).
//!
//! Exit codes: 0 on success, 1 when the queue, entry or schedule does not
//! exist, 2 on bad arguments or a store error.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde::Serialize;

mod text;

use text::{clip, printable, row, shell_word, table};

use crate::audit::{RecordJson, Who};
use crate::error::OpError;
use crate::fmt;
use crate::json::{
    ActiveRunJson, ErrorJson, HistoryJson, LimitsJson, PageJson, QueueJson, RunningPageJson,
    ScheduleJson, ShowJson, WorkerJson, WriteJson, finished_str, rfc3339,
};
use crate::ops::{
    DEFAULT_KEY, DEFAULT_LIMIT, Listed, Ops, Order, Policy, Requeue, Write, limit_words,
    parse_limit, parse_period, parse_rate, parse_state,
};
use crate::store::{Source, identities};
use punctual::durable::EntryState;
use punctual::durable::{KeyLimit, Rate};

/// Looks into and acts on punctual's durable queues in Redis and PostgreSQL:
/// a web dashboard (`serve`) and the same operations as commands.
#[derive(Debug, Parser)]
#[command(
    name = "punctual-admin",
    version,
    max_term_width = 100,
    after_help = QUEUE_HELP
)]
struct Cli {
    /// A Redis server: every queue on it (repeatable; `rediss://` for TLS).
    /// `LABEL=URL` names it LABEL (letters, digits, - and _). Without
    /// any, PUNCTUAL_REDIS_URL (one URL, or several separated by commas).
    #[arg(long = "redis", value_name = "[LABEL=]URL", global = true)]
    redis: Vec<String>,
    /// A PostgreSQL database: every queue in its schema (repeatable;
    /// `sslmode=verify-full` and the rest in the URL). `LABEL=URL` names
    /// it LABEL. Without any, PUNCTUAL_POSTGRES_URL (one URL, or several
    /// separated by commas).
    #[arg(long = "postgres", value_name = "[LABEL=]URL", global = true)]
    postgres: Vec<String>,
    /// The schema of the `--postgres` before it [default: punctual]; with
    /// PUNCTUAL_POSTGRES_URL, one --schema for each of its URLs.
    #[arg(long = "schema", value_name = "S", global = true)]
    schema: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

/// How a `QUEUE` argument names its store, under every `--help`.
const QUEUE_HELP: &str = "\
The store flags (--redis, --postgres, --schema) may come before or after
the command. Without --redis, PUNCTUAL_REDIS_URL gives the Redis stores,
and without --postgres, PUNCTUAL_POSTGRES_URL the PostgreSQL ones (one
URL, or several separated by commas): so passwords need not be on the
command line, nor in the shell's history.

QUEUE is a queue's name, or STORE:NAME when several stores hold the name.
STORE is a store's label (--redis eu=URL: eu:NAME), else its kind for the
first store of a kind (redis:NAME, postgres:NAME) and KIND@N for the N-th
(redis@2:NAME; a second --postgres, even a schema of the same database,
is postgres@2). `queues --json` gives that STORE as \"source\" where the
kind alone does not tell the store apart.

With --json, every outcome is one JSON document on stdout, a bad argument
too ({\"error\": \"...\"}). Exit codes: 0 done, 1 no such queue, entry or
schedule, 2 a bad argument or a store error.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves the dashboard, the JSON API under /api/ and /metrics.
    Serve {
        /// Where to listen; an address other than loopback needs --token or
        /// --read-only.
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
        bind: String,
        /// Shows no write button and answers every write with 403.
        #[arg(long)]
        read_only: bool,
        /// Every request must carry it (`Authorization: Bearer`, or the
        /// login form's cookie).
        #[arg(
            long,
            env = "PUNCTUAL_ADMIN_TOKEN",
            hide_env_values = true,
            value_name = "TOKEN"
        )]
        token: Option<String>,
        /// A queue whose oldest due entry has waited longer is marked amber
        /// (30s, 1m, 5m...).
        #[arg(long, default_value = "60s", value_name = "PERIOD", value_parser = period_arg)]
        latency_threshold: std::time::Duration,
    },
    /// Every queue found on the given stores, with counts.
    Queues(Out),
    /// A queue's counts by state, paused flag and clock.
    Stats {
        /// `NAME`, or `STORE:NAME` when several stores hold it (`redis:NAME`,
        /// `redis@2:NAME`, `LABEL:NAME`).
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// One page of a state's entries, in delivery order.
    Entries {
        queue: String,
        /// pending, due, leased or dead.
        #[arg(long, value_name = "STATE")]
        state: String,
        /// Entries per page: 0 gives an empty page whose next is --cursor;
        /// more than 1000 reads as 1000.
        #[arg(
            long,
            default_value_t = DEFAULT_LIMIT,
            value_name = "N",
            value_parser = limit_arg,
            allow_negative_numbers = true
        )]
        limit: usize,
        /// Where the page starts: the `next` of the page before.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
        /// oldest (delivery order: due time, lease end, time of death) or
        /// newest (backwards; cursors of its own).
        #[arg(long, default_value = "oldest", value_name = "ORDER", value_parser = order_arg)]
        order: Order,
        #[command(flatten)]
        out: Out,
    },
    /// One entry, in any state, with its failed attempts and its kept
    /// result (an entry that finished is gone; its result stays while the
    /// queue keeps results).
    Show {
        queue: String,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Puts a dead letter (or every one) back, due now (or after
    /// --delay), attempts reset.
    Requeue {
        queue: String,
        #[arg(required_unless_present = "all_dead")]
        id: Option<String>,
        /// Every dead letter of the queue.
        #[arg(long, conflicts_with = "id")]
        all_dead: bool,
        /// Due this long from now (10m, 1h30m, 500ms) rather than now.
        #[arg(long, value_name = "PERIOD", value_parser = period_arg)]
        delay: Option<std::time::Duration>,
        #[command(flatten)]
        out: Out,
    },
    /// Cancels an entry: a pending, due or dead one is deleted; a running
    /// one is stopped at its handler's next await and deleted, never
    /// retried. `changed: 0` when there is no such entry (it may have
    /// finished).
    Cancel {
        queue: String,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// The live workers of a queue: name, host, pid, places, what each
    /// runs, when it was last heard from.
    Workers {
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// The runs under way (the leased entries): the worker holding each,
    /// when it started, how long it has run, its attempt.
    Running {
        queue: String,
        /// Runs per page (at most 1000).
        #[arg(long, default_value_t = DEFAULT_LIMIT, value_name = "N", value_parser = limit_arg)]
        limit: usize,
        /// Where the page starts: the `next` of the page before.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// What happened per minute: inserted, done, failed, sent to the dead
    /// letters (minutes without an event are left out).
    History {
        queue: String,
        /// How far back (1h, 30m; the store keeps a day).
        #[arg(long, default_value = "1h", value_name = "PERIOD", value_parser = period_arg)]
        last: std::time::Duration,
        #[command(flatten)]
        out: Out,
    },
    /// The audit log of a store (every write made through punctual-admin),
    /// newest first.
    Audit {
        /// Which store: its label, or redis, postgres, redis@2... [default:
        /// the first given].
        #[arg(long, value_name = "STORE")]
        store: Option<String>,
        /// Records per page (at most 1000).
        #[arg(long, default_value_t = DEFAULT_LIMIT, value_name = "N", value_parser = limit_arg)]
        limit: usize,
        /// Where the page starts: the `next` of the page before.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Deletes an entry (pending, leased or dead).
    Remove {
        queue: String,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Deletes every dead letter of a queue.
    ClearDead {
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// Stops every consumer of the queue from taking anything.
    Pause {
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// Lets the queue's consumers take again.
    Resume {
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// The queue's recurring schedules, with their next run.
    Schedules {
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// Makes a schedule's pending tick due now.
    RunNow {
        queue: String,
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Deletes a schedule and its tick.
    Unschedule {
        queue: String,
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Pauses a schedule: its tick stays pending and is not delivered
    /// (run-now still runs one).
    #[command(name = "pause-schedule")]
    PauseSchedule {
        queue: String,
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Resumes a paused schedule: a tick that came due meanwhile runs once,
    /// then its missed-ticks rule applies.
    #[command(name = "resume-schedule")]
    ResumeSchedule {
        queue: String,
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// The queue's key limits, with how many entries of each key run now.
    ///
    /// `*` is the default, for every key without a limit of its own (its
    /// RUNNING counts theirs); the keys running now without a limit of
    /// their own are listed after.
    Limits {
        queue: String,
        #[command(flatten)]
        out: Out,
    },
    /// Sets the limit of a key (`*`: the default), replacing its own.
    ///
    /// Without --concurrency or --rate the key is bound by nothing, not
    /// even the default. Prints `changed: 0` when the limit was that
    /// already.
    #[command(name = "set-limit")]
    SetLimit {
        queue: String,
        /// The key (`*`: the default, for every key without its own).
        key: String,
        /// The most entries of the key leased at once.
        #[arg(long, value_name = "N")]
        concurrency: Option<u32>,
        /// The most deliveries of the key begun in any PER: 100/1m, 5/30s,
        /// 1/500ms (units ms, s, m, h, d; 1m30s also reads).
        #[arg(long, value_name = "MAX/PER", value_parser = rate_arg)]
        rate: Option<Rate>,
        #[command(flatten)]
        out: Out,
    },
    /// Removes the limit of a key (`*`: the default).
    ///
    /// Its entries then run under the default, if any. Removing a limit
    /// that is not there changes nothing (`changed: 0`, exit 0).
    #[command(name = "remove-limit")]
    RemoveLimit {
        queue: String,
        key: String,
        #[command(flatten)]
        out: Out,
    },
}

#[derive(Debug, Clone, Copy, Args)]
struct Out {
    /// One JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// `--limit`'s value: see [`parse_limit`].
fn limit_arg(s: &str) -> Result<usize, String> {
    parse_limit(s).map_err(|e| e.to_string())
}

/// A period's value (`--delay`, `--last`): see [`parse_period`].
fn period_arg(s: &str) -> Result<std::time::Duration, String> {
    parse_period(s).map_err(|e| e.to_string())
}

/// `--order`'s value.
fn order_arg(s: &str) -> Result<Order, String> {
    Order::parse(s).map_err(|e| e.to_string())
}

/// `--rate`'s value: see [`parse_rate`].
fn rate_arg(s: &str) -> Result<Rate, String> {
    parse_rate(s).map_err(|e| e.to_string())
}

/// A rate for people: `100/1m`.
fn rate_text(rate: &Rate) -> String {
    format!("{}/{}", rate.max, fmt::period(rate.per))
}

/// Runs the command line `args` (the program's name first, as
/// [`std::env::args_os`] gives it) and returns its exit code: 0 on
/// success, 1 when the queue, entry or schedule does not exist, 2 on bad
/// arguments or a store error.
///
/// It builds its own Tokio runtime; `serve` returns when the process is
/// interrupted (Ctrl-C or SIGTERM).
///
/// # Examples
///
/// ```no_run
/// let code = punctual_admin::cli::run(["punctual-admin", "--redis", "redis://127.0.0.1/", "queues"]);
/// # let _ = code;
/// ```
pub fn run<I, A>(args: I) -> ExitCode
where
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let (cli, sources) = match parse(args) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return refuse(
                json_of(&cli.command),
                &format!("cannot start the runtime: {e}"),
            );
        }
    };
    runtime.block_on(execute(cli.command, sources))
}

/// Whether `args` (the program's name first) ask for `--json`, wherever
/// it stands before a `--`: known before clap has read them, so that a
/// bad argument is answered as JSON too.
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Says why the command line is refused, on stderr and, with `--json`, as
/// `{"error": "..."}` on stdout; exit code 2.
fn refuse(json: bool, why: &str) -> ExitCode {
    if json {
        println!(
            "{}",
            to_json(&ErrorJson {
                error: why.to_owned()
            })
        );
    }
    eprintln!("punctual-admin: {why}");
    ExitCode::from(2)
}

/// Clap's error for a document: its text without the `error: ` heading
/// and the usage lines after it (the tip stays).
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = text.split("\n\nUsage:").next().unwrap_or(text);
    text.split("\n\nFor more information")
        .next()
        .unwrap_or(text)
        .trim()
        .to_owned()
}

/// The parsed command line and its stores; the exit code when it does not
/// parse (clap has printed why, or the help; with `--json`, why is also a
/// JSON document on stdout).
fn parse<I, A>(args: I) -> Result<(Cli, Vec<Source>), ExitCode>
where
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let json = wants_json(&args);
    let clap_failed = |e: clap::Error| {
        if !e.use_stderr() {
            // --help, --version: not an error.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        if json {
            println!(
                "{}",
                to_json(&ErrorJson {
                    error: clap_message(&e)
                })
            );
        }
        let _ = e.print();
        ExitCode::from(2)
    };
    // The store flags in the order written, wherever they stand (clap
    // takes them before and after the command alike, and says what is
    // wrong with a line; the order says which --schema is whose).
    let flags = store_flags(&args);
    let matches = Cli::command()
        .try_get_matches_from(args)
        .map_err(clap_failed)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(clap_failed)?;
    let bad = |why: String| refuse(json, &why);
    cli.redis = flags.iter().filter_map(|f| f.redis()).collect();
    cli.postgres = flags.iter().filter_map(|f| f.postgres()).collect();
    cli.schema = flags.iter().filter_map(|f| f.schema()).collect();
    let mut sources: Vec<Source> = cli.redis.iter().map(|url| Source::redis(url)).collect();
    if cli.postgres.is_empty() {
        // PUNCTUAL_POSTGRES_URL's stores share the one --schema given.
        if cli.schema.len() > 1 {
            return Err(bad(
                "several --schema, and the PostgreSQL stores come from PUNCTUAL_POSTGRES_URL: \
                 give them with --postgres URL --schema S each"
                    .to_owned(),
            ));
        }
        let schema = cli
            .schema
            .first()
            .map_or(crate::DEFAULT_SCHEMA, String::as_str);
        let urls = from_env("PUNCTUAL_POSTGRES_URL");
        if urls.is_empty() && !cli.schema.is_empty() {
            return Err(bad(format!(
                "--schema {} without --postgres: write it after the URL it belongs to",
                cli.schema[0]
            )));
        }
        for url in urls {
            sources.push(Source::postgres(&url, schema));
        }
    } else {
        // Each --schema belongs to the --postgres before it.
        let mut schemas: Vec<Option<String>> = vec![None; cli.postgres.len()];
        let mut owner: Option<usize> = None;
        for flag in &flags {
            match flag {
                Flag::Postgres(_) => owner = Some(owner.map_or(0, |o| o + 1)),
                Flag::Schema(schema) => {
                    let Some(owner) = owner else {
                        return Err(bad(format!(
                            "--schema {schema} comes before any --postgres: write it after the URL it belongs to"
                        )));
                    };
                    if schemas[owner].replace(schema.clone()).is_some() {
                        return Err(bad(format!(
                            "two --schema for --postgres {}",
                            crate::store::redact(&cli.postgres[owner])
                        )));
                    }
                }
                Flag::Redis(_) => {}
            }
        }
        for (url, schema) in cli.postgres.iter().zip(schemas) {
            sources.push(Source::postgres(
                url,
                schema.as_deref().unwrap_or(crate::DEFAULT_SCHEMA),
            ));
        }
    }
    if cli.redis.is_empty() {
        let redis: Vec<Source> = from_env("PUNCTUAL_REDIS_URL")
            .iter()
            .map(|url| Source::redis(url))
            .collect();
        sources.splice(0..0, redis);
    }
    if sources.is_empty() {
        return Err(bad(
            "no store given: add --redis URL or --postgres URL (before or after the command), \
             or set PUNCTUAL_REDIS_URL or PUNCTUAL_POSTGRES_URL"
                .to_owned(),
        ));
    }
    identities(&sources).map_err(bad)?;
    Ok((cli, sources))
}

/// A store flag of the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Flag {
    Redis(String),
    Postgres(String),
    Schema(String),
}

impl Flag {
    fn redis(&self) -> Option<String> {
        match self {
            Flag::Redis(url) => Some(url.clone()),
            _ => None,
        }
    }

    fn postgres(&self) -> Option<String> {
        match self {
            Flag::Postgres(url) => Some(url.clone()),
            _ => None,
        }
    }

    fn schema(&self) -> Option<String> {
        match self {
            Flag::Schema(schema) => Some(schema.clone()),
            _ => None,
        }
    }
}

/// The store flags of `args` (the program's name first), in the order
/// written, before the command or after it, up to a `--`: `--redis URL`,
/// `--redis=URL`, and the same of `--postgres` and `--schema`.
fn store_flags(args: &[OsString]) -> Vec<Flag> {
    let mut flags = Vec::new();
    let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        for (name, make) in [
            ("--redis", Flag::Redis as fn(String) -> Flag),
            ("--postgres", Flag::Postgres),
            ("--schema", Flag::Schema),
        ] {
            if word == name {
                if let Some(value) = words.next() {
                    flags.push(make(value.into_owned()));
                }
            } else if let Some(value) = word.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                flags.push(make(value.to_owned()));
            }
        }
    }
    flags
}

/// The URLs an environment variable gives: one, or several separated by
/// commas (blanks around them ignored).
fn from_env(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn execute(command: Command, sources: Vec<Source>) -> ExitCode {
    if let Command::Serve {
        bind,
        read_only,
        token,
        latency_threshold,
    } = command
    {
        return crate::web::serve::run(sources, &bind, read_only, token, latency_threshold).await;
    }
    let ops = Arc::new(Ops::new(sources, Policy::FRESH));
    let json = json_of(&command);
    // Boxed: the future of every command together is large.
    match Box::pin(command_output(&ops, command, json)).await {
        Ok(text) if json => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Ok(text) => {
            println!("{}", printable(&text));
            ExitCode::SUCCESS
        }
        Err(e) => {
            if json {
                println!(
                    "{}",
                    to_json(&ErrorJson {
                        error: e.to_string()
                    })
                );
            }
            eprintln!("punctual-admin: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Whether `command` was given `--json`.
fn json_of(command: &Command) -> bool {
    match command {
        Command::Serve { .. } => false,
        Command::Queues(out)
        | Command::Stats { out, .. }
        | Command::Entries { out, .. }
        | Command::Show { out, .. }
        | Command::Requeue { out, .. }
        | Command::Remove { out, .. }
        | Command::ClearDead { out, .. }
        | Command::Pause { out, .. }
        | Command::Resume { out, .. }
        | Command::Schedules { out, .. }
        | Command::RunNow { out, .. }
        | Command::Unschedule { out, .. }
        | Command::Limits { out, .. }
        | Command::SetLimit { out, .. }
        | Command::RemoveLimit { out, .. }
        | Command::Cancel { out, .. }
        | Command::Workers { out, .. }
        | Command::Running { out, .. }
        | Command::History { out, .. }
        | Command::Audit { out, .. }
        | Command::PauseSchedule { out, .. }
        | Command::ResumeSchedule { out, .. } => out.json,
    }
}

/// What the command prints, for people or as JSON.
async fn command_output(ops: &Arc<Ops>, command: Command, json: bool) -> Result<String, OpError> {
    let queue_of = |q: &str| {
        let q = q.to_owned();
        let ops = ops.clone();
        async move { ops.resolve(&q).await }
    };
    let write = |n: u64, human: String| {
        if json {
            to_json(&WriteJson::changed(n))
        } else {
            human
        }
    };
    let who = Who::cli();
    // A queue and an entry as a shell reads them back (`'#24'`).
    let sh = |s: &str| shell_word(s);
    Ok(match command {
        Command::Serve { .. } => unreachable!("served above"),
        Command::Queues(_) => {
            let (listed, failed) = ops.queues().await;
            queues_output(ops, &listed, &failed, json)?
        }
        Command::Stats { queue, .. } => {
            let listed = ops.stats(&queue).await?;
            let s = listed.snapshot.clone()?;
            if json {
                to_json(&QueueJson::of(&listed).expect("read"))
            } else {
                format!(
                    "queue    {}\nstore    {} ({})\nstate    {}\npending  {}\ndue      {}\nleased   {}\ndead     {}\nclock    {} ({} from this machine's)",
                    listed.id.name,
                    ops.store_name(listed.id.source),
                    ops.sources()[listed.id.source].describe(),
                    if s.paused { "paused" } else { "running" },
                    fmt::count(s.stats.pending),
                    fmt::count(s.stats.due),
                    fmt::count(s.stats.leased),
                    fmt::count(s.stats.dead),
                    rfc3339(s.store_now),
                    fmt::offset(s.offset),
                )
            }
        }
        Command::Entries {
            queue,
            state,
            limit,
            cursor,
            order,
            ..
        } => {
            let state = parse_state(&state)?;
            let id = queue_of(&queue).await?;
            let page = ops
                .entries_in(&id, state, order, cursor.as_deref(), limit)
                .await?;
            if json {
                to_json(&PageJson::of(&page))
            } else {
                let now = ops.store_now(&id).await?;
                let when = match state {
                    EntryState::Pending | EntryState::Due => "DUE",
                    EntryState::Leased => "LEASE UNTIL",
                    EntryState::Dead => "DIED",
                };
                let mut rows = vec![row(&[
                    "ID",
                    when,
                    "ATTEMPT",
                    "PRIO",
                    "KEY",
                    "SCHEDULE",
                    "LAST ERROR",
                    "VALUE",
                ])];
                for e in &page.entries {
                    let when = e.lease_until.or(e.died_at).unwrap_or(e.due);
                    rows.push(vec![
                        printable(&sh(&e.id)),
                        format!("{} ({})", rfc3339(when), fmt::relative(when, now)),
                        e.attempt.to_string(),
                        e.priority.to_string(),
                        clip(e.key.as_deref().unwrap_or("-"), 30),
                        printable(e.schedule.as_deref().unwrap_or("-")),
                        clip(e.last_error.as_deref().unwrap_or("-"), 40),
                        clip(
                            &e.value
                                .as_ref()
                                .map_or("(does not decode)".into(), |v| v.to_string()),
                            60,
                        ),
                    ]);
                }
                let mut text = if page.entries.is_empty() {
                    format!("no {state} entries")
                } else {
                    table(&rows, &[2, 3])
                };
                if let Some(next) = &page.next {
                    text.push_str(&format!("\nnext page: --cursor {next}"));
                    if order == Order::Newest {
                        text.push_str(" --order newest");
                    }
                }
                text
            }
        }
        Command::Show {
            queue, id: entry, ..
        } => {
            let id = queue_of(&queue).await?;
            let shown = ops.show(&id, &entry).await?;
            if json {
                to_json(&ShowJson::of(&entry, &shown))
            } else {
                let now = ops.store_now(&id).await?;
                show_text(&queue, &entry, &shown, now)
            }
        }
        Command::Requeue {
            queue,
            id: entry,
            all_dead,
            delay,
            ..
        } => {
            let id = queue_of(&queue).await?;
            let what = match (entry, all_dead) {
                (Some(entry), false) => Requeue::One(entry),
                _ => Requeue::AllDead,
            };
            let delay = delay.unwrap_or_default();
            let write_ = Write::Requeue {
                what: what.clone(),
                delay,
            };
            let n = ops.apply(&who, &id, &write_).await?;
            let due = if delay.is_zero() {
                "due now".to_owned()
            } else {
                format!("due in {}", fmt::span(delay))
            };
            let human = match &what {
                Requeue::AllDead => format!("requeued {n} dead letters of {queue}: {due}"),
                Requeue::One(e) if n == 1 => format!("requeued {} of {queue}: {due}", sh(e)),
                Requeue::One(e) => {
                    format!("{} of {queue} is not a dead letter: nothing changed", sh(e))
                }
            };
            write(n, human)
        }
        Command::Remove {
            queue, id: entry, ..
        } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::Remove { id: entry.clone() })
                .await?;
            write(n, format!("removed {} from {queue}", sh(&entry)))
        }
        Command::Cancel {
            queue, id: entry, ..
        } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::Cancel { id: entry.clone() })
                .await?;
            let human = if n == 1 {
                format!(
                    "cancelled {} of {queue}: a run of it stops at its next await; it is not retried",
                    sh(&entry)
                )
            } else {
                format!(
                    "no entry {} in {queue} (it may have finished): nothing changed",
                    sh(&entry)
                )
            };
            write(n, human)
        }
        Command::ClearDead { queue, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.apply(&who, &id, &Write::ClearDead).await?;
            write(n, format!("deleted {n} dead letters of {queue}"))
        }
        Command::Pause { queue, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.apply(&who, &id, &Write::Pause).await?;
            let human = if n == 1 {
                format!("paused {queue}")
            } else {
                format!("{queue} was paused already")
            };
            write(n, human)
        }
        Command::Resume { queue, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.apply(&who, &id, &Write::Resume).await?;
            let human = if n == 1 {
                format!("resumed {queue}")
            } else {
                format!("{queue} was not paused")
            };
            write(n, human)
        }
        Command::Schedules { queue, .. } => {
            let id = queue_of(&queue).await?;
            let schedules = ops.schedules(&id).await?;
            if json {
                let all: Vec<ScheduleJson> = schedules.iter().map(ScheduleJson::of).collect();
                to_json(&all)
            } else if schedules.is_empty() {
                format!("no schedule in {queue}")
            } else {
                let now = ops.store_now(&id).await?;
                let mut rows = vec![row(&[
                    "NAME", "SPEC", "NEXT", "LAST RUN", "OUTCOME", "VALUE",
                ])];
                for s in &schedules {
                    let mut name = printable(&s.name);
                    if s.paused {
                        name.push_str(" (paused)");
                    }
                    rows.push(vec![
                        name,
                        s.spec.clone(),
                        s.next.map_or("running now".into(), |at| {
                            format!("{} ({})", rfc3339(at), fmt::relative(at, now))
                        }),
                        s.last_run.map_or("-".into(), |at| fmt::relative(at, now)),
                        s.last_outcome.map_or("-", finished_str).to_owned(),
                        clip(&s.value.to_string(), 60),
                    ]);
                }
                table(&rows, &[])
            }
        }
        Command::RunNow { queue, name, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::RunNow { name: name.clone() })
                .await?;
            let human = if n == 1 {
                format!("schedule {name} of {queue} is due now")
            } else {
                format!("schedule {name} of {queue} is running: nothing changed")
            };
            write(n, human)
        }
        Command::Unschedule { queue, name, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::Unschedule { name: name.clone() })
                .await?;
            write(n, format!("deleted schedule {name} of {queue}"))
        }
        Command::PauseSchedule { queue, name, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::PauseSchedule { name: name.clone() })
                .await?;
            let human = if n == 1 {
                format!("paused schedule {name} of {queue}: its tick waits until it is resumed")
            } else {
                format!("schedule {name} of {queue} was paused already")
            };
            write(n, human)
        }
        Command::ResumeSchedule { queue, name, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::ResumeSchedule { name: name.clone() })
                .await?;
            let human = if n == 1 {
                format!("resumed schedule {name} of {queue}")
            } else {
                format!("schedule {name} of {queue} was not paused")
            };
            write(n, human)
        }
        Command::Workers { queue, .. } => {
            let id = queue_of(&queue).await?;
            let (health, now) = (ops.health(&id).await?, ops.store_now(&id).await?);
            if json {
                let all: Vec<WorkerJson> = health
                    .workers
                    .iter()
                    .map(|w| WorkerJson::of(w, now))
                    .collect();
                to_json(&all)
            } else if health.workers.is_empty() {
                format!("no worker of {queue} is alive")
            } else {
                let mut rows = vec![row(&[
                    "NAME",
                    "HOST",
                    "PID",
                    "STARTED",
                    "LAST SEEN",
                    "PLACES",
                    "RUNNING",
                ])];
                for w in &health.workers {
                    let mut seen = fmt::relative(w.last_seen, now);
                    if crate::health::is_late(w, now) {
                        seen.push_str(" (late)");
                    }
                    let mut name = printable(w.name.as_deref().unwrap_or("-"));
                    if w.stopping {
                        name.push_str(" (stopping)");
                    }
                    let runs: Vec<String> =
                        w.running.iter().map(|r| printable(&sh(&r.id))).collect();
                    rows.push(vec![
                        name,
                        printable(&w.host),
                        w.pid.to_string(),
                        fmt::relative(w.started_at, now),
                        seen,
                        format!("{}/{}", w.running.len(), w.concurrency),
                        if runs.is_empty() {
                            "-".to_owned()
                        } else {
                            clip(&runs.join(" "), 60)
                        },
                    ]);
                }
                table(&rows, &[2])
            }
        }
        Command::Running {
            queue,
            limit,
            cursor,
            ..
        } => {
            let id = queue_of(&queue).await?;
            let running = ops.running(&id, cursor.as_deref(), limit).await?;
            let now = ops.store_now(&id).await?;
            let workers = running.workers.clone().unwrap_or_default();
            if json {
                to_json(&RunningPageJson {
                    running: running
                        .page
                        .entries
                        .iter()
                        .map(|e| ActiveRunJson::of(e, &workers, now))
                        .collect(),
                    next: running.page.next.as_ref().map(ToString::to_string),
                })
            } else if running.page.entries.is_empty() {
                format!("nothing runs in {queue} now")
            } else {
                let mut rows = vec![row(&["ID", "WORKER", "STARTED", "RUNNING FOR", "ATTEMPT"])];
                for e in &running.page.entries {
                    let worker = match &e.worker {
                        None => "-".to_owned(),
                        Some(wid) => match workers.iter().find(|w| &w.id == wid) {
                            Some(w) => format!(
                                "{}{}:{}",
                                w.name.as_deref().map_or(String::new(), |n| format!("{n} ")),
                                w.host,
                                w.pid
                            ),
                            None => wid.clone(),
                        },
                    };
                    rows.push(vec![
                        printable(&sh(&e.id)),
                        printable(&worker),
                        e.started_at.map_or("-".into(), |at| {
                            format!("{} ({})", rfc3339(at), fmt::relative(at, now))
                        }),
                        e.started_at.map_or("-".into(), |at| {
                            fmt::span(now.duration_since(at).unwrap_or_default())
                        }),
                        e.attempt.to_string(),
                    ]);
                }
                let mut text = table(&rows, &[3, 4]);
                if let Some(next) = &running.page.next {
                    text.push_str(&format!("\nnext page: --cursor {next}"));
                }
                let first = &running.page.entries[0].id;
                text.push_str(&format!(
                    "\nto stop one: punctual-admin cancel {} {}",
                    sh(&queue),
                    printable(&sh(first))
                ));
                text
            }
        }
        Command::History { queue, last, .. } => {
            let id = queue_of(&queue).await?;
            let now = ops.store_now(&id).await?;
            let since = now - last.min(std::time::Duration::from_secs(86_400));
            let minutes = ops.history_since(&id, since).await?;
            if json {
                to_json(&HistoryJson::of(since, &minutes))
            } else if minutes.is_empty() {
                format!(
                    "nothing happened in {queue} over the last {}",
                    fmt::span(now.duration_since(since).unwrap_or_default())
                )
            } else {
                let mut rows = vec![row(&["MINUTE", "INSERTED", "DONE", "FAILED", "DEAD"])];
                let mut sums = [0_u64; 4];
                for m in &minutes {
                    for (sum, n) in sums.iter_mut().zip([m.inserted, m.done, m.failed, m.dead]) {
                        *sum += n;
                    }
                    rows.push(vec![
                        rfc3339(m.at),
                        fmt::count(m.inserted),
                        fmt::count(m.done),
                        fmt::count(m.failed),
                        fmt::count(m.dead),
                    ]);
                }
                rows.push(vec![
                    "total".to_owned(),
                    fmt::count(sums[0]),
                    fmt::count(sums[1]),
                    fmt::count(sums[2]),
                    fmt::count(sums[3]),
                ]);
                table(&rows, &[1, 2, 3, 4])
            }
        }
        Command::Audit {
            store,
            limit,
            cursor,
            ..
        } => {
            let source = ops.source_of(store.as_deref())?;
            let page = ops.audit_page(source, cursor.as_deref(), limit).await?;
            let identity = ops.identity(source).to_owned();
            if json {
                #[derive(Serialize)]
                struct AuditJson {
                    store: String,
                    records: Vec<RecordJson>,
                    next: Option<String>,
                }
                to_json(&AuditJson {
                    records: page
                        .records
                        .iter()
                        .map(|r| RecordJson::of(r, &identity))
                        .collect(),
                    store: identity,
                    next: page.next.as_ref().map(ToString::to_string),
                })
            } else if page.records.is_empty() {
                format!("no write recorded in the audit log of {identity}")
            } else {
                let mut rows = vec![row(&[
                    "WHEN", "ACTION", "QUEUE", "IDS", "OUTCOME", "FROM", "TOKEN",
                ])];
                for r in &page.records {
                    let Some(rec) = &r.record else { continue };
                    rows.push(vec![
                        rfc3339(r.at),
                        printable(&rec.action),
                        printable(&rec.queue),
                        clip(
                            &rec.ids.iter().map(|i| sh(i)).collect::<Vec<_>>().join(" "),
                            40,
                        ),
                        if rec.ok {
                            format!("changed {}", rec.changed)
                        } else {
                            clip(rec.error.as_deref().unwrap_or("failed"), 40)
                        },
                        format!(
                            "{} {}",
                            serde_json::to_value(rec.via)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                            printable(rec.from.as_deref().unwrap_or("?"))
                        ),
                        if rec.token { "yes" } else { "no" }.to_owned(),
                    ]);
                }
                let mut text = table(&rows, &[]);
                if let Some(next) = &page.next {
                    text.push_str(&format!("\nnext page: --cursor {next}"));
                }
                text
            }
        }
        Command::Limits { queue, .. } => {
            let id = queue_of(&queue).await?;
            let limits = ops.limits(&id).await?;
            if json {
                to_json(&LimitsJson::of(&limits))
            } else {
                let mut text = if limits.limits.is_empty() {
                    format!("no key limit in {queue}")
                } else {
                    let mut rows = vec![row(&["KEY", "CONCURRENCY", "RATE", "RUNNING"])];
                    for (key, limit, running) in &limits.limits {
                        rows.push(vec![
                            printable(key),
                            limit.concurrency.map_or("-".into(), |n| n.to_string()),
                            limit.rate.as_ref().map_or("-".into(), rate_text),
                            fmt::count(*running),
                        ]);
                    }
                    table(&rows, &[1, 3])
                };
                if !limits.others.is_empty() {
                    let others: Vec<String> = limits
                        .others
                        .iter()
                        .map(|(key, n)| format!("{} ({})", printable(key), fmt::count(*n)))
                        .collect();
                    text.push_str(&format!(
                        "\nrunning without a limit of their own: {}",
                        others.join(", ")
                    ));
                }
                if limits.capped {
                    text.push_str(&format!(
                        "\n(counted from the first {} leased entries only)",
                        fmt::count(crate::ops::LEASED_AT_MOST as u64)
                    ));
                }
                text
            }
        }
        Command::SetLimit {
            queue,
            key,
            concurrency,
            rate,
            ..
        } => {
            let id = queue_of(&queue).await?;
            let limit = KeyLimit { concurrency, rate };
            let n = ops
                .apply(
                    &who,
                    &id,
                    &Write::SetLimit {
                        key: key.clone(),
                        limit,
                    },
                )
                .await?;
            let what = limit_words(&limit);
            let human = if n == 1 {
                format!("{} of {queue} is now {what}", whose(&key))
            } else {
                format!(
                    "{} of {queue} was {what} already: nothing changed",
                    whose(&key)
                )
            };
            write(n, human)
        }
        Command::RemoveLimit { queue, key, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops
                .apply(&who, &id, &Write::RemoveLimit { key: key.clone() })
                .await?;
            let human = if n == 1 {
                format!("removed {} of {queue}", whose(&key))
            } else {
                format!(
                    "{queue} had no such limit ({}): nothing changed",
                    whose(&key)
                )
            };
            write(n, human)
        }
    })
}

/// `queues`: every queue of the stores that could be listed. A store that
/// could not be (or a queue whose counts could not be read) is said on
/// stderr, and fails the command only when no store could be listed.
fn queues_output(
    ops: &Ops,
    listed: &[Listed],
    failed: &[(usize, OpError)],
    json: bool,
) -> Result<String, OpError> {
    if !ops.sources().is_empty() && failed.len() == ops.sources().len() {
        if let [(_, e)] = failed {
            return Err(e.clone());
        }
        let all: Vec<String> = failed.iter().map(|(_, e)| e.message().to_owned()).collect();
        return Err(OpError::Store(format!(
            "no store could be listed: {}",
            all.join("; ")
        )));
    }
    for (source, e) in failed {
        eprintln!(
            "punctual-admin: warning: store {} left out: {e}",
            ops.store_name(*source)
        );
    }
    for l in listed {
        if let Err(e) = &l.snapshot {
            eprintln!(
                "punctual-admin: warning: the counts of {} could not be read: {e}",
                l.label
            );
        }
    }
    Ok(if json {
        let all: Vec<QueueJson> = listed.iter().filter_map(QueueJson::of).collect();
        to_json(&all)
    } else if listed.is_empty() {
        "no queue on the stores given".to_owned()
    } else {
        let mut rows = vec![row(&[
            "STORE", "QUEUE", "STATE", "PENDING", "DUE", "LEASED", "DEAD",
        ])];
        for l in listed {
            let (state, counts) = match &l.snapshot {
                Ok(s) => (
                    if s.paused { "paused" } else { "running" }.to_owned(),
                    [s.stats.pending, s.stats.due, s.stats.leased, s.stats.dead].map(fmt::count),
                ),
                Err(_) => ("unread".to_owned(), ["?", "?", "?", "?"].map(str::to_owned)),
            };
            let mut cells = vec![ops.store_name(l.id.source), l.id.name.clone(), state];
            cells.extend(counts);
            rows.push(cells);
        }
        table(&rows, &[3, 4, 5, 6])
    })
}

/// `show` for people: every field, the failed attempts, the kept result,
/// and the commands that act on the entry (its id quoted for the shell).
fn show_text(
    queue: &str,
    entry: &str,
    shown: &crate::ops::Shown,
    now: std::time::SystemTime,
) -> String {
    let t = |at: Option<std::time::SystemTime>| {
        at.map_or("-".into(), |at| {
            format!("{} ({})", rfc3339(at), fmt::relative(at, now))
        })
    };
    let mut text = String::new();
    let me = format!("{} {}", shell_word(queue), shell_word(entry));
    if let Some(e) = &shown.entry {
        text.push_str(&format!(
            "id          {}\nstate       {}\ndue         {}\nstarted     {}\nworker      {}\nlease until {}\ndied at     {}\nattempt     {}\nschedule    {}\nkey         {}\npriority    {}\nlast error  {}\nvalue       {}",
            e.id,
            e.state,
            t(Some(e.due)),
            t(e.started_at),
            e.worker.as_deref().unwrap_or("-"),
            t(e.lease_until),
            t(e.died_at),
            e.attempt,
            e.schedule.as_deref().unwrap_or("-"),
            e.key.as_deref().unwrap_or("-"),
            e.priority,
            e.last_error.as_deref().unwrap_or("-"),
            e.value.as_ref().map_or("(does not decode)".into(), |v| {
                serde_json::to_string_pretty(v)
                    .unwrap_or_default()
                    .replace('\n', "\n            ")
            }),
        ));
        for err in &e.errors {
            text.push_str(&format!(
                "\nattempt {:<3} failed {}: {}",
                err.attempt,
                t(Some(err.at)),
                err.reason.replace('\n', "\n            ")
            ));
        }
    } else {
        text.push_str(&format!(
            "id          {entry}\nstate       finished (the entry is gone; its result is kept)"
        ));
    }
    match &shown.result {
        Ok(Some(r)) => {
            text.push_str(&format!(
                "\nresult      {} {}, after {} {}",
                finished_str(r.state),
                t(Some(r.finished_at)),
                r.attempts,
                if r.attempts == 1 {
                    "attempt"
                } else {
                    "attempts"
                }
            ));
            if let Some(reason) = &r.reason {
                text.push_str(&format!("\nwhy         {reason}"));
            }
            if let Some(output) = &r.output {
                text.push_str(&format!(
                    "\noutput      {}",
                    serde_json::to_string_pretty(output)
                        .unwrap_or_default()
                        .replace('\n', "\n            ")
                ));
            }
        }
        Ok(None) => {}
        Err(e) => text.push_str(&format!("\nresult      (could not be read: {e})")),
    }
    if let Some(e) = &shown.entry {
        let hint = match e.state {
            EntryState::Dead => {
                format!("punctual-admin requeue {me} [--delay 10m] · punctual-admin remove {me}")
            }
            EntryState::Leased => format!("punctual-admin cancel {me}"),
            EntryState::Pending | EntryState::Due => format!("punctual-admin remove {me}"),
        };
        text.push_str(&format!("\ncommands    {hint}"));
    }
    text
}

/// Whose limit `key` names, for people.
fn whose(key: &str) -> String {
    if key == DEFAULT_KEY {
        "the default key limit (*)".to_owned()
    } else {
        format!("the limit of key {}", printable(key))
    }
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("plain data serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_asked_for_anywhere_before_a_double_dash() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(wants_json(&args(&["p", "--json", "stats"])));
        assert!(wants_json(&args(&["p", "stats", "q", "--json"])));
        assert!(!wants_json(&args(&["p", "show", "q", "--", "--json"])));
        assert!(
            !wants_json(&args(&["--json", "queues"])),
            "the program's name"
        );
        assert!(!wants_json(&args(&["p", "stats", "--jsonx"])));
    }

    /// The output of the command line `args` (after the program's name
    /// and a store it does not read) over `queue`, a memory queue: the
    /// binary cannot reach one, these tests can.
    async fn over_memory(
        queue: &punctual::memory::MemoryQueue<serde_json::Value>,
        args: &[&str],
    ) -> Result<String, OpError> {
        let mut line = vec!["punctual-admin", "--redis", "redis://127.0.0.1:1/"];
        line.extend(args);
        let cli = Cli::try_parse_from(line).map_err(|e| OpError::Invalid(clap_message(&e)))?;
        let json = json_of(&cli.command);
        let ops = Arc::new(Ops::new(
            vec![Source::memory(vec![queue.clone()])],
            Policy::FRESH,
        ));
        Box::pin(command_output(&ops, cli.command, json)).await
    }

    #[tokio::test]
    async fn key_limits_and_entry_keys_on_a_memory_queue() {
        use punctual::durable::InsertOptions;
        use serde_json::{Value, json};
        use std::time::Duration;

        let q = punctual::memory::MemoryQueue::<Value>::builder("tenants")
            .lease(Duration::from_secs(3600))
            .build();
        let opts = |id: &str, key: &str| InsertOptions::new().id(id).key(key).priority(5);
        for (id, key) in [
            ("a-1", "tenant-a"),
            ("a-2", "tenant-a"),
            ("b-1", "tenant-b"),
        ] {
            q.insert_with(&json!(id), &opts(id, key)).await.unwrap();
        }
        q.insert_with(
            &json!("later"),
            &InsertOptions::new()
                .id("later")
                .priority(-2)
                .delay(Duration::from_secs(600)),
        )
        .await
        .unwrap();
        let one = KeyLimit {
            concurrency: Some(1),
            rate: None,
        };
        q.set_key_limit("tenant-a", one).await.unwrap();
        let mut held = Vec::new();
        while let Some(d) = q.try_take().await.unwrap() {
            held.push(d);
        }
        assert_eq!(held.len(), 2, "tenant-a runs one at a time");

        let doc: Value = serde_json::from_str(
            &over_memory(&q, &["limits", "tenants", "--json"])
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({
                "limits": [{"key": "tenant-a", "concurrency": 1, "rate": null, "running": 1}],
                "others": [{"key": "tenant-b", "running": 1}],
                "capped": false,
            })
        );
        let text = over_memory(&q, &["limits", "tenants"]).await.unwrap();
        assert!(text.starts_with("KEY"), "{text}");
        assert!(
            text.contains("tenant-a")
                && text.ends_with("running without a limit of their own: tenant-b (1)"),
            "{text}"
        );

        let set = |args: &'static [&'static str]| {
            let q = q.clone();
            async move { over_memory(&q, args).await }
        };
        assert_eq!(
            set(&["set-limit", "tenants", "*", "--rate", "100/1m", "--json"])
                .await
                .unwrap(),
            to_json(&WriteJson::changed(1))
        );
        assert_eq!(
            set(&["set-limit", "tenants", "*", "--rate", "100/60s"])
                .await
                .unwrap(),
            "the default key limit (*) of tenants was rate 100/1m already: nothing changed"
        );
        assert_eq!(
            set(&[
                "set-limit",
                "tenants",
                "tenant-b",
                "--concurrency",
                "3",
                "--rate",
                "5/500ms"
            ])
            .await
            .unwrap(),
            "the limit of key tenant-b of tenants is now concurrency 3, rate 5/500ms"
        );
        let kept = q.key_limits().await.unwrap();
        assert!(kept.contains(&(
            "*".to_owned(),
            KeyLimit {
                concurrency: None,
                rate: Some(Rate {
                    max: 100,
                    per: Duration::from_secs(60)
                })
            }
        )));
        assert!(kept.contains(&(
            "tenant-b".to_owned(),
            KeyLimit {
                concurrency: Some(3),
                rate: Some(Rate {
                    max: 5,
                    per: Duration::from_millis(500)
                })
            }
        )));
        let text = over_memory(&q, &["limits", "tenants"]).await.unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(
            rows[1].starts_with("*") && rows[1].contains("100/1m"),
            "{text}"
        );
        assert!(
            rows[3].starts_with("tenant-b") && rows[3].ends_with(" 1"),
            "{text}"
        );

        assert_eq!(
            set(&["remove-limit", "tenants", "tenant-b", "--json"])
                .await
                .unwrap(),
            to_json(&WriteJson::changed(1))
        );
        assert_eq!(
            set(&["remove-limit", "tenants", "tenant-b"]).await.unwrap(),
            "tenants had no such limit (the limit of key tenant-b): nothing changed"
        );
        assert_eq!(q.key_limits().await.unwrap().len(), 2);

        // Bad arguments: refused before the store (clap) or by it.
        for bad in [
            &["set-limit", "tenants", "k", "--rate", "5"][..],
            &["set-limit", "tenants", "k", "--rate", "5/soon"],
            &["set-limit", "tenants", "k", "--concurrency", "-1"],
            &["set-limit", "tenants", "k", "--rate", "5/0s"],
            &["set-limit", "tenants", "", "--concurrency", "1"],
        ] {
            let e = over_memory(&q, bad).await.unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
        assert!(
            over_memory(&q, &["set-limit", "tenants", "k", "--rate", "5/0s"])
                .await
                .unwrap_err()
                .to_string()
                .contains("invalid key limit")
        );
        assert_eq!(
            over_memory(&q, &["limits", "nope"])
                .await
                .unwrap_err()
                .exit_code(),
            1
        );
        assert_eq!(
            q.key_limits().await.unwrap().len(),
            2,
            "nothing bad was kept"
        );

        // Entries: their key and priority, in the table and in `show`.
        let text = over_memory(&q, &["entries", "tenants", "--state", "leased"])
            .await
            .unwrap();
        let head = text.lines().next().unwrap();
        assert!(head.contains("ATTEMPT  PRIO  KEY"), "{text}");
        assert!(text.contains("tenant-b"), "{text}");
        let text = over_memory(&q, &["show", "tenants", "later"])
            .await
            .unwrap();
        assert!(text.contains("\nkey         -\npriority    -2\n"), "{text}");
        let doc: Value = serde_json::from_str(
            &over_memory(&q, &["show", "tenants", "a-1", "--json"])
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (&doc["key"], &doc["priority"]),
            (&json!("tenant-a"), &json!(5))
        );
    }

    /// The health and jobs commands over a memory queue: workers, running,
    /// cancel, history, show with a result, schedules paused, requeue with
    /// a delay, dead letters newest first; relative times
    /// from the store's clock (the queue's clock runs years behind this
    /// machine's here).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn health_and_jobs_commands_on_a_memory_queue() {
        use punctual::durable::{Job, Outcome, Worker};
        use serde_json::{Value, json};
        use std::time::{Duration, UNIX_EPOCH};

        let long_ago = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let q = punctual::memory::MemoryQueue::<Value>::builder("renders")
            .keep_results(Duration::from_secs(3600))
            .max_attempts(1)
            .start_at(long_ago)
            .build();
        let worker =
            Worker::builder(q.clone())
                .name("renderer")
                .spawn(|job: Job<Value>| async move {
                    match job.value()["do"].as_str() {
                        Some("hold") => {
                            job.cancelled().await;
                            Outcome::Done
                        }
                        Some("fail") => Outcome::discard("the template is missing"),
                        _ => Outcome::done_with(&json!({"pages": 3})),
                    }
                });
        q.insert_with_id("done-1", &json!({"do": "render"}), Duration::ZERO)
            .await
            .unwrap();
        q.insert_with_id("dead-1", &json!({"do": "fail"}), Duration::ZERO)
            .await
            .unwrap();
        q.insert_with_id("dead-2", &json!({"do": "fail"}), Duration::ZERO)
            .await
            .unwrap();
        q.insert_with_id("slow", &json!({"do": "hold"}), Duration::ZERO)
            .await
            .unwrap();
        q.insert_with_id("later", &json!({"do": "render"}), Duration::from_secs(600))
            .await
            .unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let s = q.stats().await.unwrap();
            let w = q.workers().await.unwrap();
            // The record as of a heartbeat after the others ended (one
            // made while they ran lists them too).
            let listed = w
                .first()
                .is_some_and(|w| w.running.len() == 1 && w.running[0].id == "slow");
            if s.dead == 2 && s.leased == 1 && listed {
                break;
            }
            assert!(tokio::time::Instant::now() < until, "{s:?} {w:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let run = |args: &'static [&'static str]| {
            let q = q.clone();
            async move { over_memory(&q, args).await }
        };
        let doc = |text: String| serde_json::from_str::<Value>(&text).unwrap();

        // Relative times from the store's clock: "in 10m", not decades ago.
        let text = run(&["entries", "renders", "--state", "pending"])
            .await
            .unwrap();
        assert!(
            text.contains("(in 10m)") || text.contains("(in 9m"),
            "{text}"
        );

        let workers = doc(run(&["workers", "renders", "--json"]).await.unwrap());
        assert_eq!(workers[0]["name"], "renderer", "{workers}");
        assert_eq!(workers[0]["pid"], std::process::id());
        let text = run(&["workers", "renders"]).await.unwrap();
        assert!(
            text.starts_with("NAME") && text.contains("renderer") && text.contains("1/1"),
            "{text}"
        );

        let running = doc(run(&["running", "renders", "--json"]).await.unwrap());
        assert_eq!(running["running"][0]["id"], "slow", "{running}");
        assert_eq!(running["running"][0]["worker"]["name"], "renderer");
        let text = run(&["running", "renders"]).await.unwrap();
        assert!(
            text.contains("renderer") && text.contains("cancel renders slow"),
            "{text}"
        );

        // A finished entry: gone, its result kept.
        let shown = doc(run(&["show", "renders", "done-1", "--json"]).await.unwrap());
        assert_eq!(
            (
                &shown["state"],
                &shown["result"]["state"],
                &shown["result"]["output"]
            ),
            (&json!("finished"), &json!("done"), &json!({"pages": 3})),
            "{shown}"
        );
        let text = run(&["show", "renders", "done-1"]).await.unwrap();
        assert!(
            text.contains("result      done") && text.contains("\"pages\": 3"),
            "{text}"
        );
        let text = run(&["show", "renders", "dead-1"]).await.unwrap();
        assert!(
            text.contains("attempt 1   failed") && text.contains("the template is missing"),
            "{text}"
        );
        assert!(
            text.contains("commands    punctual-admin requeue renders dead-1"),
            "{text}"
        );

        // Cancel: the run stops, its result says so.
        assert_eq!(
            run(&["cancel", "renders", "slow", "--json"]).await.unwrap(),
            to_json(&WriteJson::changed(1))
        );
        let until = tokio::time::Instant::now() + Duration::from_secs(15);
        while q.entry("slow").await.unwrap().is_some() {
            assert!(tokio::time::Instant::now() < until);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            q.result("slow").await.unwrap().map(|r| r.state),
            Some(punctual::durable::Finished::Cancelled)
        );
        assert!(
            run(&["cancel", "renders", "slow"])
                .await
                .unwrap()
                .contains("nothing changed")
        );

        // History per minute, from the store.
        let history = doc(run(&["history", "renders", "--json"]).await.unwrap());
        let inserted: u64 = history["minutes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["inserted"].as_u64().unwrap())
            .sum();
        assert_eq!(inserted, 5, "{history}");
        let text = run(&["history", "renders", "--last", "30m"]).await.unwrap();
        assert!(
            text.starts_with("MINUTE") && text.contains("\ntotal"),
            "{text}"
        );

        // Dead letters newest first (the two died in whichever order their
        // handlers ended: the oldest-first listing, reversed); requeue with
        // a delay.
        let ids_of = |page: &Value| -> Vec<String> {
            page["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_str().unwrap().to_owned())
                .collect()
        };
        let newest = doc(run(&[
            "entries", "renders", "--state", "dead", "--order", "newest", "--json",
        ])
        .await
        .unwrap());
        let oldest = doc(run(&["entries", "renders", "--state", "dead", "--json"])
            .await
            .unwrap());
        let mut reversed = ids_of(&oldest);
        reversed.reverse();
        let mut both = ids_of(&newest);
        assert_eq!(both, reversed);
        both.sort();
        assert_eq!(both, ["dead-1", "dead-2"]);
        let now = q.now().await.unwrap();
        assert_eq!(
            run(&["requeue", "renders", "dead-1", "--delay", "10m"])
                .await
                .unwrap(),
            "requeued dead-1 of renders: due in 10m"
        );
        let e = q.entry("dead-1").await.unwrap().unwrap();
        assert!(e.due.duration_since(now).unwrap() >= Duration::from_secs(599));
        assert!(
            run(&["requeue", "renders", "dead-2", "--delay", "soon"])
                .await
                .is_err()
        );

        // Schedules paused and resumed, with their last run and outcome.
        q.schedule_every(
            "hourly",
            Duration::from_secs(3600),
            punctual::MissedTicks::Skip,
            &json!(1),
        )
        .await
        .unwrap();
        assert_eq!(
            run(&["pause-schedule", "renders", "hourly"]).await.unwrap(),
            "paused schedule hourly of renders: its tick waits until it is resumed"
        );
        assert!(q.schedules().await.unwrap()[0].paused);
        let listed = doc(run(&["schedules", "renders", "--json"]).await.unwrap());
        assert_eq!(
            (&listed[0]["paused"], &listed[0]["last_outcome"]),
            (&json!(true), &Value::Null)
        );
        assert!(
            run(&["schedules", "renders"])
                .await
                .unwrap()
                .contains("hourly (paused)")
        );
        assert_eq!(
            run(&["resume-schedule", "renders", "hourly", "--json"])
                .await
                .unwrap(),
            to_json(&WriteJson::changed(1))
        );
        assert_eq!(
            run(&["pause-schedule", "renders", "nope"])
                .await
                .unwrap_err()
                .exit_code(),
            1
        );

        worker.shutdown(Duration::from_secs(1)).await;
    }

    #[test]
    fn each_schema_belongs_to_the_postgres_before_it() {
        let (_, sources) = parse([
            "punctual-admin",
            "--postgres",
            "postgres://a/db",
            "--redis",
            "redis://r/",
            "--postgres",
            "postgres://b/db",
            "--schema",
            "jobs",
            "queues",
        ])
        .unwrap();
        let described: Vec<String> = sources.iter().map(Source::describe).collect();
        assert_eq!(
            described,
            [
                "redis://r/",
                "postgres://a/db schema punctual",
                "postgres://b/db schema jobs"
            ]
        );
        assert!(
            parse([
                "punctual-admin",
                "--schema",
                "x",
                "--postgres",
                "p://",
                "queues"
            ])
            .is_err()
        );
        assert!(parse(["punctual-admin", "queues"]).is_err());
        // The store flags after the command, in any mix.
        let (_, sources) = parse([
            "punctual-admin",
            "--postgres",
            "postgres://a/db",
            "queues",
            "--schema",
            "jobs",
            "--redis=redis://r/",
            "--postgres=postgres://b/db",
        ])
        .unwrap();
        let described: Vec<String> = sources.iter().map(Source::describe).collect();
        assert_eq!(
            described,
            [
                "redis://r/",
                "postgres://a/db schema jobs",
                "postgres://b/db schema punctual"
            ]
        );
        assert!(
            parse([
                "punctual-admin",
                "stats",
                "q",
                "--schema",
                "x",
                "--postgres",
                "postgres://a/db"
            ])
            .is_err(),
            "a --schema before its --postgres"
        );
    }
}
