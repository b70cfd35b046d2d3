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

use text::{clip, printable, row, table};

use crate::error::OpError;
use crate::fmt;
use crate::json::{
    EntryJson, ErrorJson, LimitsJson, PageJson, QueueJson, ScheduleJson, WriteJson, rfc3339,
};
use crate::ops::{
    DEFAULT_KEY, DEFAULT_LIMIT, Ops, Policy, Requeue, parse_limit, parse_rate, parse_state,
    wall_clock,
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
    /// `LABEL=URL` names it LABEL (letters, digits, - and _).
    #[arg(long = "redis", value_name = "[LABEL=]URL")]
    redis: Vec<String>,
    /// A PostgreSQL database: every queue in its schema (repeatable;
    /// `sslmode=verify-full` and the rest in the URL). `LABEL=URL` names
    /// it LABEL.
    #[arg(long = "postgres", value_name = "[LABEL=]URL")]
    postgres: Vec<String>,
    /// The schema of the `--postgres` before it [default: punctual].
    #[arg(long = "schema", value_name = "S")]
    schema: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

/// How a `QUEUE` argument names its store, under every `--help`.
const QUEUE_HELP: &str = "\
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
        #[command(flatten)]
        out: Out,
    },
    /// One entry, in any state.
    Show {
        queue: String,
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Puts a dead letter (or every one) back, due now, attempts reset.
    Requeue {
        queue: String,
        #[arg(required_unless_present = "all_dead")]
        id: Option<String>,
        /// Every dead letter of the queue.
        #[arg(long, conflicts_with = "id")]
        all_dead: bool,
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
    let matches = Cli::command()
        .try_get_matches_from(args)
        .map_err(clap_failed)?;
    let cli = Cli::from_arg_matches(&matches).map_err(clap_failed)?;
    let bad = |why: String| refuse(json, &why);
    // Each --schema belongs to the --postgres before it.
    let pg_at: Vec<usize> = matches
        .indices_of("postgres")
        .map(Iterator::collect)
        .unwrap_or_default();
    let schema_at: Vec<usize> = matches
        .indices_of("schema")
        .map(Iterator::collect)
        .unwrap_or_default();
    let mut schemas: Vec<Option<String>> = vec![None; cli.postgres.len()];
    for (schema, at) in cli.schema.iter().zip(&schema_at) {
        let Some(owner) = pg_at.iter().rposition(|pg| pg < at) else {
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
    let mut sources: Vec<Source> = cli.redis.iter().map(|url| Source::redis(url)).collect();
    for (url, schema) in cli.postgres.iter().zip(schemas) {
        sources.push(Source::postgres(
            url,
            schema.as_deref().unwrap_or(crate::DEFAULT_SCHEMA),
        ));
    }
    if sources.is_empty() {
        return Err(bad(
            "no store given: add --redis URL or --postgres URL before the command".to_owned(),
        ));
    }
    identities(&sources).map_err(bad)?;
    Ok((cli, sources))
}

async fn execute(command: Command, sources: Vec<Source>) -> ExitCode {
    if let Command::Serve {
        bind,
        read_only,
        token,
    } = command
    {
        return crate::web::serve::run(sources, &bind, read_only, token).await;
    }
    let ops = Arc::new(Ops::new(sources, Policy::FRESH));
    let json = json_of(&command);
    match command_output(&ops, command, json).await {
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
        | Command::RemoveLimit { out, .. } => out.json,
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
    Ok(match command {
        Command::Serve { .. } => unreachable!("served above"),
        Command::Queues(_) => {
            let (listed, failed) = ops.queues().await;
            if let Some((_, e)) = failed.first() {
                return Err(e.clone());
            }
            if let Some(e) = listed.iter().find_map(|l| l.snapshot.as_ref().err()) {
                return Err(e.clone());
            }
            if json {
                let all: Vec<QueueJson> = listed.iter().filter_map(QueueJson::of).collect();
                to_json(&all)
            } else {
                let mut rows = vec![row(&[
                    "STORE", "QUEUE", "STATE", "PENDING", "DUE", "LEASED", "DEAD",
                ])];
                for l in &listed {
                    let s = l.snapshot.as_ref().expect("checked above");
                    rows.push(vec![
                        ops.store_name(l.id.source),
                        l.id.name.clone(),
                        if s.paused { "paused" } else { "running" }.to_owned(),
                        fmt::count(s.stats.pending),
                        fmt::count(s.stats.due),
                        fmt::count(s.stats.leased),
                        fmt::count(s.stats.dead),
                    ]);
                }
                if listed.is_empty() {
                    "no queue on the stores given".to_owned()
                } else {
                    table(&rows, &[3, 4, 5, 6])
                }
            }
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
            ..
        } => {
            let state = parse_state(&state)?;
            let id = queue_of(&queue).await?;
            let page = ops.entries(&id, state, cursor.as_deref(), limit).await?;
            if json {
                to_json(&PageJson::of(&page))
            } else {
                let now = wall_clock();
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
                        printable(&e.id),
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
                }
                text
            }
        }
        Command::Show {
            queue, id: entry, ..
        } => {
            let id = queue_of(&queue).await?;
            let e = ops.entry(&id, &entry).await?;
            if json {
                to_json(&EntryJson::of(&e))
            } else {
                let t = |at: Option<std::time::SystemTime>| at.map_or("-".into(), rfc3339);
                format!(
                    "id          {}\nstate       {}\ndue         {}\nlease until {}\ndied at     {}\nattempt     {}\nschedule    {}\nkey         {}\npriority    {}\nlast error  {}\nvalue       {}",
                    e.id,
                    e.state,
                    rfc3339(e.due),
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
                )
            }
        }
        Command::Requeue {
            queue,
            id: entry,
            all_dead,
            ..
        } => {
            let id = queue_of(&queue).await?;
            let what = match (entry, all_dead) {
                (Some(entry), false) => Requeue::One(entry),
                _ => Requeue::AllDead,
            };
            let n = ops.requeue(&id, &what).await?;
            let human = match &what {
                Requeue::AllDead => format!("requeued {n} dead letters of {queue}"),
                Requeue::One(e) if n == 1 => format!("requeued {e} of {queue}: due now"),
                Requeue::One(e) => format!("{e} of {queue} is not a dead letter: nothing changed"),
            };
            write(n, human)
        }
        Command::Remove {
            queue, id: entry, ..
        } => {
            let id = queue_of(&queue).await?;
            let n = ops.remove(&id, &entry).await?;
            write(n, format!("removed {entry} from {queue}"))
        }
        Command::ClearDead { queue, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.clear_dead(&id).await?;
            write(n, format!("deleted {n} dead letters of {queue}"))
        }
        Command::Pause { queue, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.pause(&id).await?;
            let human = if n == 1 {
                format!("paused {queue}")
            } else {
                format!("{queue} was paused already")
            };
            write(n, human)
        }
        Command::Resume { queue, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.resume(&id).await?;
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
                let now = wall_clock();
                let mut rows = vec![row(&["NAME", "SPEC", "NEXT", "VALUE"])];
                for s in &schedules {
                    rows.push(vec![
                        printable(&s.name),
                        s.spec.clone(),
                        s.next.map_or("running now".into(), |at| {
                            format!("{} ({})", rfc3339(at), fmt::relative(at, now))
                        }),
                        clip(&s.value.to_string(), 60),
                    ]);
                }
                table(&rows, &[])
            }
        }
        Command::RunNow { queue, name, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.run_now(&id, &name).await?;
            let human = if n == 1 {
                format!("schedule {name} of {queue} is due now")
            } else {
                format!("schedule {name} of {queue} is running: nothing changed")
            };
            write(n, human)
        }
        Command::Unschedule { queue, name, .. } => {
            let id = queue_of(&queue).await?;
            let n = ops.unschedule(&id, &name).await?;
            write(n, format!("deleted schedule {name} of {queue}"))
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
            let n = ops.set_limit(&id, &key, limit).await?;
            let what = limit_text(&limit);
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
            let n = ops.remove_limit(&id, &key).await?;
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

/// Whose limit `key` names, for people.
fn whose(key: &str) -> String {
    if key == DEFAULT_KEY {
        "the default key limit (*)".to_owned()
    } else {
        format!("the limit of key {}", printable(key))
    }
}

/// A limit for people: `concurrency 5, rate 100/1m`, or `no bound`.
fn limit_text(limit: &KeyLimit) -> String {
    let mut parts = Vec::new();
    if let Some(n) = limit.concurrency {
        parts.push(format!("concurrency {n}"));
    }
    if let Some(rate) = &limit.rate {
        parts.push(format!("rate {}", rate_text(rate)));
    }
    if parts.is_empty() {
        "no bound".to_owned()
    } else {
        parts.join(", ")
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
            vec![Source::Memory {
                queues: vec![queue.clone()],
            }],
            Policy::FRESH,
        ));
        command_output(&ops, cli.command, json).await
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
    }
}
