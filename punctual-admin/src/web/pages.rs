//! The HTML faces: each GET handler reads through the operations layer
//! and hands what it read to `views.rs` (or `runs.rs`); each POST handler
//! (a button's form) runs one write through [`Ops::apply`] (which records
//! it in the audit log) and sends the browser back where it was, with a
//! line saying what changed.
//!
//! [`Ops::apply`]: crate::ops::Ops::apply

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Form, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::runs::{self, QueueHead};
use super::views::{self, Ctx, EntriesView, QueueView, default_order, parse_trail};
use super::{Base, Params, Segments, Shared, enc};
use crate::audit::Who;
use crate::error::OpError;
use crate::fmt;
use crate::ops::{
    Bulk, DEFAULT_KEY, DEFAULT_LIMIT, MAX_PAGE, Order, QueueId, Requeue, Span, Write, parse_count,
    parse_limit, parse_period, parse_state,
};
use punctual::durable::{KeyLimit, Rate};

/// What a page's query may say.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct View {
    /// Reload every so many seconds.
    refresh: Option<u64>,
    /// The key of the line the last action left (see `flash.rs`).
    done: Option<String>,
    state: Option<String>,
    cursor: Option<String>,
    /// Read by [`parse_limit`] (any whole number; more than a page is a
    /// page).
    limit: Option<String>,
    /// `oldest` or `newest`.
    order: Option<String>,
    /// The cursors of the pages before this one, `~`-joined.
    trail: Option<String>,
    /// The activity chart's span: `hour` or `day`.
    range: Option<String>,
    /// The audit log's store.
    store: Option<String>,
}

fn ctx(shared: &Shared, base: &Base, view: &View, here: String, refreshable: bool) -> Ctx {
    Ctx {
        base: base.0.clone(),
        read_only: shared.read_only,
        logout: shared.token.is_some(),
        flash: view.done.as_deref().and_then(|key| shared.flashes.get(key)),
        refresh: view
            .refresh
            .filter(|s| refreshable && *s > 0)
            .map(|s| s.clamp(2, 300)),
        here,
        refreshable,
    }
}

/// The context of a page where nothing of the query matters (a write's
/// failure).
fn plain_ctx(shared: &Shared, base: &Base) -> Ctx {
    ctx(shared, base, &View::default(), String::new(), false)
}

/// An operation's failure as a page.
fn failure(ctx: &Ctx, e: &OpError) -> Response {
    let status = status_of(e);
    (status, views::error_page(ctx, status, e.message())).into_response()
}

/// A write's failure as a page a person can act on: what went wrong in
/// words, and the ways back.
fn write_failure(ctx: &Ctx, e: &OpError, back: Option<&str>) -> Response {
    let status = status_of(e);
    let (heading, message) = match e {
        OpError::Store(m) => (
            "The store did not answer",
            format!(
                "The write may or may not have been made: the store failed while it was asked ({m}). \
                 Look at the queue again before you retry."
            ),
        ),
        OpError::NotFound(m) => ("Not there any more", format!("Nothing changed: {m}.")),
        OpError::Invalid(m) => ("That cannot be done", format!("Nothing changed: {m}.")),
        OpError::Unsupported(m) => (
            "Not possible on this store yet",
            format!("Nothing changed: {m}."),
        ),
    };
    let back = back.map(|b| format!("{}{b}", ctx.base));
    (
        status,
        views::problem_page(ctx, status, Some(heading), &message, back.as_deref()),
    )
        .into_response()
}

pub(crate) fn status_of(e: &OpError) -> StatusCode {
    match e {
        OpError::NotFound(_) => StatusCode::NOT_FOUND,
        OpError::Invalid(_) => StatusCode::BAD_REQUEST,
        OpError::Store(_) => StatusCode::BAD_GATEWAY,
        OpError::Unsupported(_) => StatusCode::NOT_IMPLEMENTED,
    }
}

