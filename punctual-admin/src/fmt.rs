//! Numbers and times as people read them, for the pages and the command
//! line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `1234567` as `1,234,567`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in at most two units: `450ms`, `12s`, `4m 12s`, `3h 5m`,
/// `2d 4h`.
pub(crate) fn span(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (d_, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d_, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) if sec == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {sec}s"),
        (0, _, _) if m == 0 => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        _ if h == 0 => format!("{d_}d"),
        _ => format!("{d_}d {h}h"),
    }
}

/// A period exactly, in the units the command line reads back: `500ms`,
/// `30s`, `1m`, `1m30s`, `1h`, `1d`.
pub(crate) fn period(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0ms".to_owned();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ] {
        let n = rest / size;
        rest %= size;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `at` seen from `now`: `in 4m 12s`, `3h 5m ago`, `now`.
pub(crate) fn relative(at: SystemTime, now: SystemTime) -> String {
    match at.duration_since(now) {
        Ok(ahead) if ahead < Duration::from_secs(1) => "now".to_owned(),
        Ok(ahead) => format!("in {}", span(ahead)),
        Err(e) if e.duration() < Duration::from_secs(1) => "now".to_owned(),
        Err(e) => format!("{} ago", span(e.duration())),
    }
}

/// `at` as `2025-06-01 12:00:03 UTC`.
pub(crate) fn absolute(at: SystemTime) -> String {
    utc(at).format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `at` in UTC, kept to the years 0000 to 9999 (what RFC 3339 writes): a
/// time beyond them, which a store may hold for an entry delayed by
/// centuries, shows as the first or last millisecond of that range.
pub(crate) fn utc(at: SystemTime) -> chrono::DateTime<chrono::Utc> {
    /// 0000-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z, in ms.
    const FIRST: i64 = -62_167_219_200_000;
    const LAST: i64 = 253_402_300_799_999;
    let ms = match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    };
    chrono::DateTime::from_timestamp_millis(ms.clamp(FIRST, LAST)).unwrap_or_default()
}

/// A clock offset in seconds as `+0.4 ms`, `-1.25 s`.
pub(crate) fn offset(seconds: f64) -> String {
    let sign = if seconds < 0.0 { "−" } else { "+" };
    let a = seconds.abs();
    if a < 1.0 {
        format!("{sign}{:.1} ms", a * 1000.0)
    } else {
        format!("{sign}{a:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn counts_group_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn spans_and_relative_times_read_naturally() {
        assert_eq!(span(Duration::from_millis(450)), "450ms");
        assert_eq!(span(Duration::from_secs(12)), "12s");
        assert_eq!(span(Duration::from_secs(252)), "4m 12s");
        assert_eq!(span(Duration::from_secs(120)), "2m");
        assert_eq!(span(Duration::from_secs(3 * 3600 + 300)), "3h 5m");
        assert_eq!(span(Duration::from_secs(2 * 86_400 + 4 * 3600)), "2d 4h");
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(relative(now + Duration::from_secs(252), now), "in 4m 12s");
        assert_eq!(relative(now - Duration::from_secs(60), now), "1m ago");
        assert_eq!(relative(now, now), "now");
        assert_eq!(absolute(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(offset(0.0004), "+0.4 ms");
        assert_eq!(offset(-1.25), "−1.25 s");
        let ms = Duration::from_millis;
        assert_eq!(period(ms(500)), "500ms");
        assert_eq!(period(ms(60_000)), "1m");
        assert_eq!(period(ms(90_000)), "1m30s");
        assert_eq!(period(ms(86_400_000 + 1)), "1d1ms");
        assert_eq!(period(Duration::ZERO), "0ms");
    }
}
