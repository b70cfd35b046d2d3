//! The pages' markup (maud): a layout and one function per page, fed by
//! the handlers in `pages.rs` with what the operations read. Nothing here
//! reads a store.

use std::time::SystemTime;

use axum::http::StatusCode;
use maud::{DOCTYPE, Markup, html};
use punctual::durable::{EntryInfo, EntryState, Page, ScheduleInfo};
use serde_json::Value;

use super::chart;
use super::{Base, enc};
use crate::error::OpError;
use crate::fmt;
use crate::history::Point;
use crate::json::rfc3339;
use crate::ops::{DEFAULT_KEY, LEASED_AT_MOST, Limits, Listed, Snapshot};
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
    pub(crate) fn bare(base: &Base) -> Ctx {
        Ctx {
            base: base.0.clone(),
            read_only: true,
            logout: false,
            flash: None,
            refresh: None,
            here: String::new(),
            refreshable: false,
        }
    }

    fn home(&self) -> String {
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

    fn entries_url(&self, label: &str, state: EntryState) -> String {
        format!("{}/entries?state={state}", self.queue_url(label))
    }

    fn entry_url(&self, label: &str, id: &str) -> String {
        format!("{}/entries/{}", self.queue_url(label), enc(id))
    }

    /// `here` with `extra` added to its query.
    fn here_with(&self, extra: &str) -> String {
        let join = if self.here.contains('?') { '&' } else { '?' };
        format!("{}{join}{extra}", self.here)
    }
}

/// The layout around every page.
fn layout(ctx: &Ctx, title: &str, crumbs: &[(String, String)], body: Markup) -> Markup {
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
                    "rendered " (fmt::absolute(crate::ops::wall_clock()))
                }
            }
        }
    }
}

/// A time, relative to the store's clock and absolute.
fn time(at: SystemTime, now: SystemTime) -> Markup {
    html! {
        time datetime=(rfc3339(at)) title=(rfc3339(at)) {
            span.rel { (fmt::relative(at, now)) }
            " "
            span.abs { (fmt::absolute(at)) }
        }
    }
}

