//! The pages of what runs and who runs it (a queue's runs under way, its
//! workers), of what a bulk action did, and of the audit log.

use std::time::SystemTime;

use maud::{Markup, html};
use punctual::durable::WorkerInfo;

use super::enc;
use super::views::{
    Ctx, TRAIL_AT_MOST, button, clip, error_box, kind_badge, layout, queue_nav, time, trail_text,
};
use crate::audit::Via;
use crate::error::OpError;
use crate::fmt;
use crate::health::{LATE_AFTER, is_late};
use crate::ops::{AuditPage, BulkOutcome, Running};
use crate::store::Kind;

/// A queue as its pages name it.
pub(crate) struct QueueHead {
    pub(crate) label: String,
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) source: Option<String>,
}

impl QueueHead {
    fn h1(&self, what: &str) -> Markup {
        html! {
            div.head {
                h1 { (self.name) " " (kind_badge(self.kind, self.source.as_deref())) " " span.muted { (what) } }
            }
        }
    }
}

/// Who holds a run: `name · host · pid`, or the worker's id when its
/// record is not there.
fn holder(worker: Option<&str>, workers: &[WorkerInfo]) -> Markup {
    let Some(id) = worker else {
        return html! { span.muted { "—" } };
    };
    match workers.iter().find(|w| w.id == id) {
        Some(w) => html! {
            span.holder title={"worker " (id)} data-worker=(id) {
                @if let Some(name) = &w.name { strong { (name) } " · " }
                span.mono { (w.host) } " · pid " (w.pid)
            }
        },
        None => {
            html! { span.mono.muted title="its record is not there" data-worker=(id) { (clip(id, 24)) } }
        }
    }
}