pub(crate) async fn overview(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Params(view): Params<View>,
) -> Response {
    let here = if base.0.is_empty() {
        "/".to_owned()
    } else {
        base.0.clone()
    };
    let ctx = ctx(&shared, &base, &view, here, true);
    let ops = &shared.ops;
    let (listed, failed) = ops.queues_with(true).await;
    let listed: Vec<_> = listed
        .into_iter()
        .map(|l| {
            let points = ops.history(&l.id);
            (l, points)
        })
        .collect();
    let failed: Vec<_> = failed
        .into_iter()
        .map(|(source, e)| (ops.sources()[source].describe(), e))
        .collect();
    views::overview(
        &ctx,
        shared.started,
        shared.ops.refresh(),
        shared.latency_threshold,
        &listed,
        &failed,
        ops.sources().len(),
    )
    .into_response()
}

pub(crate) async fn queue(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Params(view): Params<View>,
) -> Response {
    let mut ctx = ctx(&shared, &base, &view, String::new(), true);
    let span = match view.range.as_deref() {
        Some("day") => Span::Day,
        _ => Span::Hour,
    };
    ctx.here = ctx.queue_url(&q);
    if span == Span::Day {
        ctx.here.push_str("?range=day");
    }
    let ops = &shared.ops;
    let id = match ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    let (snapshot, timeline, schedules, limits, health, minutes) = tokio::join!(
        ops.snapshot(&id),
        ops.timeline(&id),
        ops.schedules(&id),
        ops.limits(&id),
        ops.health(&id),
        ops.minutes(&id, span),
    );
    let v = QueueView {
        label: label(&shared, &id).await,
        name: id.name.clone(),
        kind: ops.kind(&id),
        source: ops.distinct_identity(id.source).map(str::to_owned),
        store: ops.sources()[id.source].describe(),
        snapshot,
        history: ops.history(&id),
        timeline,
        schedules,
        limits,
        health,
        minutes,
        span,
        latencies: ops.latency_history(&id),
        threshold: shared.latency_threshold,
    };
    views::queue(&ctx, &v).into_response()
}

async fn label(shared: &Shared, id: &QueueId) -> String {
    let found = shared.ops.found().await;
    shared.ops.label(&found, id)
}

async fn head(shared: &Shared, id: &QueueId) -> QueueHead {
    QueueHead {
        label: label(shared, id).await,
        name: id.name.clone(),
        kind: shared.ops.kind(id),
        source: shared.ops.distinct_identity(id.source).map(str::to_owned),
    }
}

pub(crate) async fn entries(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Params(view): Params<View>,
) -> Response {
    let mut ctx = ctx(&shared, &base, &view, String::new(), false);
    let ops = &shared.ops;
    let state = match parse_state(view.state.as_deref().unwrap_or("pending")) {
        Ok(state) => state,
        Err(e) => return failure(&ctx, &e),
    };
    let order = match view.order.as_deref().map(Order::parse).transpose() {
        Ok(order) => order.unwrap_or(default_order(state)),
        Err(e) => return failure(&ctx, &e),
    };
    let id = match ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    ctx.here = ctx.queue_url(&q);
    let limit = match view.limit.as_deref().map(parse_limit).transpose() {
        Ok(limit) => limit.unwrap_or(DEFAULT_LIMIT).min(MAX_PAGE),
        Err(e) => return failure(&ctx, &e),
    };
    let (snapshot, page) = tokio::join!(
        ops.snapshot(&id),
        ops.entries_in(&id, state, order, view.cursor.as_deref(), limit)
    );
    if let Err(e @ OpError::Invalid(_)) = &page {
        return failure(&ctx, e);
    }
    let now = snapshot
        .as_ref()
        .map_or_else(|_| crate::ops::wall_clock(), |s| s.now());
    let v = EntriesView {
        label: label(&shared, &id).await,
        name: id.name.clone(),
        kind: ops.kind(&id),
        source: ops.distinct_identity(id.source).map(str::to_owned),
        state,
        order,
        snapshot,
        page,
        cursor: view.cursor.clone(),
        trail: parse_trail(view.trail.as_deref()),
        limit,
        now,
    };
    views::entries(&ctx, &v).into_response()
}

