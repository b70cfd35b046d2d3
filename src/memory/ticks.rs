//! When a schedule's next tick is due: the rule of `lib/ticks.lua` (Redis)
//! and `next_tick` (PostgreSQL), computed here in full (this store parses
//! cron expressions itself, where the others ask the client for instants).

/// A schedule record, parsed: `e,<period ms>,<policy>` or `c,<expression>`.
enum Spec<'a> {
    Every {
        period: u64,
        policy: &'a str,
    },
    #[cfg_attr(not(feature = "cron"), allow(dead_code))]
    Cron(&'a str),
}

fn spec(rec: &str) -> Option<Spec<'_>> {
    if let Some(expr) = rec.strip_prefix("c,") {
        return Some(Spec::Cron(expr));
    }
    let mut parts = rec.strip_prefix("e,")?.split(',');
    let period = parts.next()?.parse().ok().filter(|p| *p > 0)?;
    Some(Spec::Every {
        period,
        policy: parts.next()?,
    })
}

/// The first instant of schedule `rec` after `now`: the next instant of its
/// grid (anchored at the Unix epoch, so replicas agree) or of its cron
/// expression; `None` when the expression has none left.
pub(crate) fn first_tick(rec: &str, now: u64) -> Option<u64> {
    match spec(rec)? {
        Spec::Every { period, .. } => Some((now / period + 1) * period),
        Spec::Cron(expr) => cron_after(expr, now),
    }
}

/// The instant of the tick after the one at `instant`, run from `since`
/// (its claim), at `now`. Every: the next grid instant if still ahead;
/// else, by the policy, that instant anyway (burst), the first grid instant
/// after now (skip), or the late run's start plus the period (delay: the
/// grid moves to its phase). Cron: the first instant after `max(now,
/// instant)`. `None` when the expression has none left.
pub(crate) fn next_tick(rec: &str, instant: u64, since: Option<u64>, now: u64) -> Option<u64> {
    match spec(rec)? {
        Spec::Every { period, policy } => {
            // Burst and skip stay on the epoch grid (`instant` is off it
            // when the spec changed while this tick ran).
            let next = if policy == "delay" {
                instant.saturating_add(period)
            } else {
                (instant / period + 1) * period
            };
            Some(if next > now || policy == "burst" {
                next
            } else if policy == "skip" {
                (now / period + 1) * period
            } else {
                since.unwrap_or(now).saturating_add(period)
            })
        }
        Spec::Cron(expr) => cron_after(expr, now.max(instant)),
    }
}

#[cfg(feature = "cron")]
fn cron_after(expr: &str, at: u64) -> Option<u64> {
    let expr = crate::cron::CronExpr::parse(expr).ok()?;
    let next = expr.next_after_ms(i64::try_from(at).ok()?)?;
    u64::try_from(next).ok()
}

#[cfg(not(feature = "cron"))]
fn cron_after(_expr: &str, _at: u64) -> Option<u64> {
    // A cron schedule needs the feature `cron` to be made at all.
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ticks_stay_on_the_epoch_grid_and_follow_their_policy() {
        assert_eq!(first_tick("e,1000,skip", 12_345), Some(13_000));
        // On time: the next grid instant, whatever the policy.
        for policy in ["burst", "skip", "delay"] {
            let rec = format!("e,1000,{policy}");
            assert_eq!(next_tick(&rec, 13_000, Some(13_000), 13_400), Some(14_000));
        }
        // Late by 2.5 periods.
        assert_eq!(
            next_tick("e,1000,burst", 13_000, Some(15_500), 15_600),
            Some(14_000)
        );
        assert_eq!(
            next_tick("e,1000,skip", 13_000, Some(15_500), 15_600),
            Some(16_000)
        );
        assert_eq!(
            next_tick("e,1000,delay", 13_000, Some(15_500), 15_600),
            Some(16_500)
        );
    }
}
