//! The pages' markup (maud): a layout and one function per page, fed by
//! the handlers in `pages.rs` with what the operations read. Nothing here
//! reads a store.

use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use maud::{DOCTYPE, Markup, html};
use punctual::durable::{EntryInfo, EntryState, Minute, Page, ScheduleInfo};
use serde_json::Value;

use super::chart;
use super::{Base, enc};
use crate::error::OpError;
use crate::fmt;
use crate::health::{Health, Mark, Verdict, judge};
use crate::history::Point;
use crate::json::{finished_str, rfc3339};
use crate::ops::{DEFAULT_KEY, LEASED_AT_MOST, Limits, Listed, Order, Shown, Snapshot, Span};
use crate::store::Kind;
use crate::timeline::Timeline;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The states in the order a queue's entries move through them.
pub(crate) const STATES: [EntryState; 4] = [
    EntryState::Pending,
    EntryState::Due,
    EntryState::Leased,
    EntryState::Dead,
];

/// What every page needs besides its content.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    /// The path the router is nested under.
    pub(crate) base: String,
    pub(crate) read_only: bool,
    /// Whether there is a login to leave.
    pub(crate) logout: bool,
    /// What the last action did, or why it failed.
    pub(crate) flash: Option<String>,
    /// Seconds between reloads, when auto-refresh is on.
    pub(crate) refresh: Option<u64>,
    /// This page's path and query (base included), without `refresh` and
    /// `done`: the auto-refresh links go there.
    pub(crate) here: String,
    /// Whether the page offers auto-refresh.
    pub(crate) refreshable: bool,
}

impl Ctx {
    /// A page's context where only the base is known: no badge, no
    /// button (error pages).
    pub(crate) fn bare(base: &Base) -> Ctx {
        Ctx {
            base: base.0.clone(),
            read_only: false,
            logout: false,
            flash: None,
            refresh: None,
            here: String::new(),
            refreshable: false,
        }
    }

    pub(crate) fn home(&self) -> String {
        if self.base.is_empty() {
            "/".to_owned()
        } else {
            self.base.clone()
        }
    }

    /// A queue's page.
    pub(crate) fn queue_url(&self, label: &str) -> String {
        format!("{}/queues/{}", self.base, enc(label))
    }

    pub(crate) fn entries_url(&self, label: &str, state: EntryState) -> String {
        format!("{}/entries?state={state}", self.queue_url(label))
    }

    pub(crate) fn entry_url(&self, label: &str, id: &str) -> String {
        format!("{}/entries/{}", self.queue_url(label), enc(id))
    }

    /// `here` with `extra` added to its query.
    fn here_with(&self, extra: &str) -> String {
        let join = if self.here.contains('?') { '&' } else { '?' };
        format!("{}{join}{extra}", self.here)
    }
}

/// The layout around every page.
pub(crate) fn layout(ctx: &Ctx, title: &str, crumbs: &[(String, String)], body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(every) = ctx.refresh {
                    meta http-equiv="refresh" content={(every) "; url=" (ctx.here_with(&format!("refresh={every}")))};
                }
                title { (title) " · punctual" }
                link rel="stylesheet" href={(ctx.base) "/assets/style.css"};
                link rel="icon" href="data:,";
                script src={(ctx.base) "/assets/local-time.js"} defer {}
            }
            body {
                header.top {
                    a.brand href=(ctx.home()) { span.mark { "◷" } "punctual" }
                    nav.crumbs aria-label="breadcrumbs" {
                        @for (href, label) in crumbs {
                            span.sep { "/" }
                            a href=(href) { (label) }
                        }
                    }
                    span.grow {}
                    @if ctx.read_only {
                        span.badge.ro title="Writes are refused: no button changes anything" { "read-only" }
                    }
                    @if ctx.refreshable {
                        @if let Some(every) = ctx.refresh {
                            a.refresh.on href=(ctx.here) title="Stop reloading this page" {
                                "auto-refresh " (every) " s ●"
                            }
                        } @else {
                            a.refresh href=(ctx.here_with("refresh=5")) title="Reload this page every 5 seconds" {
                                "auto-refresh off"
                            }
                        }
                    }
                    @if ctx.logout {
                        form.inline method="post" action={(ctx.base) "/logout"} {
                            button.linkish type="submit" { "log out" }
                        }
                    }
                }
                main {
                    @if let Some(flash) = &ctx.flash {
                        div.flash role="status" { (flash) }
                    }
                    (body)
                }
                footer {
                    "punctual-admin " (VERSION) " · "
                    a href={(ctx.base) "/api/queues"} { "JSON API" } " · "
                    a href={(ctx.base) "/metrics"} { "metrics" } " · "
                    a href={(ctx.base) "/audit"} data-nav="audit" { "audit log" } " · "
                    "rendered " (utc(crate::ops::wall_clock()))
                }
            }
        }
    }
}

/// A time, relative to the store's clock and absolute.
pub(crate) fn time(at: SystemTime, now: SystemTime) -> Markup {
    html! {
        span.when {
            span.rel { (fmt::relative(at, now)) }
            " "
            (utc(at))
        }
    }
}

/// A time as `<time>`, in UTC: `/assets/local-time.js` rewrites its text
/// into the viewer's time zone (UTC stays on hover, and without
/// JavaScript).
pub(crate) fn utc(at: SystemTime) -> Markup {
    let text = fmt::absolute(at);
    html! {
        time datetime=(rfc3339(at)) title=(text) { (text) }
    }
}

