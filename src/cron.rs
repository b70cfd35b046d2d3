//! Cron expressions (cargo feature `cron`): the crate's one parser, with
//! time zones, shared by the in-memory scheduler and durable schedules.
//!
//! An expression has 5 fields (minute, hour, day of month, month, day of
//! week), or 6 with seconds first, or is a nickname (`@daily`, `@hourly`,
//! ...), optionally after a `CRON_TZ=<IANA zone> ` prefix; without one the
//! zone is UTC. croner parses the fields and searches the calendar;
//! chrono-tz knows the zones. What comes out is an instant (UTC): callers
//! never see a zone.
//!
//! # Daylight saving time
//!
//! The rule of the Open Cron Pattern Specification, decided by the hour
//! field:
//!
//! - an hour field naming fixed hours (`3`, `1,13`, `1-3`, `1-9/2`) names
//!   local times, each run once: one the clock skips (spring forward) runs
//!   at the first instant after the jump (several skipped ones, or one that
//!   lands on another named instant, run once), one the clock repeats (fall
//!   back) at its first occurrence only;
//! - an hour field `*` or `*/n` follows the real clock: it runs in both
//!   passes of a repeated hour, and the times of a skipped hour do not exist.
//!
//! croner applies the first rule only to what it calls fixed-time jobs,
//! whose second, minute and hour fields are one value each (`30 2 * * *`),
//! and follows the real clock for everything else: `0 1-3 * * *` or
//! `*/15 2 * * *` would run twice in a repeated hour and never in a skipped
//! one. So croner's own search serves the real-clock expressions, and the
//! named-hour ones are searched on the calendar alone (croner on naive
//! date-times, where no clock changes) and placed on the time line here, by
//! [`CronExpr::place`].

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};

/// The zone prefix, as robfig/cron and Kubernetes CronJobs spell it.
const ZONE_PREFIX: &str = "CRON_TZ=";

/// A parsed cron expression and its zone.
#[derive(Clone, Debug)]
pub(crate) struct CronExpr {
    cron: Cron,
    zone: Tz,
    /// The hour field names hours (not `*` or `*/n`): the expression names
    /// local times, each run once across a clock change.
    named_hours: bool,
}

impl CronExpr {
    /// Parses `expr`, with or without a `CRON_TZ=` prefix.
    ///
    /// The error is the reason, lowercase, quoting `expr` and naming the field
    /// at fault or the unknown zone.
    pub(crate) fn parse(expr: &str) -> Result<CronExpr, String> {
        let (zone, fields) = split_zone(expr)?;
        let parser = parser();
        let cron = parser
            .parse(fields)
            .map_err(|error| explain(&parser, expr, fields, &error))?;
        // croner marks an hour field of `*` or `*/n` as a wildcard.
        let named_hours = !cron.pattern.hours.from_wildcard;
        Ok(CronExpr {
            cron,
            zone,
            named_hours,
        })
    }

    /// The first instant of the expression strictly after `t`, if any is
    /// left (the search gives up past the year 5000).
    pub(crate) fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.named_hours {
            self.next_named_after(t)
        } else {
            let local = t.with_timezone(&self.zone);
            let next = self.cron.find_next_occurrence(&local, false).ok()?;
            Some(next.with_timezone(&Utc))
        }
    }

    /// [`next_after`](Self::next_after) in milliseconds since the Unix
    /// epoch, as durable stores keep instants. The expression's instants are
    /// whole seconds, so nothing is rounded.
    #[allow(dead_code, reason = "for the durable schedules")]
    pub(crate) fn next_after_ms(&self, unix_ms: i64) -> Option<i64> {
        let t = DateTime::from_timestamp_millis(unix_ms)?;
        Some(self.next_after(t)?.timestamp_millis())
    }

    /// The first named local time placed strictly after `t`.
    ///
    /// Placing keeps the order of local times, so the first one after the
    /// wall clock reading of `t` is the answer, except when `t` is in the
    /// second pass of a repeated range: the named times still ahead in that
    /// range ran in the first pass (they are placed before `t`), and the
    /// loop steps over them.
    fn next_named_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut civil = t.with_timezone(&self.zone).naive_local();
        loop {
            civil = self.cron.find_next_occurrence(&civil, false).ok()?;
            let at = self.place(civil)?;
            if at > t {
                return Some(at);
            }
        }
    }

    /// The instant at which the named local time `civil` runs: itself, its
    /// first occurrence if the clock repeats it, or the first instant after
    /// the jump if the clock skips it.
    fn place(&self, civil: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.zone.from_local_datetime(&civil) {
            LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => Some(at.with_timezone(&Utc)),
            LocalResult::None => self.after_jump(civil),
        }
    }

    /// The first instant after the clock jumped over `civil`: the instant of
    /// the jump, where the first local time that exists after `civil` begins.
    ///
    /// Local times from `civil` up to the landing do not exist, and from it on
    /// they do for a day at least (no zone skips more than a day, or skips
    /// twice within one), so a bisection over the next day finds the landing
    /// to the second, the unit of both local times and transitions.
    fn after_jump(&self, civil: NaiveDateTime) -> Option<DateTime<Utc>> {
        const DAY: i64 = 86_400;
        let exists = |seconds: i64| {
            let later = civil.checked_add_signed(TimeDelta::seconds(seconds))?;
            self.zone.from_local_datetime(&later).earliest()
        };
        let (mut skipped, mut exists_at) = (0, DAY);
        let mut landing = exists(DAY)?;
        while exists_at - skipped > 1 {
            let middle = skipped + (exists_at - skipped) / 2;
            match exists(middle) {
                Some(at) => (exists_at, landing) = (middle, at),
                None => skipped = middle,
            }
        }
        Some(landing.with_timezone(&Utc))
    }
}