/// The runs under way: each leased entry, who holds it, since when, and
/// a button to cancel it.
pub(crate) fn running(
    ctx: &Ctx,
    head: &QueueHead,
    running: &Result<Running, OpError>,
    cursor: Option<&str>,
    now: SystemTime,
) -> Markup {
    let q = ctx.queue_url(&head.label);
    let here = format!(
        "/queues/{}/running{}",
        enc(&head.label),
        cursor.map_or(String::new(), |c| format!("?cursor={}", enc(c)))
    );
    let body = html! {
        (head.h1("running now"))
        (queue_nav(ctx, &head.label, "running"))
        @match running {
            Err(e) => { (error_box(e)) }
            Ok(r) => {
                @let workers: &[WorkerInfo] = r.workers.as_deref().unwrap_or(&[]);
                @if let Err(e) = &r.workers {
                    div.error role="alert" { "Could not read the workers: " (e.message()) }
                }
                @if r.page.entries.is_empty() {
                    div.card.empty { "Nothing runs now." }
                } @else {
                    div.card.flush {
                        table.running {
                            thead { tr {
                                th { "Entry" } th { "Worker" } th { "Started" } th.num { "Running for" }
                                th.num { "Attempt" } th { "Lease until" }
                                @if !ctx.read_only { th {} }
                            } }
                            tbody {
                                @for e in &r.page.entries {
                                    tr data-run=(e.id) {
                                        td { a.mono.id href=(ctx.entry_url(&head.label, &e.id)) { (clip(&e.id, 40)) }
                                            @if let Some(k) = &e.key { " " span.muted.mono { (clip(k, 24)) } } }
                                        td { (holder(e.worker.as_deref(), workers)) }
                                        td { @match e.started_at {
                                            Some(at) => { (time(at, now)) }
                                            None => { span.muted { "—" } }
                                        } }
                                        td.num data-field="running-for" {
                                            @match e.started_at {
                                                Some(at) => { (fmt::span(now.duration_since(at).unwrap_or_default())) }
                                                None => { span.muted { "—" } }
                                            }
                                        }
                                        td.num { (e.attempt) }
                                        td { @if let Some(at) = e.lease_until { (time(at, now)) } }
                                        @if !ctx.read_only {
                                            td.buttons {
                                                (button(&format!("{q}/entries/{}/cancel", enc(&e.id)), "cancel", "Cancel", "danger",
                                                    &[("back", &here)], Some("sure")))
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    nav.pager {
                        @if cursor.is_some() {
                            a href={(q) "/running"} data-page="first" { "⇤ first page" }
                        }
                        span.muted { (r.page.entries.len()) " shown" }
                        @if let Some(next) = &r.page.next {
                            a href={(q) "/running?cursor=" (enc(&next.to_string()))} data-page="next" { "next →" }
                        }
                    }
                    p.legend { "A cancelled run is stopped at its handler's next await (the worker learns it at once, or at its next lease extension); the entry is deleted, never retried." }
                }
            }
        }
    };
    layout(
        ctx,
        &format!("{} · running", head.name),
        &[
            (q.clone(), head.label.clone()),
            (format!("{q}/running"), "running".to_owned()),
        ],
        body,
    )
}

/// Every live worker of a queue.
pub(crate) fn workers(
    ctx: &Ctx,
    head: &QueueHead,
    workers: &Result<Vec<WorkerInfo>, OpError>,
    now: SystemTime,
) -> Markup {
    let q = ctx.queue_url(&head.label);
    let body = html! {
        (head.h1("workers"))
        (queue_nav(ctx, &head.label, "workers"))
        @match workers {
            Err(e) => { (error_box(e)) }
            Ok(list) if list.is_empty() => {
                div.card.empty { "No worker of this queue is alive." }
            }
            Ok(list) => {
                p.sub { (list.len()) " alive · "
                    (list.iter().map(|w| w.running.len()).sum::<usize>()) " running on "
                    (list.iter().map(|w| w.concurrency).sum::<usize>()) " places" }
                div.card.flush {
                    table.workers {
                        thead { tr {
                            th { "Name" } th { "Host" } th.num { "PID" } th { "Started" } th { "Last seen" }
                            th.num { "Places" } th { "Runs" }
                        } }
                        tbody {
                            @for w in list {
                                @let late = is_late(w, now);
                                tr data-worker=(w.id) data-late=(late) {
                                    td {
                                        @match &w.name { Some(n) => { strong { (n) } } None => { span.muted { "—" } } }
                                        @if w.stopping { " " span.pill.paused { "stopping" } }
                                        br; span.mono.muted.small { (clip(&w.id, 32)) }
                                    }
                                    td.mono { (w.host) }
                                    td.num { (w.pid) }
                                    td { (time(w.started_at, now)) }
                                    td.lastseen {
                                        (time(w.last_seen, now))
                                        @if late {
                                            " " span.pill.late title={"not heard from for over " (fmt::span(LATE_AFTER))} { "late" }
                                        }
                                    }
                                    td.num data-field="places" { (w.running.len()) " / " (w.concurrency) }
                                    td.runs {
                                        @for (i, run) in w.running.iter().enumerate() {
                                            @if i > 0 { ", " }
                                            a.mono href=(ctx.entry_url(&head.label, &run.id)) title={"attempt " (run.attempt)} { (clip(&run.id, 24)) }
                                        }
                                        @if w.running.is_empty() { span.muted { "idle" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(
        ctx,
        &format!("{} · workers", head.name),
        &[
            (q.clone(), head.label.clone()),
            (format!("{q}/workers"), "workers".to_owned()),
        ],
        body,
    )
}

/// What a bulk action did, entry by entry.
pub(crate) fn bulk_result(
    ctx: &Ctx,
    head: &QueueHead,
    what: &str,
    outcomes: &[BulkOutcome],
    back: &str,
) -> Markup {
    let q = ctx.queue_url(&head.label);
    let changed = outcomes.iter().filter(|o| o.changed).count();
    let body = html! {
        (head.h1(what))
        div.flash role="status" data-bulk=(what) {
            (what) ": " (changed) " of " (outcomes.len()) " done."
        }
        div.card.flush {
            table.bulk {
                thead { tr { th { "Entry" } th { "Outcome" } } }
                tbody {
                    @for o in outcomes {
                        tr data-outcome=(o.id) data-changed=(o.changed) {
                            td { a.mono href=(ctx.entry_url(&head.label, &o.id)) { (clip(&o.id, 40)) } }
                            td {
                                @if o.changed { span.ok { "done" } }
                                @else { span.err { (o.error.as_deref().unwrap_or("nothing changed")) } }
                            }
                        }
                    }
                }
            }
        }
        p { a href={(ctx.base) (back)} data-way="back" { "← back to the list" } }
    };
    layout(ctx, what, &[(q, head.label.clone())], body)
}

/// A page of a store's audit log, newest first.
#[allow(clippy::too_many_arguments)]
pub(crate) fn audit(
    ctx: &Ctx,
    stores: &[(String, String)],
    store: &str,
    page: &Result<AuditPage, OpError>,
    cursor: Option<&str>,
    trail: &[String],
    now: SystemTime,
) -> Markup {
    let url = |cursor: Option<&str>, trail: &[String]| {
        let mut url = format!("{}/audit?store={}", ctx.base, enc(store));
        if let Some(c) = cursor {
            url.push_str(&format!("&cursor={}", enc(c)));
        }
        if !trail.is_empty() {
            url.push_str(&format!("&trail={}", enc(&trail_text(trail))));
        }
        url
    };
    let body = html! {
        div.head {
            h1 { "Audit log" }
            p.sub { "Every write made through this dashboard, its API and its command line, newest first; each store keeps its own for 30 days." }
        }
        @if stores.len() > 1 {
            nav.tabs {
                @for (identity, name) in stores {
                    a.on[identity == store] href={(ctx.base) "/audit?store=" (enc(identity))} data-store=(identity) { (name) }
                }
            }
        }
        @match page {
            Err(e) => { (error_box(e)) }
            Ok(p) if p.records.is_empty() => {
                div.card.empty { "No write recorded" @if cursor.is_some() { " before these" } "." }
            }
            Ok(p) => {
                div.card.flush {
                    table.audit {
                        thead { tr {
                            th { "When" } th { "What" } th { "Queue" } th { "Entries" } th { "Outcome" }
                            th { "From" } th { "Token" }
                        } }
                        tbody {
                            @for r in &p.records {
                                tr data-audit=(r.id) {
                                    td { (time(r.at, now)) }
                                    @match &r.record {
                                        None => { td colspan="6" { span.muted { "(a record this version cannot read)" } } }
                                        Some(rec) => {
                                            td data-field="action" {
                                                strong { (rec.action) }
                                                @if let Some(d) = &rec.detail { br; span.muted.small { (d) } }
                                            }
                                            td data-field="queue" { a href=(ctx.queue_url(&rec.queue)) { (rec.queue) } }
                                            td.ids data-field="ids" {
                                                @for (i, id) in rec.ids.iter().take(5).enumerate() {
                                                    @if i > 0 { ", " }
                                                    span.mono { (clip(id, 24)) }
                                                }
                                                @if rec.ids.len() > 5 { " and " (rec.ids.len() - 5) " more" }
                                            }
                                            td data-field="outcome" {
                                                @if rec.ok { span.ok { "changed " (rec.changed) } }
                                                @else { span.err { (clip(rec.error.as_deref().unwrap_or("failed"), 80)) } }
                                            }
                                            td data-field="from" {
                                                span.via { (match rec.via { Via::Page => "page", Via::Api => "API", Via::Cli => "command line" }) }
                                                " "
                                                span.mono { (rec.from.as_deref().unwrap_or("?")) }
                                                @if let Some(f) = &rec.forwarded_for { br; span.muted.small { "forwarded for " (f) } }
                                            }
                                            td data-field="token" { @if rec.token { "yes" } @else { span.muted { "no" } } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                nav.pager {
                    @if cursor.is_some() {
                        a href=(url(None, &[])) data-page="first" { "⇤ newest" }
                        @match trail.split_last() {
                            Some((last, rest)) => {
                                a href=(url((!last.is_empty()).then_some(last.as_str()), rest)) data-page="prev" { "← newer" }
                            }
                            None => {}
                        }
                    }
                    span.muted { (p.records.len()) " shown" }
                    @if let Some(next) = &p.next {
                        a href=(url(Some(&next.to_string()), &longer(trail, cursor))) data-page="next" { "older →" }
                    }
                }
            }
        }
        p.muted.small { "Times: when the store recorded the write, by its clock; shown in your time zone (UTC on hover)." }
    };
    layout(
        ctx,
        "Audit log",
        &[(format!("{}/audit", ctx.base), "audit log".to_owned())],
        body,
    )
}

/// `trail` with `cursor` (the page being left; `""` for the first) added,
/// the oldest dropped past what is kept.
pub(crate) fn longer(trail: &[String], cursor: Option<&str>) -> Vec<String> {
    let mut more = trail.to_vec();
    more.push(cursor.unwrap_or("").to_owned());
    if more.len() > TRAIL_AT_MOST {
        more.remove(0);
    }
    more
}
