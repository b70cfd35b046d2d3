//! The command line: `punctual-admin [--redis URL]... [--postgres URL
//! [--schema S]]... COMMAND`, each command one call of the operations
//! layer, printed for people or, with `--json`, as one JSON document.
//!
//! Exit codes: 0 on success, 1 when the queue, entry or schedule does not
//! exist, 2 on bad arguments or a store error.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde::Serialize;

use crate::error::OpError;
use crate::fmt;
use crate::json::{EntryJson, ErrorJson, PageJson, QueueJson, ScheduleJson, WriteJson, rfc3339};
use crate::ops::{DEFAULT_LIMIT, Ops, Policy, Requeue, parse_state, wall_clock};
use crate::store::Source;
use punctual::durable::EntryState;

/// Looks into and acts on punctual's durable queues in Redis and PostgreSQL:
/// a web dashboard (`serve`) and the same operations as commands.
#[derive(Debug, Parser)]
#[command(name = "punctual-admin", version, max_term_width = 100)]
struct Cli {
    /// A Redis server: every queue on it (repeatable; `rediss://` for TLS).
    #[arg(long = "redis", value_name = "URL")]
    redis: Vec<String>,
    /// A PostgreSQL database: every queue in its schema (repeatable;
    /// `sslmode=verify-full` and the rest in the URL).
    #[arg(long = "postgres", value_name = "URL")]
    postgres: Vec<String>,
    /// The schema of the `--postgres` before it [default: punctual].
    #[arg(long = "schema", value_name = "S")]
    schema: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

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
        /// `NAME`, or `redis:NAME` / `postgres:NAME` when several stores
        /// hold it.
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
        /// Entries per page (at most 1000).
        #[arg(long, default_value_t = DEFAULT_LIMIT, value_name = "N")]
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
}

#[derive(Debug, Clone, Copy, Args)]
struct Out {
    /// One JSON document on stdout.
    #[arg(long)]
    json: bool,
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
            eprintln!("punctual-admin: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(execute(cli.command, sources))
}

/// The parsed command line and its stores; the exit code when it does not
/// parse (clap has printed why, or the help).
fn parse<I, A>(args: I) -> Result<(Cli, Vec<Source>), ExitCode>
where
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return Err(ExitCode::from(if e.use_stderr() { 2 } else { 0 }));
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return Err(ExitCode::from(2));
        }
    };
    let bad = |why: String| {
        eprintln!("punctual-admin: {why}");
        ExitCode::from(2)
    };
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
    let json = match &command {
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
        | Command::Unschedule { out, .. } => out.json,
    };
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
                        l.kind.to_string(),
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
                    listed.kind,
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
                    table(&rows, &[2])
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
                    "id          {}\nstate       {}\ndue         {}\nlease until {}\ndied at     {}\nattempt     {}\nschedule    {}\nlast error  {}\nvalue       {}",
                    e.id,
                    e.state,
                    rfc3339(e.due),
                    t(e.lease_until),
                    t(e.died_at),
                    e.attempt,
                    e.schedule.as_deref().unwrap_or("-"),
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
    })
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("plain data serializes")
}

/// `text` with its control characters written as escapes (`\u{1b}`),
/// line breaks and tabs apart: what an entry's id, a schedule's name or a
/// handler's error holds must not drive the terminal it is printed on.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

/// `text` cut to `max` characters (an ellipsis marks the cut), on one line,
/// [`printable`].
fn clip(text: &str, max: usize) -> String {
    let one_line = printable(&text.replace(['\n', '\r', '\t'], " "));
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// Rows as aligned columns, those in `right` aligned right (numbers).
fn table(rows: &[Vec<String>], right: &[usize]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c > 0 {
                line.push_str("  ");
            }
            if right.contains(&c) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if c + 1 < r.len() {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push(line);
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_numbers_right() {
        let rows = vec![row(&["Q", "N"]), row(&["jobs", "1,000"]), row(&["a", "7"])];
        assert_eq!(table(&rows, &[1]), "Q         N\njobs  1,000\na         7");
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