pub(crate) async fn entry(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments((q, entry)): Segments<(String, String)>,
    Params(view): Params<View>,
) -> Response {
    let ctx = ctx(&shared, &base, &view, String::new(), false);
    let ops = &shared.ops;
    let id = match ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    let (snapshot, shown) = tokio::join!(ops.snapshot(&id), ops.show(&id, &entry));
    let shown = match shown {
        Ok(shown) => shown,
        Err(e) => return failure(&ctx, &e),
    };
    let now = snapshot.map_or_else(|_| crate::ops::wall_clock(), |s| s.now());
    let label = label(&shared, &id).await;
    views::entry(&ctx, &label, &id.name, &entry, &shown, now).into_response()
}

pub(crate) async fn running(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Params(view): Params<View>,
) -> Response {
    let mut ctx = ctx(&shared, &base, &view, String::new(), true);
    let ops = &shared.ops;
    let id = match ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    ctx.here = format!("{}/running", ctx.queue_url(&q));
    let (snapshot, running) = tokio::join!(
        ops.snapshot(&id),
        ops.running(&id, view.cursor.as_deref(), DEFAULT_LIMIT)
    );
    if let Err(e @ OpError::Invalid(_)) = &running {
        return failure(&ctx, e);
    }
    let now = snapshot.map_or_else(|_| crate::ops::wall_clock(), |s| s.now());
    let head = head(&shared, &id).await;
    runs::running(&ctx, &head, &running, view.cursor.as_deref(), now).into_response()
}

pub(crate) async fn workers(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Params(view): Params<View>,
) -> Response {
    let mut ctx = ctx(&shared, &base, &view, String::new(), true);
    let ops = &shared.ops;
    let id = match ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    ctx.here = format!("{}/workers", ctx.queue_url(&q));
    let (snapshot, health) = tokio::join!(ops.snapshot(&id), ops.health(&id));
    let now = snapshot.map_or_else(|_| crate::ops::wall_clock(), |s| s.now());
    let head = head(&shared, &id).await;
    let workers = health.map(|h| h.workers);
    runs::workers(&ctx, &head, &workers, now).into_response()
}

pub(crate) async fn audit(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Params(view): Params<View>,
) -> Response {
    let ctx = ctx(&shared, &base, &view, String::new(), false);
    let ops = &shared.ops;
    let source = match ops.source_of(view.store.as_deref()) {
        Ok(source) => source,
        Err(e) => return failure(&ctx, &e),
    };
    let page = ops
        .audit_page(source, view.cursor.as_deref(), DEFAULT_LIMIT)
        .await;
    if let Err(e @ OpError::Invalid(_)) = &page {
        return failure(&ctx, e);
    }
    let stores: Vec<(String, String)> = (0..ops.sources().len())
        .map(|i| (ops.identity(i).to_owned(), ops.store_name(i)))
        .collect();
    runs::audit(
        &ctx,
        &stores,
        ops.identity(source),
        &page,
        view.cursor.as_deref(),
        &parse_trail(view.trail.as_deref()),
        crate::ops::wall_clock(),
    )
    .into_response()
}

/// What a button's form sends.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Action {
    /// Where to go after it (a path within the dashboard).
    back: Option<String>,
    id: Option<String>,
    all_dead: Option<String>,
    confirm: Option<String>,
    /// A requeue's delay (`10m`; empty: now).
    delay: Option<String>,
    /// The set-limit form: the key, and each bound (empty: none).
    key: Option<String>,
    concurrency: Option<String>,
    rate_max: Option<String>,
    rate_per: Option<String>,
}

