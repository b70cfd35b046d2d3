//! Cron schedules (cargo feature `cron`): the wall-clock reading rule that
//! turns cron instants into Tokio deadlines. Expressions and their zones are
//! [`crate::cron`]'s business.
//!
//! A cron job is a periodic job whose [`Cadence`](super::ticks::Cadence)
//! is a [`CronCadence`]. Cron instants are wall-clock instants (UTC, whatever
//! the expression's zone), while the queue runs on the Tokio clock, so after
//! each run the cadence reads the wall clock as
//!
//! ```text
//! reading = max(system clock, previous instant + Tokio time elapsed since it was due)
//! ```
//!
//! takes the first instant strictly after the reading, and waits the
//! difference on the Tokio clock. The second term is why a system clock
//! that jumps back never repeats a run, why a run that overruns the next
//! instant skips it, and why paused-time tests work: under paused time the
//! system clock stands still and the Tokio term moves. A system clock that
//! jumps ahead wins the `max` and is followed.

use super::ScheduleError;
use crate::cron::CronExpr;
use crate::queue::deadline_after;
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Where the cadence reads the wall clock: the system clock, except in the
/// unit tests below, which move a fake one by hand (backwards too).
type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The system clock. The crate's only reading of it (clippy forbids
/// `SystemTime::now` elsewhere, so that paused test time drives everything
/// else): cron expressions name wall-clock instants, which no Tokio clock
/// knows. Paused time stays usable through the reading rule (module docs).
#[allow(clippy::disallowed_methods)]
fn system_clock() -> DateTime<Utc> {
    DateTime::from(SystemTime::now())
}

/// A cron job's schedule: its expression and the instant of the run that is
/// queued or running.
pub(crate) struct CronCadence {
    cron: CronExpr,
    clock: Clock,
    instant: DateTime<Utc>,
}

impl CronCadence {
    /// Parses `expr` and finds its first instant strictly after the system
    /// clock. Returns the cadence and the Tokio deadline of that first run,
    /// counted from `now`.
    pub(crate) fn start(expr: &str, now: Instant) -> Result<(Self, Instant), ScheduleError> {
        Self::start_with(expr, now, Arc::new(system_clock))
    }

    fn start_with(
        expr: &str,
        now: Instant,
        clock: Clock,
    ) -> Result<(Self, Instant), ScheduleError> {
        let cron = CronExpr::parse(expr).map_err(ScheduleError::InvalidCron)?;
        let reading = clock();
        let Some(instant) = cron.next_after(reading) else {
            return Err(ScheduleError::InvalidCron(format!(
                "`{expr}` names no instant from now on (a date such as February 30th?)"
            )));
        };
        let deadline = deadline_after(now, wait(&reading, &instant));
        let cadence = CronCadence {
            cron,
            clock,
            instant,
        };
        Ok((cadence, deadline))
    }

    /// The Tokio deadline of the next run, after the run `due` at ended at
    /// `ended`. An expression with no instant left never runs again.
    pub(crate) fn next_run(&mut self, due: Instant, ended: Instant) -> Instant {
        let elapsed =
            TimeDelta::from_std(ended.saturating_duration_since(due)).unwrap_or(TimeDelta::MAX);
        let followed = self
            .instant
            .checked_add_signed(elapsed)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let reading = (self.clock)().max(followed);
        match self.cron.next_after(reading) {
            Some(next) => {
                self.instant = next;
                deadline_after(ended, wait(&reading, &next))
            }
            None => deadline_after(ended, Duration::MAX),
        }
    }
}

