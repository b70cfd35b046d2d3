//! Recurring schedules kept in a durable store: their specs as users read
//! them, and what [`schedules`](crate::redis::RedisQueue::schedules) lists.

use std::time::{Duration, SystemTime};

use crate::MissedTicks;

/// A named recurring schedule of a durable queue, from `schedules()`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleInfo<T> {
    /// The schedule's name (its tick's id).
    pub name: String,
    /// `every <n><unit> <policy>` (e.g. `every 10s skip`), or the cron
    /// expression as given (with its `CRON_TZ=` prefix).
    pub spec: String,
    /// When its tick is due; `None` while the tick is leased (running).
    pub next: Option<SystemTime>,
    /// The value each tick carries.
    pub value: T,
    /// When the run of its last finished tick began, by the store's clock
    /// (`None` before any finished).
    pub last_run: Option<SystemTime>,
    /// How its last finished tick ended (`Done`, `Dead`, `Cancelled`).
    pub last_outcome: Option<super::Finished>,
    /// Paused with `pause_schedule`: its tick stays pending and is not
    /// delivered until `resume_schedule`.
    pub paused: bool,
}

/// How a `schedule_every` spec reads: the largest of `h`, `m`, `s`, `ms`
/// that divides the period, and the policy always written.
pub(crate) fn every_spec(period_ms: u64, missed: MissedTicks) -> String {
    let (n, unit) = [(3_600_000, "h"), (60_000, "m"), (1000, "s"), (1, "ms")]
        .into_iter()
        .find(|(unit, _)| period_ms % unit == 0)
        .map(|(size, unit)| (period_ms / size, unit))
        .unwrap_or((period_ms, "ms"));
    format!("every {n}{unit} {}", policy(missed))
}

pub(crate) fn policy(missed: MissedTicks) -> &'static str {
    match missed {
        MissedTicks::Burst => "burst",
        MissedTicks::Delay => "delay",
        MissedTicks::Skip => "skip",
    }
}

/// A period in whole milliseconds (the stores' resolution), or why not.
pub(crate) fn period_ms(period: Duration) -> Result<u64, String> {
    let ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Err(format!("a period must be at least 1 ms, not {period:?}"));
    }
    // Instants stay exact integers in a Lua double and a PostgreSQL bigint.
    const MAX: u64 = 1 << 50;
    if ms > MAX {
        return Err(format!("a period must be at most {MAX} ms, not {period:?}"));
    }
    Ok(ms)
}

/// The cron instants a store needs for a tick's successor: the first few
/// of `expr` strictly after `from` (ms since the epoch), as
/// `<rec>\n<from>,<i1>,<i2>,...`, ending in `,x` when the expression has
/// none left.
/// The spec users read (`every 10s skip`, or the cron expression) of a
/// schedule record (`e,<period ms>,<policy>` or `c,<expression>`).
pub(crate) fn spec_of(rec: &str) -> String {
    if let Some(expr) = rec.strip_prefix("c,") {
        return expr.to_owned();
    }
    let mut parts = rec.trim_start_matches("e,").split(',');
    let period = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let missed = match parts.next() {
        Some("skip") => MissedTicks::Skip,
        Some("delay") => MissedTicks::Delay,
        _ => MissedTicks::Burst,
    };
    every_spec(period, missed)
}

#[cfg(feature = "cron")]
pub(crate) fn cron_instants(
    rec: &str,
    expr: &str,
    from: i64,
    count: usize,
) -> Result<String, String> {
    let expr = crate::cron::CronExpr::parse(expr)?;
    let mut out = format!("{rec}\n{from}");
    let mut at = from;
    for _ in 0..count {
        match expr.next_after_ms(at) {
            Some(next) => {
                out.push_str(&format!(",{next}"));
                at = next;
            }
            None => {
                out.push_str(",x");
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_specs_use_the_largest_unit_that_divides() {
        assert_eq!(every_spec(10_000, MissedTicks::Skip), "every 10s skip");
        assert_eq!(every_spec(1500, MissedTicks::Burst), "every 1500ms burst");
        assert_eq!(every_spec(7_200_000, MissedTicks::Delay), "every 2h delay");
        assert_eq!(every_spec(90_000, MissedTicks::Burst), "every 90s burst");
        assert_eq!(every_spec(120_000, MissedTicks::Burst), "every 2m burst");
    }

    #[test]
    fn periods_are_whole_milliseconds() {
        assert_eq!(period_ms(Duration::from_micros(1500)), Ok(1));
        assert!(period_ms(Duration::ZERO).is_err());
        assert!(period_ms(Duration::from_micros(999)).is_err());
        assert!(period_ms(Duration::MAX).is_err());
    }
}
