//! `Scheduler::schedule_cron` with a `CRON_TZ=` prefix, across real
//! daylight saving changes, under paused time.
//!
//! The public API has no clock to inject: a cron job starts from the system
//! clock (today), and its later readings move with Tokio time (the system
//! clock stands still under paused time). So each test starts today and lets
//! paused time carry its job through the zone's next spring-forward and
//! fall-back days, both less than 13 months ahead: a few hundred to a few
//! thousand runs, which paused time gets through in moments. The wall
//! instant each run stands for is the first run's plus the Tokio time since
//! the first run started; the tests check every one against the rule
//! written out with chrono-tz, and count the runs of the change days.
//!
//! The precise cases (seconds fields, readings inside a repeated hour,
//! every hour-field shape, fixed dates in both zones) are the unit tests of
//! `src/cron.rs`, which call the parser on fixed dates.

#![cfg(feature = "cron")]

use chrono::{DateTime, Days, NaiveDate, NaiveTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use punctual::{JobHandle, ScheduleError, Scheduler};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::{Instant, sleep, sleep_until};

const S: Duration = Duration::from_secs(1);

/// The system clock, as the scheduler reads it.
#[allow(clippy::disallowed_methods)] // the cron rule starts from the system clock
fn wall() -> DateTime<Utc> {
    SystemTime::now().into()
}

struct Cron {
    job: JobHandle<()>,
    starts: Arc<Mutex<Vec<Instant>>>,
    /// The wall instant the first run stands for.
    first_wall: DateTime<Utc>,
    first: Instant,
}

/// Schedules `expr` with a job that logs its start instants and takes a
/// second, and checks that its first deadline is the first of `instants`
/// after a reading of the system clock taken while it was scheduled.
fn schedule(scheduler: &Scheduler, expr: &str, instants: &[DateTime<Utc>]) -> Cron {
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let log = starts.clone();
    let t0 = Instant::now();
    let before = wall();
    let job = scheduler
        .schedule_cron(expr, move || {
            log.lock().unwrap().push(Instant::now());
            // Longer than the test takes in real time, so the Tokio term of
            // the reading always beats the (real, slowly moving) system clock.
            sleep(S)
        })
        .unwrap();
    let after = wall();
    let first = job.next_run().unwrap();
    let waits = first - t0;
    let next = |reading: DateTime<Utc>| *instants.iter().find(|&&at| at > reading).unwrap();
    // The scheduler read the clock at some `r` in `before..=after`.
    let first_wall = [next(before), next(after)]
        .into_iter()
        .find(|&at| {
            let (at_least, at_most) = ((at - after).to_std(), (at - before).to_std());
            at_least.is_ok_and(|d| d <= waits) && at_most.is_ok_and(|d| waits <= d)
        })
        .unwrap_or_else(|| panic!("`{expr}`: first run in {waits:?} from {before}"));
    Cron {
        job,
        starts,
        first_wall,
        first,
    }
}

/// Lets paused time run until the job has run for every instant up to
/// `last` (and that run has ended), and returns the wall instants its runs
/// stood for.
async fn run_through(cron: &Cron, last: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    // The last run takes a second; the next is an hour or more later.
    sleep_until(cron.first + (last - cron.first_wall).to_std().unwrap() + S * 2).await;
    let starts = cron.starts.lock().unwrap();
    // The first start is at most a millisecond late (Tokio's timer rounds up
    // to whole milliseconds); later deadlines count from the instants.
    assert!(starts[0] - cron.first < Duration::from_millis(1));
    starts
        .iter()
        .map(|&start| cron.first_wall + TimeDelta::from_std(start - starts[0]).unwrap())
        .collect()
}

/// The UTC offset in force at the start of local `day`.
fn offset_at(zone: Tz, day: NaiveDate) -> i32 {
    let midnight = zone.from_local_datetime(&day.and_time(NaiveTime::MIN));
    midnight
        .earliest()
        .unwrap()
        .offset()
        .fix()
        .local_minus_utc()
}

/// The next day (from today's) on which `zone` springs forward, and the
/// next one on which it falls back.
fn change_days(zone: Tz, today: NaiveDate) -> (NaiveDate, NaiveDate) {
    let (mut spring, mut fall) = (None, None);
    let mut day = today;
    while spring.is_none() || fall.is_none() {
        let (now, then) = (offset_at(zone, day), offset_at(zone, day + Days::new(1)));
        if then > now {
            spring.get_or_insert(day);
        } else if then < now {
            fall.get_or_insert(day);
        }
        day = day + Days::new(1);
        assert!(
            day - today < TimeDelta::days(400),
            "no clock change in {zone}"
        );
    }
    (spring.unwrap(), fall.unwrap())
}

/// Where the named local time `at` of `day` runs: the instant itself, its
/// first occurrence if repeated, or the first minute that exists after it
/// if skipped (the zones here jump by whole hours).
fn place(zone: Tz, day: NaiveDate, at: NaiveTime) -> DateTime<Utc> {
    let mut local = day.and_time(at);
    loop {
        if let Some(instant) = zone.from_local_datetime(&local).earliest() {
            return instant.with_timezone(&Utc);
        }
        local += TimeDelta::minutes(1);
    }
}

fn hm(hour: u32, minute: u32) -> NaiveTime {
    NaiveTime::from_hms_opt(hour, minute, 0).unwrap()
}

fn local_day(zone: Tz, at: DateTime<Utc>) -> NaiveDate {
    at.with_timezone(&zone).date_naive()
}

#[tokio::test(start_paused = true)]
async fn berlin_named_times_run_once_on_both_change_days() {
    let zone: Tz = "Europe/Berlin".parse().unwrap();
    let today = local_day(zone, wall());
    let (spring, fall) = change_days(zone, today);
    let last_day = spring.max(fall);
    // 01:30, 02:30 and 03:30 of every day, placed by the rule; a skipped
    // 02:30 runs at 03:00, and the set keeps one run per instant.
    let mut day = today - Days::new(1);
    let mut want = BTreeSet::new();
    while day <= last_day {
        for hour in 1..=3 {
            want.insert(place(zone, day, hm(hour, 30)));
        }
        day = day + Days::new(1);
    }
    let want: Vec<_> = want.into_iter().collect();

    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "CRON_TZ=Europe/Berlin 30 1-3 * * *", &want);
    let last = *want.last().unwrap();
    let ran = run_through(&cron, last).await;
    let want: Vec<_> = want
        .into_iter()
        .filter(|&at| at >= cron.first_wall)
        .collect();
    assert_eq!(ran, want);
    assert_eq!(cron.job.runs() as usize, ran.len());

    let on = |day: NaiveDate| -> Vec<String> {
        ran.iter()
            .filter(|&&at| local_day(zone, at) == day)
            .map(|at| at.with_timezone(&zone).format("%H:%M %:z").to_string())
            .collect()
    };
    // 02:30 does not exist: it runs when the clock jumps, at 03:00 CEST.
    assert_eq!(on(spring), ["01:30 +01:00", "03:00 +02:00", "03:30 +02:00"]);
    // 02:30 happens twice: it runs in the first pass only.
    assert_eq!(on(fall), ["01:30 +02:00", "02:30 +02:00", "03:30 +01:00"]);
}