/// A queue's health mark, its reasons on hover.
pub(crate) fn health_mark(verdict: Option<&Result<Verdict, OpError>>) -> Markup {
    let (mark, title) = match verdict {
        Some(Ok(v)) if v.reasons.is_empty() => (v.mark, "Healthy".to_owned()),
        Some(Ok(v)) => (v.mark, v.reasons.join("; ")),
        Some(Err(e)) => (
            Mark::Unknown,
            format!("Could not read its workers and latency: {e}"),
        ),
        None => (Mark::Unknown, "Not read".to_owned()),
    };
    let word = match mark {
        Mark::Green => "healthy",
        Mark::Amber => "lagging",
        Mark::Red => "stuck",
        Mark::Unknown => "unknown",
    };
    html! {
        span.health.(format!("h-{}", mark.as_str())) data-health=(mark.as_str()) title=(title) {
            span.dot { "●" } " " (word)
        }
    }
}

/// The mark of a queue from its counts and health.
pub(crate) fn verdict(
    snapshot: &Result<Snapshot, OpError>,
    health: Option<&Result<Health, OpError>>,
    threshold: Duration,
) -> Option<Result<Verdict, OpError>> {
    let snapshot = match snapshot {
        Ok(s) => s,
        Err(e) => return Some(Err(e.clone())),
    };
    Some(match health? {
        Ok(h) => Ok(judge(snapshot.stats.due, h, snapshot.now(), threshold)),
        Err(e) => Err(e.clone()),
    })
}

/// A latency for people: `—` when nothing is due.
fn latency_text(latency: Option<Duration>) -> String {
    latency.map_or_else(|| "—".to_owned(), fmt::span)
}

/// The links between a queue's pages.
pub(crate) fn queue_nav(ctx: &Ctx, label: &str, on: &str) -> Markup {
    let q = ctx.queue_url(label);
    html! {
        nav.qnav aria-label="queue" {
            a.on[on == "queue"] href=(q) data-nav="queue" { "Overview" }
            a.on[on == "entries"] href=(ctx.entries_url(label, EntryState::Pending)) data-nav="entries" { "Entries" }
            a.on[on == "dead"] href=(ctx.entries_url(label, EntryState::Dead)) data-nav="dead" { "Dead letters" }
            a.on[on == "running"] href={(q) "/running"} data-nav="running" { "Running" }
            a.on[on == "workers"] href={(q) "/workers"} data-nav="workers" { "Workers" }
        }
    }
}

pub(crate) fn num(n: u64, state: Option<EntryState>) -> Markup {
    let class = state.map_or("", chart::state_class);
    html! {
        span.n.(class).zero[n == 0] { (fmt::count(n)) }
    }
}

fn status_pill(paused: bool) -> Markup {
    html! {
        @if paused {
            span.pill.paused title="Consumers take nothing until it is resumed" { "paused" }
        } @else {
            span.pill.running { "running" }
        }
    }
}

/// The store's kind, or its identity where two stores of the kind (or a
/// label) need one (`redis@2`, `eu`), with the kind on hover.
pub(crate) fn kind_badge(kind: Kind, source: Option<&str>) -> Markup {
    html! {
        @match source {
            Some(source) => span.kind.(format!("k-{kind}")) title=(kind) data-source=(source) { (source) },
            None => span.kind.(format!("k-{kind}")) { (kind) },
        }
    }
}

/// A button that POSTs (a form, so it works without JavaScript);
/// `confirm` adds a box that must be ticked first.
pub(crate) fn button(
    action: &str,
    name: &str,
    label: &str,
    class: &str,
    fields: &[(&str, &str)],
    confirm: Option<&str>,
) -> Markup {
    html! {
        form.act method="post" action=(action) {
            @for (key, value) in fields {
                input type="hidden" name=(key) value=(value);
            }
            @if let Some(what) = confirm {
                label.confirm {
                    input type="checkbox" name="confirm" value="yes" required data-confirm=(name);
                    " " (what)
                }
            }
            button type="submit" class=(class) data-action=(name) { (label) }
        }
    }
}

pub(crate) fn error_box(e: &OpError) -> Markup {
    html! { div.error role="alert" { (e.message()) } }
}

