//! Charts drawn on the server as SVG: a queue's counts since the dashboard
//! started (one small chart per state, each on its own scale) and what
//! comes due over the next hour. Colours come from the page's CSS (each
//! chart draws in `currentColor` or a state's class), so they follow the
//! light and dark themes.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use maud::{Markup, html};
use punctual::durable::{EntryState, Minute, QueueStats};

use crate::fmt;
use crate::history::Point;
use crate::ops::Span;
use crate::timeline::{MINUTES, Timeline};

/// A state's count in a sample.
pub(crate) fn count_of(stats: &QueueStats, state: EntryState) -> u64 {
    match state {
        EntryState::Pending => stats.pending,
        EntryState::Due => stats.due,
        EntryState::Leased => stats.leased,
        EntryState::Dead => stats.dead,
    }
}

/// The smallest of 1, 2, 5, 10, 20, 50, ... that is at least `n` (at
/// least 1): a chart's top.
fn nice_top(n: u64) -> u64 {
    let mut step = 1_u64;
    loop {
        for m in [1, 2, 5] {
            if let Some(top) = step.checked_mul(m) {
                if top >= n {
                    return top;
                }
            }
        }
        match step.checked_mul(10) {
            Some(next) => step = next,
            None => return u64::MAX,
        }
    }
}

/// The x (0..=1) of each point over the span from the first to the last
/// (the newest read, a few seconds old at most), and the state's count.
fn series(points: &[Point], state: EntryState) -> Vec<(f64, u64)> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Vec::new();
    };
    let span = last
        .at
        .duration_since(first.at)
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-3);
    points
        .iter()
        .map(|p| {
            let x =
                p.at.duration_since(first.at)
                    .unwrap_or_default()
                    .as_secs_f64()
                    / span;
            (x.min(1.0), count_of(&p.value, state))
        })
        .collect()
}

/// The line and the area under it, in a `w` by `h` box, for values up to
/// `top`.
fn paths(series: &[(f64, u64)], top: u64, w: f64, h: f64) -> (String, String) {
    let mut line = String::new();
    for (i, (x, v)) in series.iter().enumerate() {
        let px = x * w;
        let py = h - (*v as f64 / top as f64) * (h - 2.0) - 1.0;
        let _ = write!(line, "{}{px:.1},{py:.1}", if i == 0 { "M" } else { " L" });
    }
    // A single point is a flat line across.
    if series.len() == 1 {
        let (_, v) = series[0];
        let py = h - (v as f64 / top as f64) * (h - 2.0) - 1.0;
        line = format!("M0,{py:.1} L{w:.1},{py:.1}");
    }
    let area = if line.is_empty() {
        String::new()
    } else {
        let first_x = if series.len() == 1 {
            0.0
        } else {
            series[0].0 * w
        };
        let last_x = if series.len() == 1 {
            w
        } else {
            series[series.len() - 1].0 * w
        };
        format!("{line} L{last_x:.1},{h:.1} L{first_x:.1},{h:.1} Z")
    };
    (line, area)
}

/// A small chart of one state's count since the dashboard started, for a
/// row of the overview (no axes; its own scale).
pub(crate) fn sparkline(points: &[Point], state: EntryState, now: SystemTime) -> Markup {
    let (w, h) = (96.0, 22.0);
    let s = series(points, state);
    let top = nice_top(s.iter().map(|(_, v)| *v).max().unwrap_or(0));
    let (line, area) = paths(&s, top, w, h);
    html! {
        svg.spark.(state_class(state)) viewBox={"0 0 " (w) " " (h)} width=(w) height=(h)
            role="img" aria-label={(state) " since the dashboard started"} {
            title { (state) ": " (span_text(points, now)) " of history, up to " (fmt::count(top)) }
            path.area d=(area) {}
            path.line d=(line) {}
        }
    }
}

/// One state's count since the dashboard started, with its scale and time
/// span written out: a tile of the queue page.
pub(crate) fn history(points: &[Point], state: EntryState, now: SystemTime) -> Markup {
    let (w, h) = (260.0, 64.0);
    let s = series(points, state);
    let top = nice_top(s.iter().map(|(_, v)| *v).max().unwrap_or(0));
    let (line, area) = paths(&s, top, w, h);
    html! {
        figure.history {
            svg.chart.(state_class(state)) viewBox={"0 0 " (w) " " (h)} preserveAspectRatio="none"
                role="img" aria-label={(state) " count since the dashboard started"} {
                line.grid x1="0" y1="1" x2=(w) y2="1" {}
                line.grid x1="0" y1=(h / 2.0) x2=(w) y2=(h / 2.0) {}
                line.axis x1="0" y1=(h - 0.5) x2=(w) y2=(h - 0.5) {}
                path.area d=(area) {}
                path.line d=(line) vector-effect="non-scaling-stroke" {}
            }
            figcaption {
                span { "max " (fmt::count(top)) }
                span { (span_text(points, now)) " ago → now" }
            }
        }
    }
}

