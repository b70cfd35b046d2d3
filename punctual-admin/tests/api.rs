//! The JSON API, the pages and `/metrics` over HTTP: the dashboard's
//! router called as a service, in front of a seeded Redis and PostgreSQL
//! (and a memory queue): every route and its document, the status codes,
//! the token, read-only mode, the same-origin check on writes, nesting,
//! two stores of one kind told apart (and their metrics), pages of 0 and
//! of more than 1000 entries, and the cache that makes many viewers cost
//! one read.

mod common;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use common::pg::PgDb;
use common::redis_server::RedisServer;
use common::{
    DEFAULT_LIMIT, KEYED_DUE, SEEDED, TENANT_A, pg_queue_in, redis_queue, seed_keyed, seed_pg,
    seed_redis,
};
use punctual::durable::{Durable, EntryState, KeyLimit, Rate};
use punctual::memory::MemoryQueue;
use punctual::postgres::PgQueue;
use punctual::redis::RedisQueue;
use punctual_admin::{Dashboard, DashboardBuilder};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The host the test requests are sent to, and the Origin of a page of it.
const HOST: &str = "dash.test";
const ORIGIN: &str = "http://dash.test";

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// One request through `router`; `headers` besides `Host`.
async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, HOST);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn get(router: &Router, uri: &str) -> Answer {
    call(router, "GET", uri, &[], "").await
}

/// A write as the dashboard's own pages send it.
async fn write(router: &Router, method: &str, uri: &str, body: &str) -> Answer {
    call(
        router,
        method,
        uri,
        &[("origin", ORIGIN), ("content-type", "application/json")],
        body,
    )
    .await
}

#[track_caller]
fn status(a: &Answer, want: StatusCode) {
    assert_eq!(a.status, want, "{}", a.body);
}

struct Seeded {
    redis: RedisServer,
    _db: PgDb,
    pg_url: String,
    schema: String,
    r: RedisQueue<serde_json::Value>,
    p: PgQueue<serde_json::Value>,
}

impl Seeded {
    /// Redis `orders` (seeded) and `emails`; PostgreSQL `orders` (seeded)
    /// in `schema`.
    async fn new(schema: &str) -> Seeded {
        let redis = RedisServer::start_in_memory();
        let db = PgDb::new();
        let pg_url = db.url();
        let r = redis_queue(&redis.url(), "orders").await;
        let p = pg_queue_in(&pg_url, schema, "orders").await;
        // The leased entries stay leased (an hour) once let go.
        drop(seed_redis(&r).await);
        drop(seed_pg(&p).await);
        redis_queue(&redis.url(), "emails")
            .await
            .insert(&json!({"to": "a@example.com"}), Duration::from_secs(600))
            .await
            .unwrap();
        Seeded {
            redis,
            _db: db,
            pg_url,
            schema: schema.to_owned(),
            r,
            p,
        }
    }

