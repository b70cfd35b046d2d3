//! The JSON API under `/api/` (API.md, "Routes"): the command line's
//! commands over HTTP, answering the same documents as its `--json`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

use super::pages::status_of;
use super::views::verdict;
use super::{Segments, Shared};
use crate::audit::{RecordJson, Who};
use crate::error::OpError;
use crate::json::{
    ActiveRunJson, BulkJson, ErrorJson, HealthJson, HistoryJson, LimitsJson, PageJson, QueueJson,
    RunningPageJson, ScheduleJson, SetLimitJson, ShowJson, WorkerJson, WriteJson,
};
use crate::ops::{
    Bulk, DEFAULT_LIMIT, Order, Requeue, Write, parse_limit, parse_period, parse_state,
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/queues", get(queues))
        .route("/api/queues/{q}", get(stats))
        .route("/api/queues/{q}/entries", get(entries))
        .route("/api/queues/{q}/entries/{id}", get(entry).delete(remove))
        .route("/api/queues/{q}/entries/{id}/cancel", post(cancel))
        .route("/api/queues/{q}/bulk", post(bulk))
        .route("/api/queues/{q}/health", get(health))
        .route("/api/queues/{q}/workers", get(workers))
        .route("/api/queues/{q}/running", get(running))
        .route("/api/queues/{q}/history", get(history))
        .route("/api/audit", get(audit))
        .route("/api/queues/{q}/schedules", get(schedules))
        .route(
            "/api/queues/{q}/schedules/{name}",
            axum::routing::delete(unschedule),
        )
        .route("/api/queues/{q}/schedules/{name}/run-now", post(run_now))
        .route(
            "/api/queues/{q}/schedules/{name}/pause",
            post(pause_schedule),
        )
        .route(
            "/api/queues/{q}/schedules/{name}/resume",
            post(resume_schedule),
        )
        .route("/api/queues/{q}/pause", post(pause))
        .route("/api/queues/{q}/resume", post(resume))
        .route("/api/queues/{q}/clear-dead", post(clear_dead))
        .route("/api/queues/{q}/requeue", post(requeue))
        .route("/api/queues/{q}/limits", get(limits).post(set_limit))
        .route(
            "/api/queues/{q}/limits/{key}",
            axum::routing::delete(remove_limit),
        )
}

/// `{"error": "..."}` with the status that fits.
pub(crate) fn error(e: &OpError) -> Response {
    (
        status_of(e),
        axum::Json(ErrorJson {
            error: e.message().to_owned(),
        }),
    )
        .into_response()
}

fn answer<T: Serialize>(result: Result<T, OpError>) -> Response {
    match result {
        Ok(value) => axum::Json(value).into_response(),
        Err(e) => error(&e),
    }
}

async fn queues(State(shared): State<Arc<Shared>>) -> Response {
    let (listed, failed) = shared.ops.queues().await;
    answer((|| {
        if let Some((_, e)) = failed.into_iter().next() {
            return Err(e);
        }
        listed
            .iter()
            .map(|l| {
                l.snapshot.as_ref().map_err(Clone::clone)?;
                Ok(QueueJson::of(l).expect("read"))
            })
            .collect::<Result<Vec<_>, OpError>>()
    })())
}

async fn stats(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    answer(
        shared
            .ops
            .stats(&q)
            .await
            .map(|l| QueueJson::of(&l).expect("read")),
    )
}

#[derive(Debug, Deserialize)]
struct EntriesQuery {
    state: Option<String>,
    /// Read by [`parse_limit`]: 0 is an empty page, more than 1000 is
    /// 1000, however large.
    limit: Option<String>,
    cursor: Option<String>,
    /// `oldest` (the default) or `newest`.
    order: Option<String>,
}

async fn entries(
    State(shared): State<Arc<Shared>>,
    Segments(q): Segments<String>,
    query: Result<Query<EntriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(&OpError::Invalid(
            "the query takes state=pending|due|leased|dead, limit=N, cursor=C and order=oldest|newest"
                .to_owned(),
        ));
    };
    answer(
        async {
            let state = parse_state(query.state.as_deref().ok_or_else(|| {
                OpError::Invalid("say which entries: state=pending|due|leased|dead".to_owned())
            })?)?;
            let limit = query.limit.as_deref().map(parse_limit).transpose()?;
            let order = query.order.as_deref().map(Order::parse).transpose()?;
            let id = shared.ops.resolve(&q).await?;
            let page = shared
                .ops
                .entries_in(
                    &id,
                    state,
                    order.unwrap_or_default(),
                    query.cursor.as_deref(),
                    limit.unwrap_or(DEFAULT_LIMIT),
                )
                .await?;
            Ok(PageJson::of(&page))
        }
        .await,
    )
}