fn wait(from: &DateTime<Utc>, to: &DateTime<Utc>) -> Duration {
    (*to - *from).to_std().unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Timelike};
    use std::sync::Mutex;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    /// A wall clock moved by hand.
    struct Fake(Arc<Mutex<DateTime<Utc>>>);

    impl Fake {
        fn new(at: DateTime<Utc>) -> (Fake, Clock) {
            let shared = Arc::new(Mutex::new(at));
            let read = shared.clone();
            (Fake(shared), Arc::new(move || *read.lock().unwrap()))
        }
        fn set(&self, at: DateTime<Utc>) {
            *self.0.lock().unwrap() = at;
        }
    }

    /// The first `n` instants of `expr` after `from`, each run taking no
    /// time and the fake clock standing still (as under paused time).
    /// Checks that every Tokio wait equals the wall-clock gap.
    fn instants(expr: &str, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let t0 = Instant::now();
        let (_fake, clock) = Fake::new(from);
        let (mut cadence, mut due) = CronCadence::start_with(expr, t0, clock).unwrap();
        let mut out = vec![cadence.instant];
        assert_eq!(due - t0, wait(&from, &cadence.instant));
        for _ in 1..n {
            let before = cadence.instant;
            let next = cadence.next_run(due, due);
            assert_eq!(next - due, wait(&before, &cadence.instant));
            due = next;
            out.push(cadence.instant);
        }
        out
    }

    #[test]
    fn every_minute() {
        let got = instants("* * * * *", utc(2027, 1, 1, 0, 0, 30), 3);
        assert_eq!(
            got,
            [
                utc(2027, 1, 1, 0, 1, 0),
                utc(2027, 1, 1, 0, 2, 0),
                utc(2027, 1, 1, 0, 3, 0)
            ]
        );
    }

    #[test]
    fn every_fifteen_seconds_with_a_seconds_field() {
        let from = utc(2027, 1, 1, 0, 0, 7) + TimeDelta::milliseconds(250);
        let got = instants("*/15 * * * * *", from, 5);
        let want: Vec<_> = [15, 30, 45, 60, 75]
            .iter()
            .map(|&s| utc(2027, 1, 1, 0, 0, 0) + TimeDelta::seconds(s))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn an_instant_exactly_at_the_reading_is_not_taken() {
        let got = instants("*/15 * * * * *", utc(2027, 1, 1, 0, 0, 15), 1);
        assert_eq!(got, [utc(2027, 1, 1, 0, 0, 30)]);
    }

    #[test]
    fn nicknames() {
        let from = utc(2027, 1, 1, 13, 0, 0);
        assert_eq!(
            instants("@daily", from, 2),
            [utc(2027, 1, 2, 0, 0, 0), utc(2027, 1, 3, 0, 0, 0)]
        );
        assert_eq!(
            instants("@hourly", from, 2),
            [utc(2027, 1, 1, 14, 0, 0), utc(2027, 1, 1, 15, 0, 0)]
        );
        assert_eq!(instants("@monthly", from, 1), [utc(2027, 2, 1, 0, 0, 0)]);
    }

    #[test]
    fn last_day_of_the_month() {
        let got = instants("0 0 L * *", utc(2027, 12, 15, 0, 0, 0), 5);
        assert_eq!(
            got,
            [
                utc(2027, 12, 31, 0, 0, 0),
                utc(2028, 1, 31, 0, 0, 0),
                utc(2028, 2, 29, 0, 0, 0),
                utc(2028, 3, 31, 0, 0, 0),
                utc(2028, 4, 30, 0, 0, 0),
            ]
        );
    }

    #[test]
    fn february_29th() {
        let got = instants("0 0 29 2 *", utc(2027, 3, 1, 0, 0, 0), 3);
        assert_eq!(
            got,
            [
                utc(2028, 2, 29, 0, 0, 0),
                utc(2032, 2, 29, 0, 0, 0),
                utc(2036, 2, 29, 0, 0, 0)
            ]
        );
        assert!(
            got.iter()
                .all(|t| t.month() == 2 && t.day() == 29 && t.hour() == 0)
        );
    }

    #[test]
    fn an_overrun_skips_the_instants_it_covered() {
        let t0 = Instant::now();
        let (_fake, clock) = Fake::new(utc(2027, 1, 1, 0, 0, 30));
        let (mut cadence, due) = CronCadence::start_with("* * * * *", t0, clock).unwrap();
        // The run due at 00:01 takes 90 s: 00:02 is skipped, 00:03 is next.
        let ended = due + Duration::from_secs(90);
        let next = cadence.next_run(due, ended);
        assert_eq!(cadence.instant, utc(2027, 1, 1, 0, 3, 0));
        assert_eq!(next - ended, Duration::from_secs(30));
    }

    #[test]
    fn a_clock_that_jumps_back_never_repeats_a_run() {
        let t0 = Instant::now();
        let (fake, clock) = Fake::new(utc(2027, 1, 1, 0, 0, 30));
        let (mut cadence, mut due) = CronCadence::start_with("* * * * *", t0, clock).unwrap();
        let mut seen = vec![cadence.instant];
        // Each run takes 5 s; meanwhile the system clock is set back an hour,
        // then stays behind.
        for _ in 0..3 {
            fake.set(utc(2026, 12, 31, 23, 0, 0));
            let ended = due + Duration::from_secs(5);
            let next = cadence.next_run(due, ended);
            assert_eq!(next - ended, Duration::from_secs(55));
            due = next;
            seen.push(cadence.instant);
        }
        assert_eq!(
            seen,
            [
                utc(2027, 1, 1, 0, 1, 0),
                utc(2027, 1, 1, 0, 2, 0),
                utc(2027, 1, 1, 0, 3, 0),
                utc(2027, 1, 1, 0, 4, 0)
            ]
        );
    }

    #[test]
    fn a_clock_that_jumps_ahead_is_followed() {
        let t0 = Instant::now();
        let (fake, clock) = Fake::new(utc(2027, 1, 1, 0, 0, 30));
        let (mut cadence, due) = CronCadence::start_with("0 * * * *", t0, clock).unwrap();
        assert_eq!(cadence.instant, utc(2027, 1, 1, 1, 0, 0));
        fake.set(utc(2027, 1, 1, 5, 59, 50));
        let next = cadence.next_run(due, due);
        assert_eq!(cadence.instant, utc(2027, 1, 1, 6, 0, 0));
        assert_eq!(next - due, Duration::from_secs(10));
    }

    #[test]
    fn a_zoned_expression_waits_the_real_time_across_a_clock_change() {
        // Berlin springs forward on 2027-03-28 at 01:00 UTC (02:00 CET to
        // 03:00 CEST): 03:00 local is 02:00 UTC the day before and 01:00 UTC
        // that day, 23 hours apart; `instants` checks each wait.
        let got = instants(
            "CRON_TZ=Europe/Berlin 0 3 * * *",
            utc(2027, 3, 26, 2, 0, 30),
            3,
        );
        assert_eq!(
            got,
            [
                utc(2027, 3, 27, 2, 0, 0),
                utc(2027, 3, 28, 1, 0, 0),
                utc(2027, 3, 29, 1, 0, 0)
            ]
        );
    }

    fn refused(expr: &str) -> String {
        match CronCadence::start_with(expr, Instant::now(), Arc::new(|| utc(2027, 1, 1, 0, 0, 0))) {
            Err(ScheduleError::InvalidCron(why)) => why,
            Err(other) => panic!("`{expr}`: {other:?}"),
            Ok(_) => panic!("`{expr}` was accepted"),
        }
    }

    #[test]
    fn an_expression_that_names_no_instant_is_refused() {
        assert_eq!(
            refused("0 0 30 2 *"),
            "`0 0 30 2 *` names no instant from now on (a date such as February 30th?)"
        );
    }
}
