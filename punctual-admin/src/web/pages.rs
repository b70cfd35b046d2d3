//! The HTML faces: each GET handler reads through the operations layer
//! and hands what it read to `views.rs`; each POST handler (a button's
//! form) runs one operation and sends the browser back where it was, with
//! a line saying what changed.

use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::views::{self, Ctx, EntriesView, QueueView};
use super::{Base, Params, Segments, Shared, enc};
use crate::error::OpError;
use crate::fmt;
use crate::ops::{
    DEFAULT_KEY, DEFAULT_LIMIT, MAX_PAGE, QueueId, Requeue, parse_count, parse_limit, parse_period,
    parse_state,
};
use punctual::durable::{KeyLimit, Rate};

/// What a page's query may say.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct View {
    /// Reload every so many seconds.
    refresh: Option<u64>,
    /// What the last action did.
    done: Option<String>,
    state: Option<String>,
    cursor: Option<String>,
    /// Read by [`parse_limit`] (any whole number; more than a page is a
    /// page).
    limit: Option<String>,
}

fn ctx(shared: &Shared, base: &Base, view: &View, here: String, refreshable: bool) -> Ctx {
    Ctx {
        base: base.0.clone(),
        read_only: shared.read_only,
        logout: shared.token.is_some(),
        flash: view.done.clone(),
        refresh: view
            .refresh
            .filter(|s| refreshable && *s > 0)
            .map(|s| s.clamp(2, 300)),
        here,
        refreshable,
    }
}

/// An operation's failure as a page.
fn failure(ctx: &Ctx, e: &OpError) -> Response {
    let status = status_of(e);
    (status, views::error_page(ctx, status, e.message())).into_response()
}