/// A form field's text, trimmed, when there is some.
fn filled(field: Option<&str>) -> Option<String> {
    field
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A form's delay field: empty is now.
fn delay_of(field: Option<&str>) -> Result<Duration, OpError> {
    filled(field).map_or(Ok(Duration::ZERO), |d| parse_period(&d))
}

impl Action {
    /// The set-limit form's key and limit.
    fn limit(&self) -> Result<(String, KeyLimit), OpError> {
        let key = filled(self.key.as_deref())
            .ok_or_else(|| OpError::Invalid("say which key to limit (* for the default)".into()))?;
        let concurrency = filled(self.concurrency.as_deref())
            .map(|n| parse_count(&n, "concurrency"))
            .transpose()?;
        let rate = match (
            filled(self.rate_max.as_deref()),
            filled(self.rate_per.as_deref()),
        ) {
            (None, None) => None,
            (Some(max), Some(per)) => Some(Rate {
                max: parse_count(&max, "a rate's max")?,
                per: parse_period(&per)?,
            }),
            _ => {
                return Err(OpError::Invalid(
                    "a rate needs both its max and its period (such as 100 per 1m)".into(),
                ));
            }
        };
        Ok((key, KeyLimit { concurrency, rate }))
    }

    /// Where the form said to go after it, when that is a path within
    /// the dashboard.
    fn back(&self) -> Option<&str> {
        safe_back(self.back.as_deref())
    }
}

/// `back` when it is a path within the dashboard: browsers drop tabs and
/// line breaks from a URL and read `\` as `/`, so `/<tab>/evil.example`
/// would leave.
fn safe_back(back: Option<&str>) -> Option<&str> {
    back.filter(|b| {
        b.starts_with('/')
            && !b.starts_with("//")
            && !b.contains('\\')
            && !b.contains(char::is_control)
    })
}

/// Runs a button's operation on queue `q` and answers with a redirect
/// back, its line kept for the page there (or a page saying why not).
async fn act<F>(
    shared: &Shared,
    base: &Base,
    q: &str,
    action: &Action,
    needs_confirm: bool,
    op: F,
) -> Response
where
    F: AsyncFnOnce(&QueueId) -> Result<String, OpError>,
{
    let ctx = plain_ctx(shared, base);
    if needs_confirm && action.confirm.as_deref() != Some("yes") {
        let e = OpError::Invalid("tick the box beside the button first".to_owned());
        return write_failure(&ctx, &e, action.back());
    }
    let id = match shared.ops.resolve(q).await {
        Ok(id) => id,
        Err(e) => return write_failure(&ctx, &e, action.back()),
    };
    match op(&id).await {
        Ok(done) => {
            let back = action
                .back()
                .map_or_else(|| format!("/queues/{}", enc(q)), str::to_owned);
            let join = if back.contains('?') { '&' } else { '?' };
            let key = shared.flashes.put(done);
            Redirect::to(&format!("{}{back}{join}done={key}", base.0)).into_response()
        }
        Err(e) => write_failure(&ctx, &e, action.back()),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", fmt::count(n), if n == 1 { one } else { many })
}

pub(crate) async fn pause(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        Ok(match ops.apply(&who, id, &Write::Pause).await? {
            1 => format!(
                "Paused {}: consumers take nothing until it is resumed.",
                id.name
            ),
            _ => format!("{} was paused already.", id.name),
        })
    })
    .await
}

pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        Ok(match ops.apply(&who, id, &Write::Resume).await? {
            1 => format!("Resumed {}.", id.name),
            _ => format!("{} was not paused.", id.name),
        })
    })
    .await
}

pub(crate) async fn clear_dead(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        let n = ops.apply(&who, id, &Write::ClearDead).await?;
        Ok(format!(
            "Deleted {}.",
            plural(n, "dead letter", "dead letters")
        ))
    })
    .await
}

/// "due now" or "due in 10m".
fn due_words(delay: Duration) -> String {
    if delay.is_zero() {
        "due now".to_owned()
    } else {
        format!("due in {}", fmt::span(delay))
    }
}

