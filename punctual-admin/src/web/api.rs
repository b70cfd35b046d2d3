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
use super::{Segments, Shared};
use crate::error::OpError;
use crate::json::{
    EntryJson, ErrorJson, LimitsJson, PageJson, QueueJson, ScheduleJson, SetLimitJson, WriteJson,
};
use crate::ops::{DEFAULT_LIMIT, QueueId, Requeue, parse_limit, parse_state};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/queues", get(queues))
        .route("/api/queues/{q}", get(stats))
        .route("/api/queues/{q}/entries", get(entries))
        .route("/api/queues/{q}/entries/{id}", get(entry).delete(remove))
        .route("/api/queues/{q}/schedules", get(schedules))
        .route(
            "/api/queues/{q}/schedules/{name}",
            axum::routing::delete(unschedule),
        )
        .route("/api/queues/{q}/schedules/{name}/run-now", post(run_now))
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
}

async fn entries(
    State(shared): State<Arc<Shared>>,
    Segments(q): Segments<String>,
    query: Result<Query<EntriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(&OpError::Invalid(
            "the query takes state=pending|due|leased|dead, limit=N and cursor=C".to_owned(),
        ));
    };
    answer(
        async {
            let state = parse_state(query.state.as_deref().ok_or_else(|| {
                OpError::Invalid("say which entries: state=pending|due|leased|dead".to_owned())
            })?)?;
            let limit = query.limit.as_deref().map(parse_limit).transpose()?;
            let id = shared.ops.resolve(&q).await?;
            let page = shared
                .ops
                .entries(
                    &id,
                    state,
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
            Ok(EntryJson::of(&shared.ops.entry(&id, &entry).await?))
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

/// Resolves `q` and runs a write on it: `{"ok": true, "changed": N}`.
async fn write<F>(shared: &Shared, q: &str, op: F) -> Response
where
    F: AsyncFnOnce(&QueueId) -> Result<u64, OpError>,
{
    answer(
        async {
            let id = shared.ops.resolve(q).await?;
            Ok(WriteJson::changed(op(&id).await?))
        }
        .await,
    )
}

async fn pause(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    write(&shared, &q, async |id| shared.ops.pause(id).await).await
}

async fn resume(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    write(&shared, &q, async |id| shared.ops.resume(id).await).await
}

async fn clear_dead(State(shared): State<Arc<Shared>>, Segments(q): Segments<String>) -> Response {
    write(&shared, &q, async |id| shared.ops.clear_dead(id).await).await
}

/// `{"id": "..."}` or `{"all_dead": true}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequeueBody {
    id: Option<String>,
    #[serde(default)]
    all_dead: bool,
}

async fn requeue(
    State(shared): State<Arc<Shared>>,
    Segments(q): Segments<String>,
    body: Bytes,
) -> Response {
    let what = match serde_json::from_slice::<RequeueBody>(&body) {
        Ok(RequeueBody {
            id: Some(id),
            all_dead: false,
        }) => Requeue::One(id),
        Ok(RequeueBody {
            id: None,
            all_dead: true,
        }) => Requeue::AllDead,
        _ => {
            return error(&OpError::Invalid(
                "the body is {\"id\": \"...\"} or {\"all_dead\": true}".to_owned(),
            ));
        }
    };
    write(&shared, &q, async |id| shared.ops.requeue(id, &what).await).await
}

async fn remove(
    State(shared): State<Arc<Shared>>,
    Segments((q, entry)): Segments<(String, String)>,
) -> Response {
    write(&shared, &q, async |id| shared.ops.remove(id, &entry).await).await
}

async fn run_now(
    State(shared): State<Arc<Shared>>,
    Segments((q, name)): Segments<(String, String)>,
) -> Response {
    write(&shared, &q, async |id| shared.ops.run_now(id, &name).await).await
}

async fn unschedule(
    State(shared): State<Arc<Shared>>,
    Segments((q, name)): Segments<(String, String)>,
) -> Response {
    write(&shared, &q, async |id| {
        shared.ops.unschedule(id, &name).await
    })
    .await
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
    write(&shared, &q, async |id| {
        shared.ops.set_limit(id, &set.key, set.limit()).await
    })
    .await
}

async fn remove_limit(
    State(shared): State<Arc<Shared>>,
    Segments((q, key)): Segments<(String, String)>,
) -> Response {
    write(&shared, &q, async |id| {
        shared.ops.remove_limit(id, &key).await
    })
    .await
}