fn num(n: u64, state: Option<EntryState>) -> Markup {
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
fn kind_badge(kind: Kind, source: Option<&str>) -> Markup {
    html! {
        @match source {
            Some(source) => span.kind.(format!("k-{kind}")) title=(kind) data-source=(source) { (source) },
            None => span.kind.(format!("k-{kind}")) { (kind) },
        }
    }
}

/// A button that POSTs (a form, so it works without JavaScript);
/// `confirm` adds a box that must be ticked first.
fn button(
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

fn error_box(e: &OpError) -> Markup {
    html! { div.error role="alert" { (e.message()) } }
}

/// The overview: every queue with its counts and their history.
pub(crate) fn overview(
    ctx: &Ctx,
    started: SystemTime,
    refresh: std::time::Duration,
    listed: &[(Listed, Vec<Point>)],
    failed: &[(String, OpError)],
    stores: usize,
) -> Markup {
    let total = |f: fn(&Snapshot) -> u64| -> u64 {
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
                (fmt::absolute(started))
            }
        }
        @for (_, e) in failed {
            div.error role="alert" { "Could not list the queues of " (e.message()) }
        }
        @if listed.is_empty() && failed.is_empty() {
            div.card.empty { "No queue on the stores given yet: a queue appears once it holds an entry or a schedule." }
        } @else {
            div.card.flush {
                table.queues {
                    thead {
                        tr {
                            th { "Queue" }
                            th { "Status" }
                            @for state in STATES {
                                th.num.(chart::state_class(state)) { (state) }
                            }
                            th.num title="The store's clock minus this dashboard's" { "Clock" }
                        }
                    }
                    tbody {
                        @for (l, points) in listed {
                            tr data-queue=(l.label) {
                                td.qcell {
                                    a.qname href=(ctx.queue_url(&l.label)) { (l.id.name) }
                                    " " (kind_badge(l.kind, l.source.as_deref()))
                                }
                                @match &l.snapshot {
                                    Ok(s) => {
                                        td { (status_pill(s.paused)) }
                                        @for state in STATES {
                                            td.num.count {
                                                a href=(ctx.entries_url(&l.label, state)) {
                                                    (num(chart::count_of(&s.stats, state), Some(state)))
                                                }
                                                (chart::sparkline(points, state, s.now()))
                                            }
                                        }
                                        td.num.muted { (fmt::offset(s.offset)) }
                                    }
                                    Err(e) => {
                                        td colspan="6" { (error_box(e)) }
                                    }
                                }
                            }
                        }
                    }
                    tfoot {
                        tr {
                            td { "Total" }
                            td {}
                            td.num { (num(total(|s| s.stats.pending), Some(EntryState::Pending))) }
                            td.num { (num(total(|s| s.stats.due), Some(EntryState::Due))) }
                            td.num { (num(total(|s| s.stats.leased), Some(EntryState::Leased))) }
                            td.num { (num(total(|s| s.stats.dead), Some(EntryState::Dead))) }
                            td {}
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
}

pub(crate) fn queue(ctx: &Ctx, v: &QueueView) -> Markup {
    let q = ctx.queue_url(&v.label);
    let back = format!("/queues/{}", enc(&v.label));
    let body = html! {
        div.head {
            h1 { (v.name) " " (kind_badge(v.kind, v.source.as_deref())) " "
                @if let Ok(s) = &v.snapshot { (status_pill(s.paused)) } }
            p.sub { (v.store) }
        }
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
                section.card.clock {
                    h2 { "Clock" }
                    p {
                        "The store's clock reads " strong { (fmt::absolute(s.now())) }
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
                th { "Name" } th { "Spec" } th { "Next run" } th { "Value" }
                @if !ctx.read_only { th {} }
            } }
            tbody {
                @for s in list {
                    tr data-schedule=(s.name) {
                        td { a.mono href=(ctx.entry_url(label, &s.name)) { (s.name) } }
                        td.mono { (s.spec) }
                        td {
                            @match s.next {
                                Some(at) => { (time(at, now)) }
                                None => { span.pill.leased { "running now" } }
                            }
                        }
                        td.value { code { (clip(&s.value.to_string(), 80)) } }
                        @if !ctx.read_only {
                            td.buttons {
                                @if s.next.is_some() {
                                    (button(&format!("{q}/schedules/{}/run-now", enc(&s.name)), "run-now", "Run now", "",
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
    pub(crate) snapshot: Result<Snapshot, OpError>,
    pub(crate) page: Result<Page<Value>, OpError>,
    pub(crate) cursor: Option<String>,
    pub(crate) limit: usize,
    pub(crate) now: SystemTime,
}

pub(crate) fn entries(ctx: &Ctx, v: &EntriesView) -> Markup {
    let q = ctx.queue_url(&v.label);
    let here = format!(
        "/queues/{}/entries?state={}{}",
        enc(&v.label),
        v.state,
        v.cursor
            .as_deref()
            .map(|c| format!("&cursor={}", enc(c)))
            .unwrap_or_default()
    );
    let when_title = match v.state {
        EntryState::Pending | EntryState::Due => "Due",
        EntryState::Leased => "Lease until",
        EntryState::Dead => "Died",
    };
    let body = html! {
        div.head {
            h1 { (v.name) " " (kind_badge(v.kind, v.source.as_deref())) " " span.muted { "entries" } }
        }
        nav.tabs {
            @for state in STATES {
                a.(chart::state_class(state)).on[state == v.state] href=(ctx.entries_url(&v.label, state)) data-state=(state) {
                    (state)
                    @if let Ok(s) = &v.snapshot {
                        " " span.count { (fmt::count(chart::count_of(&s.stats, state))) }
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
                    a href={(ctx.entries_url(&v.label, v.state))
                        @if let Some(c) = &v.cursor { "&cursor=" (enc(c)) }} data-page="this" {
                        "Show this page"
                    }
                }
            }
            Ok(page) if page.entries.is_empty() => {
                div.card.empty { "No " (v.state) " entry" @if v.cursor.is_some() { " after this point" } "." }
            }
            Ok(page) => {
                div.card.flush {
                    table.entries {
                        thead { tr {
                            th { "ID" } th { (when_title) } th.num { "Attempt" } th.num { "Prio" } th { "Key" } th { "Schedule" }
                            th { "Last error" } th { "Value" }
                            @if !ctx.read_only { th {} }
                        } }
                        tbody {
                            @for e in &page.entries {
                                tr data-entry=(e.id) {
                                    td { a.mono.id href=(ctx.entry_url(&v.label, &e.id)) { (clip(&e.id, 40)) } }
                                    td { (time(e.lease_until.or(e.died_at).unwrap_or(e.due), v.now)) }
                                    td.num { (e.attempt) }
                                    td.num.prio { (e.priority) }
                                    td.key { @if let Some(k) = &e.key { span.mono { (clip(k, 40)) } } @else { span.muted { "—" } } }
                                    td { @if let Some(s) = &e.schedule { span.mono { (s) } } @else { span.muted { "—" } } }
                                    td.err { @if let Some(err) = &e.last_error { (clip(err, 80)) } }
                                    td.value { code { (value_text(e, 80)) } }
                                    @if !ctx.read_only {
                                        td.buttons {
                                            @if e.state == EntryState::Dead {
                                                (button(&format!("{q}/requeue"), "requeue", "Requeue", "", &[("id", &e.id), ("back", &here)], None))
                                            }
                                            (button(&format!("{q}/entries/{}/remove", enc(&e.id)), "remove", "Delete", "danger", &[("back", &here)], None))
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                nav.pager {
                    @if v.cursor.is_some() {
                        a href=(ctx.entries_url(&v.label, v.state)) data-page="first" { "← first page" }
                    }
                    span.muted { (page.entries.len()) " shown" }
                    @if let Some(next) = &page.next {
                        a href={(ctx.entries_url(&v.label, v.state)) "&cursor=" (enc(&next.to_string())) "&limit=" (v.limit)} data-page="next" {
                            "next " (v.limit) " →"
                        }
                    }
                }
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

fn value_text(e: &EntryInfo<Value>, max: usize) -> String {
    match &e.value {
        Some(v) => clip(&v.to_string(), max),
        None => "(does not decode)".to_owned(),
    }
}

pub(crate) fn entry(
    ctx: &Ctx,
    label: &str,
    name: &str,
    e: &EntryInfo<Value>,
    now: SystemTime,
) -> Markup {
    let q = ctx.queue_url(label);
    let here = format!("/queues/{}/entries/{}", enc(label), enc(&e.id));
    let queue_page = format!("/queues/{}", enc(label));
    let body = html! {
        div.head {
            h1 { span.muted { "Entry " } code { (e.id) } " "
                span.pill.(chart::state_class(e.state)) data-entry-state=(e.state) { (e.state) } }
        }
        @if !ctx.read_only {
            div.actions {
                @if e.state == EntryState::Dead {
                    (button(&format!("{q}/requeue"), "requeue", "Requeue now", "primary", &[("id", &e.id), ("back", &here)], None))
                }
                @if let Some(schedule) = &e.schedule {
                    @if matches!(e.state, EntryState::Pending | EntryState::Due) {
                        (button(&format!("{q}/schedules/{}/run-now", enc(schedule)), "run-now", "Run now", "", &[("back", &here)], None))
                    }
                }
                (button(&format!("{q}/entries/{}/remove", enc(&e.id)), "remove", "Delete", "danger", &[("back", &queue_page)], Some("sure")))
            }
        }
        div.card {
            dl.fields {
                dt { "Queue" } dd { a href=(q) { (name) } }
                dt { "State" } dd { span.(chart::state_class(e.state)) { (e.state) } }
                dt { "Due" } dd { (time(e.due, now)) }
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
        section.card {
            h2 { "Value" }
            @match &e.value {
                Some(v) => { pre.json { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
                None => { p.error { "The stored value is not JSON this dashboard can read." } }
            }
        }
    };
    layout(
        ctx,
        &format!("{} · {}", name, e.id),
        &[
            (q.clone(), label.to_owned()),
            (ctx.entries_url(label, e.state), e.state.to_string()),
            (ctx.entry_url(label, &e.id), clip(&e.id, 24)),
        ],
        body,
    )
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
    let body = html! {
        div.card.problem {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p { (message) }
            p { a href=(ctx.home()) { "← all queues" } }
        }
    };
    layout(ctx, status.canonical_reason().unwrap_or("error"), &[], body)
}

/// `text` on one line, cut to `max` characters.
fn clip(text: &str, max: usize) -> String {
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