async fn entry(
    State(shared): State<Arc<Shared>>,
    Segments((q, entry)): Segments<(String, String)>,
) -> Response {
    answer(
        async {
            let id = shared.ops.resolve(&q).await?;
            Ok(ShowJson::of(&entry, &shared.ops.show(&id, &entry).await?))
        }
        .await,
    )
}

async fn schedules(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    answer(
        async {
            let id = shared.ops.resolve(&q).await?;
            let list = shared.ops.schedules(&id).await?;
            Ok(list.iter().map(ScheduleJson::of).collect::<Vec<_>>())
        }
        .await,
    )
}

/// Resolves `q` and does `write` on it for `who` (recorded in the audit
/// log): `{"ok": true, "changed": N}`.
async fn write(shared: &Shared, who: &Who, q: &str, write: Write) -> Response {
    answer(
        async {
            let id = shared.ops.resolve(q).await?;
            Ok(WriteJson::changed(
                shared.ops.apply(who, &id, &write).await?,
            ))
        }
        .await,
    )
}

async fn pause(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments(q): Segments<String>,
) -> Response {
    write(&shared, &who, &q, Write::Pause).await
}

async fn resume(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments(q): Segments<String>,
) -> Response {
    write(&shared, &who, &q, Write::Resume).await
}

async fn clear_dead(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments(q): Segments<String>,
) -> Response {
    write(&shared, &who, &q, Write::ClearDead).await
}

/// `{"id": "..."}` or `{"all_dead": true}`, with `"delay_ms"` (the
/// requeued entries due that long from now).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequeueBody {
    id: Option<String>,
    #[serde(default)]
    all_dead: bool,
    #[serde(default)]
    delay_ms: u64,
}

async fn requeue(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments(q): Segments<String>,
    body: Bytes,
) -> Response {
    let (what, delay_ms) = match serde_json::from_slice::<RequeueBody>(&body) {
        Ok(RequeueBody {
            id: Some(id),
            all_dead: false,
            delay_ms,
        }) => (Requeue::One(id), delay_ms),
        Ok(RequeueBody {
            id: None,
            all_dead: true,
            delay_ms,
        }) => (Requeue::AllDead, delay_ms),
        _ => {
            return error(&OpError::Invalid(
                "the body is {\"id\": \"...\"} or {\"all_dead\": true}, with \"delay_ms\": n if not now"
                    .to_owned(),
            ));
        }
    };
    let delay = std::time::Duration::from_millis(delay_ms);
    write(&shared, &who, &q, Write::Requeue { what, delay }).await
}

async fn remove(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, entry)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::Remove { id: entry }).await
}

async fn cancel(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, entry)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::Cancel { id: entry }).await
}

async fn run_now(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::RunNow { name }).await
}

async fn unschedule(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::Unschedule { name }).await
}

async fn pause_schedule(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::PauseSchedule { name }).await
}

async fn resume_schedule(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, name)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::ResumeSchedule { name }).await
}

/// `{"action": "requeue" | "delete", "ids": [...], "delay_ms"?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    action: String,
    ids: Vec<String>,
    #[serde(default)]
    delay_ms: Option<u64>,
}

async fn bulk(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments(q): Segments<String>,
    body: Bytes,
) -> Response {
    let shape = "the body is {\"action\": \"requeue\" | \"delete\", \"ids\": [\"...\"], \"delay_ms\": n (requeue only)}";
    let bulk_body = match serde_json::from_slice::<BulkBody>(&body) {
        Ok(b) => b,
        Err(e) => return error(&OpError::Invalid(format!("{shape}: {e}"))),
    };
    let bulk = match (bulk_body.action.as_str(), bulk_body.delay_ms) {
        ("requeue", delay) => Bulk::Requeue {
            delay: std::time::Duration::from_millis(delay.unwrap_or(0)),
        },
        ("delete", None) => Bulk::Delete,
        _ => return error(&OpError::Invalid(shape.to_owned())),
    };
    answer(
        async {
            let id = shared.ops.resolve(&q).await?;
            let outcomes = shared.ops.bulk(&who, &id, bulk, &bulk_body.ids).await?;
            Ok(BulkJson::of(&outcomes))
        }
        .await,
    )
}

async fn health(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    answer(
        async {
            let id = shared.ops.resolve(&q).await?;
            let (snapshot, health) = tokio::join!(shared.ops.snapshot(&id), shared.ops.health(&id));
            let due = snapshot.as_ref().map_err(Clone::clone)?.stats.due;
            let health = health?;
            let verdict = verdict(
                &snapshot,
                Some(&Ok(health.clone())),
                shared.latency_threshold,
            )
            .expect("read")?;
            Ok(HealthJson::of(
                &verdict,
                &health,
                due,
                shared.latency_threshold,
            ))
        }
        .await,
    )
}

