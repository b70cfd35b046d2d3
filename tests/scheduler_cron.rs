//! `Scheduler::schedule_cron` (cargo feature `cron`), under paused time.
//!
//! The first instant depends on the system clock, which the test reads just
//! before and after scheduling: the job's first deadline must fall in that
//! window. Later runs are driven by the Tokio term of the reading rule
//! (the system clock stands still under paused time), so their gaps are
//! exact. Clock jumps are covered by the unit tests of `scheduler/cron.rs`,
//! which move a fake clock.

#![cfg(feature = "cron")]

use chrono::{DateTime, Datelike, TimeDelta, Timelike, Utc};
use punctual::{JobError, JobHandle, ScheduleError, Scheduler};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep, sleep_until};

const S: Duration = Duration::from_secs(1);

/// The system clock, as the scheduler reads it.
#[allow(clippy::disallowed_methods)] // the cron rule starts from the system clock
fn wall() -> DateTime<Utc> {
    SystemTime::now().into()
}

type Starts = Arc<Mutex<Vec<Instant>>>;

struct Cron {
    job: JobHandle<()>,
    starts: Starts,
    /// The wall instant the first run stands for.
    first_wall: DateTime<Utc>,
    first: Instant,
}

/// Schedules `expr` with a job that logs its start instants and takes
/// `takes`, and checks that its first deadline is `next(reading)` for a
/// reading of the system clock taken while it was scheduled.
fn schedule(
    scheduler: &Scheduler,
    expr: &str,
    takes: Duration,
    next: impl Fn(DateTime<Utc>) -> DateTime<Utc>,
) -> Cron {
    let starts: Starts = Arc::default();
    let log = starts.clone();
    let t0 = Instant::now();
    let before = wall();
    let job = scheduler
        .schedule_cron(expr, move || {
            log.lock().unwrap().push(Instant::now());
            sleep(takes)
        })
        .unwrap();
    let after = wall();
    let first = job.next_run().unwrap();
    let waits = first - t0;
    // The scheduler read the clock at some `r` in `before..=after` and waits
    // `next(r) - r`; `next(r)` is `next(before)` unless an instant fell
    // inside that window of microseconds.
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

/// The start instants, as offsets from the first start. The first start is
/// at most a millisecond after the first deadline (Tokio's timer rounds up
/// to whole milliseconds); later deadlines count from the instants, so the
/// gaps are exact.
fn offsets(cron: &Cron) -> Vec<Duration> {
    let starts = cron.starts.lock().unwrap();
    let Some(&first) = starts.first() else {
        return Vec::new();
    };
    assert!(first - cron.first < Duration::from_millis(1));
    starts.iter().map(|s| *s - first).collect()
}

fn truncate(t: DateTime<Utc>, unit: i64) -> DateTime<Utc> {
    let secs = t.timestamp().div_euclid(unit) * unit;
    DateTime::from_timestamp(secs, 0).unwrap()
}

/// The first multiple of `unit` seconds since the epoch strictly after `t`.
fn next_multiple(t: DateTime<Utc>, unit: i64) -> DateTime<Utc> {
    truncate(t, unit) + TimeDelta::seconds(unit)
}

#[tokio::test(start_paused = true)]
async fn every_minute() {
    let scheduler = Scheduler::new(1);
    // Runs of 1 s: the Tokio term of the reading then always exceeds the
    // (real, slowly moving) system clock, even if the first instant fell
    // within microseconds of scheduling.
    let cron = schedule(&scheduler, "* * * * *", S, |t| next_multiple(t, 60));
    assert_eq!(cron.first_wall.second(), 0);
    sleep_until(cron.first + S * 150).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, S * 60, S * 120]);
    assert_eq!(cron.job.runs(), 3);
    assert_eq!(cron.job.next_run(), Some(cron.first + S * 180));
}

#[tokio::test(start_paused = true)]
async fn every_fifteen_seconds_with_a_seconds_field() {
    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "*/15 * * * * *", S / 10, |t| {
        next_multiple(t, 15)
    });
    sleep_until(cron.first + S * 50).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, S * 15, S * 30, S * 45]);
}