pub(crate) async fn requeue(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    let ctx = plain_ctx(&shared, &base);
    let what = match (&action.id, action.all_dead.as_deref()) {
        (Some(id), _) => Requeue::One(id.clone()),
        (None, Some("true")) => Requeue::AllDead,
        _ => {
            let e = OpError::Invalid("say which entry to requeue, or all_dead".to_owned());
            return write_failure(&ctx, &e, action.back());
        }
    };
    let delay = match delay_of(action.delay.as_deref()) {
        Ok(delay) => delay,
        Err(e) => return write_failure(&ctx, &e, action.back()),
    };
    let write = Write::Requeue {
        what: what.clone(),
        delay,
    };
    act(&shared, &base, &q, &action, false, async |id| {
        let n = ops.apply(&who, id, &write).await?;
        Ok(match &what {
            Requeue::AllDead => format!(
                "Requeued {}: {}.",
                plural(n, "dead letter", "dead letters"),
                due_words(delay)
            ),
            Requeue::One(e) if n == 1 => format!("Requeued {e}: {}.", due_words(delay)),
            Requeue::One(e) => format!("{e} is not a dead letter: nothing changed."),
        })
    })
    .await
}

pub(crate) async fn remove(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, entry)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        let write = Write::Remove { id: entry.clone() };
        ops.apply(&who, id, &write).await?;
        Ok(format!("Deleted {entry}."))
    })
    .await
}

pub(crate) async fn cancel(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, entry)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        let write = Write::Cancel { id: entry.clone() };
        Ok(match ops.apply(&who, id, &write).await? {
            1 => format!("Cancelled {entry}: its run stops and it will not be retried."),
            _ => format!("{entry} is not there any more (it may have finished): nothing changed."),
        })
    })
    .await
}

pub(crate) async fn run_now(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        let write = Write::RunNow { name: name.clone() };
        Ok(match ops.apply(&who, id, &write).await? {
            1 => format!("Schedule {name} is due now."),
            _ => format!("Schedule {name} is running: nothing changed."),
        })
    })
    .await
}

pub(crate) async fn unschedule(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        let write = Write::Unschedule { name: name.clone() };
        ops.apply(&who, id, &write).await?;
        Ok(format!("Deleted schedule {name} and its tick."))
    })
    .await
}

pub(crate) async fn pause_schedule(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        let write = Write::PauseSchedule { name: name.clone() };
        Ok(match ops.apply(&who, id, &write).await? {
            1 => format!("Paused schedule {name}: its tick waits until it is resumed."),
            _ => format!("Schedule {name} was paused already."),
        })
    })
    .await
}

pub(crate) async fn resume_schedule(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        let write = Write::ResumeSchedule { name: name.clone() };
        Ok(match ops.apply(&who, id, &write).await? {
            1 => format!("Resumed schedule {name}."),
            _ => format!("Schedule {name} was not paused."),
        })
    })
    .await
}

/// The bulk form: `ids` (one field per entry ticked), `action`
/// (`requeue` or `delete`), `delay`, `confirm`, `back`.
#[derive(Debug, Default)]
struct BulkForm {
    ids: Vec<String>,
    action: Option<String>,
    delay: Option<String>,
    confirm: Option<String>,
    back: Option<String>,
}

impl BulkForm {
    /// An `application/x-www-form-urlencoded` body (its repeated `ids`
    /// are what `Form` cannot read).
    fn parse(body: &[u8]) -> BulkForm {
        let decode = |s: &str| {
            let spaced = s.replace('+', " ");
            percent_encoding::percent_decode_str(&spaced)
                .decode_utf8_lossy()
                .into_owned()
        };
        let mut form = BulkForm::default();
        for pair in String::from_utf8_lossy(body).split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode(value);
            match decode(key).as_str() {
                "ids" => form.ids.push(value),
                "action" => form.action = Some(value),
                "delay" => form.delay = Some(value),
                "confirm" => form.confirm = Some(value),
                "back" => form.back = Some(value),
                _ => {}
            }
        }
        form
    }
}

