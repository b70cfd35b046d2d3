//! `MissedTicks`: what a fixed-rate job does after an overrun or a stalled
//! worker. The expected start instants are the timelines documented on
//! `MissedTicks` (period 10 ms, later runs take 2 ms).

use punctual::{MissedTicks, Scheduler};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);
const PERIOD: Duration = Duration::from_millis(10);

/// Start instants (ms since `origin`) of a fixed-rate job whose first run
/// takes `first` ms and later runs 2 ms, observed until `until` ms. Fails
/// if two runs overlap.
async fn starts(
    scheduler: &Scheduler,
    initial_delay: u64,
    missed: MissedTicks,
    first: u64,
    until: u64,
) -> Vec<u64> {
    let origin = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let active = Arc::new(AtomicUsize::new(0));
    let (l, a) = (log.clone(), active.clone());
    let mut run = 0;
    let job = scheduler
        .schedule_at_fixed_rate_with(MS * initial_delay as u32, PERIOD, missed, move || {
            run += 1;
            let took = if run == 1 { first } else { 2 };
            let (l, a) = (l.clone(), a.clone());
            async move {
                assert_eq!(a.fetch_add(1, Ordering::SeqCst), 0, "runs overlap");
                l.lock().unwrap().push(origin.elapsed().as_millis() as u64);
                sleep(MS * took as u32).await;
                a.fetch_sub(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    tokio::time::sleep_until(origin + MS * until as u32).await;
    assert!(job.cancel());
    let starts = log.lock().unwrap().clone();
    assert_eq!(
        job.runs() as usize + active.load(Ordering::SeqCst),
        starts.len()
    );
    starts
}

async fn overrun(missed: MissedTicks, first: u64) -> Vec<u64> {
    let scheduler = Scheduler::new(4);
    starts(&scheduler, 0, missed, first, first + 31).await
}

#[tokio::test(start_paused = true)]
async fn overrun_as_documented() {
    // The first timeline on `MissedTicks`: the run due at 0 takes 25.
    assert_eq!(
        overrun(MissedTicks::Burst, 25).await,
        [0, 25, 27, 30, 40, 50]
    );
    assert_eq!(overrun(MissedTicks::Delay, 25).await, [0, 25, 35, 45, 55]);
    assert_eq!(overrun(MissedTicks::Skip, 25).await, [0, 30, 40, 50]);
}

#[tokio::test(start_paused = true)]
async fn overrun_by_half_a_period() {
    assert_eq!(overrun(MissedTicks::Burst, 15).await, [0, 15, 20, 30, 40]);
    assert_eq!(overrun(MissedTicks::Delay, 15).await, [0, 15, 25, 35, 45]);
    assert_eq!(overrun(MissedTicks::Skip, 15).await, [0, 20, 30, 40]);
}

#[tokio::test(start_paused = true)]
async fn overrun_by_one_period() {
    assert_eq!(
        overrun(MissedTicks::Burst, 20).await,
        [0, 20, 22, 30, 40, 50]
    );
    assert_eq!(overrun(MissedTicks::Delay, 20).await, [0, 20, 30, 40, 50]);
    // The instant 20 is exactly the end of the overrun: dropped too.
    assert_eq!(overrun(MissedTicks::Skip, 20).await, [0, 30, 40, 50]);
}

#[tokio::test(start_paused = true)]
async fn overrun_by_two_and_a_half_periods() {
    assert_eq!(
        overrun(MissedTicks::Burst, 35).await,
        [0, 35, 37, 39, 41, 50, 60]
    );
    assert_eq!(overrun(MissedTicks::Delay, 35).await, [0, 35, 45, 55, 65]);
    assert_eq!(overrun(MissedTicks::Skip, 35).await, [0, 40, 50, 60]);
}

#[tokio::test(start_paused = true)]
async fn overrun_by_ten_periods() {
    // Burst: the ten missed runs (due 10..=100) and the three that come due
    // meanwhile follow back to back, 2 ms each, until caught up at 140.
    let mut burst = vec![0];
    burst.extend((110..=134).step_by(2));
    burst.push(140);
    assert_eq!(overrun(MissedTicks::Burst, 110).await, burst);
    assert_eq!(
        overrun(MissedTicks::Delay, 110).await,
        [0, 110, 120, 130, 140]
    );
    assert_eq!(overrun(MissedTicks::Skip, 110).await, [0, 120, 130, 140]);
}

#[tokio::test(start_paused = true)]
async fn overrun_by_ten_periods_with_one_worker() {
    let scheduler = Scheduler::new(1);
    assert_eq!(
        starts(&scheduler, 0, MissedTicks::Skip, 110, 141).await,
        [0, 120, 130, 140]
    );
}

/// The only worker is busy with another job until `busy` ms; the periodic
/// job is first due at 5 ms.
async fn stalled(missed: MissedTicks, busy: u64) -> Vec<u64> {
    let scheduler = Scheduler::new(1);
    scheduler
        .schedule(Duration::ZERO, sleep(MS * busy as u32))
        .unwrap();
    starts(&scheduler, 5, missed, 2, 56).await
}

#[tokio::test(start_paused = true)]
async fn stalled_worker() {
    assert_eq!(
        stalled(MissedTicks::Burst, 28).await,
        [28, 30, 32, 35, 45, 55]
    );
    assert_eq!(stalled(MissedTicks::Delay, 28).await, [28, 38, 48]);
    assert_eq!(stalled(MissedTicks::Skip, 28).await, [28, 35, 45, 55]);
}

#[tokio::test(start_paused = true)]
async fn worker_stalled_less_than_a_period_keeps_the_grid() {
    for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
        assert_eq!(stalled(missed, 12).await, [12, 15, 25, 35, 45, 55]);
    }
}

#[tokio::test(start_paused = true)]
async fn runs_on_time_are_the_same_under_every_policy() {
    for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
        let scheduler = Scheduler::new(1);
        assert_eq!(
            starts(&scheduler, 0, missed, 10, 41).await,
            [0, 10, 20, 30, 40]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn next_run_reports_the_policy_deadline() {
    let scheduler = Scheduler::new(1);
    let origin = Instant::now();
    let mut first = true;
    let job = scheduler
        .schedule_at_fixed_rate_with(Duration::ZERO, PERIOD, MissedTicks::Skip, move || {
            let slow = std::mem::take(&mut first);
            async move {
                if slow {
                    sleep(MS * 35).await;
                }
            }
        })
        .unwrap();
    sleep(MS * 36).await;
    assert_eq!(job.next_run(), Some(origin + MS * 40));
}

#[test]
fn burst_is_the_default() {
    assert_eq!(MissedTicks::default(), MissedTicks::Burst);
}

#[test]
fn missed_ticks_is_send_sync_copy_and_debug() {
    fn send_sync_copy<T: Send + Sync + Copy + std::fmt::Debug>() {}
    send_sync_copy::<MissedTicks>();
    assert_eq!(format!("{:?}", MissedTicks::Skip), "Skip");
}

#[tokio::test(start_paused = true)]
async fn zero_period_is_refused_under_every_policy() {
    let scheduler = Scheduler::new(1);
    for missed in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
        let refused = scheduler.schedule_at_fixed_rate_with(
            Duration::ZERO,
            Duration::ZERO,
            missed,
            || async {},
        );
        assert_eq!(refused.unwrap_err(), punctual::ScheduleError::ZeroPeriod);
    }
}