/// The overview: every queue with its health, counts and their history.
/// On a phone each queue's row becomes a card (the stylesheet), every
/// count in view without scrolling sideways.
pub(crate) fn overview(
    ctx: &Ctx,
    started: SystemTime,
    refresh: std::time::Duration,
    threshold: Duration,
    listed: &[(Listed, Vec<Point>)],
    failed: &[(String, OpError)],
    stores: usize,
) -> Markup {
    let total = |f: &dyn Fn(&Snapshot) -> u64| -> u64 {
        listed
            .iter()
            .filter_map(|(l, _)| l.snapshot.as_ref().ok())
            .map(f)
            .sum()
    };
    let body = html! {
        div.head {
            h1 { "Queues" }
            p.sub {
                (listed.len()) " queues on " (stores) (if stores == 1 { " store" } else { " stores" })
                " · counts read at most every " (fmt::span(refresh)) " · charts since "
                (utc(started))
            }
        }
        @for (_, e) in failed {
            div.error role="alert" { "Could not list the queues of " (e.message()) }
        }
        @if listed.is_empty() && failed.is_empty() {
            div.card.empty { "No queue on the stores given yet: a queue appears once it holds an entry or a schedule." }
        } @else {
            div.card.flush.overview {
                table.queues {
                    thead {
                        tr {
                            th { "Queue" }
                            th title={"Red: entries are due and no worker is alive. Amber: the oldest due entry waited over "
                                (fmt::span(threshold)) ", or a worker is late. Green otherwise."} { "Health" }
                            @for state in STATES {
                                th.num.(chart::state_class(state)) { (state) }
                            }
                            th.num title="How long the oldest due entry has waited" { "Latency" }
                            th.num title="Live workers" { "Workers" }
                            th.num title="The store's clock minus this dashboard's" { "Clock" }
                        }
                    }
                    tbody {
                        @for (l, points) in listed {
                            @let v = verdict(&l.snapshot, l.health.as_ref(), threshold);
                            tr data-queue=(l.label) {
                                td.qcell {
                                    a.qname href=(ctx.queue_url(&l.label)) { (l.id.name) }
                                    " " (kind_badge(l.kind, l.source.as_deref()))
                                    @if let Ok(s) = &l.snapshot {
                                        @if s.paused { " " (status_pill(true)) }
                                    }
                                }
                                td.hcell { (health_mark(v.as_ref())) }
                                @match &l.snapshot {
                                    Ok(s) => {
                                        @for state in STATES {
                                            td.num.count data-state=(state) data-label=(state) {
                                                a href=(ctx.entries_url(&l.label, state)) {
                                                    (num(chart::count_of(&s.stats, state), Some(state)))
                                                }
                                                (chart::sparkline(points, state, s.now()))
                                            }
                                        }
                                        @match &l.health {
                                            Some(Ok(h)) => {
                                                td.num.lat data-label="latency" data-latency-ms=(h.latency.map_or(0, |l| l.as_millis())) {
                                                    (latency_text(h.latency))
                                                }
                                                td.num.wk data-label="workers" data-workers=(h.workers.len()) {
                                                    a href={(ctx.queue_url(&l.label)) "/workers"} { (h.workers.len()) }
                                                }
                                            }
                                            _ => {
                                                td.num.lat.muted data-label="latency" { "?" }
                                                td.num.wk.muted data-label="workers" { "?" }
                                            }
                                        }
                                        td.num.muted.clock data-label="clock" { (fmt::offset(s.offset)) }
                                    }
                                    Err(e) => {
                                        td.rowerror colspan="7" { (error_box(e)) }
                                    }
                                }
                            }
                        }
                    }
                    tfoot {
                        tr {
                            td.qcell { "Total" }
                            td.hcell {}
                            @for state in STATES {
                                td.num.count data-label=(state) {
                                    (num(total(&|s| chart::count_of(&s.stats, state)), Some(state)))
                                }
                            }
                            td.lat {} td.wk {} td.clock {}
                        }
                    }
                }
            }
            (legend())
        }
    };
    layout(ctx, "Queues", &[], body)
}

fn legend() -> Markup {
    html! {
        p.legend {
            span.st-pending { "■" } " pending: not yet due · "
            span.st-due { "■" } " due: waiting for a consumer · "
            span.st-leased { "■" } " leased: running now · "
            span.st-dead { "■" } " dead: given up on"
        }
    }
}

/// What the queue page shows.
pub(crate) struct QueueView {
    pub(crate) label: String,
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// The store's identity where its kind does not tell it apart.
    pub(crate) source: Option<String>,
    pub(crate) store: String,
    pub(crate) snapshot: Result<Snapshot, OpError>,
    pub(crate) history: Vec<Point>,
    pub(crate) timeline: Result<Timeline, OpError>,
    pub(crate) schedules: Result<Vec<ScheduleInfo<Value>>, OpError>,
    pub(crate) limits: Result<Limits, OpError>,
    pub(crate) health: Result<Health, OpError>,
    /// The per-minute history over `span`.
    pub(crate) minutes: Result<Vec<Minute>, OpError>,
    pub(crate) span: Span,
    /// The latency as sampled since the dashboard started (ms).
    pub(crate) latencies: Vec<Point<Option<u64>>>,
    pub(crate) threshold: Duration,
}