    fn builder(&self) -> DashboardBuilder {
        Dashboard::builder()
            .redis(&self.redis.url())
            .postgres(&self.pg_url, &self.schema)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_answer_the_documents_of_the_command_line() {
    let s = Seeded::new("api_reads").await;
    let memory: MemoryQueue<Value> = MemoryQueue::new("local");
    memory
        .insert(&json!({"n": 1}), Duration::from_secs(60))
        .await
        .unwrap();
    let app = s.builder().memory(memory).router();

    let all = get(&app, "/api/queues").await;
    status(&all, StatusCode::OK);
    assert_eq!(all.headers[header::CONTENT_TYPE], "application/json");
    let names: Vec<String> = all
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            format!(
                "{}:{}:{}",
                q["store"].as_str().unwrap(),
                q["name"].as_str().unwrap(),
                q["pending"]
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "redis:emails:1".to_owned(),
            format!("redis:orders:{}", SEEDED.pending),
            format!("postgres:orders:{}", SEEDED.pending),
            "memory:local:1".to_owned()
        ]
    );

    let both = get(&app, "/api/queues/orders").await;
    status(&both, StatusCode::BAD_REQUEST);
    assert!(
        both.json()["error"]
            .as_str()
            .unwrap()
            .contains("redis:orders or postgres:orders")
    );
    for q in ["redis:orders", "redis%3Aorders"] {
        let one = get(&app, &format!("/api/queues/{q}")).await;
        status(&one, StatusCode::OK);
        assert_eq!(
            (&one.json()["store"], &one.json()["dead"]),
            (&json!("redis"), &json!(3))
        );
    }
    status(&get(&app, "/api/queues/nope").await, StatusCode::NOT_FOUND);

    let dead = get(&app, "/api/queues/postgres:orders/entries?state=dead").await;
    status(&dead, StatusCode::OK);
    let dead = dead.json();
    assert_eq!(dead["entries"].as_array().unwrap().len(), 3);
    assert_eq!(dead["next"], Value::Null);
    assert_eq!(
        dead["entries"][1]["last_error"],
        "address not found: 221B Baker Street"
    );
    let page = get(
        &app,
        "/api/queues/redis:orders/entries?state=pending&limit=100",
    )
    .await
    .json();
    assert_eq!(page["entries"].as_array().unwrap().len(), 100);
    let next = page["next"].as_str().unwrap().to_owned();
    let rest = get(
        &app,
        &format!("/api/queues/redis:orders/entries?state=pending&limit=100&cursor={next}"),
    )
    .await
    .json();
    assert_eq!(
        rest["entries"].as_array().unwrap().len() as u64,
        SEEDED.pending - 100
    );
    assert_eq!(rest["next"], Value::Null);
    status(
        &get(
            &app,
            &format!("/api/queues/postgres:orders/entries?state=pending&cursor={next}"),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    status(
        &get(&app, "/api/queues/redis:orders/entries").await,
        StatusCode::BAD_REQUEST,
    );
    status(
        &get(&app, "/api/queues/redis:orders/entries?state=asleep").await,
        StatusCode::BAD_REQUEST,
    );
    status(
        &get(&app, "/api/queues/redis:orders/entries?state=dead&limit=x").await,
        StatusCode::BAD_REQUEST,
    );

    let entry = get(&app, "/api/queues/redis:orders/entries/leased-1").await;
    status(&entry, StatusCode::OK);
    let entry = entry.json();
    assert_eq!(
        (&entry["state"], &entry["value"]["order"]),
        (&json!("leased"), &json!(7))
    );
    assert!(entry["lease_until"].is_string());
    status(
        &get(&app, "/api/queues/redis:orders/entries/nope").await,
        StatusCode::NOT_FOUND,
    );

    let schedules = get(&app, "/api/queues/redis:orders/schedules").await.json();
    let names: Vec<&str> = schedules
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"cleanup") && names.contains(&"nightly-report"));

    let nowhere = get(&app, "/api/nope").await;
    status(&nowhere, StatusCode::NOT_FOUND);
    assert!(nowhere.json()["error"].is_string());

    // The pages show what the API answers.
    let overview = get(&app, "/").await;
    status(&overview, StatusCode::OK);
    assert_eq!(
        overview.headers[header::X_FRAME_OPTIONS],
        "DENY",
        "no framing: clickjacking"
    );
    assert_eq!(
        overview.headers[header::CONTENT_SECURITY_POLICY],
        "frame-ancestors 'none'"
    );
    assert!(
        overview.body.contains(r#"href="/queues/redis:orders""#),
        "links by store:name"
    );
    assert!(
        overview.body.contains(r#"href="/queues/emails""#),
        "and by name when unique"
    );
    assert!(overview.body.contains("<svg"), "charts");
    let queue = get(&app, "/queues/postgres:orders").await;
    status(&queue, StatusCode::OK);
    for part in [
        "Next hour",
        "nightly-report",
        "every 1h skip",
        common::cleanup_spec(),
        "class=\"timeline\"",
        "The store's clock",
    ] {
        assert!(queue.body.contains(part), "{part} on the queue page");
    }
    let page = get(
        &app,
        "/queues/postgres:orders/entries?state=dead&order=oldest",
    )
    .await;
    assert!(page.body.contains("card declined (issuer code 51)"));
    let entry = get(&app, "/queues/postgres:orders/entries/dead-2").await;
    status(&entry, StatusCode::OK);
    assert!(
        entry.body.contains("&quot;order&quot;: 101"),
        "the value, pretty"
    );
    status(&get(&app, "/queues/nope").await, StatusCode::NOT_FOUND);
    status(
        &get(&app, "/queues/redis:orders/entries/nope").await,
        StatusCode::NOT_FOUND,
    );
    status(&get(&app, "/nowhere").await, StatusCode::NOT_FOUND);
    let css = get(&app, "/assets/style.css").await;
    assert_eq!(css.headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_change_the_store() {
    let s = Seeded::new("api_writes").await;
    let app = s.builder().router();
    let ok = |n: u64| json!({"ok": true, "changed": n});

    let a = write(&app, "POST", "/api/queues/redis:orders/pause", "").await;
    status(&a, StatusCode::OK);
    assert_eq!(a.json(), ok(1));
    assert!(s.r.is_paused().await.unwrap());
    assert_eq!(
        get(&app, "/api/queues/redis:orders").await.json()["paused"],
        true,
        "the cache forgot"
    );
    assert_eq!(
        write(&app, "POST", "/api/queues/redis:orders/pause", "")
            .await
            .json(),
        ok(0)
    );
    assert_eq!(
        write(&app, "POST", "/api/queues/redis:orders/resume", "")
            .await
            .json(),
        ok(1)
    );
    assert!(!s.r.is_paused().await.unwrap());

    assert_eq!(
        write(
            &app,
            "POST",
            "/api/queues/redis:orders/requeue",
            r#"{"id": "dead-3"}"#
        )
        .await
        .json(),
        ok(1)
    );
    assert_eq!(
        s.r.entry("dead-3").await.unwrap().unwrap().state,
        EntryState::Due
    );
    assert_eq!(
        write(
            &app,
            "POST",
            "/api/queues/redis:orders/requeue",
            r#"{"all_dead": true}"#
        )
        .await
        .json(),
        ok(2)
    );
    assert_eq!(s.r.stats().await.unwrap().dead, 0);
    status(
        &write(
            &app,
            "POST",
            "/api/queues/redis:orders/requeue",
            r#"{"id": "nope"}"#,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    for bad in [
        "",
        "{}",
        r#"{"id": 3}"#,
        r#"{"id": "a", "all_dead": true}"#,
        r#"{"all": true}"#,
    ] {
        status(
            &write(&app, "POST", "/api/queues/redis:orders/requeue", bad).await,
            StatusCode::BAD_REQUEST,
        );
    }

    assert_eq!(
        write(
            &app,
            "DELETE",
            "/api/queues/postgres:orders/entries/order-003",
            ""
        )
        .await
        .json(),
        ok(1)
    );
    assert!(s.p.entry("order-003").await.unwrap().is_none());
    status(
        &write(
            &app,
            "DELETE",
            "/api/queues/postgres:orders/entries/order-003",
            "",
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    assert_eq!(
        write(&app, "POST", "/api/queues/postgres:orders/clear-dead", "")
            .await
            .json(),
        ok(3)
    );
    assert_eq!(s.p.stats().await.unwrap().dead, 0);

    assert_eq!(
        write(
            &app,
            "POST",
            "/api/queues/postgres:orders/schedules/nightly-report/run-now",
            ""
        )
        .await
        .json(),
        ok(1)
    );
    let tick = s.p.entry("nightly-report").await.unwrap().unwrap();
    assert!(tick.due <= s.p.now().await.unwrap());
    status(
        &write(
            &app,
            "POST",
            "/api/queues/postgres:orders/schedules/nope/run-now",
            "",
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    assert_eq!(
        write(
            &app,
            "DELETE",
            "/api/queues/postgres:orders/schedules/cleanup",
            ""
        )
        .await
        .json(),
        ok(1)
    );
    assert_eq!(s.p.schedules().await.unwrap().len(), 1);
    status(
        &write(
            &app,
            "DELETE",
            "/api/queues/postgres:orders/schedules/cleanup",
            "",
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    status(
        &write(&app, "GET", "/api/queues/postgres:orders/pause", "").await,
        StatusCode::METHOD_NOT_ALLOWED,
    );

    // A page's button: a form POST, answered with a redirect back.
    let form = call(
        &app,
        "POST",
        "/queues/redis:orders/pause",
        &[
            ("origin", ORIGIN),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "back=%2Fqueues%2Fredis%3Aorders",
    )
    .await;
    status(&form, StatusCode::SEE_OTHER);
    let location = form.headers[header::LOCATION].to_str().unwrap();
    assert!(
        location.starts_with("/queues/redis:orders?done="),
        "{location}"
    );
    assert!(s.r.is_paused().await.unwrap());
    // The line after the button is the server's, kept under the key the
    // redirect names; a `done` of anyone else's making shows nothing.
    let after = get(&app, location).await;
    assert!(
        after.body.contains("class=\"flash\"") && after.body.contains("Paused orders"),
        "{}",
        after.body
    );
    let forged = get(&app, "/queues/redis:orders?done=Everything%20is%20fine").await;
    status(&forged, StatusCode::OK);
    assert!(!forged.body.contains("class=\"flash\""));
    assert!(!forged.body.contains("Everything is fine"));
    // Deleting every dead letter wants its box ticked.
    let unticked = call(
        &app,
        "POST",
        "/queues/redis:orders/clear-dead",
        &[
            ("origin", ORIGIN),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "back=%2F",
    )
    .await;
    status(&unticked, StatusCode::BAD_REQUEST);
    // A redirect never leaves the dashboard.
    let away = call(
        &app,
        "POST",
        "/queues/redis:orders/resume",
        &[
            ("origin", ORIGIN),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "back=%2F%2Fevil.example%2F",
    )
    .await;
    assert!(
        away.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/queues/redis:orders?done=")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safety_token_read_only_and_same_origin() {
    let s = Seeded::new("api_safety").await;

    // Writes come from the dashboard's own pages.
    let app = s.builder().router();
    for headers in [
        vec![],
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        vec![("referer", "http://evil.example/page")],
        vec![("origin", "http://dash.test:8081")],
    ] {
        let a = call(&app, "POST", "/api/queues/redis:orders/pause", &headers, "").await;
        status(&a, StatusCode::FORBIDDEN);
        assert!(a.json()["error"].as_str().unwrap().contains("Origin"));
        let form = call(&app, "POST", "/queues/redis:orders/pause", &headers, "").await;
        status(&form, StatusCode::FORBIDDEN);
    }
    assert!(
        !s.r.is_paused().await.unwrap(),
        "nothing forged got through"
    );
    let by_referer = call(
        &app,
        "POST",
        "/api/queues/redis:orders/pause",
        &[("referer", "http://dash.test/queues/x")],
        "",
    )
    .await;
    status(&by_referer, StatusCode::OK);
    assert!(s.r.is_paused().await.unwrap());

    // Read-only: no button, every write 403, reads as usual.
    let ro = s.builder().read_only(true).router();
    let page = get(&ro, "/queues/redis:orders").await;
    status(&page, StatusCode::OK);
    assert!(!page.body.contains("data-action"), "no write button");
    assert!(page.body.contains("read-only"));
    let entries = get(&ro, "/queues/redis:orders/entries?state=dead&order=oldest").await;
    assert!(entries.body.contains("dead-1") && !entries.body.contains("data-action"));
    for (method, uri) in [
        ("POST", "/api/queues/redis:orders/resume"),
        ("DELETE", "/api/queues/redis:orders/entries/order-001"),
        ("POST", "/queues/redis:orders/resume"),
        ("POST", "/queues/redis:orders/requeue"),
    ] {
        status(
            &write(&ro, method, uri, r#"{"all_dead": true}"#).await,
            StatusCode::FORBIDDEN,
        );
    }
    assert!(
        s.r.is_paused().await.unwrap(),
        "still paused: the resume was refused"
    );
    assert!(s.r.entry("order-001").await.unwrap().is_some());
    status(&get(&ro, "/api/queues/redis:orders").await, StatusCode::OK);

    // A token: every request needs it.
    let locked = s.builder().token("s3cret token").router();
    let refused = get(&locked, "/api/queues").await;
    status(&refused, StatusCode::UNAUTHORIZED);
    assert!(
        refused.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    status(&get(&locked, "/metrics").await, StatusCode::UNAUTHORIZED);
    status(
        &call(
            &locked,
            "GET",
            "/api/queues",
            &[("authorization", "Bearer wrong")],
            "",
        )
        .await,
        StatusCode::UNAUTHORIZED,
    );
    let page = get(&locked, "/queues/redis:orders").await;
    status(&page, StatusCode::SEE_OTHER);
    assert_eq!(page.headers[header::LOCATION], "/login");
    status(&get(&locked, "/login").await, StatusCode::OK);
    let bearer = [("authorization", "Bearer s3cret token")];
    status(
        &call(&locked, "GET", "/api/queues", &bearer, "").await,
        StatusCode::OK,
    );
    // The header is no ambient credential: no Origin needed with it.
    let resumed = call(
        &locked,
        "POST",
        "/api/queues/redis:orders/resume",
        &bearer,
        "",
    )
    .await;
    assert_eq!(resumed.json(), json!({"ok": true, "changed": 1}));
    let form = [
        ("origin", ORIGIN),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    status(
        &call(&locked, "POST", "/login", &form, "token=nope").await,
        StatusCode::UNAUTHORIZED,
    );
    let login = call(&locked, "POST", "/login", &form, "token=s3cret+token").await;
    status(&login, StatusCode::SEE_OTHER);
    let cookie = login.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let with_cookie = call(
        &locked,
        "GET",
        "/queues/redis:orders",
        &[("cookie", &pair)],
        "",
    )
    .await;
    status(&with_cookie, StatusCode::OK);
    assert!(with_cookie.body.contains("log out"));
    // A cookie is ambient: its writes still need the Origin.
    status(
        &call(
            &locked,
            "POST",
            "/api/queues/redis:orders/pause",
            &[("cookie", &pair)],
            "",
        )
        .await,
        StatusCode::FORBIDDEN,
    );
    status(
        &call(
            &locked,
            "POST",
            "/api/queues/redis:orders/pause",
            &[("cookie", &pair), ("origin", ORIGIN)],
            "",
        )
        .await,
        StatusCode::OK,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_nesting_and_one_read_for_many_viewers() {
    let s = Seeded::new("api_metrics").await;
    let dashboard = s.builder().build();
    let app = dashboard.router();

    let text = get(&app, "/metrics").await;
    status(&text, StatusCode::OK);
    assert!(
        text.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    for line in [
        "# TYPE punctual_queue_entries gauge",
        r#"punctual_queue_entries{messaging_system="punctual",messaging_destination_name="orders",punctual_store="redis",punctual_entry_state="dead"} 3"#,
        &format!(
            r#"punctual_queue_entries{{messaging_system="punctual",messaging_destination_name="orders",punctual_store="postgres",punctual_entry_state="pending"}} {}"#,
            SEEDED.pending
        ),
        r#"punctual_queue_paused{messaging_system="punctual",messaging_destination_name="emails",punctual_store="redis"} 0"#,
        "punctual_admin_read_errors 0",
    ] {
        assert!(
            text.body.lines().any(|l| l == line),
            "{line} in\n{}",
            text.body
        );
    }

    // Nested under a path: every link and the stylesheet carry it.
    let nested = Router::new().nest("/ops/jobs", dashboard.router());
    let page = get(&nested, "/ops/jobs").await;
    status(&page, StatusCode::OK);
    assert!(page.body.contains(r#"href="/ops/jobs/assets/style.css""#));
    assert!(
        page.body
            .contains(r#"href="/ops/jobs/queues/redis:orders""#)
    );
    status(
        &get(&nested, "/ops/jobs/assets/style.css").await,
        StatusCode::OK,
    );
    let form = call(
        &nested,
        "POST",
        "/ops/jobs/queues/emails/pause",
        &[
            ("origin", ORIGIN),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "back=%2Fqueues%2Femails",
    )
    .await;
    assert!(
        form.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/ops/jobs/queues/emails?done=")
    );

    // Ten viewers at once, five requests each, once the counts are stale:
    // one read of each queue's counts (the Redis scripts: clock, counts,
    // paused), not fifty.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let reads = |body: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix("punctual_admin_stats_reads_total "))
            .unwrap()
            .parse()
            .unwrap()
    };
    let evalsha = |info: String| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let reads_before = reads(&get(&app, "/metrics").await.body);
    let evalsha_before = evalsha(s.redis.cli(&["INFO", "commandstats"]));
    let mut viewers = tokio::task::JoinSet::new();
    for v in 0..10 {
        let app = app.clone();
        viewers.spawn(async move {
            for i in 0..5 {
                let uri = match (v + i) % 3 {
                    0 => "/",
                    1 => "/metrics",
                    _ => "/api/queues",
                };
                assert_eq!(get(&app, uri).await.status, StatusCode::OK);
            }
        });
    }
    while let Some(done) = viewers.join_next().await {
        done.unwrap();
    }
    let reads_after = reads(&get(&app, "/metrics").await.body);
    let evalsha_after = evalsha(s.redis.cli(&["INFO", "commandstats"]));
    assert!(
        reads_after - reads_before <= 3,
        "{reads_before} -> {reads_after}: one read per queue at most"
    );
    assert!(
        evalsha_after - evalsha_before <= 2 * 3,
        "{evalsha_before} -> {evalsha_after}"
    );
    assert!(reads_after >= 3, "the counts were read at all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_comes_back_is_seen_again_within_seconds() {
    let mut redis = RedisServer::start();
    redis_queue(&redis.url(), "jobs")
        .await
        .insert(&json!({"n": 1}), Duration::from_secs(600))
        .await
        .unwrap();
    redis.kill();
    let app = Dashboard::builder().redis(&redis.url()).router();

    // Down: the pages and the API say so, at once, without a stack trace.
    let overview = get(&app, "/").await;
    status(&overview, StatusCode::OK);
    assert!(
        overview.body.contains("Could not list"),
        "{}",
        overview.body
    );
    let queue = get(&app, "/api/queues/jobs").await;
    status(&queue, StatusCode::BAD_GATEWAY);
    assert!(queue.json()["error"].is_string());

    // Back: seen again within a few seconds, not when the list of queues
    // (read every 30 s) is next read.
    redis.restart();
    let back = tokio::time::Instant::now();
    loop {
        let a = get(&app, "/api/queues/jobs").await;
        if a.status == StatusCode::OK {
            assert_eq!(a.json()["pending"], 1);
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(8),
            "still {} {} after {:?}",
            a.status,
            a.body,
            back.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let overview = get(&app, "/").await;
    assert!(
        !overview.body.contains("Could not list"),
        "{}",
        overview.body
    );
}

/// A queue whose own name reads as `store:NAME` is linked by its
/// qualified name, so its page and buttons act on it, not on NAME of that
/// store; and what the pages and the API refuse is refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_look_qualified_and_bad_arguments() {
    let redis = RedisServer::start_in_memory();
    redis_queue(&redis.url(), "orders")
        .await
        .insert(&json!({"n": 1}), Duration::from_secs(600))
        .await
        .unwrap();
    let lookalike: MemoryQueue<Value> = MemoryQueue::new("redis:orders");
    for _ in 0..2 {
        lookalike
            .insert(&json!({"n": 2}), Duration::from_secs(600))
            .await
            .unwrap();
    }
    let app = Dashboard::builder()
        .redis(&redis.url())
        .memory(lookalike)
        .router();

    let overview = get(&app, "/").await;
    status(&overview, StatusCode::OK);
    assert!(
        overview
            .body
            .contains(r#"href="/queues/memory:redis:orders""#),
        "{}",
        overview.body
    );
    let page = get(&app, "/queues/memory:redis:orders").await;
    status(&page, StatusCode::OK);
    assert!(
        page.body
            .contains(r#"action="/queues/memory:redis:orders/pause""#)
    );
    assert_eq!(
        get(&app, "/api/queues/memory:redis:orders").await.json()["pending"],
        2
    );
    assert_eq!(
        get(&app, "/api/queues/redis:orders").await.json()["pending"],
        1
    );
}

/// Each sample of `/metrics` comes under its own family's `# TYPE` line,
/// as the text format (and OpenMetrics parsers) want.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_samples_follow_their_own_type_line() {
    let app = Dashboard::builder()
        .memory(MemoryQueue::new("jobs"))
        .router();
    let text = get(&app, "/metrics").await.body;
    let mut family = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap();
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            assert_eq!(name, family, "{line} under the TYPE of {family} in\n{text}");
        }
    }
}

/// After a button, the browser goes back within the dashboard only: a
/// `back` that a browser would read as another host (it drops tabs and
/// line breaks from URLs) is not followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_sends_the_browser_back_within_the_dashboard_only() {
    let app = Dashboard::builder()
        .memory(MemoryQueue::new("jobs"))
        .router();
    let form = [
        ("origin", ORIGIN),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    for back in [
        "%2F%09%2Fevil.example",
        "%2F%0A%2Fevil.example",
        "%2F%5Cevil.example",
    ] {
        let a = call(
            &app,
            "POST",
            "/queues/jobs/pause",
            &form,
            &format!("back={back}"),
        )
        .await;
        status(&a, StatusCode::SEE_OTHER);
        let to = a.headers[header::LOCATION].to_str().unwrap();
        assert!(to.starts_with("/queues/jobs?done="), "{back} -> {to:?}");
    }
}

/// A path or query the dashboard cannot read is answered in the face's
/// own shape: `{"error"}` under `/api/`, a page elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_paths_and_queries_are_answered_in_kind() {
    let app = Dashboard::builder()
        .memory(MemoryQueue::new("jobs"))
        .router();
    for uri in ["/api/queues/%FF", "/api/queues/jobs/entries/%FF"] {
        let a = get(&app, uri).await;
        status(&a, StatusCode::BAD_REQUEST);
        assert!(a.json()["error"].is_string(), "{uri}: {}", a.body);
    }
    for uri in [
        "/queues/%FF",
        "/queues/jobs/entries/%FF",
        "/queues/jobs?refresh=-1",
        "/queues/jobs/entries?state=pending&limit=abc",
    ] {
        let a = get(&app, uri).await;
        status(&a, StatusCode::BAD_REQUEST);
        assert!(
            a.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}: {}",
            a.body
        );
    }
}

/// A series of a Prometheus text: its name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// Every sample of a Prometheus text: its series and its value.
fn samples(text: &str) -> Vec<(Series, String)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("a value");
        let (name, mut labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let mut labels = Vec::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut value = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => value.push(chars.next().expect("an escaped character")),
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.push((key, value));
                    if chars.peek() == Some(&',') {
                        chars.next();
                    }
                }
                (name.to_owned(), labels)
            }
        };
        labels.sort();
        out.push(((name, labels), value.to_owned()));
    }
    out
}

/// Two Redis servers (one labelled `eu`) and two schemas of one
/// PostgreSQL database, each with a queue `plain`: the API lists each once
/// with its own `"source"` where its kind does not tell it apart, each is
/// reached by `STORE:plain` (reads, writes, pages and their links), and
/// `/metrics` has no two samples of one series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_of_one_kind_are_each_reachable() {
    let (red1, red2) = (
        RedisServer::start_in_memory(),
        RedisServer::start_in_memory(),
    );
    let db = PgDb::new();
    let pg = db.url();
    let r1 = redis_queue(&red1.url(), "plain").await;
    let r2 = redis_queue(&red2.url(), "plain").await;
    let p1 = pg_queue_in(&pg, "api_two_a", "plain").await;
    let p2 = pg_queue_in(&pg, "api_two_b", "plain").await;
    for (n, q) in [(1, &r1), (2, &r2)] {
        for i in 0..n {
            q.insert(&json!(i), Duration::from_secs(600)).await.unwrap();
        }
    }
    for (n, q) in [(3, &p1), (4, &p2)] {
        for i in 0..n {
            q.insert(&json!(i), Duration::from_secs(600)).await.unwrap();
        }
    }
    let app = Dashboard::builder()
        .redis(&red1.url())
        .redis(&format!("eu={}", red2.url()))
        .postgres(&pg, "api_two_a")
        .postgres(&pg, "api_two_b")
        .router();

    let all = get(&app, "/api/queues").await.json();
    let listed: Vec<(Value, Value, Value, Value)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["store"].clone(),
                q.get("source").cloned().unwrap_or(Value::Null),
                q["name"].clone(),
                q["pending"].clone(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (json!("redis"), Value::Null, json!("plain"), json!(1)),
            (json!("redis"), json!("eu"), json!("plain"), json!(2)),
            (json!("postgres"), Value::Null, json!("plain"), json!(3)),
            (
                json!("postgres"),
                json!("postgres@2"),
                json!("plain"),
                json!(4)
            ),
        ]
    );
    let both = get(&app, "/api/queues/plain").await;
    status(&both, StatusCode::BAD_REQUEST);
    assert!(
        both.json()["error"]
            .as_str()
            .unwrap()
            .ends_with("write redis:plain or eu:plain or postgres:plain or postgres@2:plain"),
        "{}",
        both.body
    );
    for (q, pending) in [
        ("redis:plain", 1),
        ("eu:plain", 2),
        ("postgres:plain", 3),
        ("postgres@2:plain", 4),
        ("postgres%402%3Aplain", 4),
    ] {
        let one = get(&app, &format!("/api/queues/{q}")).await;
        status(&one, StatusCode::OK);
        assert_eq!(one.json()["pending"], pending, "{q}");
        let page = get(&app, &format!("/api/queues/{q}/entries?state=pending")).await;
        status(&page, StatusCode::OK);
        assert_eq!(
            page.json()["entries"].as_array().unwrap().len(),
            pending,
            "{q}"
        );
    }
    // Writes reach the store named, and only it.
    let a = write(&app, "POST", "/api/queues/postgres@2:plain/pause", "").await;
    status(&a, StatusCode::OK);
    assert!(p2.is_paused().await.unwrap());
    assert!(!p1.is_paused().await.unwrap());
    let a = write(&app, "POST", "/api/queues/eu:plain/pause", "").await;
    status(&a, StatusCode::OK);
    assert!(r2.is_paused().await.unwrap());
    assert!(!r1.is_paused().await.unwrap());

    // The pages link each by its own qualified name, and act on it.
    let overview = get(&app, "/").await;
    for href in [
        "/queues/redis:plain",
        "/queues/eu:plain",
        "/queues/postgres:plain",
        "/queues/postgres@2:plain",
    ] {
        assert!(
            overview.body.contains(&format!(r#"href="{href}""#)),
            "{href} in\n{}",
            overview.body
        );
    }
    let page = get(&app, "/queues/postgres@2:plain").await;
    status(&page, StatusCode::OK);
    assert!(
        page.body
            .contains(r#"action="/queues/postgres@2:plain/resume""#)
    );
    assert!(page.body.contains(r#"data-source="postgres@2""#));
    let form = call(
        &app,
        "POST",
        "/queues/postgres@2:plain/resume",
        &[
            ("origin", ORIGIN),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "",
    )
    .await;
    status(&form, StatusCode::SEE_OTHER);
    assert!(!p2.is_paused().await.unwrap());

    // /metrics: one sample per series (Prometheus refuses a scrape with
    // two), the series of each store told apart.
    let text = get(&app, "/metrics").await.body;
    let all = samples(&text);
    let mut seen = std::collections::BTreeSet::new();
    for (series, _) in &all {
        assert!(seen.insert(series.clone()), "{series:?} twice in\n{text}");
    }
    let entries = all
        .iter()
        .filter(|((name, _), _)| name == "punctual_queue_entries")
        .count();
    assert_eq!(entries, 4 * 4, "four queues, four states\n{text}");
    assert!(
        text.lines().any(|l| l
            == r#"punctual_queue_paused{messaging_system="punctual",messaging_destination_name="plain",punctual_store="redis",punctual_source="eu"} 1"#),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l
            == r#"punctual_queue_paused{messaging_system="punctual",messaging_destination_name="plain",punctual_store="redis"} 0"#),
        "{text}"
    );
}

/// A label may name one store only.
#[test]
#[should_panic(expected = "two stores are labelled \"eu\"")]
fn a_label_given_twice_is_refused() {
    let _ = Dashboard::builder()
        .redis("eu=redis://127.0.0.1:1/")
        .postgres("eu=postgres://127.0.0.1:1/x", "punctual");
}

/// `limit=0` is an empty page whose `next` is the cursor given (the
/// library's rule), in the API and on the page; a limit above 1000,
/// however large, is 1000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_0_is_an_empty_page_and_large_limits_are_clamped() {
    let redis = RedisServer::start_in_memory();
    let q = redis_queue(&redis.url(), "many").await;
    let many: Vec<(Value, Duration)> = (0..1005)
        .map(|i| (json!(i), Duration::from_secs(600 + i)))
        .collect();
    q.insert_many(&many).await.unwrap();
    let app = Dashboard::builder().redis(&redis.url()).router();
    let api = "/api/queues/many/entries?state=pending";

    let first = get(&app, &format!("{api}&limit=3")).await.json();
    let cursor = first["next"].as_str().unwrap().to_owned();
    let zero = get(&app, &format!("{api}&limit=0")).await;
    status(&zero, StatusCode::OK);
    assert_eq!(zero.json(), json!({"entries": [], "next": null}));
    let zero = get(&app, &format!("{api}&limit=0&cursor={cursor}")).await;
    status(&zero, StatusCode::OK);
    assert_eq!(zero.json(), json!({"entries": [], "next": cursor}));
    status(
        &get(&app, &format!("{api}&limit=0&cursor=zzz")).await,
        StatusCode::BAD_REQUEST,
    );
    for limit in ["1000000", "99999999999999999999999999"] {
        let big = get(&app, &format!("{api}&limit={limit}")).await;
        status(&big, StatusCode::OK);
        let big = big.json();
        assert_eq!(big["entries"].as_array().unwrap().len(), 1000, "{limit}");
        assert!(big["next"].is_string(), "{limit}");
    }
    for bad in ["-1", "x", ""] {
        let a = get(&app, &format!("{api}&limit={bad}")).await;
        status(&a, StatusCode::BAD_REQUEST);
        assert!(
            a.json()["error"].as_str().unwrap().contains("limit"),
            "{bad}"
        );
    }

    // The page: no entry for limit=0, a full page for a huge limit.
    let page = get(
        &app,
        &format!("/queues/many/entries?state=pending&limit=0&cursor={cursor}"),
    )
    .await;
    status(&page, StatusCode::OK);
    assert!(!page.body.contains("data-entry="), "{}", page.body);
    assert!(
        page.body.contains("limit=0 asks for no entry"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(&format!("&amp;cursor={cursor}")),
        "a link to the page at the cursor given: {}",
        page.body
    );
    let page = get(
        &app,
        "/queues/many/entries?state=pending&limit=99999999999999999999999999",
    )
    .await;
    status(&page, StatusCode::OK);
    assert_eq!(page.body.matches("data-entry=").count(), 1000);
    assert!(page.body.contains("next 1000 →"));
}

/// A form POST as the dashboard's own pages send it.
async fn form(router: &Router, uri: &str, body: &str) -> Answer {
    call(
        router,
        "POST",
        uri,
        &[
            ("origin", ORIGIN),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        body,
    )
    .await
}

/// The limits of `queue` as the store keeps them, by key.
async fn kept<Q>(queue: &Q) -> Vec<(String, KeyLimit)>
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    let mut all = queue.key_limits().await.unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Issue 39 on one store: `q` (as the URL names it) is `queue`, seeded by
/// [`seed_keyed`] with its due entries taken and held. The entries show
/// their key and priority (API, pages); the limits are listed with what
/// runs of each key; they are set and removed through the API and the
/// pages' forms; bad input is a 400; read-only and a write from elsewhere
/// are refused.
async fn key_limits_on<Q>(builder: impl Fn() -> DashboardBuilder, q: &str, queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    let app = builder().router();
    let ok = |n: u64| json!({"ok": true, "changed": n});

    // Entries carry their key and priority.
    let leased = get(&app, &format!("/api/queues/{q}/entries?state=leased")).await;
    status(&leased, StatusCode::OK);
    let mut running: Vec<(String, Value, Value)> = leased.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["key"].is_string())
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["key"].clone(),
                e["priority"].clone(),
            )
        })
        .collect();
    running.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        running,
        [
            ("a-1".to_owned(), json!("tenant-a"), json!(5)),
            ("a-2".to_owned(), json!("tenant-a"), json!(5)),
            ("b-1".to_owned(), json!("tenant-b"), json!(5)),
        ]
    );
    let urgent = get(&app, &format!("/api/queues/{q}/entries/urgent"))
        .await
        .json();
    assert_eq!(
        (&urgent["key"], &urgent["priority"]),
        (&Value::Null, &json!(9))
    );
    let later = get(&app, &format!("/api/queues/{q}/entries/later"))
        .await
        .json();
    assert_eq!(
        (&later["key"], &later["priority"]),
        (&json!("tenant-c"), &json!(-2))
    );
    let page = get(&app, &format!("/queues/{q}/entries?state=pending")).await;
    status(&page, StatusCode::OK);
    assert!(
        page.body.contains("<th class=\"num\">Prio</th>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("tenant-c") && page.body.contains(">-2<"),
        "{}",
        page.body
    );
    let entry = get(&app, &format!("/queues/{q}/entries/later")).await;
    assert!(
        entry.body.contains(r#"data-field="priority">-2<"#) && entry.body.contains("tenant-c"),
        "{}",
        entry.body
    );

    // The limits, with what runs of each key: tenant-a its own two, the
    // default the one of tenant-b (a key without its own limit).
    let limits = get(&app, &format!("/api/queues/{q}/limits")).await;
    status(&limits, StatusCode::OK);
    assert_eq!(
        limits.json(),
        json!({
            "limits": [
                {"key": "*", "concurrency": null, "rate": {"max": 100, "per_ms": 60000}, "running": 1},
                {"key": "tenant-a", "concurrency": 2, "rate": null, "running": 2},
            ],
            "others": [{"key": "tenant-b", "running": 1}],
            "capped": false,
        })
    );
    let page = get(&app, &format!("/queues/{q}")).await;
    status(&page, StatusCode::OK);
    for part in [
        "Key limits",
        r#"<tr data-limit="tenant-a">"#,
        r#"data-running="2""#,
        "100 per 1m",
        r#"data-other="tenant-b""#,
        r#"data-action="set-limit""#,
        &format!(r#"action="/queues/{q}/limits/tenant-a/remove""#),
    ] {
        assert!(
            page.body.contains(part),
            "{part} on the queue page:\n{}",
            page.body
        );
    }

    // Set through the API: an upsert, 0 when nothing changed.
    let set = r#"{"key": "tenant-b", "concurrency": 1, "rate": {"max": 5, "per_ms": 30000}}"#;
    let a = write(&app, "POST", &format!("/api/queues/{q}/limits"), set).await;
    status(&a, StatusCode::OK);
    assert_eq!(a.json(), ok(1));
    let tenant_b = KeyLimit {
        concurrency: Some(1),
        rate: Some(Rate {
            max: 5,
            per: Duration::from_secs(30),
        }),
    };
    assert_eq!(
        kept(queue).await,
        [
            ("*".to_owned(), DEFAULT_LIMIT),
            ("tenant-a".to_owned(), TENANT_A),
            ("tenant-b".to_owned(), tenant_b)
        ]
    );
    assert_eq!(
        write(&app, "POST", &format!("/api/queues/{q}/limits"), set)
            .await
            .json(),
        ok(0)
    );
    let limits = get(&app, &format!("/api/queues/{q}/limits")).await.json();
    assert_eq!(
        limits["limits"][0]["running"], 0,
        "tenant-b has its own now"
    );
    assert_eq!(limits["limits"][2]["running"], 1);
    assert_eq!(limits["others"], json!([]));
    // A key that must be written encoded, and one with neither bound.
    let a = write(
        &app,
        "POST",
        &format!("/api/queues/{q}/limits"),
        r#"{"key": "eu/west 1"}"#,
    )
    .await;
    assert_eq!(a.json(), ok(1));
    assert!(
        kept(queue)
            .await
            .contains(&("eu/west 1".to_owned(), KeyLimit::default()))
    );

    // Remove through the API: the key URL-encoded, `*` the default.
    for (path, n) in [
        ("tenant-b", 1),
        ("tenant-b", 0),
        ("eu%2Fwest%201", 1),
        ("*", 1),
        ("%2A", 0),
    ] {
        let a = write(
            &app,
            "DELETE",
            &format!("/api/queues/{q}/limits/{path}"),
            "",
        )
        .await;
        status(&a, StatusCode::OK);
        assert_eq!(a.json(), ok(n), "{path}");
    }
    assert_eq!(kept(queue).await, [("tenant-a".to_owned(), TENANT_A)]);
    let limits = get(&app, &format!("/api/queues/{q}/limits")).await.json();
    assert_eq!(limits["others"], json!([{"key": "tenant-b", "running": 1}]));

    // Bad input: 400 with why, and nothing changed.
    for bad in [
        "",
        "not json",
        "{}",
        r#"{"concurrency": 1}"#,
        r#"{"key": 7}"#,
        r#"{"key": "k", "concurrency": -1}"#,
        r#"{"key": "k", "concurrency": "x"}"#,
        r#"{"key": "k", "concurrency": 4294967296}"#,
        r#"{"key": "k", "rate": {"max": 1}}"#,
        r#"{"key": "k", "rate": {"max": 1, "per": 1000}}"#,
        r#"{"key": "k", "limit": 1}"#,
        r#"{"key": "k", "rate": {"max": 1, "per_ms": 0}}"#,
        r#"{"key": ""}"#,
    ] {
        let a = write(&app, "POST", &format!("/api/queues/{q}/limits"), bad).await;
        status(&a, StatusCode::BAD_REQUEST);
        assert!(
            a.json()["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{bad}"
        );
    }
    let zero = write(
        &app,
        "POST",
        &format!("/api/queues/{q}/limits"),
        r#"{"key": "k", "rate": {"max": 1, "per_ms": 0}}"#,
    )
    .await;
    assert!(
        zero.json()["error"].as_str().unwrap().contains("limit"),
        "{}",
        zero.body
    );
    assert_eq!(kept(queue).await, [("tenant-a".to_owned(), TENANT_A)]);
    status(
        &get(&app, "/api/queues/nope/limits").await,
        StatusCode::NOT_FOUND,
    );
    status(
        &write(&app, "POST", "/api/queues/nope/limits", r#"{"key": "k"}"#).await,
        StatusCode::NOT_FOUND,
    );

    // The pages' forms: set, then remove once the box is ticked.
    let back = format!("back=%2Fqueues%2F{}", q.replace(':', "%3A"));
    let a = form(
        &app,
        &format!("/queues/{q}/limits"),
        &format!("{back}&key=tenant-c&concurrency=3&rate_max=10&rate_per=1m30s"),
    )
    .await;
    status(&a, StatusCode::SEE_OTHER);
    let to = a.headers[header::LOCATION].to_str().unwrap();
    assert!(to.starts_with(&format!("/queues/{q}?done=")), "{to}");
    let tenant_c = KeyLimit {
        concurrency: Some(3),
        rate: Some(Rate {
            max: 10,
            per: Duration::from_secs(90),
        }),
    };
    assert!(
        kept(queue)
            .await
            .contains(&("tenant-c".to_owned(), tenant_c))
    );
    let a = form(
        &app,
        &format!("/queues/{q}/limits"),
        &format!("{back}&key=*&concurrency=&rate_max=&rate_per="),
    )
    .await;
    status(&a, StatusCode::SEE_OTHER);
    assert!(
        kept(queue)
            .await
            .contains(&("*".to_owned(), KeyLimit::default()))
    );
    for bad in [
        "key=&concurrency=1",
        "concurrency=1",
        "key=k&concurrency=x",
        "key=k&concurrency=-1",
        "key=k&rate_max=10",
        "key=k&rate_per=1m",
        "key=k&rate_max=10&rate_per=soon",
        "key=k&rate_max=10&rate_per=0s",
    ] {
        let a = form(&app, &format!("/queues/{q}/limits"), bad).await;
        status(&a, StatusCode::BAD_REQUEST);
        assert!(
            a.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{bad}"
        );
    }
    assert!(!kept(queue).await.iter().any(|(k, _)| k == "k"));
    let unticked = form(&app, &format!("/queues/{q}/limits/tenant-c/remove"), &back).await;
    status(&unticked, StatusCode::BAD_REQUEST);
    assert!(kept(queue).await.iter().any(|(k, _)| k == "tenant-c"));
    let a = form(
        &app,
        &format!("/queues/{q}/limits/tenant-c/remove"),
        &format!("{back}&confirm=yes"),
    )
    .await;
    status(&a, StatusCode::SEE_OTHER);
    assert!(!kept(queue).await.iter().any(|(k, _)| k == "tenant-c"));
    let a = form(
        &app,
        &format!("/queues/{q}/limits/%2A/remove"),
        &format!("{back}&confirm=yes"),
    )
    .await;
    status(&a, StatusCode::SEE_OTHER);
    assert_eq!(kept(queue).await, [("tenant-a".to_owned(), TENANT_A)]);

    // Read-only: the limits are shown, with no button and no form; every
    // write refused.
    let ro = builder().read_only(true).router();
    let page = get(&ro, &format!("/queues/{q}")).await;
    assert!(page.body.contains(r#"<tr data-limit="tenant-a">"#));
    assert!(!page.body.contains("data-action") && !page.body.contains("set-limit"));
    for (method, uri, body) in [
        (
            "POST",
            format!("/api/queues/{q}/limits"),
            r#"{"key": "x", "concurrency": 1}"#,
        ),
        ("DELETE", format!("/api/queues/{q}/limits/tenant-a"), ""),
        ("POST", format!("/queues/{q}/limits"), "key=x&concurrency=1"),
        (
            "POST",
            format!("/queues/{q}/limits/tenant-a/remove"),
            "confirm=yes",
        ),
    ] {
        status(&write(&ro, method, &uri, body).await, StatusCode::FORBIDDEN);
    }
    status(
        &get(&ro, &format!("/api/queues/{q}/limits")).await,
        StatusCode::OK,
    );

    // A write from elsewhere, or from nowhere said: refused.
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![("referer", "http://evil.example/x")],
        vec![],
    ] {
        let mut with_type = headers.clone();
        with_type.push(("content-type", "application/json"));
        let a = call(
            &app,
            "POST",
            &format!("/api/queues/{q}/limits"),
            &with_type,
            r#"{"key": "x", "concurrency": 1}"#,
        )
        .await;
        status(&a, StatusCode::FORBIDDEN);
        let a = call(
            &app,
            "DELETE",
            &format!("/api/queues/{q}/limits/tenant-a"),
            &headers,
            "",
        )
        .await;
        status(&a, StatusCode::FORBIDDEN);
        let a = call(
            &app,
            "POST",
            &format!("/queues/{q}/limits/tenant-a/remove"),
            &headers,
            "confirm=yes",
        )
        .await;
        status(&a, StatusCode::FORBIDDEN);
    }
    assert_eq!(
        kept(queue).await,
        [("tenant-a".to_owned(), TENANT_A)],
        "nothing forged got through"
    );
    // With the token in the header, no Origin is needed.
    let locked = builder().token("t0ken").router();
    let a = call(
        &locked,
        "DELETE",
        &format!("/api/queues/{q}/limits/tenant-a"),
        &[("authorization", "Bearer t0ken")],
        "",
    )
    .await;
    assert_eq!(a.json(), ok(1));
    assert_eq!(kept(queue).await, []);
}

/// Issue 39 on a memory queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_limits_and_entry_keys_on_memory() {
    let queue: MemoryQueue<Value> = MemoryQueue::builder("tenants")
        .lease(Duration::from_secs(3600))
        .build();
    seed_keyed(&queue).await;
    let mut held = Vec::new();
    for _ in 0..KEYED_DUE {
        held.push(queue.try_take().await.unwrap().expect("due"));
    }
    assert!(held.iter().all(|d| d.key().is_some() && d.priority() == 5));
    let q = queue.clone();
    key_limits_on(
        move || Dashboard::builder().memory(q.clone()),
        "tenants",
        &queue,
    )
    .await;
}

/// Issue 39 on Redis (`redis:tenants`, a PostgreSQL queue of that name
/// beside it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_limits_and_entry_keys_on_redis() {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let queue = redis_queue(&redis.url(), "tenants").await;
    seed_keyed(&queue).await;
    pg_queue_in(&db.url(), "api_keys_r", "tenants")
        .await
        .insert(&json!(1), Duration::from_secs(600))
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..KEYED_DUE {
        held.push(queue.try_take().await.unwrap().expect("due"));
    }
    let (url, pg) = (redis.url(), db.url());
    key_limits_on(
        move || Dashboard::builder().redis(&url).postgres(&pg, "api_keys_r"),
        "redis:tenants",
        &queue,
    )
    .await;
}

/// Issue 39 on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_limits_and_entry_keys_on_postgres() {
    let db = PgDb::new();
    let queue = pg_queue_in(&db.url(), "api_keys_p", "tenants").await;
    seed_keyed(&queue).await;
    let mut held = Vec::new();
    for _ in 0..KEYED_DUE {
        held.push(queue.try_take().await.unwrap().expect("due"));
    }
    let pg = db.url();
    key_limits_on(
        move || Dashboard::builder().postgres(&pg, "api_keys_p"),
        "tenants",
        &queue,
    )
    .await;
}

/// One request through `router` as from `addr` (what `serve` learns from
/// the connection): the audit log says where a write came from.
async fn call_from(
    router: &Router,
    addr: &str,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, HOST);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let mut request = request.body(Body::from(body.to_owned())).unwrap();
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn get_with(router: &Router, uri: &str, headers: &[(&str, &str)]) -> Answer {
    call(router, "GET", uri, headers, "").await
}

/// The `<tr>` of `attr="value"` in `html`, up to its end.
fn row_of<'a>(html: &'a str, attr: &str, value: &str) -> &'a str {
    let start = html
        .find(&format!("{attr}=\"{value}\""))
        .unwrap_or_else(|| panic!("no {attr}={value:?} in {html}"));
    let rest = &html[start..];
    &rest[..rest.find("</tr>").unwrap_or(rest.len())]
}

/// The `href` of the link marked `data-page="{which}"`, entities undone.
fn page_link(html: &str, which: &str) -> Option<String> {
    let at = html.find(&format!("data-page=\"{which}\""))?;
    let tag_start = html[..at].rfind("<a ")?;
    let tag = &html[tag_start..at];
    let href = tag.split("href=\"").nth(1)?.split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

/// The ids of the entries listed on an entries page, in order.
fn listed_ids(html: &str) -> Vec<String> {
    html.split("<tr data-entry=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

/// Health at a glance, through the API and the pages, over `queue` (named
/// `q` in `app`) seeded by `seed_runs` and `stuck` (`stuck_q`: entries
/// due, no worker): the marks (red, green, amber past a threshold the
/// builder sets), the workers, the runs under way and a cancel that stops
/// one, results kept of finished entries, and the per-minute history.
async fn health_and_runs_on<Q>(
    builder: impl Fn() -> DashboardBuilder,
    q: &str,
    queue: &Q,
    stuck_q: &str,
) where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    // Read fresh for each request: the worker's record changes as the test
    // goes.
    let builder = move || builder().refresh_every(Duration::ZERO);
    let app = builder().router();
    let worker = common::seed_runs(queue).await;

    // The marks: red where due entries wait for no one, green where a
    // worker keeps up; amber once the waiting entry is older than a
    // threshold (1 ms here, 60 s unless told).
    let stuck = get(&app, &format!("/api/queues/{stuck_q}/health")).await;
    status(&stuck, StatusCode::OK);
    let stuck = stuck.json();
    assert_eq!(stuck["mark"], "red", "{stuck}");
    assert_eq!(stuck["workers"], 0);
    assert!(
        stuck["reasons"][0]
            .as_str()
            .unwrap()
            .contains("no worker alive"),
        "{stuck}"
    );
    let busy = get(&app, &format!("/api/queues/{q}/health")).await.json();
    assert_eq!(
        (&busy["mark"], &busy["workers"], &busy["due"]),
        (&json!("green"), &json!(1), &json!(1)),
        "{busy}"
    );
    assert!(busy["latency_ms"].as_u64().unwrap() < 60_000, "{busy}");
    assert_eq!(busy["threshold_ms"], 60_000);
    let strict = builder()
        .latency_threshold(Duration::from_millis(1))
        .router();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let late = get(&strict, &format!("/api/queues/{q}/health"))
        .await
        .json();
    assert_eq!(late["mark"], "amber", "{late}");
    assert!(
        late["reasons"][0].as_str().unwrap().contains("waited"),
        "{late}"
    );
    let overview = get(&app, "/").await;
    status(&overview, StatusCode::OK);
    assert!(
        row_of(&overview.body, "data-queue", stuck_q).contains("data-health=\"red\""),
        "{}",
        overview.body
    );
    let busy_row = row_of(&overview.body, "data-queue", q);
    assert!(busy_row.contains("data-health=\"green\""), "{busy_row}");
    assert!(busy_row.contains("data-workers=\"1\""), "{busy_row}");
    assert!(busy_row.contains("data-latency-ms="), "{busy_row}");

    // The workers: who, where, what each runs.
    let workers = get(&app, &format!("/api/queues/{q}/workers")).await;
    status(&workers, StatusCode::OK);
    let workers = workers.json();
    let w = &workers[0];
    assert_eq!(workers.as_array().unwrap().len(), 1, "{workers}");
    assert_eq!(
        (&w["name"], &w["pid"], &w["concurrency"], &w["late"]),
        (
            &json!("renderer"),
            &json!(std::process::id()),
            &json!(1),
            &json!(false)
        ),
        "{w}"
    );
    assert_eq!(w["running"][0]["id"], "slow-1", "{w}");
    let page = get(&app, &format!("/queues/{q}/workers")).await;
    status(&page, StatusCode::OK);
    let row = row_of(&page.body, "data-worker", w["id"].as_str().unwrap());
    assert!(
        row.contains("renderer")
            && row.contains(&std::process::id().to_string())
            && row.contains("slow-1"),
        "{row}"
    );

    // The runs under way, with their worker.
    let running = get(&app, &format!("/api/queues/{q}/running")).await;
    status(&running, StatusCode::OK);
    let running = running.json();
    let run = &running["running"][0];
    assert_eq!(running["running"].as_array().unwrap().len(), 1, "{running}");
    assert_eq!(
        (
            &run["id"],
            &run["attempt"],
            &run["worker"]["name"],
            &run["worker"]["pid"]
        ),
        (
            &json!("slow-1"),
            &json!(1),
            &json!("renderer"),
            &json!(std::process::id())
        ),
        "{running}"
    );
    assert!(run["started_at"].is_string() && run["running_for_ms"].is_u64());
    let page = get(&app, &format!("/queues/{q}/running")).await;
    status(&page, StatusCode::OK);
    let row = row_of(&page.body, "data-run", "slow-1");
    assert!(
        row.contains("renderer") && row.contains("data-action=\"cancel\""),
        "{row}"
    );

    // Results kept of what finished: the entry is gone, its result says
    // how it ended.
    let shown = get(&app, &format!("/api/queues/{q}/entries/quick-2")).await;
    status(&shown, StatusCode::OK);
    let shown = shown.json();
    assert_eq!(
        (
            &shown["state"],
            &shown["result"]["state"],
            &shown["result"]["output"]
        ),
        (&json!("finished"), &json!("done"), &json!({"pages": 2})),
        "{shown}"
    );
    let page = get(&app, &format!("/queues/{q}/entries/quick-2")).await;
    status(&page, StatusCode::OK);
    assert!(
        page.body.contains("data-result=\"done\"") && page.body.contains("&quot;pages&quot;: 2"),
        "{}",
        page.body
    );

    // Cancel: the run stops, the entry goes, its result says cancelled.
    let cancelled = write(
        &app,
        "POST",
        &format!("/api/queues/{q}/entries/slow-1/cancel"),
        "",
    )
    .await;
    status(&cancelled, StatusCode::OK);
    assert_eq!(cancelled.json(), json!({"ok": true, "changed": 1}));
    common::eventually("slow-1 is gone", || async {
        queue.entry("slow-1").await.unwrap().is_none()
    })
    .await;
    let result = queue.result("slow-1").await.unwrap().expect("kept");
    assert_eq!(result.state, punctual::durable::Finished::Cancelled);
    assert_eq!(
        write(
            &app,
            "POST",
            &format!("/api/queues/{q}/entries/slow-1/cancel"),
            ""
        )
        .await
        .json(),
        json!({"ok": true, "changed": 0}),
        "nothing left to cancel"
    );
    common::eventually("waiting runs once the place is free", || async {
        queue.stats().await.unwrap().due == 0
    })
    .await;

    // The history per minute, from the store: what was inserted and done.
    let history = get(&app, &format!("/api/queues/{q}/history?last=1h")).await;
    status(&history, StatusCode::OK);
    let history = history.json();
    let sum = |field: &str| -> u64 {
        history["minutes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[field].as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum("inserted"), 5, "{history}");
    assert!(sum("done") >= 3, "{history}");
    status(
        &get(&app, &format!("/api/queues/{q}/history?last=soon")).await,
        StatusCode::BAD_REQUEST,
    );
    // Drawn from it on the queue page (a fresh dashboard: it survives a
    // restart of the dashboard), over the hour and over the day.
    let fresh = builder().router();
    for range in ["", "?range=day"] {
        let page = get(&fresh, &format!("/queues/{q}{range}")).await;
        status(&page, StatusCode::OK);
        assert!(
            page.body.contains("data-inserted=\"5\""),
            "{range}: {}",
            page.body
        );
        assert!(page.body.contains("class=\"flows\""));
    }
    worker.shutdown(Duration::from_secs(1)).await;
}

/// A queue of due entries and no worker.
async fn seed_stuck<Q>(queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    queue
        .insert_many(&[(json!(1), Duration::ZERO), (json!(2), Duration::ZERO)])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_runs_and_results_on_memory() {
    let busy: MemoryQueue<Value> = MemoryQueue::builder("renders")
        .keep_results(Duration::from_secs(3600))
        .build();
    let stuck: MemoryQueue<Value> = MemoryQueue::new("stuck");
    seed_stuck(&stuck).await;
    let (b, s) = (busy.clone(), stuck.clone());
    let builder = move || Dashboard::builder().memory(b.clone()).memory(s.clone());
    health_and_runs_on(builder, "renders", &busy, "stuck").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_runs_and_results_on_redis() {
    let redis = RedisServer::start_in_memory();
    let busy: RedisQueue<Value> = RedisQueue::builder("renders")
        .url(&redis.url())
        .keep_results(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    assert_supported!(&busy, "health_runs_and_results_on_redis");
    seed_stuck(&redis_queue(&redis.url(), "stuck").await).await;
    let url = redis.url();
    let builder = move || Dashboard::builder().redis(&url);
    health_and_runs_on(builder, "renders", &busy, "stuck").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_runs_and_results_on_postgres() {
    let db = PgDb::new();
    let busy: PgQueue<Value> = PgQueue::builder("renders")
        .url(&db.url())
        .schema("api_health")
        .keep_results(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    assert_supported!(&busy, "health_runs_and_results_on_postgres");
    seed_stuck(&pg_queue_in(&db.url(), "api_health", "stuck").await).await;
    let url = db.url();
    let builder = move || Dashboard::builder().postgres(&url, "api_health");
    health_and_runs_on(builder, "renders", &busy, "stuck").await;
}

/// Schedules paused and resumed through the API and the pages, their last
/// run and outcome shown.
async fn schedules_paused_on<Q>(app: &Router, q: &str, queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    queue
        .schedule_every(
            "nightly",
            Duration::from_secs(3600),
            punctual::MissedTicks::Skip,
            &json!("n"),
        )
        .await
        .unwrap();
    let paused = write(
        app,
        "POST",
        &format!("/api/queues/{q}/schedules/nightly/pause"),
        "",
    )
    .await;
    status(&paused, StatusCode::OK);
    assert_eq!(paused.json(), json!({"ok": true, "changed": 1}));
    assert!(queue.schedules().await.unwrap()[0].paused);
    assert_eq!(
        write(
            app,
            "POST",
            &format!("/api/queues/{q}/schedules/nightly/pause"),
            ""
        )
        .await
        .json(),
        json!({"ok": true, "changed": 0})
    );
    let listed = get(app, &format!("/api/queues/{q}/schedules")).await.json();
    assert_eq!(
        (
            &listed[0]["paused"],
            &listed[0]["last_run"],
            &listed[0]["last_outcome"]
        ),
        (&json!(true), &Value::Null, &Value::Null),
        "{listed}"
    );
    status(
        &write(
            app,
            "POST",
            &format!("/api/queues/{q}/schedules/nope/pause"),
            "",
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    let page = get(app, &format!("/queues/{q}")).await;
    let row = row_of(&page.body, "data-schedule", "nightly");
    assert!(
        row.contains("data-paused=\"true\"") && row.contains("data-action=\"resume-schedule\""),
        "{row}"
    );
    assert!(row.contains("never"), "no run yet: {row}");
    let resumed = form(
        app,
        &format!("/queues/{q}/schedules/nightly/resume"),
        &format!("back=%2Fqueues%2F{q}"),
    )
    .await;
    status(&resumed, StatusCode::SEE_OTHER);
    assert!(!queue.schedules().await.unwrap()[0].paused);
    let page = get(app, resumed.headers[header::LOCATION].to_str().unwrap()).await;
    assert!(
        page.body.contains("Resumed schedule nightly."),
        "{}",
        page.body
    );
    assert!(
        row_of(&page.body, "data-schedule", "nightly").contains("data-action=\"pause-schedule\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_pause_and_resume_on_every_store() {
    let memory: MemoryQueue<Value> = MemoryQueue::new("cron");
    let app = Dashboard::builder().memory(memory.clone()).router();
    schedules_paused_on(&app, "cron", &memory).await;

    let redis = RedisServer::start_in_memory();
    let r = redis_queue(&redis.url(), "cron").await;
    let db = PgDb::new();
    let p = pg_queue_in(&db.url(), "api_cron", "cron").await;
    if let Some(why) = common::unsupported(&r).await {
        eprintln!("SKIPPED schedules on redis: the store does not answer {why}");
    } else {
        let app = Dashboard::builder().redis(&redis.url()).router();
        schedules_paused_on(&app, "cron", &r).await;
    }
    if let Some(why) = common::unsupported(&p).await {
        eprintln!("SKIPPED schedules on postgres: the store does not answer {why}");
    } else {
        let app = Dashboard::builder()
            .postgres(&db.url(), "api_cron")
            .router();
        schedules_paused_on(&app, "cron", &p).await;
    }
}

/// Dead letters newest first, page by page both ways; requeued with a
/// delay; requeued and deleted in bulk, each entry answered; a row's
/// Delete confirmed as the entry page's is.
async fn dead_letters_on<Q>(app: &Router, q: &str, queue: &Q)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    common::seed_dead(queue, 7).await;
    let oldest: Vec<String> = queue
        .entries(EntryState::Dead, None, 10)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.id)
        .collect();
    let mut newest = oldest.clone();
    newest.reverse();

    // The API: newest first, in pages of 3, its cursors its own.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut uri = format!("/api/queues/{q}/entries?state=dead&order=newest&limit=3");
        if let Some(c) = &cursor {
            uri.push_str(&format!("&cursor={c}"));
        }
        let page = get(app, &uri).await;
        status(&page, StatusCode::OK);
        let page = page.json();
        for e in page["entries"].as_array().unwrap() {
            seen.push(e["id"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => {
                status(
                    &get(
                        app,
                        &format!("/api/queues/{q}/entries?state=dead&cursor={next}"),
                    )
                    .await,
                    StatusCode::BAD_REQUEST,
                );
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(seen, newest);
    status(
        &get(
            app,
            &format!("/api/queues/{q}/entries?state=dead&order=sideways"),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );

    // The page: newest first unless asked, older and newer by links.
    let first = get(app, &format!("/queues/{q}/entries?state=dead&limit=3")).await;
    status(&first, StatusCode::OK);
    assert_eq!(listed_ids(&first.body), newest[..3]);
    assert!(page_link(&first.body, "prev").is_none(), "the newest page");
    let older = page_link(&first.body, "next").expect("an older page");
    let second = get(app, &older).await;
    assert_eq!(listed_ids(&second.body), newest[3..6]);
    let third = get(app, &page_link(&second.body, "next").unwrap()).await;
    assert_eq!(listed_ids(&third.body), newest[6..]);
    assert!(page_link(&third.body, "next").is_none(), "the oldest page");
    let back = get(app, &page_link(&third.body, "prev").expect("a newer page")).await;
    assert_eq!(listed_ids(&back.body), newest[3..6]);
    let back = get(app, &page_link(&back.body, "prev").unwrap()).await;
    assert_eq!(listed_ids(&back.body), newest[..3]);
    let oldest_first = get(app, &format!("/queues/{q}/entries?state=dead&order=oldest")).await;
    assert_eq!(listed_ids(&oldest_first.body), oldest);
    // A long error: one line, the rest behind a click.
    let row = row_of(&oldest_first.body, "data-entry", "dead-2");
    assert!(row.contains("<details class=\"clamp\""), "{row}");
    assert!(!row_of(&oldest_first.body, "data-entry", "dead-1").contains("<details"));
    // Times as <time> in UTC, for the script to show in local time.
    assert!(
        oldest_first.body.contains("<time datetime=\"") && oldest_first.body.contains(" UTC\">"),
        "{}",
        oldest_first.body
    );
    assert!(oldest_first.body.contains("/assets/local-time.js"));
    let js = get(app, "/assets/local-time.js").await;
    status(&js, StatusCode::OK);
    assert!(js.body.contains("time[datetime]"));

    // Requeue with a delay: due that long from now.
    let now = queue.now().await.unwrap();
    let requeued = write(
        app,
        "POST",
        &format!("/api/queues/{q}/requeue"),
        r#"{"id": "dead-7", "delay_ms": 600000}"#,
    )
    .await;
    assert_eq!(requeued.json(), json!({"ok": true, "changed": 1}));
    let e = queue.entry("dead-7").await.unwrap().unwrap();
    assert_eq!(e.state, EntryState::Pending);
    let ahead = e.due.duration_since(now).unwrap();
    assert!(
        ahead >= Duration::from_secs(595) && ahead <= Duration::from_secs(605),
        "{ahead:?}"
    );
    let by_form = form(
        app,
        &format!("/queues/{q}/requeue"),
        "id=dead-6&delay=1h&back=%2F",
    )
    .await;
    status(&by_form, StatusCode::SEE_OTHER);
    let e = queue.entry("dead-6").await.unwrap().unwrap();
    assert!(e.due.duration_since(now).unwrap() >= Duration::from_secs(3590));
    status(
        &form(app, &format!("/queues/{q}/requeue"), "id=dead-5&delay=soon").await,
        StatusCode::BAD_REQUEST,
    );

    // Bulk through the API: each id answered, unknown ones refused alone.
    let bulk = write(
        app,
        "POST",
        &format!("/api/queues/{q}/bulk"),
        r#"{"action": "delete", "ids": ["dead-5", "nope", "dead-5"]}"#,
    )
    .await;
    status(&bulk, StatusCode::OK);
    let bulk = bulk.json();
    assert_eq!(bulk["changed"], 1, "{bulk}");
    assert_eq!(
        bulk["results"][0],
        json!({"id": "dead-5", "changed": true, "error": null})
    );
    assert_eq!(bulk["results"][1]["changed"], false);
    assert!(
        bulk["results"][1]["error"]
            .as_str()
            .unwrap()
            .contains("no such entry"),
        "{bulk}"
    );
    assert_eq!(bulk["results"].as_array().unwrap().len(), 2, "each id once");
    assert!(queue.entry("dead-5").await.unwrap().is_none());
    let bulk = write(
        app,
        "POST",
        &format!("/api/queues/{q}/bulk"),
        r#"{"action": "requeue", "ids": ["dead-4", "dead-7"], "delay_ms": 0}"#,
    )
    .await
    .json();
    assert_eq!(bulk["changed"], 1, "{bulk}");
    assert!(
        bulk["results"][1]["error"]
            .as_str()
            .unwrap()
            .contains("not a dead letter"),
        "{bulk}"
    );
    for bad in [
        r#"{"action": "explode", "ids": ["dead-1"]}"#,
        r#"{"action": "delete", "ids": []}"#,
        r#"{"action": "delete", "ids": ["dead-1"], "delay_ms": 5}"#,
        r#"{"ids": ["dead-1"]}"#,
    ] {
        status(
            &write(app, "POST", &format!("/api/queues/{q}/bulk"), bad).await,
            StatusCode::BAD_REQUEST,
        );
    }
    assert!(queue.entry("dead-1").await.unwrap().is_some());

    // Bulk through the list's form: refused unconfirmed; each entry
    // answered on the page that follows.
    let unconfirmed = form(
        app,
        &format!("/queues/{q}/bulk"),
        "ids=dead-1&ids=dead-2&action=delete",
    )
    .await;
    status(&unconfirmed, StatusCode::BAD_REQUEST);
    assert!(queue.entry("dead-1").await.unwrap().is_some());
    let done = form(
        app,
        &format!("/queues/{q}/bulk"),
        "ids=dead-1&ids=dead-2&ids=ghost&action=delete&confirm=yes&back=%2Fqueues%2Fx",
    )
    .await;
    status(&done, StatusCode::OK);
    assert!(row_of(&done.body, "data-outcome", "dead-1").contains("data-changed=\"true\""));
    assert!(row_of(&done.body, "data-outcome", "ghost").contains("no such entry"));
    assert!(queue.entry("dead-2").await.unwrap().is_none());

    // A row's Delete, as the entry page's: only with its box ticked.
    let remove = format!("/queues/{q}/entries/dead-3/remove");
    status(
        &form(app, &remove, "back=%2F").await,
        StatusCode::BAD_REQUEST,
    );
    assert!(queue.entry("dead-3").await.unwrap().is_some());
    status(
        &form(app, &remove, "back=%2F&confirm=yes").await,
        StatusCode::SEE_OTHER,
    );
    assert!(queue.entry("dead-3").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_newest_first_requeue_delay_and_bulk_on_memory() {
    let memory: MemoryQueue<Value> = MemoryQueue::builder("mail").max_attempts(1).build();
    let app = Dashboard::builder().memory(memory.clone()).router();
    dead_letters_on(&app, "mail", &memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_newest_first_requeue_delay_and_bulk_on_redis() {
    let redis = RedisServer::start_in_memory();
    let r = redis_queue(&redis.url(), "mail").await;
    assert_supported!(&r, "dead_letters_..._on_redis");
    let app = Dashboard::builder().redis(&redis.url()).router();
    dead_letters_on(&app, "mail", &r).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_newest_first_requeue_delay_and_bulk_on_postgres() {
    let db = PgDb::new();
    let p = pg_queue_in(&db.url(), "api_dead", "mail").await;
    assert_supported!(&p, "dead_letters_..._on_postgres");
    let app = Dashboard::builder()
        .postgres(&db.url(), "api_dead")
        .router();
    dead_letters_on(&app, "mail", &p).await;
}

/// The audit log: every write through the API and the pages, newest
/// first, with where it came from and whether the token came with it;
/// kept in the store, hidden from the lists of queues.
async fn audit_on<Q>(builder: impl Fn() -> DashboardBuilder, q: &str, queue: &Q, store: &str)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    queue
        .insert(&json!(1), Duration::from_secs(600))
        .await
        .unwrap();
    let open = builder().router();
    let locked = builder().token("s3cret").router();
    let origin = [("origin", ORIGIN), ("content-type", "application/json")];
    let a = call_from(
        &open,
        "10.1.2.3:4567",
        "POST",
        &format!("/api/queues/{q}/pause"),
        &origin,
        "",
    )
    .await;
    status(&a, StatusCode::OK);
    let page_form = [
        ("origin", ORIGIN),
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-forwarded-for", "203.0.113.9"),
    ];
    let b = call_from(
        &open,
        "10.1.2.4:5000",
        "POST",
        &format!("/queues/{q}/resume"),
        &page_form,
        "",
    )
    .await;
    status(&b, StatusCode::SEE_OTHER);
    let bearer = [("authorization", "Bearer s3cret")];
    let c = call_from(
        &locked,
        "10.9.9.9:1",
        "DELETE",
        &format!("/api/queues/{q}/entries/nope"),
        &bearer,
        "",
    )
    .await;
    status(&c, StatusCode::NOT_FOUND);

    // In memory each dashboard keeps its own log (the store is the
    // process's memory, the log the dashboard's); Redis and PostgreSQL
    // keep one log that every dashboard of the store writes to.
    let locked_log = get_with(&locked, &format!("/api/audit?store={store}"), &bearer).await;
    status(&locked_log, StatusCode::OK);
    let locked_log = locked_log.json();
    let log = get(&open, &format!("/api/audit?store={store}")).await;
    status(&log, StatusCode::OK);
    let log = log.json();
    assert_eq!(log["store"], store);
    let mut records = log["records"].as_array().unwrap().clone();
    if store == "memory" {
        assert_eq!(records.len(), 2, "{log}");
        records.insert(0, locked_log["records"][0].clone());
    } else {
        assert_eq!(log, locked_log);
    }
    assert_eq!(records.len(), 3, "{log}");
    let newest = &records[0];
    assert_eq!(
        (
            &newest["action"],
            &newest["ids"],
            &newest["ok"],
            &newest["via"],
            &newest["from"],
            &newest["token"]
        ),
        (
            &json!("remove"),
            &json!(["nope"]),
            &json!(false),
            &json!("api"),
            &json!("10.9.9.9:1"),
            &json!(true)
        ),
        "{newest}"
    );
    assert!(newest["error"].as_str().unwrap().contains("no entry"));
    assert_eq!(
        (
            &records[1]["action"],
            &records[1]["via"],
            &records[1]["from"],
            &records[1]["forwarded_for"],
            &records[1]["token"]
        ),
        (
            &json!("resume"),
            &json!("page"),
            &json!("10.1.2.4:5000"),
            &json!("203.0.113.9"),
            &json!(false)
        ),
        "{log}"
    );
    assert_eq!(
        (
            &records[2]["action"],
            &records[2]["queue"],
            &records[2]["changed"],
            &records[2]["from"]
        ),
        (
            &json!("pause"),
            &json!(q),
            &json!(1),
            &json!("10.1.2.3:4567")
        ),
        "{log}"
    );
    assert!(records[1]["at"].as_str().unwrap() >= records[2]["at"].as_str().unwrap());
    let page = get(&open, &format!("/audit?store={store}")).await;
    status(&page, StatusCode::OK);
    let shown = if store == "memory" { 2 } else { 3 };
    assert_eq!(
        page.body.matches("<tr data-audit=").count(),
        shown,
        "{}",
        page.body
    );
    assert!(page.body.contains("10.1.2.3:4567") && page.body.contains("203.0.113.9"));
    // Kept in the store, listed nowhere else.
    let queues = get(&open, "/api/queues").await.json();
    assert!(
        !queues.to_string().contains("punctual-admin.audit"),
        "{queues}"
    );
    status(
        &get(&open, "/api/queues/punctual-admin.audit").await,
        StatusCode::NOT_FOUND,
    );
    status(
        &get(&open, "/api/audit?store=nowhere").await,
        StatusCode::NOT_FOUND,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_every_write_on_memory() {
    let memory: MemoryQueue<Value> = MemoryQueue::new("billing");
    let m = memory.clone();
    audit_on(
        move || Dashboard::builder().memory(m.clone()),
        "billing",
        &memory,
        "memory",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_every_write_on_redis_and_postgres() {
    let redis = RedisServer::start_in_memory();
    let r = redis_queue(&redis.url(), "billing").await;
    match common::unsupported(&r).await {
        Some(why) => eprintln!("SKIPPED the audit log on redis: the store does not answer {why}"),
        None => {
            let url = redis.url();
            audit_on(
                move || Dashboard::builder().redis(&url),
                "billing",
                &r,
                "redis",
            )
            .await;
        }
    }
    let db = PgDb::new();
    let p = pg_queue_in(&db.url(), "api_audit", "billing").await;
    match common::unsupported(&p).await {
        Some(why) => {
            eprintln!("SKIPPED the audit log on postgres: the store does not answer {why}")
        }
        None => {
            let url = db.url();
            audit_on(
                move || Dashboard::builder().postgres(&url, "api_audit"),
                "billing",
                &p,
                "postgres",
            )
            .await;
        }
    }
}

/// A record 30 days old goes at the next write that looks (no task sweeps).
#[tokio::test(start_paused = true)]
async fn audit_records_go_after_30_days() {
    let memory: MemoryQueue<Value> = MemoryQueue::new("billing");
    memory
        .insert(&json!(1), Duration::from_secs(3600 * 24 * 90))
        .await
        .unwrap();
    let app = Dashboard::builder().memory(memory.clone()).router();
    status(
        &write(&app, "POST", "/api/queues/billing/pause", "").await,
        StatusCode::OK,
    );
    let count = |app: Router| async move {
        get(&app, "/api/audit").await.json()["records"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count(app.clone()).await, 1);
    tokio::time::advance(Duration::from_secs(29 * 86_400)).await;
    status(
        &write(&app, "POST", "/api/queues/billing/resume", "").await,
        StatusCode::OK,
    );
    assert_eq!(count(app.clone()).await, 2, "both younger than 30 days");
    tokio::time::advance(Duration::from_secs(2 * 86_400)).await;
    status(
        &write(&app, "POST", "/api/queues/billing/pause", "").await,
        StatusCode::OK,
    );
    let left = get(&app, "/api/audit").await.json();
    let actions: Vec<&str> = left["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["pause", "resume"],
        "the 31-day-old record went: {left}"
    );
}

/// A write that fails shows a page a person can act on: the dashboard's
/// own badge (no "read-only" on a writable one), what went wrong in words,
/// the way back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_says_so_with_a_way_back() {
    let mut redis = RedisServer::start();
    redis_queue(&redis.url(), "jobs")
        .await
        .insert(&json!({"n": 1}), Duration::from_secs(600))
        .await
        .unwrap();
    let app = Dashboard::builder().redis(&redis.url()).router();
    status(&get(&app, "/queues/jobs").await, StatusCode::OK);
    redis.kill();
    let failed = form(&app, "/queues/jobs/pause", "back=%2Fqueues%2Fjobs").await;
    status(&failed, StatusCode::BAD_GATEWAY);
    assert!(
        failed.body.contains("The store did not answer"),
        "{}",
        failed.body
    );
    assert!(
        !failed.body.contains("class=\"badge ro\""),
        "{}",
        failed.body
    );
    assert!(
        failed
            .body
            .contains("href=\"/queues/jobs\" data-way=\"back\""),
        "{}",
        failed.body
    );
    let ro = Dashboard::builder()
        .redis(&redis.url())
        .read_only(true)
        .router();
    let refused = form(&ro, "/queues/jobs/pause", "").await;
    status(&refused, StatusCode::FORBIDDEN);
    assert!(
        refused.body.contains("class=\"badge ro\""),
        "a read-only dashboard says so"
    );
}