#[tokio::test(start_paused = true)]
async fn daily_at_midnight() {
    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "@daily", S, |t| next_multiple(t, 86_400));
    assert_eq!((cron.first_wall.hour(), cron.first_wall.minute()), (0, 0));
    sleep_until(cron.first + S * 86_400 * 2 + S).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, S * 86_400, S * 86_400 * 2]);
}

/// Midnight of the first day after `t` that `pick` accepts.
fn next_midnight_where(t: DateTime<Utc>, pick: impl Fn(DateTime<Utc>) -> bool) -> DateTime<Utc> {
    let mut day = next_multiple(t, 86_400);
    while !pick(day) {
        day += TimeDelta::days(1);
    }
    day
}

fn is_last_day_of_month(day: DateTime<Utc>) -> bool {
    (day + TimeDelta::days(1)).day() == 1
}

#[tokio::test(start_paused = true)]
async fn last_day_of_the_month() {
    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "0 0 L * *", S, |t| {
        next_midnight_where(t, is_last_day_of_month)
    });
    let second = next_midnight_where(cron.first_wall, is_last_day_of_month);
    let third = next_midnight_where(second, is_last_day_of_month);
    let gap = |t: DateTime<Utc>| (t - cron.first_wall).to_std().unwrap();
    sleep_until(cron.first + gap(third) + S).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, gap(second), gap(third)]);
    // From 28 to 31 days apart, as months are.
    assert!((S * 86_400 * 28..=S * 86_400 * 31).contains(&gap(second)));
}

fn is_february_29th(day: DateTime<Utc>) -> bool {
    day.month() == 2 && day.day() == 29
}

#[tokio::test(start_paused = true)]
async fn february_29th() {
    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "0 0 29 2 *", S, |t| {
        next_midnight_where(t, is_february_29th)
    });
    let second = next_midnight_where(cron.first_wall, is_february_29th);
    assert_eq!(second.year() - cron.first_wall.year(), 4);
    let gap = (second - cron.first_wall).to_std().unwrap();
    sleep_until(cron.first + gap + S).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, gap]);
}

#[tokio::test(start_paused = true)]
async fn a_ninety_second_run_every_minute_skips_one_instant() {
    // As documented on `schedule_cron`: the run at :00 ends at +90 s, the
    // instant at +60 s is skipped and the one at +120 s is taken.
    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "* * * * *", S * 90, |t| next_multiple(t, 60));
    sleep_until(cron.first + S * 200).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, S * 120]);
}

#[tokio::test(start_paused = true)]
async fn a_run_that_overruns_the_next_instant_skips_it() {
    let scheduler = Scheduler::new(4);
    // Every second, each run takes 2.5 s: the two instants it covers are
    // skipped, and the next run is at the following whole second.
    let cron = schedule(&scheduler, "* * * * * *", S * 5 / 2, |t| {
        next_multiple(t, 1)
    });
    sleep_until(cron.first + S * 10).await;
    assert_eq!(offsets(&cron), [Duration::ZERO, S * 3, S * 6, S * 9]);
}

fn refused(scheduler: &Scheduler, expr: &str) -> String {
    match scheduler.schedule_cron(expr, || async {}) {
        Err(ScheduleError::InvalidCron(why)) => why,
        other => panic!("`{expr}`: {:?}", other.map(|_| ())),
    }
}