/// Requeues or deletes the entries ticked on a list page, each checked by
/// the server and each answered on the page that follows.
pub(crate) async fn bulk(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments(q): Segments<String>,
    body: Bytes,
) -> Response {
    let form = BulkForm::parse(&body);
    let ctx = plain_ctx(&shared, &base);
    let back = safe_back(form.back.as_deref());
    let bulk = match form.action.as_deref() {
        Some("delete") => Bulk::Delete,
        Some("requeue") => match delay_of(form.delay.as_deref()) {
            Ok(delay) => Bulk::Requeue { delay },
            Err(e) => return write_failure(&ctx, &e, back),
        },
        _ => {
            let e = OpError::Invalid("say what to do with the entries: requeue or delete".into());
            return write_failure(&ctx, &e, back);
        }
    };
    if form.confirm.as_deref() != Some("yes") {
        let e = OpError::Invalid("tick the box beside the buttons first".to_owned());
        return write_failure(&ctx, &e, back);
    }
    let id = match shared.ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return write_failure(&ctx, &e, back),
    };
    match shared.ops.bulk(&who, &id, bulk, &form.ids).await {
        Ok(outcomes) => {
            let what = match bulk {
                Bulk::Delete => "Deleted".to_owned(),
                Bulk::Requeue { delay } => format!("Requeued, {}", due_words(delay)),
            };
            let head = head(&shared, &id).await;
            let back = back.map_or_else(|| format!("/queues/{}", enc(&q)), str::to_owned);
            runs::bulk_result(&ctx, &head, &what, &outcomes, &back).into_response()
        }
        Err(e) => write_failure(&ctx, &e, back),
    }
}

/// Who a limit belongs to, for the line after a button.
fn whose(key: &str) -> String {
    if key == DEFAULT_KEY {
        "The default key limit".to_owned()
    } else {
        format!("The limit of key {key}")
    }
}

pub(crate) async fn set_limit(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let (key, limit) = match action.limit() {
        Ok(set) => set,
        Err(e) => return write_failure(&plain_ctx(&shared, &base), &e, action.back()),
    };
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        let write = Write::SetLimit {
            key: key.clone(),
            limit,
        };
        Ok(match ops.apply(&who, id, &write).await? {
            1 => format!("{} is set.", whose(&key)),
            _ => format!("{} was that already: nothing changed.", whose(&key)),
        })
    })
    .await
}

pub(crate) async fn remove_limit(
    State(shared): State<Arc<Shared>>,
    base: Base,
    who: Who,
    Segments((q, key)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        let write = Write::RemoveLimit { key: key.clone() };
        Ok(match ops.apply(&who, id, &write).await? {
            1 => format!("{} is removed.", whose(&key)),
            _ => format!("{} was not set: nothing changed.", whose(&key)),
        })
    })
    .await
}

pub(crate) async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("style.css"),
    )
        .into_response()
}

/// The script that shows times in the viewer's time zone.
pub(crate) async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("local-time.js"),
    )
        .into_response()
}

pub(crate) async fn not_found(base: Base, uri: Uri) -> Response {
    let path = uri.path();
    if path == "/api" || path.starts_with("/api/") {
        return super::api::error(&OpError::NotFound(format!("no route {path}")));
    }
    let ctx = Ctx::bare(&base);
    (
        StatusCode::NOT_FOUND,
        views::error_page(&ctx, StatusCode::NOT_FOUND, "There is no such page."),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bulk_form_reads_every_ticked_entry() {
        let form = BulkForm::parse(
            b"back=%2Fqueues%2Fq%2Fentries%3Fstate%3Ddead&ids=dead-1&ids=%2324&ids=a+b&action=requeue&delay=10m&confirm=yes",
        );
        assert_eq!(form.ids, ["dead-1", "#24", "a b"]);
        assert_eq!(form.action.as_deref(), Some("requeue"));
        assert_eq!(form.delay.as_deref(), Some("10m"));
        assert_eq!(form.back.as_deref(), Some("/queues/q/entries?state=dead"));
        assert_eq!(safe_back(Some("//evil.example")), None);
        assert_eq!(safe_back(Some("/\t/evil.example")), None);
        assert_eq!(safe_back(Some("/queues/q")), Some("/queues/q"));
    }
}
