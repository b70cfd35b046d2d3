//! The web faces: HTML pages, the JSON API under `/api/` and `/metrics`,
//! as one [`axum::Router`] an application nests where it likes (under its
//! own authentication), or that `punctual-admin serve` serves alone.

mod api;
mod chart;
mod flash;
mod guard;
mod metrics;
mod pages;
mod runs;
pub(crate) mod serve;
mod views;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::middleware;
use axum::routing::{get, post};
use punctual::memory::MemoryQueue;
use serde_json::Value;

use crate::ops::{Ops, Policy, wall_clock};
use crate::store::{Source, identities};

/// How often the dashboard samples every queue's counts for its charts
/// (through the same cache as the pages, so it adds no read while people
/// watch).
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The dashboard: every queue of the stores it is given, as pages, a JSON
/// API and Prometheus metrics, in one [`axum::Router`].
///
/// Made by [`Dashboard::builder`]. The router links within itself by
/// relative paths worked out from each request, so it can be nested under
/// any path (`app.nest("/jobs", router)`); it samples the counts of every
/// queue every 5 seconds for its charts once it has served a request, and
/// stops when the router is dropped.
///
/// # Examples
///
/// ```no_run
/// use axum::Router;
/// use punctual_admin::Dashboard;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let jobs = Dashboard::builder()
///     .redis("redis://127.0.0.1/")
///     .postgres("postgres://app@127.0.0.1/shop", "punctual")
///     .read_only(true)
///     .router();
/// // Behind the application's own authentication layer:
/// let app: Router = Router::new().nest("/jobs", jobs);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app).await
/// # }
/// ```
#[derive(Clone)]
pub struct Dashboard {
    shared: Arc<Shared>,
}

impl fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dashboard")
            .field("ops", &self.shared.ops)
            .field("read_only", &self.shared.read_only)
            .field("token", &self.shared.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) ops: Arc<Ops>,
    pub(crate) read_only: bool,
    pub(crate) token: Option<String>,
    /// When the dashboard started (its charts begin here).
    pub(crate) started: SystemTime,
    /// The latency over which a queue's mark is amber.
    pub(crate) latency_threshold: Duration,
    /// The lines shown after a button.
    pub(crate) flashes: flash::Flashes,
    sampling: AtomicBool,
}

impl Shared {
    /// Starts sampling the queues' counts, once, from inside the runtime
    /// that serves the router. The task holds the dashboard weakly: it
    /// ends when the router is dropped.
    fn start_sampling(self: &Arc<Self>) {
        if self.sampling.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Shared> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                let ops = shared.ops.clone();
                drop(shared);
                ops.queues_with(true).await;
            }
        });
    }
}

impl Dashboard {
    /// A builder with no store yet: add some with
    /// [`redis`](DashboardBuilder::redis),
    /// [`postgres`](DashboardBuilder::postgres) and
    /// [`memory`](DashboardBuilder::memory).
    pub fn builder() -> DashboardBuilder {
        DashboardBuilder {
            sources: Vec::new(),
            memory: Vec::new(),
            read_only: false,
            token: None,
            refresh: Policy::SHARED.stats_ttl,
            latency_threshold: crate::health::DEFAULT_THRESHOLD,
        }
    }

    /// The pages, the JSON API and `/metrics`, as a router to serve or to
    /// nest. Routers made from one dashboard share its caches.
    pub fn router(&self) -> Router {
        let shared = self.shared.clone();
        Router::new()
            .route("/", get(pages::overview))
            .route("/queues/{q}", get(pages::queue))
            .route("/queues/{q}/entries", get(pages::entries))
            .route("/queues/{q}/entries/{id}", get(pages::entry))
            .route("/queues/{q}/entries/{id}/remove", post(pages::remove))
            .route("/queues/{q}/entries/{id}/cancel", post(pages::cancel))
            .route("/queues/{q}/running", get(pages::running))
            .route("/queues/{q}/workers", get(pages::workers))
            .route("/queues/{q}/bulk", post(pages::bulk))
            .route("/audit", get(pages::audit))
            .route("/queues/{q}/pause", post(pages::pause))
            .route("/queues/{q}/resume", post(pages::resume))
            .route("/queues/{q}/clear-dead", post(pages::clear_dead))
            .route("/queues/{q}/requeue", post(pages::requeue))
            .route("/queues/{q}/schedules/{name}/run-now", post(pages::run_now))
            .route(
                "/queues/{q}/schedules/{name}/unschedule",
                post(pages::unschedule),
            )
            .route(
                "/queues/{q}/schedules/{name}/pause",
                post(pages::pause_schedule),
            )
            .route(
                "/queues/{q}/schedules/{name}/resume",
                post(pages::resume_schedule),
            )
            .route("/queues/{q}/limits", post(pages::set_limit))
            .route("/queues/{q}/limits/{key}/remove", post(pages::remove_limit))
            .route("/login", get(guard::login_form).post(guard::login))
            .route("/logout", post(guard::logout))
            .route("/assets/style.css", get(pages::style))
            .route("/assets/local-time.js", get(pages::script))
            .route("/metrics", get(metrics::metrics))
            .merge(api::routes())
            .fallback(pages::not_found)
            .layer(middleware::from_fn_with_state(shared.clone(), guard::guard))
            .with_state(shared)
    }
}