#[tokio::test(start_paused = true)]
async fn a_field_out_of_range_is_named() {
    let scheduler = Scheduler::new(1);
    assert_eq!(
        refused(&scheduler, "0 0 0 31 13 *"),
        "`0 0 0 31 13 *`: month field `13`: number out of bounds",
    );
    assert_eq!(
        refused(&scheduler, "*/15 60 * * *"),
        "`*/15 60 * * *`: hour field `60`: number out of bounds",
    );
    let err = scheduler
        .schedule_cron("99 * * * *", || async {})
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid cron expression: `99 * * * *`: minute field `99`: number out of bounds"
    );
    assert_eq!(scheduler.stats().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn garbage_is_refused_with_what_was_expected() {
    let scheduler = Scheduler::new(1);
    let why = refused(&scheduler, "every day at noon");
    assert!(why.starts_with("`every day at noon`: "), "{why}");
    assert!(why.contains("expected 5 fields"), "{why}");
    let why = refused(&scheduler, "0 0 30 2 *");
    assert!(why.contains("names no instant"), "{why}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_wins_over_an_invalid_expression() {
    let scheduler = Scheduler::new(1);
    scheduler.shutdown();
    assert_eq!(
        scheduler.schedule_cron("garbage", || async {}).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        scheduler
            .schedule_cron("* * * * *", || async {})
            .unwrap_err(),
        ScheduleError::Shutdown
    );
}

#[tokio::test(start_paused = true)]
async fn counts_once_against_max_pending() {
    let scheduler = Scheduler::builder().workers(1).max_pending(1).build();
    let cron = schedule(&scheduler, "* * * * * *", Duration::ZERO, |t| {
        next_multiple(t, 1)
    });
    sleep_until(cron.first + S * 7 / 2).await;
    assert_eq!(cron.job.runs(), 4);
    assert_eq!(scheduler.stats().pending, 1);
    assert_eq!(
        scheduler.schedule_cron("@daily", || async {}).unwrap_err(),
        ScheduleError::Full
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_before_and_during_a_run() {
    let scheduler = Scheduler::new(1);
    let idle = scheduler.schedule_cron("@hourly", || async {}).unwrap();
    assert!(idle.cancel());
    assert!(idle.next_run().is_none());
    assert!(idle.await.unwrap_err().is_cancelled());

    let cron = schedule(&scheduler, "* * * * *", S * 10, |t| next_multiple(t, 60));
    sleep_until(cron.first + S * 5).await;
    assert!(cron.job.cancel(), "cancels the run in progress");
    sleep(S * 600).await;
    // The run in progress finished; no later run started.
    assert_eq!(offsets(&cron), [Duration::ZERO]);
    assert_eq!(cron.job.runs(), 1);
    assert!(cron.job.await.unwrap_err().is_cancelled());
    let stats = scheduler.stats();
    assert_eq!((stats.pending, stats.cancelled, stats.completed), (0, 2, 1));
}

#[tokio::test(start_paused = true)]
async fn abort_stops_the_run_at_its_next_await() {
    let scheduler = Scheduler::new(1);
    let reached = Arc::new(Mutex::new(false));
    let r = reached.clone();
    let job = scheduler
        .schedule_cron("* * * * * *", move || {
            let r = r.clone();
            async move {
                sleep(S * 10).await;
                *r.lock().unwrap() = true;
            }
        })
        .unwrap();
    sleep_until(job.next_run().unwrap() + S).await;
    assert_eq!(scheduler.stats().running, 1);
    assert!(job.abort());
    assert!(job.await.unwrap_err().is_cancelled());
    assert!(!*reached.lock().unwrap());
    assert_eq!(scheduler.stats().running, 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_a_cron_job_like_a_periodic_one() {
    let scheduler = Scheduler::new(1);
    let cron = schedule(&scheduler, "*/10 * * * * *", Duration::ZERO, |t| {
        next_multiple(t, 10)
    });
    sleep_until(cron.first + S * 15).await;
    assert_eq!(cron.job.runs(), 2);
    scheduler.shutdown();
    assert!(cron.job.is_cancelled());
    scheduler.terminated().await;
    assert!(cron.job.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn continue_periodic_after_shutdown_keeps_it_until_shutdown_now() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .continue_periodic_after_shutdown(true)
        .build();
    let cron = schedule(&scheduler, "*/10 * * * * *", Duration::ZERO, |t| {
        next_multiple(t, 10)
    });
    scheduler.shutdown();
    sleep_until(cron.first + S * 25).await;
    assert_eq!(cron.job.runs(), 3);
    assert_eq!(scheduler.shutdown_now(), 1);
    scheduler.terminated().await;
    assert!(cron.job.await.unwrap_err().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_panic_stops_a_cron_job() {
    let scheduler = Scheduler::new(1);
    let gate = Arc::new(Notify::new());
    let mut run = 0;
    let job = scheduler
        .schedule_cron("* * * * * *", move || {
            run += 1;
            let gate = gate.clone();
            async move {
                gate.notify_one();
                assert!(run < 3, "third run fails");
            }
        })
        .unwrap();
    match job.await {
        Err(JobError::Panicked(_)) => {}
        other => panic!("expected a panic, got {:?}", other.map(|_| ())),
    }
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.panicked, stats.pending), (2, 1, 0));
}