pub(crate) fn queue(ctx: &Ctx, v: &QueueView) -> Markup {
    let q = ctx.queue_url(&v.label);
    let back = format!("/queues/{}", enc(&v.label));
    let health = Some(v.health.clone());
    let verdict = verdict(&v.snapshot, health.as_ref(), v.threshold);
    let span_url = |span: Span| match span {
        Span::Hour => format!("{q}#activity"),
        Span::Day => format!("{q}?range=day#activity"),
    };
    let body = html! {
        div.head {
            h1 { (v.name) " " (kind_badge(v.kind, v.source.as_deref())) " "
                @if let Ok(s) = &v.snapshot { (status_pill(s.paused)) } " "
                (health_mark(verdict.as_ref())) }
            p.sub { (v.store) }
        }
        (queue_nav(ctx, &v.label, "queue"))
        @match &v.snapshot {
            Err(e) => { (error_box(e)) }
            Ok(s) => {
                @if !ctx.read_only {
                    div.actions {
                        @if s.paused {
                            (button(&format!("{q}/resume"), "resume", "Resume", "primary", &[("back", &back)], None))
                        } @else {
                            (button(&format!("{q}/pause"), "pause", "Pause", "", &[("back", &back)], None))
                        }
                        @if s.stats.dead > 0 {
                            (button(&format!("{q}/requeue"), "requeue-all", &format!("Requeue all {} dead", fmt::count(s.stats.dead)), "",
                                &[("all_dead", "true"), ("back", &back)], None))
                            (button(&format!("{q}/clear-dead"), "clear-dead", &format!("Delete all {} dead", fmt::count(s.stats.dead)), "danger",
                                &[("back", &back)], Some("sure")))
                        }
                    }
                }
                div.tiles {
                    @for state in STATES {
                        a.tile.(chart::state_class(state)) href=(ctx.entries_url(&v.label, state)) data-state=(state) {
                            div.label { (state) }
                            div.big { (num(chart::count_of(&s.stats, state), None)) }
                            (chart::history(&v.history, state, s.now()))
                        }
                    }
                }
                section.card.vitals {
                    h2 { "Health" }
                    @match &v.health {
                        Err(e) => { (error_box(e)) }
                        Ok(h) => {
                            dl.fields {
                                dt { "Mark" } dd { (health_mark(verdict.as_ref())) }
                                @if let Some(Ok(verdict)) = &verdict {
                                    @for reason in &verdict.reasons {
                                        dt {} dd.reason.(format!("h-{}", verdict.mark.as_str())) { (reason) }
                                    }
                                }
                                dt { "Latency" } dd data-field="latency" {
                                    (latency_text(h.latency))
                                    span.muted { " (amber over " (fmt::span(v.threshold)) ")" }
                                }
                                dt { "Workers" } dd data-field="workers" {
                                    a href={(q) "/workers"} { (h.workers.len()) " alive" }
                                    " · " a href={(q) "/running"} {
                                        (h.workers.iter().map(|w| w.running.len()).sum::<usize>()) " running"
                                    }
                                }
                            }
                        }
                    }
                    @if !v.latencies.is_empty() {
                        (chart::latency(&v.latencies, v.threshold, s.now()))
                    }
                }
                section.card.activity #activity {
                    div.cardhead {
                        h2 { "Activity per minute" }
                        nav.span {
                            a.on[v.span == Span::Hour] href=(span_url(Span::Hour)) data-span="hour" { "last hour" }
                            a.on[v.span == Span::Day] href=(span_url(Span::Day)) data-span="day" { "last day" }
                        }
                    }
                    @match &v.minutes {
                        Err(e) => { (error_box(e)) }
                        Ok(minutes) => { (chart::throughput(minutes, v.span, s.now())) }
                    }
                }
                section.card.clock {
                    h2 { "Clock" }
                    p {
                        "The store's clock reads " strong { (utc(s.now())) }
                        ", " (fmt::offset(s.offset)) " from this dashboard's. "
                        span.muted { "Due times, leases and schedules follow the store's clock." }
                    }
                }
                section.card {
                    h2 { "Next hour" }
                    @match &v.timeline {
                        Err(e) => { (error_box(e)) }
                        Ok(t) => {
                            p.sub {
                                strong { (t.total_text()) } " coming due in the next 60 minutes · "
                                strong.st-due { (fmt::count(t.due_now)) } " due now"
                                @if t.capped {
                                    " · only the first " (fmt::count(t.read as u64))
                                    " pending entries were read: the hour is complete up to "
                                    (fmt::relative(t.complete_until, t.now))
                                }
                            }
                            (chart::timeline(t))
                            p.legend {
                                span.k-job { "■" } " first attempt · "
                                span.k-retry { "■" } " retry · "
                                span.k-tick { "■" } " schedule tick"
                            }
                        }
                    }
                }
                section.card.flush {
                    h2.pad { "Schedules" }
                    @match &v.schedules {
                        Err(e) => { (error_box(e)) }
                        Ok(list) if list.is_empty() => { p.pad.muted { "No schedule." } }
                        Ok(list) => { (schedules_table(ctx, &v.label, list, s.now(), &back)) }
                    }
                }
                section.card.flush.limits {
                    h2.pad { "Key limits" }
                    @match &v.limits {
                        Err(e) => { div.pad { (error_box(e)) } }
                        Ok(limits) => { (limits_table(ctx, &v.label, limits, &back)) }
                    }
                }
            }
        }
    };
    layout(ctx, &v.name, &[(q.clone(), v.label.clone())], body)
}