/// How far back a history goes, as text.
fn span_text(points: &[Point], now: SystemTime) -> String {
    match points.first() {
        Some(first) => fmt::span(now.duration_since(first.at).unwrap_or_default()),
        None => "0s".to_owned(),
    }
}

pub(crate) fn state_class(state: EntryState) -> &'static str {
    match state {
        EntryState::Pending => "st-pending",
        EntryState::Due => "st-due",
        EntryState::Leased => "st-leased",
        EntryState::Dead => "st-dead",
    }
}

/// What comes due over the next hour: a bar per minute, stacked by kind
/// (first attempts, retries, ticks), with the part past what was read
/// shaded when the timeline was capped.
pub(crate) fn timeline(t: &Timeline) -> Markup {
    let (w, h, left, bottom) = (720.0, 140.0, 36.0, 20.0);
    let plot_w = w - left - 4.0;
    let plot_h = h - bottom - 6.0;
    let bar_w = plot_w / MINUTES as f64;
    let top = nice_top(t.minutes.iter().map(|b| b.total()).max().unwrap_or(0));
    let y = |v: u64| 6.0 + plot_h - v as f64 / top as f64 * plot_h;
    let minute_at = |i: usize| t.now + Duration::from_secs(60 * i as u64);
    let unread_from = t
        .complete_until
        .duration_since(t.now)
        .unwrap_or_default()
        .as_secs_f64()
        / (60.0 * MINUTES as f64);
    html! {
        svg.timeline viewBox={"0 0 " (w) " " (h)} role="img"
            aria-label="entries coming due over the next hour, per minute" {
            @for frac in [0.0, 0.5, 1.0] {
                @let gy = 6.0 + plot_h - frac * plot_h;
                line.grid x1=(left) y1=(gy) x2=(w - 4.0) y2=(gy) {}
                // The middle line stays unlabelled: half of 5 is no count.
                @if frac != 0.5 {
                    text.tick x=(left - 6.0) y=(gy + 4.0) text-anchor="end" {
                        (fmt::count((top as f64 * frac).round() as u64))
                    }
                }
            }
            @if t.capped {
                rect.unread x=(left + unread_from * plot_w) y="6" width=(plot_w - unread_from * plot_w)
                    height=(plot_h) {
                    title { "not read: the timeline stops after its first " (t.read) " entries" }
                }
            }
            @for (i, b) in t.minutes.iter().enumerate() {
                @let x = left + i as f64 * bar_w + 1.0;
                @let bw = (bar_w - 2.0).max(1.0);
                g {
                    title {
                        (fmt::absolute(minute_at(i))) " + 1 min: "
                        (b.jobs) " new, " (b.retries) " retries, " (b.ticks) " ticks"
                    }
                    rect.hit x=(x - 1.0) y="6" width=(bar_w) height=(plot_h) {}
                    @let y_jobs = y(b.jobs);
                    @let y_retries = y(b.jobs + b.retries);
                    @let y_ticks = y(b.total());
                    @if b.jobs > 0 {
                        rect.k-job x=(x) y=(y_jobs) width=(bw) height=(6.0 + plot_h - y_jobs) {}
                    }
                    @if b.retries > 0 {
                        rect.k-retry x=(x) y=(y_retries) width=(bw) height=(y_jobs - y_retries) {}
                    }
                    @if b.ticks > 0 {
                        rect.k-tick x=(x) y=(y_ticks) width=(bw) height=(y_retries - y_ticks) {}
                    }
                }
            }
            line.axis x1=(left) y1=(6.0 + plot_h + 0.5) x2=(w - 4.0) y2=(6.0 + plot_h + 0.5) {}
            @for m in [0_usize, 15, 30, 45, 60] {
                @let x = left + m as f64 * bar_w;
                text.tick x=(x) y=(h - 4.0)
                    text-anchor=(if m == 0 { "start" } else if m == 60 { "end" } else { "middle" }) {
                    @if m == 0 { "now" } @else { "+" (m) "m" }
                }
            }
        }
    }
}

/// The four counts of a minute of history, with their names and classes.
const FLOWS: [(&str, &str); 4] = [
    ("inserted", "f-inserted"),
    ("done", "f-done"),
    ("failed", "f-failed"),
    ("dead", "f-dead"),
];

fn flow(m: &Minute, i: usize) -> u64 {
    match i {
        0 => m.inserted,
        1 => m.done,
        2 => m.failed,
        _ => m.dead,
    }
}