/// Splits a `CRON_TZ=<zone> ` prefix off `expr`: its zone (UTC without one)
/// and the fields after it.
fn split_zone(expr: &str) -> Result<(Tz, &str), String> {
    let Some(rest) = expr.trim_start().strip_prefix(ZONE_PREFIX) else {
        return Ok((Tz::UTC, expr));
    };
    let (name, fields) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if name.is_empty() {
        return Err(format!(
            "`{expr}`: expected an IANA time zone after `{ZONE_PREFIX}`, \
             as in `CRON_TZ=Europe/Berlin 0 3 * * *`"
        ));
    }
    let zone: Tz = name.parse().map_err(|_| {
        format!(
            "`{expr}`: unknown time zone `{name}` (expected an IANA name such as Europe/Berlin)"
        )
    })?;
    if fields.trim().is_empty() {
        return Err(format!(
            "`{expr}`: expected a cron expression after the time zone"
        ));
    }
    Ok((zone, fields))
}

/// 5 fields, or 6 with seconds first; `@hourly`, `@daily` and the like;
/// day of month and day of week match when either does (as Vixie cron).
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

const FIVE: [&str; 5] = ["minute", "hour", "day of month", "month", "day of week"];
const SIX: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day of month",
    "month",
    "day of week",
];

/// Why `fields` (the part of `expr` after its zone) is refused, naming the
/// field at fault when there is one.
fn explain(parser: &CronParser, expr: &str, fields: &str, error: &CronError) -> String {
    let parts: Vec<&str> = fields.split_whitespace().collect();
    let names: &[&str] = match parts.len() {
        5 => &FIVE,
        6 => &SIX,
        _ => {
            return format!(
                "`{expr}`: expected 5 fields (minute hour day-of-month month day-of-week), \
                 6 with seconds first, or a nickname such as @hourly or @daily"
            );
        }
    };
    // The parser's messages do not say which field is wrong: try each field
    // alone, the others `*`; the first one refused alone is at fault.
    for (at, name) in names.iter().enumerate() {
        let probe: Vec<&str> = (0..parts.len())
            .map(|i| if i == at { parts[i] } else { "*" })
            .collect();
        if let Err(alone) = parser.parse(&probe.join(" ")) {
            return format!(
                "`{expr}`: {name} field `{}`: {}",
                parts[at],
                describe(&alone)
            );
        }
    }
    format!("`{expr}`: {}", describe(error))
}