async fn workers(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    answer(
        async {
            let id = shared.ops.resolve(&q).await?;
            let (snapshot, health) = tokio::join!(shared.ops.snapshot(&id), shared.ops.health(&id));
            let now = snapshot?.now();
            Ok(health?
                .workers
                .iter()
                .map(|w| WorkerJson::of(w, now))
                .collect::<Vec<_>>())
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    limit: Option<String>,
    cursor: Option<String>,
}

async fn running(
    State(shared): State<Arc<Shared>>,
    Segments(q): Segments<String>,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(&OpError::Invalid(
            "the query takes limit=N and cursor=C".to_owned(),
        ));
    };
    answer(
        async {
            let limit = query.limit.as_deref().map(parse_limit).transpose()?;
            let id = shared.ops.resolve(&q).await?;
            let (snapshot, running) = tokio::join!(
                shared.ops.snapshot(&id),
                shared
                    .ops
                    .running(&id, query.cursor.as_deref(), limit.unwrap_or(DEFAULT_LIMIT))
            );
            let (now, running) = (snapshot?.now(), running?);
            let workers = running.workers.unwrap_or_default();
            Ok(RunningPageJson {
                running: running
                    .page
                    .entries
                    .iter()
                    .map(|e| ActiveRunJson::of(e, &workers, now))
                    .collect(),
                next: running.page.next.as_ref().map(ToString::to_string),
            })
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    /// How far back: a period such as `1h` (the default) or `30m`, at
    /// most a day (what the store keeps).
    last: Option<String>,
}

async fn history(
    State(shared): State<Arc<Shared>>,
    Segments(q): Segments<String>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(&OpError::Invalid(
            "the query takes last=PERIOD (1h unless given, at most 1d)".to_owned(),
        ));
    };
    answer(
        async {
            let last = match query.last.as_deref() {
                Some(text) => parse_period(text)?,
                None => std::time::Duration::from_secs(3600),
            };
            let id = shared.ops.resolve(&q).await?;
            let now = shared.ops.store_now(&id).await?;
            let since = now - last.min(std::time::Duration::from_secs(86_400));
            let minutes = shared.ops.history_since(&id, since).await?;
            Ok(HistoryJson::of(since, &minutes))
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
struct AuditQuery {
    store: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// `{"store", "records": [...], "next"}`: a page of a store's audit log,
/// newest first.
#[derive(Debug, Serialize)]
struct AuditJson {
    store: String,
    records: Vec<RecordJson>,
    next: Option<String>,
}

async fn audit(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(&OpError::Invalid(
            "the query takes store=S, limit=N and cursor=C".to_owned(),
        ));
    };
    answer(
        async {
            let limit = query.limit.as_deref().map(parse_limit).transpose()?;
            let source = shared.ops.source_of(query.store.as_deref())?;
            let page = shared
                .ops
                .audit_page(
                    source,
                    query.cursor.as_deref(),
                    limit.unwrap_or(DEFAULT_LIMIT),
                )
                .await?;
            let store = shared.ops.identity(source).to_owned();
            Ok(AuditJson {
                records: page
                    .records
                    .iter()
                    .map(|r| RecordJson::of(r, &store))
                    .collect(),
                store,
                next: page.next.as_ref().map(ToString::to_string),
            })
        }
        .await,
    )
}

async fn limits(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    answer(
        async {
            let id = shared.ops.resolve(&q).await?;
            Ok(LimitsJson::of(&shared.ops.limits(&id).await?))
        }
        .await,
    )
}

/// `{"key": "...", "concurrency": n | null, "rate": {"max": n, "per_ms":
/// n} | null}`: an upsert.
async fn set_limit(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments(q): Segments<String>,
    body: Bytes,
) -> Response {
    let set = match serde_json::from_slice::<SetLimitJson>(&body) {
        Ok(set) => set,
        Err(e) => {
            return error(&OpError::Invalid(format!(
                "the body is {{\"key\": \"...\", \"concurrency\": n | null, \
                 \"rate\": {{\"max\": n, \"per_ms\": n}} | null}}: {e}"
            )));
        }
    };
    let limit = set.limit();
    write(
        &shared,
        &who,
        &q,
        Write::SetLimit {
            key: set.key,
            limit,
        },
    )
    .await
}

async fn remove_limit(
    State(shared): State<Arc<Shared>>,
    who: Who,
    Segments((q, key)): Segments<(String, String)>,
) -> Response {
    write(&shared, &who, &q, Write::RemoveLimit { key }).await
}
