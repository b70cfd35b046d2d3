//! [`Backoff`]: how long a failed job waits before its next attempt.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How long a failed job waits before its next attempt, for
/// [`WorkerBuilder::backoff`](super::WorkerBuilder::backoff).
///
/// `fixed` and `exponential` start unjittered and uncapped. Delays
/// saturate (at the cap, else `Duration::MAX`) and never panic.
///
/// ```text
/// exponential(1 s):           1 s, 2 s, 4 s, 8 s, 16 s, ...
/// exponential(1 s).max(5 s):  1 s, 2 s, 4 s, 5 s, 5 s, ...
/// .jitter(true):              each delay drawn uniformly in [0, delay]
/// ```
///
/// # Examples
///
/// ```
/// use punctual::durable::Backoff;
/// use std::time::Duration;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1)).max(Duration::from_secs(5));
/// assert_eq!(backoff.delay(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay(3), Duration::from_secs(4));
/// assert_eq!(backoff.delay(9), Duration::from_secs(5));
/// assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(5));
///
/// let jittered = backoff.jitter(true);
/// assert!(jittered.delay(3) <= Duration::from_secs(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    base: Duration,
    exponential: bool,
    cap: Option<Duration>,
    jitter: bool,
}

impl Default for Backoff {
    /// `exponential(1 s).max(1 h).jitter(true)`.
    fn default() -> Self {
        Backoff::exponential(Duration::from_secs(1))
            .max(Duration::from_secs(3600))
            .jitter(true)
    }
}

impl Backoff {
    /// The same `delay` before every retry.
    pub fn fixed(delay: Duration) -> Self {
        Backoff {
            base: delay,
            exponential: false,
            cap: None,
            jitter: false,
        }
    }

    /// `base * 2^(attempt - 1)` before the retry after `attempt` failed.
    pub fn exponential(base: Duration) -> Self {
        Backoff {
            exponential: true,
            ..Backoff::fixed(base)
        }
    }

    /// No delay longer than `cap`.
    pub fn max(self, cap: Duration) -> Self {
        Backoff {
            cap: Some(cap),
            ..self
        }
    }

    /// Full jitter: each delay is drawn uniformly in `[0, delay]`, anew on
    /// each call, so that jobs that failed together do not retry together.
    pub fn jitter(self, on: bool) -> Self {
        Backoff { jitter: on, ..self }
    }

    /// The delay before the attempt after `attempt` failed; `delay(0)` is
    /// `delay(1)`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let delay = if self.exponential {
            doubled(self.base, attempt.max(1) - 1)
        } else {
            self.base
        };
        let delay = self.cap.map_or(delay, |cap| delay.min(cap));
        if self.jitter { uniform(delay) } else { delay }
    }
}

/// `base * 2^doublings`, exactly, or `Duration::MAX` where that passes it
/// (in nanoseconds a `u128` holds every `Duration` with room for the
/// product up to 2^127; the factor itself is checked first).
fn doubled(base: Duration, doublings: u32) -> Duration {
    if base.is_zero() {
        return Duration::ZERO;
    }
    let nanos = 1u128
        .checked_shl(doublings)
        .filter(|factor| factor.leading_zeros() > 0)
        .and_then(|factor| base.as_nanos().checked_mul(factor));
    nanos
        .and_then(|nanos| {
            let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
            let sub = (nanos % 1_000_000_000) as u32;
            Some(Duration::new(secs, sub))
        })
        .unwrap_or(Duration::MAX)
}

/// A duration drawn uniformly in `[0, max]`.
fn uniform(max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    let drawn = match nanos.checked_add(1) {
        Some(span) => next_random() % span,
        None => next_random(),
    };
    if max.as_nanos() > u128::from(u64::MAX) {
        // Beyond 584 years of nanoseconds: scale a fraction of `max` (in
        // floating point, which may round past `max`).
        let secs = max.as_secs_f64() * (drawn as f64 / u64::MAX as f64);
        return Duration::try_from_secs_f64(secs).map_or(max, |d| d.min(max));
    }
    Duration::from_nanos(drawn)
}

/// xorshift64*, seeded per thread from the operating system's randomness
/// (through the standard library's hasher keys): jitter needs spread, not
/// secrecy.
fn next_random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().build_hasher().finish() | 1);
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn fixed_is_the_same_every_time() {
        let b = Backoff::fixed(3 * S);
        assert_eq!([b.delay(0), b.delay(1), b.delay(7)], [3 * S; 3]);
    }

    #[test]
    fn exponential_doubles_and_saturates() {
        let b = Backoff::exponential(S);
        assert_eq!(b.delay(0), S);
        assert_eq!(b.delay(1), S);
        assert_eq!(b.delay(2), 2 * S);
        assert_eq!(b.delay(11), 1024 * S);
        // Exact up to where the product passes `Duration::MAX`.
        assert_eq!(b.delay(40), Duration::from_secs(1 << 39));
        assert_eq!(b.delay(64), Duration::from_secs(1 << 63));
        assert_eq!(b.delay(65), Duration::MAX);
        let tenth = Backoff::exponential(Duration::from_millis(100));
        assert_eq!(tenth.delay(40), Duration::from_millis(100 << 39));
        assert_eq!(tenth.delay(40).as_secs(), 54_975_581_388);
        let ms: u128 = 100 << 67; // past u64 milliseconds, within Duration
        let want = Duration::new((ms / 1000) as u64, (ms % 1000 * 1_000_000) as u32);
        assert_eq!(tenth.delay(68), want);
        assert_eq!(tenth.delay(69), Duration::MAX);
        assert_eq!(tenth.max(S).delay(69), S);
        assert_eq!(b.delay(u32::MAX), Duration::MAX);
        assert_eq!(b.max(10 * S).delay(u32::MAX), 10 * S);
        assert_eq!(
            Backoff::exponential(Duration::ZERO).delay(99),
            Duration::ZERO
        );
        assert_eq!(Backoff::exponential(Duration::MAX).delay(2), Duration::MAX);
    }

    #[test]
    fn jitter_stays_within_the_delay_and_spreads() {
        let b = Backoff::fixed(S).jitter(true);
        let draws: Vec<Duration> = (0..200).map(|_| b.delay(1)).collect();
        assert!(draws.iter().all(|d| *d <= S));
        assert!(draws.iter().any(|d| *d < S / 2) && draws.iter().any(|d| *d > S / 2));
        let huge = Backoff::fixed(Duration::MAX).jitter(true);
        assert!(huge.delay(1) <= Duration::MAX);
        assert_eq!(
            Backoff::fixed(Duration::ZERO).jitter(true).delay(1),
            Duration::ZERO
        );
    }

    #[test]
    fn the_default_is_exponential_from_a_second_capped_at_an_hour_with_jitter() {
        let b = Backoff::default();
        assert_eq!(b, Backoff::exponential(S).max(3600 * S).jitter(true));
        assert!(b.delay(30) <= 3600 * S);
    }
}