/// The parser's message, in our style: lowercase, no final period.
fn describe(error: &CronError) -> String {
    let message = match error {
        CronError::ComponentError(message) | CronError::InvalidPattern(message) => message.clone(),
        other => other.to_string(),
    };
    let message = message.trim_end_matches('.');
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::from("not a cron expression"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const BERLIN: &str = "CRON_TZ=Europe/Berlin";
    const NEW_YORK: &str = "CRON_TZ=America/New_York";

    fn parse(expr: &str) -> CronExpr {
        CronExpr::parse(expr).unwrap_or_else(|why| panic!("{why}"))
    }

    /// A local time with its offset, which tells the two passes of a
    /// repeated hour apart: `2027-10-31 02:30:00 +02:00`.
    fn instant(local: &str) -> DateTime<Utc> {
        DateTime::parse_from_str(local, "%Y-%m-%d %H:%M:%S %:z")
            .unwrap_or_else(|error| panic!("`{local}`: {error}"))
            .with_timezone(&Utc)
    }

    /// The instants of `zone expr` after `from` up to `to` (both local times
    /// with offsets), written as local times with offsets in that zone.
    fn runs(zone: &str, expr: &str, from: &str, to: &str) -> Vec<String> {
        let cron = parse(&format!("{zone} {expr}"));
        let (mut at, to) = (instant(from), instant(to));
        let mut out = Vec::new();
        while let Some(next) = cron.next_after(at).filter(|&next| next <= to) {
            out.push(
                next.with_timezone(&cron.zone)
                    .format("%Y-%m-%d %H:%M:%S %:z")
                    .to_string(),
            );
            at = next;
        }
        out
    }

    // Europe/Berlin springs forward on 2027-03-28: 02:00 CET (+01:00) is
    // 03:00 CEST (+02:00), 02:xx does not exist.

    #[test]
    fn berlin_spring_a_fixed_time_in_the_gap_runs_once_when_it_ends() {
        let (from, to) = ("2027-03-27 00:00:00 +01:00", "2027-03-30 00:00:00 +02:00");
        assert_eq!(
            runs(BERLIN, "30 2 * * *", from, to),
            [
                "2027-03-27 02:30:00 +01:00",
                "2027-03-28 03:00:00 +02:00",
                "2027-03-29 02:30:00 +02:00",
            ]
        );
        assert_eq!(
            runs(BERLIN, "0 2 * * *", from, to),
            [
                "2027-03-27 02:00:00 +01:00",
                "2027-03-28 03:00:00 +02:00",
                "2027-03-29 02:00:00 +02:00",
            ]
        );
        // With a seconds field: both named seconds are skipped, one run.
        assert_eq!(
            runs(BERLIN, "15,45 30 2 * * *", from, to),
            [
                "2027-03-27 02:30:15 +01:00",
                "2027-03-27 02:30:45 +01:00",
                "2027-03-28 03:00:00 +02:00",
                "2027-03-29 02:30:15 +02:00",
                "2027-03-29 02:30:45 +02:00",
            ]
        );
    }

    #[test]
    fn berlin_spring_named_hours_landing_on_another_named_time_run_once() {
        let (from, to) = ("2027-03-28 00:00:00 +01:00", "2027-03-29 00:00:00 +02:00");
        // 02:00 is skipped and lands on 03:00, which is named too.
        assert_eq!(
            runs(BERLIN, "0 1-3 * * *", from, to),
            ["2027-03-28 01:00:00 +01:00", "2027-03-28 03:00:00 +02:00"]
        );
        // Every quarter of the skipped hour: one run when it ends.
        assert_eq!(
            runs(BERLIN, "*/15 2 * * *", from, to),
            ["2027-03-28 03:00:00 +02:00"]
        );
        assert_eq!(
            runs(BERLIN, "0 30 1-9/2 * * *", from, to),
            [
                "2027-03-28 01:30:00 +01:00",
                "2027-03-28 03:30:00 +02:00",
                "2027-03-28 05:30:00 +02:00",
                "2027-03-28 07:30:00 +02:00",
                "2027-03-28 09:30:00 +02:00",
            ]
        );
    }

    #[test]
    fn berlin_spring_the_real_clock_has_no_skipped_times() {
        assert_eq!(
            runs(
                BERLIN,
                "30 * * * *",
                "2027-03-28 00:00:00 +01:00",
                "2027-03-28 05:00:00 +02:00"
            ),
            [
                "2027-03-28 00:30:00 +01:00",
                "2027-03-28 01:30:00 +01:00",
                "2027-03-28 03:30:00 +02:00",
                "2027-03-28 04:30:00 +02:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "*/15 * * * *",
                "2027-03-28 01:30:00 +01:00",
                "2027-03-28 03:30:00 +02:00"
            ),
            [
                "2027-03-28 01:45:00 +01:00",
                "2027-03-28 03:00:00 +02:00",
                "2027-03-28 03:15:00 +02:00",
                "2027-03-28 03:30:00 +02:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "0 */2 * * *",
                "2027-03-27 23:00:00 +01:00",
                "2027-03-28 06:00:00 +02:00"
            ),
            [
                "2027-03-28 00:00:00 +01:00",
                "2027-03-28 04:00:00 +02:00",
                "2027-03-28 06:00:00 +02:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "30 */30 * * * *",
                "2027-03-28 01:00:00 +01:00",
                "2027-03-28 03:31:00 +02:00"
            ),
            [
                "2027-03-28 01:00:30 +01:00",
                "2027-03-28 01:30:30 +01:00",
                "2027-03-28 03:00:30 +02:00",
                "2027-03-28 03:30:30 +02:00",
            ]
        );
    }

    // Europe/Berlin falls back on 2027-10-31: 03:00 CEST (+02:00) is 02:00
    // CET (+01:00), 02:xx happens twice.

    #[test]
    fn berlin_fall_a_fixed_time_in_the_repeated_hour_runs_at_its_first_pass() {
        let (from, to) = ("2027-10-30 00:00:00 +02:00", "2027-11-02 00:00:00 +01:00");
        assert_eq!(
            runs(BERLIN, "30 2 * * *", from, to),
            [
                "2027-10-30 02:30:00 +02:00",
                "2027-10-31 02:30:00 +02:00",
                "2027-11-01 02:30:00 +01:00",
            ]
        );
        assert_eq!(
            runs(BERLIN, "0 2 * * *", from, to),
            [
                "2027-10-30 02:00:00 +02:00",
                "2027-10-31 02:00:00 +02:00",
                "2027-11-01 02:00:00 +01:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "15,45 30 2 * * *",
                from,
                "2027-11-01 00:00:00 +01:00"
            ),
            [
                "2027-10-30 02:30:15 +02:00",
                "2027-10-30 02:30:45 +02:00",
                "2027-10-31 02:30:15 +02:00",
                "2027-10-31 02:30:45 +02:00",
            ]
        );
    }

    #[test]
    fn berlin_fall_named_hours_run_at_the_first_pass_only() {
        let (from, to) = ("2027-10-31 00:00:00 +02:00", "2027-11-01 00:00:00 +01:00");
        assert_eq!(
            runs(BERLIN, "0 1-3 * * *", from, to),
            [
                "2027-10-31 01:00:00 +02:00",
                "2027-10-31 02:00:00 +02:00",
                "2027-10-31 03:00:00 +01:00",
            ]
        );
        assert_eq!(
            runs(BERLIN, "*/30 2 * * *", from, to),
            ["2027-10-31 02:00:00 +02:00", "2027-10-31 02:30:00 +02:00"]
        );
    }

    #[test]
    fn berlin_fall_the_real_clock_runs_in_both_passes() {
        assert_eq!(
            runs(
                BERLIN,
                "30 * * * *",
                "2027-10-31 00:00:00 +02:00",
                "2027-10-31 04:00:00 +01:00"
            ),
            [
                "2027-10-31 00:30:00 +02:00",
                "2027-10-31 01:30:00 +02:00",
                "2027-10-31 02:30:00 +02:00",
                "2027-10-31 02:30:00 +01:00",
                "2027-10-31 03:30:00 +01:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "*/15 * * * *",
                "2027-10-31 02:30:00 +02:00",
                "2027-10-31 02:15:00 +01:00"
            ),
            [
                "2027-10-31 02:45:00 +02:00",
                "2027-10-31 02:00:00 +01:00",
                "2027-10-31 02:15:00 +01:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "0 */2 * * *",
                "2027-10-30 23:00:00 +02:00",
                "2027-10-31 06:00:00 +01:00"
            ),
            [
                "2027-10-31 00:00:00 +02:00",
                "2027-10-31 02:00:00 +02:00",
                "2027-10-31 02:00:00 +01:00",
                "2027-10-31 04:00:00 +01:00",
                "2027-10-31 06:00:00 +01:00",
            ]
        );
        assert_eq!(
            runs(
                BERLIN,
                "10 30 2 * * *",
                "2027-10-31 00:00:00 +02:00",
                "2027-10-31 04:00:00 +01:00"
            ),
            ["2027-10-31 02:30:10 +02:00"],
            "hour named: one run, even with a seconds field"
        );
        assert_eq!(
            runs(
                BERLIN,
                "10 30 * * * *",
                "2027-10-31 02:00:00 +02:00",
                "2027-10-31 03:00:00 +01:00"
            ),
            ["2027-10-31 02:30:10 +02:00", "2027-10-31 02:30:10 +01:00",]
        );
    }

    // America/New_York springs forward on 2027-03-14: 02:00 EST (-05:00) is
    // 03:00 EDT (-04:00).

    #[test]
    fn new_york_spring() {
        let (from, to) = ("2027-03-13 00:00:00 -05:00", "2027-03-16 00:00:00 -04:00");
        assert_eq!(
            runs(NEW_YORK, "30 2 * * *", from, to),
            [
                "2027-03-13 02:30:00 -05:00",
                "2027-03-14 03:00:00 -04:00",
                "2027-03-15 02:30:00 -04:00",
            ]
        );
        assert_eq!(
            runs(NEW_YORK, "0 2 * * *", from, to),
            [
                "2027-03-13 02:00:00 -05:00",
                "2027-03-14 03:00:00 -04:00",
                "2027-03-15 02:00:00 -04:00",
            ]
        );
        let (from, to) = ("2027-03-14 00:00:00 -05:00", "2027-03-14 05:00:00 -04:00");
        assert_eq!(
            runs(NEW_YORK, "0 1-3 * * *", from, to),
            ["2027-03-14 01:00:00 -05:00", "2027-03-14 03:00:00 -04:00"]
        );
        assert_eq!(
            runs(NEW_YORK, "30 * * * *", from, to),
            [
                "2027-03-14 00:30:00 -05:00",
                "2027-03-14 01:30:00 -05:00",
                "2027-03-14 03:30:00 -04:00",
                "2027-03-14 04:30:00 -04:00",
            ]
        );
        assert_eq!(
            runs(NEW_YORK, "0 */2 * * *", from, to),
            ["2027-03-14 04:00:00 -04:00"]
        );
        assert_eq!(
            runs(
                NEW_YORK,
                "*/15 * * * *",
                "2027-03-14 01:30:00 -05:00",
                "2027-03-14 03:30:00 -04:00"
            ),
            [
                "2027-03-14 01:45:00 -05:00",
                "2027-03-14 03:00:00 -04:00",
                "2027-03-14 03:15:00 -04:00",
                "2027-03-14 03:30:00 -04:00",
            ]
        );
        assert_eq!(
            runs(NEW_YORK, "*/20 59 1,2 * * *", from, to),
            [
                "2027-03-14 01:59:00 -05:00",
                "2027-03-14 01:59:20 -05:00",
                "2027-03-14 01:59:40 -05:00",
                "2027-03-14 03:00:00 -04:00",
            ]
        );
    }

    // America/New_York falls back on 2027-11-07: 02:00 EDT (-04:00) is 01:00
    // EST (-05:00), 01:xx happens twice.

    #[test]
    fn new_york_fall() {
        let (from, to) = ("2027-11-07 00:00:00 -04:00", "2027-11-07 04:00:00 -05:00");
        assert_eq!(
            runs(NEW_YORK, "30 1 * * *", from, to),
            ["2027-11-07 01:30:00 -04:00"]
        );
        assert_eq!(
            runs(NEW_YORK, "30 2 * * *", from, to),
            ["2027-11-07 02:30:00 -05:00"]
        );
        assert_eq!(
            runs(NEW_YORK, "0 2 * * *", from, to),
            ["2027-11-07 02:00:00 -05:00"]
        );
        assert_eq!(
            runs(NEW_YORK, "0 1-3 * * *", from, to),
            [
                "2027-11-07 01:00:00 -04:00",
                "2027-11-07 02:00:00 -05:00",
                "2027-11-07 03:00:00 -05:00",
            ]
        );
        assert_eq!(
            runs(NEW_YORK, "30 * * * *", from, to),
            [
                "2027-11-07 00:30:00 -04:00",
                "2027-11-07 01:30:00 -04:00",
                "2027-11-07 01:30:00 -05:00",
                "2027-11-07 02:30:00 -05:00",
                "2027-11-07 03:30:00 -05:00",
            ]
        );
        assert_eq!(
            runs(NEW_YORK, "0 */2 * * *", from, to),
            ["2027-11-07 02:00:00 -05:00", "2027-11-07 04:00:00 -05:00"]
        );
        assert_eq!(
            runs(
                NEW_YORK,
                "*/15 * * * *",
                "2027-11-07 01:30:00 -04:00",
                "2027-11-07 01:15:00 -05:00"
            ),
            [
                "2027-11-07 01:45:00 -04:00",
                "2027-11-07 01:00:00 -05:00",
                "2027-11-07 01:15:00 -05:00",
            ]
        );
        assert_eq!(
            runs(NEW_YORK, "0 0 1 * * *", from, to),
            ["2027-11-07 01:00:00 -04:00"]
        );
    }

    #[test]
    fn jumps_of_half_an_hour_and_of_a_whole_day() {
        // Lord Howe moves its clock by 30 minutes: 02:00 is 02:30 on
        // 2027-10-03.
        assert_eq!(
            runs(
                "CRON_TZ=Australia/Lord_Howe",
                "15 2 * * *",
                "2027-10-02 12:00:00 +10:30",
                "2027-10-04 12:00:00 +11:00"
            ),
            ["2027-10-03 02:30:00 +11:00", "2027-10-04 02:15:00 +11:00"]
        );
        // Samoa skipped 2011-12-30 whole, going from -10:00 to +14:00: that
        // day's noon ran when the 31st began.
        assert_eq!(
            runs(
                "CRON_TZ=Pacific/Apia",
                "0 0,12 * * *",
                "2011-12-29 06:00:00 -10:00",
                "2011-12-31 18:00:00 +14:00"
            ),
            [
                "2011-12-29 12:00:00 -10:00",
                "2011-12-31 00:00:00 +14:00",
                "2011-12-31 12:00:00 +14:00",
            ]
        );
    }

    #[test]
    fn named_hours_read_from_the_second_pass_wait_for_the_next_named_time() {
        // Read at 01:10 EST, the second pass: 01:15..01:45 ran in the first.
        assert_eq!(
            runs(
                NEW_YORK,
                "*/15 1 * * *",
                "2027-11-07 01:10:00 -05:00",
                "2027-11-08 01:15:00 -05:00"
            ),
            ["2027-11-08 01:00:00 -05:00", "2027-11-08 01:15:00 -05:00"]
        );
        assert_eq!(
            runs(
                NEW_YORK,
                "0 1-3 * * *",
                "2027-11-07 01:30:00 -05:00",
                "2027-11-07 03:00:00 -05:00"
            ),
            ["2027-11-07 02:00:00 -05:00", "2027-11-07 03:00:00 -05:00"]
        );
    }

    #[test]
    fn a_reading_between_seconds_is_not_rounded() {
        let cron = parse("CRON_TZ=Europe/Berlin 30 2 * * *");
        let named = instant("2027-10-31 02:30:00 +02:00");
        let just = TimeDelta::milliseconds(1);
        assert_eq!(cron.next_after(named - just), Some(named));
        assert_eq!(
            cron.next_after(named - just + just / 2),
            Some(named),
            "sub-millisecond"
        );
        assert_eq!(
            cron.next_after(named),
            Some(instant("2027-11-01 02:30:00 +01:00"))
        );
        let cron = parse("CRON_TZ=Europe/Berlin 30 * * * *");
        assert_eq!(cron.next_after(named - just), Some(named));
        assert_eq!(
            cron.next_after(named),
            Some(instant("2027-10-31 02:30:00 +01:00"))
        );
    }

    #[test]
    fn milliseconds_since_the_epoch() {
        let cron = parse("CRON_TZ=America/New_York 30 2 * * *");
        let from = instant("2027-03-13 12:00:00 -05:00").timestamp_millis();
        let gap_end = instant("2027-03-14 03:00:00 -04:00").timestamp_millis();
        assert_eq!(cron.next_after_ms(from), Some(gap_end));
        assert_eq!(cron.next_after_ms(gap_end - 1), Some(gap_end));
        assert_eq!(
            cron.next_after_ms(gap_end),
            Some(instant("2027-03-15 02:30:00 -04:00").timestamp_millis())
        );
        assert_eq!(cron.next_after_ms(i64::MAX), None);
        assert_eq!(parse("0 0 30 2 *").next_after_ms(from), None);
    }

    #[test]
    fn without_a_prefix_the_zone_is_utc() {
        let from = instant("2027-03-28 00:00:00 +00:00");
        let at_three = Some(instant("2027-03-28 03:00:00 +00:00"));
        assert_eq!(parse("0 3 * * *").next_after(from), at_three);
        assert_eq!(parse("CRON_TZ=UTC 0 3 * * *").next_after(from), at_three);
        assert_eq!(
            parse("CRON_TZ=Etc/UTC 0 3 * * *").next_after(from),
            at_three
        );
        assert_eq!(
            parse("CRON_TZ=Europe/Berlin 0 3 * * *").next_after(from),
            Some(instant("2027-03-28 01:00:00 +00:00"))
        );
        // Tabs, and space before the prefix.
        assert_eq!(
            parse("  CRON_TZ=Asia/Tokyo\t0 3 * * *").next_after(from),
            Some(instant("2027-03-29 03:00:00 +09:00"))
        );
    }

    /// Every instant of `cron` from `from` to `to`, found by brute force
    /// every 5 seconds (each test expression names multiples of 5 seconds;
    /// the zones change clock at whole hours, by an hour, and once in the
    /// span), by the rule of the module docs read literally.
    fn brute_force(cron: &CronExpr, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        const STEP: TimeDelta = TimeDelta::seconds(5);
        let margin = TimeDelta::hours(3);
        let (start, end) = (from - margin, to + margin);
        let mut instants = Vec::new();
        let mut u = start;
        while u <= end {
            instants.push(u);
            u += STEP;
        }
        let local = |u: &DateTime<Utc>| u.with_timezone(&cron.zone).naive_local();
        let matches = |civil: &NaiveDateTime| cron.cron.is_time_matching(civil).unwrap();
        let found: BTreeSet<DateTime<Utc>> = if cron.named_hours {
            // Each named local time at its first instant, or where the jump
            // over it lands: the first instant whose local time is later.
            let mut civil = local(&start);
            let mut found = BTreeSet::new();
            while civil <= local(&end) {
                if matches(&civil) {
                    let placed = match cron.zone.from_local_datetime(&civil) {
                        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                            at.with_timezone(&Utc)
                        }
                        LocalResult::None => {
                            // Local time only grows around a skipped hour.
                            let at = instants.partition_point(|u| local(u) <= civil);
                            instants[at]
                        }
                    };
                    found.insert(placed);
                }
                civil += STEP;
            }
            found
        } else {
            // Every instant whose local time matches.
            instants
                .into_iter()
                .filter(|u| matches(&local(u)))
                .collect()
        };
        found
            .into_iter()
            .filter(|u| (from..=to).contains(u))
            .collect()
    }

    /// Checks `next_after` against brute force for readings around the
    /// clock change at `change` (a local time with its offset) in `zone`.
    fn agrees_with_brute_force(zone: &str, change: &str) {
        const EXPRESSIONS: [&str; 16] = [
            "30 2 * * *",
            "0 2 * * *",
            "30 1 * * *",
            "0 1-3 * * *",
            "0 2,3 * * *",
            "0 1,13 * * *",
            "0 1-9/2 * * *",
            "*/15 2 * * *",
            "15,45 30 2 * * *",
            "*/20 59 1,2 * * *",
            "30 * * * *",
            "*/15 * * * *",
            "0 */2 * * *",
            "@hourly",
            "30 */30 * * * *",
            "*/20 * * * * *",
        ];
        let change = instant(change);
        for expr in EXPRESSIONS {
            let cron = parse(&format!("CRON_TZ={zone} {expr}"));
            let (from, to) = (change - TimeDelta::hours(30), change + TimeDelta::hours(30));
            // Far enough for the next instant of a daily expression.
            let want = brute_force(&cron, from, to + TimeDelta::hours(26));
            // Readings every 15 s (and between seconds) for two hours on each
            // side of the change, every 10 minutes further out.
            let mut reading = from;
            while reading <= to {
                for t in [reading, reading + TimeDelta::milliseconds(2_500)] {
                    let first = want.get(want.partition_point(|&u| u <= t)).copied();
                    assert_eq!(cron.next_after(t), first, "{zone} {expr} after {t}");
                }
                let near = (reading - change).abs() <= TimeDelta::hours(2);
                reading += if near {
                    TimeDelta::seconds(15)
                } else {
                    TimeDelta::minutes(10)
                };
            }
        }
    }

    #[test]
    fn berlin_spring_agrees_with_brute_force() {
        agrees_with_brute_force("Europe/Berlin", "2027-03-28 02:00:00 +01:00");
    }

    #[test]
    fn berlin_fall_agrees_with_brute_force() {
        agrees_with_brute_force("Europe/Berlin", "2027-10-31 03:00:00 +02:00");
    }

    #[test]
    fn new_york_spring_agrees_with_brute_force() {
        agrees_with_brute_force("America/New_York", "2027-03-14 02:00:00 -05:00");
    }

    #[test]
    fn new_york_fall_agrees_with_brute_force() {
        agrees_with_brute_force("America/New_York", "2027-11-07 02:00:00 -04:00");
    }

    #[test]
    fn croner_fixed_time_rule_agrees_on_one_value_fields() {
        // Where croner applies the named-time rule itself (one second, one
        // minute, one hour), its search and ours agree.
        for expr in ["30 2 * * *", "0 2 * * *", "30 1 * * *", "15 30 2 * * *"] {
            for zone in ["Europe/Berlin", "America/New_York"] {
                let cron = parse(&format!("CRON_TZ={zone} {expr}"));
                let mut t = instant("2027-01-01 00:00:00 +00:00");
                for _ in 0..400 {
                    let ours = cron.next_after(t).unwrap();
                    let local = t.with_timezone(&cron.zone);
                    let theirs = cron.cron.find_next_occurrence(&local, false).unwrap();
                    assert_eq!(ours, theirs.with_timezone(&Utc), "{zone} {expr} after {t}");
                    t = ours;
                }
            }
        }
    }

    fn refused(expr: &str) -> String {
        match CronExpr::parse(expr) {
            Err(why) => why,
            Ok(cron) => panic!("`{expr}` was accepted: {cron:?}"),
        }
    }

    #[test]
    fn out_of_range_fields_are_named() {
        assert_eq!(
            refused("60 * * * *"),
            "`60 * * * *`: minute field `60`: number out of bounds"
        );
        assert_eq!(
            refused("0 24 * * *"),
            "`0 24 * * *`: hour field `24`: number out of bounds"
        );
        assert_eq!(
            refused("0 0 32 * *"),
            "`0 0 32 * *`: day of month field `32`: number out of bounds"
        );
        assert_eq!(
            refused("0 0 1 13 *"),
            "`0 0 1 13 *`: month field `13`: number out of bounds"
        );
        assert_eq!(
            refused("61 0 0 * * *"),
            "`61 0 0 * * *`: second field `61`: number out of bounds"
        );
        assert_eq!(
            refused("CRON_TZ=Europe/Berlin 0 24 * * *"),
            "`CRON_TZ=Europe/Berlin 0 24 * * *`: hour field `24`: number out of bounds"
        );
    }

    #[test]
    fn garbage_says_what_is_expected() {
        for expr in ["garbage", "", "* * *", "* * * * * * *", "@fortnightly"] {
            let why = refused(expr);
            assert!(why.contains("expected 5 fields"), "{expr}: {why}");
            assert!(why.starts_with(&format!("`{expr}`")), "{why}");
        }
        let why = refused("* * * * blursday");
        assert!(
            why.starts_with("`* * * * blursday`: day of week field `blursday`: "),
            "{why}"
        );
        let why = refused("CRON_TZ=America/New_York every day");
        assert!(
            why.starts_with("`CRON_TZ=America/New_York every day`: expected 5 fields"),
            "{why}"
        );
    }

    #[test]
    fn an_unknown_zone_is_named() {
        assert_eq!(
            refused("CRON_TZ=Europe/Berln 0 3 * * *"),
            "`CRON_TZ=Europe/Berln 0 3 * * *`: unknown time zone `Europe/Berln` \
             (expected an IANA name such as Europe/Berlin)"
        );
        // IANA names are case-sensitive, as in the zone database.
        assert!(refused("CRON_TZ=europe/berlin 0 3 * * *").contains("`europe/berlin`"));
        assert!(refused("CRON_TZ=CEST 0 3 * * *").contains("unknown time zone `CEST`"));
    }

    #[test]
    fn a_prefix_without_a_zone_or_an_expression_is_refused() {
        for expr in ["CRON_TZ=", "CRON_TZ= 0 3 * * *", "  CRON_TZ=\t"] {
            let why = refused(expr);
            assert_eq!(
                why,
                format!(
                    "`{expr}`: expected an IANA time zone after `CRON_TZ=`, \
                     as in `CRON_TZ=Europe/Berlin 0 3 * * *`"
                )
            );
        }
        for expr in ["CRON_TZ=Europe/Berlin", "CRON_TZ=Europe/Berlin   "] {
            assert_eq!(
                refused(expr),
                format!("`{expr}`: expected a cron expression after the time zone")
            );
        }
    }
}