fn schedules_table(
    ctx: &Ctx,
    label: &str,
    list: &[ScheduleInfo<Value>],
    now: SystemTime,
    back: &str,
) -> Markup {
    let q = ctx.queue_url(label);
    html! {
        table.schedules {
            thead { tr {
                th { "Name" } th { "Spec" } th { "Next run" } th { "Last run" } th { "Outcome" } th { "Value" }
                @if !ctx.read_only { th {} }
            } }
            tbody {
                @for s in list {
                    tr data-schedule=(s.name) data-paused=(s.paused) {
                        td {
                            a.mono href=(ctx.entry_url(label, &s.name)) { (s.name) }
                            @if s.paused {
                                " " span.pill.paused title="Its tick stays pending and is not delivered until resumed" { "paused" }
                            }
                        }
                        td.mono { (s.spec) }
                        td {
                            @match s.next {
                                Some(at) => { (time(at, now)) }
                                None => { span.pill.leased { "running now" } }
                            }
                        }
                        td data-field="last-run" {
                            @match s.last_run {
                                Some(at) => { (time(at, now)) }
                                None => { span.muted { "never" } }
                            }
                        }
                        td data-field="outcome" {
                            @match s.last_outcome {
                                Some(o) => { span.outcome.(format!("o-{}", finished_str(o))) { (finished_str(o)) } }
                                None => { span.muted { "—" } }
                            }
                        }
                        td.value { code { (clip(&s.value.to_string(), 80)) } }
                        @if !ctx.read_only {
                            td.buttons {
                                @if s.next.is_some() {
                                    (button(&format!("{q}/schedules/{}/run-now", enc(&s.name)), "run-now", "Run now", "",
                                        &[("back", back)], None))
                                }
                                @if s.paused {
                                    (button(&format!("{q}/schedules/{}/resume", enc(&s.name)), "resume-schedule", "Resume", "",
                                        &[("back", back)], None))
                                } @else {
                                    (button(&format!("{q}/schedules/{}/pause", enc(&s.name)), "pause-schedule", "Pause", "",
                                        &[("back", back)], None))
                                }
                                (button(&format!("{q}/schedules/{}/unschedule", enc(&s.name)), "unschedule", "Delete", "danger",
                                    &[("back", back)], Some("sure")))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A rate for people: `100 per 1m`.
fn rate_text(rate: &punctual::durable::Rate) -> String {
    format!("{} per {}", rate.max, fmt::period(rate.per))
}

/// The key limits of a queue, how many of each key run now, a button to
/// remove each and a form to set one.
fn limits_table(ctx: &Ctx, label: &str, limits: &Limits, back: &str) -> Markup {
    let q = ctx.queue_url(label);
    html! {
        @if limits.limits.is_empty() {
            p.pad.muted { "No key limit: entries of every key run as consumers take them." }
        } @else {
            table.limits {
                thead { tr {
                    th { "Key" } th.num { "Concurrency" } th { "Rate" } th.num { "Running now" }
                    @if !ctx.read_only { th {} }
                } }
                tbody {
                    @for (key, limit, running) in &limits.limits {
                        tr data-limit=(key) {
                            td {
                                span.mono { (key) }
                                @if key == DEFAULT_KEY {
                                    " " span.muted { "default: every key without its own" }
                                }
                            }
                            td.num {
                                @match limit.concurrency {
                                    Some(n) => { (fmt::count(n.into())) }
                                    None => { span.muted { "—" } }
                                }
                            }
                            td {
                                @match &limit.rate {
                                    Some(rate) => { (rate_text(rate)) }
                                    None => { span.muted { "—" } }
                                }
                            }
                            td.num data-running=(running) { (num(*running, Some(EntryState::Leased))) }
                            @if !ctx.read_only {
                                td.buttons {
                                    (button(&format!("{q}/limits/{}/remove", enc(key)), "remove-limit", "Remove", "danger",
                                        &[("back", back)], Some("sure")))
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !limits.others.is_empty() {
            p.pad.muted.others {
                "Running now without a limit of their own: "
                @for (i, (key, n)) in limits.others.iter().enumerate() {
                    @if i > 0 { ", " }
                    span.mono data-other=(key) { (key) } " (" (fmt::count(*n)) ")"
                }
            }
        }
        @if limits.capped {
            p.pad.muted {
                "Counted from the first " (fmt::count(LEASED_AT_MOST as u64)) " leased entries only."
            }
        }
        @if !ctx.read_only {
            form.pad.set-limit method="post" action={(q) "/limits"} {
                input type="hidden" name="back" value=(back);
                label { "Key " input type="text" name="key" required placeholder="tenant-42, or * for the default" size="24"; }
                " "
                label { "Concurrency " input type="number" name="concurrency" min="0" max="4294967295" placeholder="none" size="6"; }
                " "
                label { "Rate " input type="number" name="rate_max" min="0" max="4294967295" placeholder="max" size="6"; }
                " "
                label { "per " input type="text" name="rate_per" placeholder="1m, 30s, 500ms" size="12" pattern="([0-9]+(ms|s|m|h|d))+"; }
                " "
                button.primary type="submit" data-action="set-limit" { "Set limit" }
                p.muted.hint {
                    "Sets the key's limit, replacing the one it had. A key given neither bound is limited by nothing, not even the default."
                }
            }
        }
    }
}

/// What the entries page shows.
pub(crate) struct EntriesView {
    pub(crate) label: String,
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// The store's identity where its kind does not tell it apart.
    pub(crate) source: Option<String>,
    pub(crate) state: EntryState,
    pub(crate) order: Order,
    pub(crate) snapshot: Result<Snapshot, OpError>,
    pub(crate) page: Result<Page<Value>, OpError>,
    pub(crate) cursor: Option<String>,
    /// The cursors of the pages before this one, oldest first (`""`: the
    /// first page), as far back as they are kept.
    pub(crate) trail: Vec<String>,
    pub(crate) limit: usize,
    pub(crate) now: SystemTime,
}

/// The most cursors a page's link keeps to walk back with.
pub(crate) const TRAIL_AT_MOST: usize = 20;

/// A trail as its query value: `~`-joined (a cursor holds no `~`).
pub(crate) fn trail_text(trail: &[String]) -> String {
    trail.join("~")
}

/// The trail of `text` (an empty text is no trail).
pub(crate) fn parse_trail(text: Option<&str>) -> Vec<String> {
    match text {
        None | Some("") => Vec::new(),
        Some(t) => t.split('~').map(str::to_owned).collect(),
    }
}

pub(crate) fn entries(ctx: &Ctx, v: &EntriesView) -> Markup {
    let q = ctx.queue_url(&v.label);
    // The first page of this state in this order.
    let first = {
        let mut url = ctx.entries_url(&v.label, v.state);
        if v.order != default_order(v.state) {
            url.push_str(&format!("&order={}", v.order.as_str()));
        }
        url
    };
    let page_url = |cursor: Option<&str>, trail: &[String]| {
        let mut url = first.clone();
        if let Some(c) = cursor {
            url.push_str(&format!("&cursor={}", enc(c)));
        }
        if !trail.is_empty() {
            url.push_str(&format!("&trail={}", enc(&trail_text(trail))));
        }
        if v.limit != crate::ops::DEFAULT_LIMIT {
            url.push_str(&format!("&limit={}", v.limit));
        }
        url
    };
    // Where a button sends the browser back: this very page.
    let here = {
        let full = page_url(v.cursor.as_deref(), &v.trail);
        full.strip_prefix(&ctx.base).unwrap_or(&full).to_owned()
    };
    let when_title = match v.state {
        EntryState::Pending | EntryState::Due => "Due",
        EntryState::Leased => "Lease until",
        EntryState::Dead => "Died",
    };
    let (back_label, next_label) = match (v.state, v.order) {
        (EntryState::Dead, Order::Newest) => ("← newer".to_owned(), "older →".to_owned()),
        (_, Order::Newest) => ("← later".to_owned(), "earlier →".to_owned()),
        _ => ("← previous".to_owned(), format!("next {} →", v.limit)),
    };
    let selectable = !ctx.read_only;
    let nav_on = if v.state == EntryState::Dead {
        "dead"
    } else {
        "entries"
    };
    let body = html! {
        div.head {
            h1 { (v.name) " " (kind_badge(v.kind, v.source.as_deref())) " " span.muted { "entries" } }
        }
        (queue_nav(ctx, &v.label, nav_on))
        nav.tabs {
            @for state in STATES {
                a.(chart::state_class(state)).on[state == v.state] href=(ctx.entries_url(&v.label, state)) data-state=(state) {
                    (state)
                    @if let Ok(s) = &v.snapshot {
                        " " span.count { (fmt::count(chart::count_of(&s.stats, state))) }
                    }
                }
            }
            span.grow {}
            span.order {
                @for order in [Order::Newest, Order::Oldest] {
                    @let href = if order == default_order(v.state) {
                        ctx.entries_url(&v.label, v.state)
                    } else {
                        format!("{}&order={}", ctx.entries_url(&v.label, v.state), order.as_str())
                    };
                    a.on[order == v.order] href=(href) data-order=(order.as_str()) {
                        (match order { Order::Newest => "newest first", Order::Oldest => "oldest first" })
                    }
                }
            }
        }
        @if v.state == EntryState::Dead && !ctx.read_only {
            @if let Ok(s) = &v.snapshot {
                @if s.stats.dead > 0 {
                    div.actions {
                        (button(&format!("{q}/requeue"), "requeue-all", "Requeue all dead", "", &[("all_dead", "true"), ("back", &here)], None))
                        (button(&format!("{q}/clear-dead"), "clear-dead", "Delete all dead", "danger", &[("back", &here)], Some("sure")))
                    }
                }
            }
        }
        @match &v.page {
            Err(e) => { (error_box(e)) }
            Ok(_) if v.limit == 0 => {
                div.card.empty {
                    "limit=0 asks for no entry. "
                    a href={(first)
                        @if let Some(c) = &v.cursor { "&cursor=" (enc(c)) }} data-page="this" {
                        "Show this page"
                    }
                }
            }
            Ok(page) if page.entries.is_empty() => {
                div.card.empty { "No " (v.state) " entry" @if v.cursor.is_some() { " after this point" } "." }
                (pager(v, &page_url, None, &back_label, &next_label, 0))
            }
            Ok(page) => {
                div.card.flush {
                    table.entries.(format!("in-{}", v.state)) {
                        thead { tr {
                            @if selectable { th.pick { span.sr { "Select" } } }
                            th { "ID" } th { (when_title) } th.num { "Attempt" } th.num { "Prio" } th { "Key" } th { "Schedule" }
                            th { "Last error" } th { "Value" }
                            @if !ctx.read_only { th {} }
                        } }
                        tbody {
                            @for e in &page.entries {
                                tr data-entry=(e.id) {
                                    @if selectable {
                                        td.pick {
                                            input type="checkbox" name="ids" value=(e.id) form="bulk" aria-label={"select " (e.id)};
                                        }
                                    }
                                    td { a.mono.id href=(ctx.entry_url(&v.label, &e.id)) { (clip(&e.id, 40)) } }
                                    td { (time(e.lease_until.or(e.died_at).unwrap_or(e.due), v.now)) }
                                    td.num { (e.attempt) }
                                    td.num.prio { (e.priority) }
                                    td.key { @if let Some(k) = &e.key { span.mono { (clip(k, 40)) } } @else { span.muted { "—" } } }
                                    td { @if let Some(s) = &e.schedule { span.mono { (s) } } @else { span.muted { "—" } } }
                                    td.err { @if let Some(err) = &e.last_error { (clamped(err)) } }
                                    td.value { code { (value_text(e, 80)) } }
                                    @if !ctx.read_only {
                                        td.buttons {
                                            @if e.state == EntryState::Dead {
                                                (button(&format!("{q}/requeue"), "requeue", "Requeue", "", &[("id", &e.id), ("back", &here)], None))
                                            }
                                            @if e.state == EntryState::Leased {
                                                (button(&format!("{q}/entries/{}/cancel", enc(&e.id)), "cancel", "Cancel", "danger", &[("back", &here)], Some("sure")))
                                            }
                                            (button(&format!("{q}/entries/{}/remove", enc(&e.id)), "remove", "Delete", "danger", &[("back", &here)], Some("sure")))
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if selectable {
                    form.bulk #bulk method="post" action={(q) "/bulk"} {
                        input type="hidden" name="back" value=(here);
                        span.muted { "With the entries ticked above:" }
                        @if v.state == EntryState::Dead {
                            label { "requeue in " input type="text" name="delay" placeholder="now, or 10m" size="8"
                                pattern="([0-9]+(ms|s|m|h|d))*"; }
                            button type="submit" name="action" value="requeue" data-action="bulk-requeue" { "Requeue selected" }
                        }
                        button.danger type="submit" name="action" value="delete" data-action="bulk-delete" { "Delete selected" }
                        label.confirm {
                            input type="checkbox" name="confirm" value="yes" required data-confirm="bulk";
                            " sure"
                        }
                    }
                }
                (pager(v, &page_url, page.next.as_ref().map(ToString::to_string), &back_label, &next_label, page.entries.len()))
            }
        }
    };
    layout(
        ctx,
        &format!("{} · {}", v.name, v.state),
        &[
            (q.clone(), v.label.clone()),
            (ctx.entries_url(&v.label, v.state), v.state.to_string()),
        ],
        body,
    )
}

/// The order a state's entries are listed in unless asked otherwise:
/// dead letters newest first, the others in delivery order.
pub(crate) fn default_order(state: EntryState) -> Order {
    if state == EntryState::Dead {
        Order::Newest
    } else {
        Order::Oldest
    }
}

/// The links to the first, the previous and the next page.
fn pager(
    v: &EntriesView,
    page_url: &dyn Fn(Option<&str>, &[String]) -> String,
    next: Option<String>,
    back_label: &str,
    next_label: &str,
    shown: usize,
) -> Markup {
    // Back: the last cursor of the trail; past the kept trail, the first
    // page.
    let back = match v.trail.split_last() {
        Some((last, rest)) => Some(page_url((!last.is_empty()).then_some(last.as_str()), rest)),
        None if v.cursor.is_some() => Some(page_url(None, &[])),
        None => None,
    };
    let forward = next.map(|next| {
        page_url(
            Some(&next),
            &super::runs::longer(&v.trail, v.cursor.as_deref()),
        )
    });
    html! {
        nav.pager {
            @if v.cursor.is_some() {
                a href=(page_url(None, &[])) data-page="first" { "⇤ first page" }
            }
            @if let Some(back) = back {
                a href=(back) data-page="prev" { (back_label) }
            }
            span.muted { (shown) " shown" }
            @if let Some(forward) = forward {
                a href=(forward) data-page="next" { (next_label) }
            }
        }
    }
}

/// An error on one line, cut short; all of it (line breaks kept) behind a
/// click when it is long.
pub(crate) fn clamped(text: &str) -> Markup {
    let short = clip(text, 80);
    html! {
        @if short == text {
            span.errtext { (text) }
        } @else {
            details.clamp {
                summary { (short) }
                pre.err { (text) }
            }
        }
    }
}

fn value_text(e: &EntryInfo<Value>, max: usize) -> String {
    match &e.value {
        Some(v) => clip(&v.to_string(), max),
        None => "(does not decode)".to_owned(),
    }
}

/// An entry's page: its fields, its failed attempts, its value; and its
/// kept result, alone when the entry finished and is gone.
pub(crate) fn entry(
    ctx: &Ctx,
    label: &str,
    name: &str,
    id: &str,
    shown: &Shown,
    now: SystemTime,
) -> Markup {
    let q = ctx.queue_url(label);
    let here = format!("/queues/{}/entries/{}", enc(label), enc(id));
    let queue_page = format!("/queues/{}", enc(label));
    let state_text = shown
        .entry
        .as_ref()
        .map_or("finished".to_owned(), |e| e.state.to_string());
    let state_class = shown
        .entry
        .as_ref()
        .map_or("st-finished", |e| chart::state_class(e.state));
    let body = html! {
        div.head {
            h1 { span.muted { "Entry " } code { (id) } " "
                span.pill.(state_class) data-entry-state=(state_text) { (state_text) } }
        }
        (queue_nav(ctx, label, ""))
        @if let Some(e) = &shown.entry {
            @if !ctx.read_only {
                div.actions {
                    @if e.state == EntryState::Dead {
                        form.act.requeue method="post" action={(q) "/requeue"} {
                            input type="hidden" name="id" value=(e.id);
                            input type="hidden" name="back" value=(here);
                            label.delay { "in " input type="text" name="delay" placeholder="now, or 10m" size="8"
                                pattern="([0-9]+(ms|s|m|h|d))*" data-field="delay"; }
                            button.primary type="submit" data-action="requeue" { "Requeue" }
                        }
                    }
                    @if let Some(schedule) = &e.schedule {
                        @if matches!(e.state, EntryState::Pending | EntryState::Due) {
                            (button(&format!("{q}/schedules/{}/run-now", enc(schedule)), "run-now", "Run now", "", &[("back", &here)], None))
                        }
                    }
                    @if e.state == EntryState::Leased {
                        (button(&format!("{q}/entries/{}/cancel", enc(&e.id)), "cancel", "Cancel the run", "danger", &[("back", &here)], Some("sure")))
                    }
                    (button(&format!("{q}/entries/{}/remove", enc(&e.id)), "remove", "Delete", "danger", &[("back", &queue_page)], Some("sure")))
                }
            }
            div.card {
                dl.fields {
                    dt { "Queue" } dd { a href=(q) { (name) } }
                    dt { "State" } dd { span.(chart::state_class(e.state)) { (e.state) } }
                    dt { "Due" } dd { (time(e.due, now)) }
                    @if let Some(at) = e.started_at { dt { "Started" } dd data-field="started" { (time(at, now)) } }
                    @if let Some(w) = &e.worker { dt { "Worker" } dd.mono data-field="worker" { (w) } }
                    @if let Some(at) = e.lease_until { dt { "Lease until" } dd { (time(at, now)) } }
                    @if let Some(at) = e.died_at { dt { "Died" } dd { (time(at, now)) } }
                    dt { "Attempts" } dd.num-left { (e.attempt) }
                    dt { "Priority" } dd.num-left data-field="priority" { (e.priority) }
                    dt { "Key" } dd data-field="key" {
                        @match &e.key {
                            Some(k) => { span.mono { (k) } }
                            None => { span.muted { "none" } }
                        }
                    }
                    @if let Some(s) = &e.schedule { dt { "Schedule" } dd.mono { (s) } }
                    @if let Some(err) = &e.last_error { dt { "Last error" } dd { pre.err { (err) } } }
                }
            }
            section.card.flush.attempts {
                h2.pad { "Failed attempts" }
                @if e.errors.is_empty() {
                    p.pad.muted { "None." }
                } @else {
                    table.errors {
                        thead { tr { th.num { "Attempt" } th { "When" } th { "Why" } } }
                        tbody {
                            @for err in &e.errors {
                                tr data-attempt=(err.attempt) {
                                    td.num { (err.attempt) }
                                    td { (time(err.at, now)) }
                                    td.err { (clamped(&err.reason)) }
                                }
                            }
                        }
                    }
                    @if e.errors.len() >= 10 {
                        p.pad.muted { "The last 10 failed attempts are kept." }
                    }
                }
            }
        }
        (result_card(shown, now))
        @if let Some(e) = &shown.entry {
            section.card {
                h2 { "Value" }
                @match &e.value {
                    Some(v) => { pre.json { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
                    None => { p.error { "The stored value is not JSON this dashboard can read." } }
                }
            }
        }
    };
    let mut crumbs = vec![(q.clone(), label.to_owned())];
    if let Some(e) = &shown.entry {
        crumbs.push((ctx.entries_url(label, e.state), e.state.to_string()));
    }
    crumbs.push((ctx.entry_url(label, id), clip(id, 24)));
    layout(ctx, &format!("{name} · {id}"), &crumbs, body)
}

/// What is kept of an entry's finish, if anything.
fn result_card(shown: &Shown, now: SystemTime) -> Markup {
    html! {
        @match &shown.result {
            Ok(Some(r)) => {
                section.card.result data-result=(finished_str(r.state)) {
                    h2 { "Result" }
                    dl.fields {
                        dt { "Finished" } dd {
                            span.outcome.(format!("o-{}", finished_str(r.state))) data-field="outcome" { (finished_str(r.state)) }
                            " " (time(r.finished_at, now))
                        }
                        dt { "Attempts" } dd.num-left { (r.attempts) }
                        @if let Some(reason) = &r.reason { dt { "Why" } dd { pre.err { (reason) } } }
                        dt { "Output" } dd {
                            @match &r.output {
                                Some(o) => { pre.json data-field="output" { (serde_json::to_string_pretty(o).unwrap_or_default()) } }
                                None => { span.muted { "none" } }
                            }
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                section.card.result {
                    h2 { "Result" }
                    p.muted { "Could not read whether a result is kept: " (e.message()) }
                }
            }
        }
    }
}

pub(crate) fn login_page(ctx: &Ctx, has_token: bool, error: Option<&str>) -> Markup {
    let body = html! {
        div.card.login {
            h1 { "Log in" }
            @if has_token {
                p.muted { "This dashboard was started with a token. Give it once; a cookie keeps it for this browser." }
                @if let Some(e) = error { div.error role="alert" { (e) } }
                form method="post" action={(ctx.base) "/login"} {
                    label { "Token " input type="password" name="token" autocomplete="current-password" autofocus required; }
                    " "
                    button.primary type="submit" data-action="login" { "Log in" }
                }
            } @else {
                p { "This dashboard needs no token. " a href=(ctx.home()) { "Go to the queues." } }
            }
        }
    };
    layout(ctx, "Log in", &[], body)
}

pub(crate) fn error_page(ctx: &Ctx, status: StatusCode, message: &str) -> Markup {
    problem_page(ctx, status, None, message, None)
}

/// A page saying what went wrong: a heading (the status when none), what
/// happened, and the ways back (where the person came from, when known,
/// and the overview).
pub(crate) fn problem_page(
    ctx: &Ctx,
    status: StatusCode,
    heading: Option<&str>,
    message: &str,
    back: Option<&str>,
) -> Markup {
    let reason = status.canonical_reason().unwrap_or("");
    let body = html! {
        div.card.problem data-status=(status.as_u16()) {
            h1 { @match heading {
                Some(h) => { (h) }
                None => { (status.as_u16()) " " (reason) }
            } }
            p.message { (message) }
            p.ways {
                @if let Some(back) = back {
                    a href=(back) data-way="back" { "← back to where you were" } " · "
                }
                a href=(ctx.home()) data-way="home" { "all queues" }
            }
            @if heading.is_some() {
                p.muted.status { (status.as_u16()) " " (reason) }
            }
        }
    };
    layout(ctx, heading.unwrap_or(reason), &[], body)
}

/// `text` on one line, cut to `max` characters.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}