#[tokio::test(start_paused = true)]
async fn new_york_every_hour_follows_the_real_clock_on_both_change_days() {
    let zone: Tz = "America/New_York".parse().unwrap();
    let today = local_day(zone, wall());
    let (spring, fall) = change_days(zone, today);
    let last_day = spring.max(fall);
    // New York is whole hours off UTC: half past every hour there is half
    // past every hour in UTC, whatever the local clock does.
    let start = zone
        .from_local_datetime(&today.and_time(hm(0, 30)))
        .earliest()
        .unwrap()
        .with_timezone(&Utc);
    let end = place(zone, last_day + Days::new(1), hm(0, 0));
    let want: Vec<_> = (0..)
        .map(|hours| start + TimeDelta::hours(hours))
        .take_while(|&at| at < end)
        .collect();

    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "CRON_TZ=America/New_York 30 * * * *", &want);
    let ran = run_through(&cron, *want.last().unwrap()).await;
    let want: Vec<_> = want
        .into_iter()
        .filter(|&at| at >= cron.first_wall)
        .collect();
    assert_eq!(ran, want);

    let on = |day: NaiveDate| -> Vec<String> {
        ran.iter()
            .filter(|&&at| local_day(zone, at) == day)
            .map(|at| at.with_timezone(&zone).format("%H:%M %:z").to_string())
            .collect()
    };
    // 02:30 does not exist: 23 runs.
    let spring_day = on(spring);
    assert_eq!(spring_day.len(), 23);
    assert_eq!(
        spring_day[..3],
        ["00:30 -05:00", "01:30 -05:00", "03:30 -04:00"]
    );
    // 01:30 happens twice, and runs twice: 25 runs.
    let fall_day = on(fall);
    assert_eq!(fall_day.len(), 25);
    assert_eq!(
        fall_day[..4],
        [
            "00:30 -04:00",
            "01:30 -04:00",
            "01:30 -05:00",
            "02:30 -05:00"
        ]
    );
}

fn refused(scheduler: &Scheduler, expr: &str) -> String {
    match scheduler.schedule_cron(expr, || async {}) {
        Err(error @ ScheduleError::InvalidCron(_)) => error.to_string(),
        other => panic!("`{expr}`: {:?}", other.map(|_| ())),
    }
}

#[tokio::test(start_paused = true)]
async fn an_unknown_zone_is_named() {
    let scheduler = Scheduler::new(1);
    assert_eq!(
        refused(&scheduler, "CRON_TZ=Mars/Olympus_Mons 0 3 * * *"),
        "invalid cron expression: `CRON_TZ=Mars/Olympus_Mons 0 3 * * *`: \
         unknown time zone `Mars/Olympus_Mons` (expected an IANA name such as Europe/Berlin)"
    );
    assert_eq!(
        refused(&scheduler, "CRON_TZ=Europe/Berlin"),
        "invalid cron expression: `CRON_TZ=Europe/Berlin`: \
         expected a cron expression after the time zone"
    );
    assert_eq!(
        refused(&scheduler, "CRON_TZ=Europe/Berlin 0 25 * * *"),
        "invalid cron expression: `CRON_TZ=Europe/Berlin 0 25 * * *`: \
         hour field `25`: number out of bounds"
    );
    assert_eq!(scheduler.stats().pending, 0);
}