/// Builds a [`Dashboard`]; made by [`Dashboard::builder`].
pub struct DashboardBuilder {
    sources: Vec<Source>,
    memory: Vec<MemoryQueue<Value>>,
    read_only: bool,
    token: Option<String>,
    refresh: Duration,
    latency_threshold: Duration,
}

impl fmt::Debug for DashboardBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DashboardBuilder")
            .field(
                "sources",
                &self
                    .sources
                    .iter()
                    .map(Source::describe)
                    .collect::<Vec<_>>(),
            )
            .field("memory", &self.memory.len())
            .field("read_only", &self.read_only)
            .field("refresh", &self.refresh)
            .field("latency_threshold", &self.latency_threshold)
            .finish_non_exhaustive()
    }
}

impl DashboardBuilder {
    /// Every queue of the Redis server at `url` (`rediss://` for TLS),
    /// found without being declared. Nothing connects until a request
    /// needs it.
    ///
    /// `url` may start with a label, `LABEL=URL` (letters, digits, `-`,
    /// `_`): the queue `jobs` of that server is then `LABEL:jobs`, and its
    /// JSON and metrics say `LABEL`. Without one, the first Redis server
    /// is `redis` and the n-th `redis@n` (`redis@2:jobs`).
    ///
    /// # Panics
    ///
    /// If the label is already another store's, or is `redis`, `postgres`
    /// or `memory`.
    #[track_caller]
    pub fn redis(self, url: &str) -> Self {
        self.add(Source::redis(url))
    }

    /// Every queue in `schema` (`punctual` unless the application chose
    /// another) of the PostgreSQL database at `url`, through one small pool
    /// of connections made when a request first needs one.
    ///
    /// `url` may start with a label, `LABEL=URL`, as for
    /// [`redis`](Self::redis); without one the first PostgreSQL store is
    /// `postgres` and the n-th `postgres@n` (two schemas of one database
    /// are two stores).
    ///
    /// # Panics
    ///
    /// If the label is already another store's, or is `redis`, `postgres`
    /// or `memory`.
    #[track_caller]
    pub fn postgres(self, url: &str, schema: &str) -> Self {
        self.add(Source::postgres(url, schema))
    }

    #[track_caller]
    fn add(mut self, source: Source) -> Self {
        self.sources.push(source);
        if let Err(why) = identities(&self.sources) {
            panic!("punctual-admin: {why}");
        }
        self
    }

    /// A queue of this process's memory (a `MemoryQueue` handle whose
    /// values are JSON: `queue.typed()` turns a typed one into it).
    pub fn memory(mut self, queue: MemoryQueue<Value>) -> Self {
        self.memory.push(queue);
        self
    }

    /// With `true`, the pages show no write button and every write (any
    /// request but `GET` and `HEAD`, the login form apart) is answered
    /// with 403.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Every request must carry `token`: `Authorization: Bearer <token>`,
    /// or the cookie the dashboard's login form sets. What
    /// `punctual-admin serve --token` does; an application that nests the
    /// router under its own authentication needs none.
    ///
    /// # Panics
    ///
    /// If `token` is empty.
    #[track_caller]
    pub fn token(mut self, token: &str) -> Self {
        assert!(!token.is_empty(), "the dashboard's token must not be empty");
        self.token = Some(token.to_owned());
        self
    }