/// The per-minute history over `span`, in buckets (a minute each over an
/// hour, ten minutes each over a day): what was inserted, done, failed
/// and sent to the dead letters, each a line. Read from the store's
/// history, so it reads the same after the dashboard restarts.
pub(crate) fn throughput(minutes: &[Minute], span: Span, now: SystemTime) -> Markup {
    let (w, h, left, bottom) = (1100.0, 170.0, 40.0, 20.0);
    let plot_w = w - left - 4.0;
    let plot_h = h - bottom - 6.0;
    let (buckets, size) = match span {
        Span::Hour => (60_usize, 60_u64),
        Span::Day => (144, 600),
    };
    let start = now - Duration::from_secs(buckets as u64 * size);
    let mut sums = vec![[0_u64; 4]; buckets];
    let mut totals = [0_u64; 4];
    for m in minutes {
        let Ok(ago) = m.at.duration_since(start) else {
            continue;
        };
        let i = ((ago.as_secs() / size) as usize).min(buckets - 1);
        for (f, total) in totals.iter_mut().enumerate() {
            sums[i][f] += flow(m, f);
            *total += flow(m, f);
        }
    }
    let top = nice_top(
        sums.iter()
            .flat_map(|b| b.iter().copied())
            .max()
            .unwrap_or(0),
    );
    let x = |i: usize| left + (i as f64 + 0.5) / buckets as f64 * plot_w;
    let y = |v: u64| 6.0 + plot_h - v as f64 / top as f64 * plot_h;
    let unit = if size == 60 { "minute" } else { "10 minutes" };
    let lines: Vec<String> = (0..FLOWS.len())
        .map(|f| {
            let mut d = String::new();
            for (i, b) in sums.iter().enumerate() {
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if i == 0 { "M" } else { " L" },
                    x(i),
                    y(b[f])
                );
            }
            d
        })
        .collect();
    html! {
        figure.throughput data-inserted=(totals[0]) data-done=(totals[1]) data-failed=(totals[2]) data-dead=(totals[3])
            data-minutes=(minutes.len()) {
            svg.flows viewBox={"0 0 " (w) " " (h)} role="img"
                aria-label={"inserted, done, failed and dead per " (unit)} {
                @for frac in [0.0, 0.5, 1.0] {
                    @let gy = 6.0 + plot_h - frac * plot_h;
                    line.grid x1=(left) y1=(gy) x2=(w - 4.0) y2=(gy) {}
                    @if frac != 0.5 {
                        text.tick x=(left - 6.0) y=(gy + 4.0) text-anchor="end" {
                            (fmt::count((top as f64 * frac).round() as u64))
                        }
                    }
                }
                @for ((name, class), d) in FLOWS.iter().zip(&lines) {
                    path.flow.(class) d=(d) vector-effect="non-scaling-stroke" {
                        title { (name) }
                    }
                }
                line.axis x1=(left) y1=(6.0 + plot_h + 0.5) x2=(w - 4.0) y2=(6.0 + plot_h + 0.5) {}
                text.tick x=(left) y=(h - 4.0) text-anchor="start" { (fmt::span(span.duration())) " ago" }
                text.tick x=(w - 4.0) y=(h - 4.0) text-anchor="end" { "now" }
            }
            figcaption.legend {
                @for (f, (name, class)) in FLOWS.iter().enumerate() {
                    span.(class) { "■" } " " (name) " " strong data-total=(name) { (fmt::count(totals[f])) } " · "
                }
                "per " (unit) ", from the store's history"
            }
        }
    }
}

/// The latency (how long the oldest due entry had waited) as sampled
/// since the dashboard started, with the threshold over which the queue
/// is amber.
pub(crate) fn latency(
    points: &[Point<Option<u64>>],
    threshold: Duration,
    now: SystemTime,
) -> Markup {
    let (w, h) = (720.0, 48.0);
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return html! {};
    };
    let span = last
        .at
        .duration_since(first.at)
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-3);
    let max = points.iter().filter_map(|p| p.value).max().unwrap_or(0);
    let top = nice_top(max.max(1000));
    let series: Vec<(f64, u64)> = points
        .iter()
        .map(|p| {
            let x =
                p.at.duration_since(first.at)
                    .unwrap_or_default()
                    .as_secs_f64()
                    / span;
            (x.min(1.0), p.value.unwrap_or(0))
        })
        .collect();
    let (line, area) = paths(&series, top, w, h);
    let threshold_ms = threshold.as_millis() as f64;
    let ty = h - (threshold_ms / top as f64) * (h - 2.0) - 1.0;
    html! {
        figure.history.latency {
            svg.chart.lat viewBox={"0 0 " (w) " " (h)} preserveAspectRatio="none"
                role="img" aria-label="latency since the dashboard started" {
                line.axis x1="0" y1=(h - 0.5) x2=(w) y2=(h - 0.5) {}
                @if threshold_ms <= top as f64 {
                    line.threshold x1="0" y1=(ty) x2=(w) y2=(ty) {}
                }
                path.area d=(area) {}
                path.line d=(line) vector-effect="non-scaling-stroke" {}
            }
            figcaption {
                span { "latency, max " (fmt::span(Duration::from_millis(top))) }
                span { "sampled since the dashboard started, " (span_text_of(first.at, now)) " ago → now" }
            }
        }
    }
}

fn span_text_of(first: SystemTime, now: SystemTime) -> String {
    fmt::span(now.duration_since(first).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tops_are_round() {
        assert_eq!(nice_top(0), 1);
        assert_eq!(nice_top(3), 5);
        assert_eq!(nice_top(7), 10);
        assert_eq!(nice_top(11), 20);
        assert_eq!(nice_top(1_000_000), 1_000_000);
        assert_eq!(nice_top(1_000_001), 2_000_000);
        assert_eq!(nice_top(u64::MAX), u64::MAX);
    }
}