pub(crate) fn status_of(e: &OpError) -> StatusCode {
    match e {
        OpError::NotFound(_) => StatusCode::NOT_FOUND,
        OpError::Invalid(_) => StatusCode::BAD_REQUEST,
        OpError::Store(_) => StatusCode::BAD_GATEWAY,
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
    let (listed, failed) = ops.queues().await;
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
    ctx.here = ctx.queue_url(&q);
    let ops = &shared.ops;
    let id = match ops.resolve(&q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    let (snapshot, timeline, schedules, limits) = tokio::join!(
        ops.snapshot(&id),
        ops.timeline(&id),
        ops.schedules(&id),
        ops.limits(&id)
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
    };
    views::queue(&ctx, &v).into_response()
}

async fn label(shared: &Shared, id: &QueueId) -> String {
    let found = shared.ops.found().await;
    shared.ops.label(&found, id)
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
        ops.entries(&id, state, view.cursor.as_deref(), limit)
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
        snapshot,
        page,
        cursor: view.cursor.clone(),
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
    let (snapshot, found) = tokio::join!(ops.snapshot(&id), ops.entry(&id, &entry));
    let e = match found {
        Ok(e) => e,
        Err(e) => return failure(&ctx, &e),
    };
    let now = snapshot.map_or_else(|_| crate::ops::wall_clock(), |s| s.now());
    let label = label(&shared, &id).await;
    views::entry(&ctx, &label, &id.name, &e, now).into_response()
}

/// What a button's form sends.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Action {
    /// Where to go after it (a path within the dashboard).
    back: Option<String>,
    id: Option<String>,
    all_dead: Option<String>,
    confirm: Option<String>,
    /// The set-limit form: the key, and each bound (empty: none).
    key: Option<String>,
    concurrency: Option<String>,
    rate_max: Option<String>,
    rate_per: Option<String>,
}

impl Action {
    /// The set-limit form's key and limit.
    fn limit(&self) -> Result<(String, KeyLimit), OpError> {
        let filled = |field: &Option<String>| {
            field
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let key = filled(&self.key)
            .ok_or_else(|| OpError::Invalid("say which key to limit (* for the default)".into()))?;
        let concurrency = filled(&self.concurrency)
            .map(|n| parse_count(&n, "concurrency"))
            .transpose()?;
        let rate = match (filled(&self.rate_max), filled(&self.rate_per)) {
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
}

/// Runs a button's operation on queue `q` and answers with a redirect
/// back (or a page saying why not).
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
    let ctx = Ctx::bare(base);
    if needs_confirm && action.confirm.as_deref() != Some("yes") {
        let e = OpError::Invalid("tick the box beside the button first".to_owned());
        return failure(&ctx, &e);
    }
    let id = match shared.ops.resolve(q).await {
        Ok(id) => id,
        Err(e) => return failure(&ctx, &e),
    };
    match op(&id).await {
        Ok(done) => {
            let back = action
                .back
                .as_deref()
                .filter(|b| {
                    // Browsers drop tabs and line breaks from a URL and read
                    // `\` as `/`: `/<tab>/evil.example` would leave.
                    b.starts_with('/')
                        && !b.starts_with("//")
                        && !b.contains('\\')
                        && !b.contains(char::is_control)
                })
                .map_or_else(|| format!("/queues/{}", enc(q)), str::to_owned);
            let join = if back.contains('?') { '&' } else { '?' };
            Redirect::to(&format!("{}{back}{join}done={}", base.0, enc(&done))).into_response()
        }
        Err(e) => failure(&ctx, &e),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", fmt::count(n), if n == 1 { one } else { many })
}

pub(crate) async fn pause(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        Ok(match ops.pause(id).await? {
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
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        Ok(match ops.resume(id).await? {
            1 => format!("Resumed {}.", id.name),
            _ => format!("{} was not paused.", id.name),
        })
    })
    .await
}

pub(crate) async fn clear_dead(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        let n = ops.clear_dead(id).await?;
        Ok(format!(
            "Deleted {}.",
            plural(n, "dead letter", "dead letters")
        ))
    })
    .await
}

pub(crate) async fn requeue(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    let what = match (&action.id, action.all_dead.as_deref()) {
        (Some(id), _) => Requeue::One(id.clone()),
        (None, Some("true")) => Requeue::AllDead,
        _ => {
            let e = OpError::Invalid("say which entry to requeue, or all_dead".to_owned());
            return failure(&Ctx::bare(&base), &e);
        }
    };
    act(&shared, &base, &q, &action, false, async |id| {
        let n = ops.requeue(id, &what).await?;
        Ok(match &what {
            Requeue::AllDead => format!(
                "Requeued {}: due now.",
                plural(n, "dead letter", "dead letters")
            ),
            Requeue::One(e) if n == 1 => format!("Requeued {e}: due now."),
            Requeue::One(e) => format!("{e} is not a dead letter: nothing changed."),
        })
    })
    .await
}

pub(crate) async fn remove(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments((q, entry)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        ops.remove(id, &entry).await?;
        Ok(format!("Deleted {entry}."))
    })
    .await
}

pub(crate) async fn run_now(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments((q, name)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        Ok(match ops.run_now(id, &name).await? {
            1 => format!("Schedule {name} is due now."),
            _ => format!("Schedule {name} is running: nothing changed."),
        })
    })
    .await
}

pub(crate) async fn unschedule(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments((q, name)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        ops.unschedule(id, &name).await?;
        Ok(format!("Deleted schedule {name} and its tick."))
    })
    .await
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
    Segments(q): Segments<String>,
    Form(action): Form<Action>,
) -> Response {
    let (key, limit) = match action.limit() {
        Ok(set) => set,
        Err(e) => return failure(&Ctx::bare(&base), &e),
    };
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, false, async |id| {
        Ok(match ops.set_limit(id, &key, limit).await? {
            1 => format!("{} is set.", whose(&key)),
            _ => format!("{} was that already: nothing changed.", whose(&key)),
        })
    })
    .await
}

pub(crate) async fn remove_limit(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Segments((q, key)): Segments<(String, String)>,
    Form(action): Form<Action>,
) -> Response {
    let ops = shared.ops.clone();
    act(&shared, &base, &q, &action, true, async |id| {
        Ok(match ops.remove_limit(id, &key).await? {
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