    /// How long a queue's counts (read with its clock and paused flag) and
    /// its timeline stay good: each is read at most once per `every`
    /// however many people watch (3 s unless changed). Once that long has
    /// passed, a page shows the counts it has while one task reads them
    /// again, so no page waits on a slow count (a PostgreSQL queue's counts
    /// cost the database a pass over its rows). Zero reads them for every
    /// request.
    pub fn refresh_every(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// How long the oldest due entry of a queue may wait before its
    /// health mark turns amber (60 s unless changed). A queue is also
    /// amber when one of its workers is late (its record not refreshed
    /// for 10 s, by the store's clock), and red when entries are due and
    /// no worker is alive.
    pub fn latency_threshold(mut self, threshold: Duration) -> Self {
        self.latency_threshold = threshold;
        self
    }

    /// The dashboard.
    pub fn build(self) -> Dashboard {
        let mut sources = self.sources;
        if !self.memory.is_empty() {
            sources.push(Source::memory(self.memory));
        }
        Dashboard {
            shared: Arc::new(Shared {
                ops: Arc::new(Ops::new(
                    sources,
                    Policy {
                        stats_ttl: self.refresh,
                        ..Policy::SHARED
                    },
                )),
                read_only: self.read_only,
                token: self.token,
                started: wall_clock(),
                latency_threshold: self.latency_threshold,
                flashes: flash::Flashes::default(),
                sampling: AtomicBool::new(false),
            }),
        }
    }

    /// The dashboard's router: `self.build().router()`.
    pub fn router(self) -> Router {
        self.build().router()
    }

    pub(crate) fn sources(mut self, sources: Vec<Source>) -> Self {
        self.sources.extend(sources);
        self
    }
}

/// The path the router is nested under (`""` at the root), worked out from
/// the request: every link of the pages starts with it.
#[derive(Clone, Debug)]
pub(crate) struct Base(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path();
        let original = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(inner, |o| o.0.path());
        Ok(Base(base_of(original, inner)))
    }
}

fn base_of(original: &str, inner: &str) -> String {
    if let Some(base) = original.strip_suffix(inner) {
        return base.trim_end_matches('/').to_owned();
    }
    if inner == "/" {
        return original.trim_end_matches('/').to_owned();
    }
    String::new()
}

/// `axum`'s `Path`, refused in the face's own shape (`{"error"}` under
/// `/api/`, a page elsewhere) rather than as plain text.
#[derive(Debug)]
pub(crate) struct Segments<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for Segments<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = axum::response::Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Segments(value)),
            Err(e) => Err(unreadable(parts, e.body_text()).await),
        }
    }
}

/// `axum`'s `Query`, refused as [`Segments`] is.
#[derive(Debug)]
pub(crate) struct Params<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for Params<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = axum::response::Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Params(value)),
            Err(e) => Err(unreadable(parts, e.body_text()).await),
        }
    }
}

/// A 400 for a request the dashboard cannot read, in the face's shape.
async fn unreadable(parts: &mut Parts, why: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    let error = crate::error::OpError::Invalid(why);
    let path = parts.uri.path();
    if path == "/api" || path.starts_with("/api/") {
        return api::error(&error);
    }
    let Ok(base) = Base::from_request_parts(parts, &()).await;
    let status = axum::http::StatusCode::BAD_REQUEST;
    let ctx = views::Ctx::bare(&base);
    (status, views::error_page(&ctx, status, error.message())).into_response()
}

/// A path segment or query value, percent-encoded (`:` and `@` kept, as
/// in `redis@2:jobs`).
pub(crate) fn enc(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~')
        .remove(b':')
        .remove(b'@');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_what_nesting_added() {
        assert_eq!(base_of("/queues/x", "/queues/x"), "");
        assert_eq!(base_of("/jobs/queues/x", "/queues/x"), "/jobs");
        assert_eq!(base_of("/jobs", "/"), "/jobs");
        assert_eq!(base_of("/jobs/", "/"), "/jobs");
        assert_eq!(base_of("/", "/"), "");
    }

    #[test]
    fn names_are_encoded_for_paths() {
        assert_eq!(enc("redis:jobs"), "redis:jobs");
        assert_eq!(enc("redis@2:jobs"), "redis@2:jobs");
        assert_eq!(enc("a/b #1?"), "a%2Fb%20%231%3F");
    }
}
