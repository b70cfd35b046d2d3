//! The command line against seeded Redis and PostgreSQL servers: every
//! command, its `--json` documents, its exit codes (0 done, 1 no such
//! queue, entry or schedule, 2 bad arguments or a store error), queues
//! named `redis:NAME` / `postgres:NAME` when both stores hold the name,
//! two stores of one kind told apart (`redis@2:NAME`, `LABEL:NAME`),
//! `--json` errors for bad arguments, and `rediss://` /
//! `sslmode=verify-full` URLs.

mod common;
#[path = "../../tests/common/pg_server.rs"]
mod pg_server;
#[path = "../../tests/common/tls.rs"]
mod tls;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::pg::PgDb;
use common::redis_server::RedisServer;
use common::{
    DEFAULT_LIMIT, Held, KEYED_DUE, SEEDED, TENANT_A, pg_queue, pg_queue_in, redis_queue,
    seed_keyed, seed_pg, seed_redis,
};
use punctual::durable::{Durable, EntryState, KeyLimit, Rate};
use serde_json::{Value, json};
use tokio::task::block_in_place;

/// What a run of `punctual-admin` gave.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {self:?}"))
    }
}

/// Runs the binary with `stores` then `args`.
fn admin(stores: &[String], args: &[&str]) -> Run {
    admin_env(stores, args, &[])
}

fn admin_env(stores: &[String], args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_punctual-admin"))
            .args(stores)
            .args(args)
            .env_remove("PUNCTUAL_REDIS_URL")
            .env_remove("PUNCTUAL_POSTGRES_URL")
            .envs(env.iter().copied())
            .output()
            .expect("the binary runs")
    });
    Run {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts `run` ended with `code`, showing it otherwise.
#[track_caller]
fn exits(run: Run, code: i32) -> Run {
    assert_eq!(run.code, code, "{run:#?}");
    run
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

/// `2025-06-01T12:00:03.250Z`
#[track_caller]
fn is_rfc3339_utc(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("a time, not {v}"));
    assert!(
        s.len() == 24 && s.ends_with('Z') && &s[10..11] == "T",
        "not RFC 3339 UTC: {s}"
    );
}

struct Seeded {
    _redis: RedisServer,
    _db: PgDb,
    _held: Vec<Held>,
    stores: Vec<String>,
    redis_url: String,
    pg_url: String,
}

/// Redis holds `orders` (seeded) and `emails`; PostgreSQL's `schema` holds
/// `orders` (seeded) and `reports` (a schedule only).
async fn seeded(schema: &str) -> Seeded {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let (redis_url, pg_url) = (redis.url(), db.url());
    let r = redis_queue(&redis_url, "orders").await;
    let p = pg_queue_in(&pg_url, schema, "orders").await;
    let held = vec![seed_redis(&r).await, seed_pg(&p).await];
    let emails = redis_queue(&redis_url, "emails").await;
    emails
        .insert(&json!({"to": "a@example.com"}), Duration::from_secs(600))
        .await
        .unwrap();
    let reports = pg_queue_in(&pg_url, schema, "reports").await;
    reports
        .schedule_every(
            "weekly",
            Duration::from_secs(7 * 86_400),
            punctual::MissedTicks::Skip,
            &json!("weekly"),
        )
        .await
        .unwrap();
    Seeded {
        stores: vec![
            "--redis".into(),
            redis_url.clone(),
            "--postgres".into(),
            pg_url.clone(),
            "--schema".into(),
            schema.into(),
        ],
        _redis: redis,
        _db: db,
        _held: held,
        redis_url,
        pg_url,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_answer_the_json_shapes_and_exit_codes() {
    let s = seeded("cli_reads").await;
    let st = &s.stores;

    // queues: every queue of both stores, with counts.
    let all = exits(admin(st, &["queues", "--json"]), 0).json();
    let all = all.as_array().expect("a list");
    let names: Vec<(String, String)> = all
        .iter()
        .map(|q| {
            (
                q["store"].as_str().unwrap().to_owned(),
                q["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("redis".into(), "emails".into()),
            ("redis".into(), "orders".into()),
            ("postgres".into(), "orders".into()),
            ("postgres".into(), "reports".into()),
        ]
    );
    let shape = set(&[
        "store", "name", "paused", "pending", "due", "leased", "dead", "now",
    ]);
    for q in all {
        assert_eq!(keys(q), shape);
        is_rfc3339_utc(&q["now"]);
    }
    for q in &all[1..3] {
        assert_eq!(
            (
                &q["pending"],
                &q["due"],
                &q["leased"],
                &q["dead"],
                &q["paused"]
            ),
            (
                &json!(SEEDED.pending),
                &json!(SEEDED.due),
                &json!(SEEDED.leased),
                &json!(SEEDED.dead),
                &json!(false)
            ),
            "{q}"
        );
    }
    let human = exits(admin(st, &["queues"]), 0).stdout.clone();
    assert!(human.starts_with("STORE"), "{human}");
    assert!(human.contains("postgres  reports"), "{human}");

    // stats: a name both stores hold must say which.
    let both = exits(admin(st, &["stats", "orders"]), 2);
    assert!(
        both.stderr.contains("redis:orders or postgres:orders"),
        "{both:?}"
    );
    let r = exits(admin(st, &["stats", "redis:orders", "--json"]), 0).json();
    assert_eq!((&r["store"], &r["dead"]), (&json!("redis"), &json!(3)));
    let p = exits(admin(st, &["stats", "postgres:orders", "--json"]), 0).json();
    assert_eq!(
        (&p["store"], &p["pending"]),
        (&json!("postgres"), &json!(SEEDED.pending))
    );
    let e = exits(admin(st, &["stats", "emails", "--json"]), 0).json();
    assert_eq!((&e["store"], &e["pending"]), (&json!("redis"), &json!(1)));
    let missing = exits(admin(st, &["stats", "nope", "--json"]), 1);
    assert_eq!(keys(&missing.json()), set(&["error"]));
    exits(admin(st, &["stats", "postgres:emails"]), 1);
    let human = exits(admin(st, &["stats", "postgres:orders"]), 0)
        .stdout
        .clone();
    assert!(human.contains("dead     3"), "{human}");

    // entries: pages walk every pending entry once, in due order.
    for q in ["redis:orders", "postgres:orders"] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut args = vec![
                "entries", q, "--state", "pending", "--limit", "50", "--json",
            ];
            if let Some(c) = &cursor {
                args.extend(["--cursor", c.as_str()]);
            }
            let page = exits(admin(st, &args), 0).json();
            assert_eq!(keys(&page), set(&["entries", "next"]));
            pages += 1;
            for e in page["entries"].as_array().unwrap() {
                assert_eq!(
                    keys(e),
                    set(&[
                        "id",
                        "state",
                        "due",
                        "lease_until",
                        "died_at",
                        "attempt",
                        "schedule",
                        "key",
                        "priority",
                        "last_error",
                        "started_at",
                        "worker",
                        "errors",
                        "value"
                    ])
                );
                assert_eq!(e["state"], "pending");
                assert_eq!((&e["key"], &e["priority"]), (&Value::Null, &json!(0)));
                is_rfc3339_utc(&e["due"]);
                assert_eq!(
                    (&e["lease_until"], &e["died_at"]),
                    (&Value::Null, &Value::Null)
                );
                seen.push((
                    e["due"].as_str().unwrap().to_owned(),
                    e["id"].as_str().unwrap().to_owned(),
                ));
            }
            match page["next"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(pages, 3, "{q}: 124 entries in pages of 50");
        assert_eq!(seen.len() as u64, SEEDED.pending, "{q}");
        let ids: BTreeSet<&String> = seen.iter().map(|(_, id)| id).collect();
        assert_eq!(ids.len(), seen.len(), "{q}: each entry once");
        assert!(
            seen.windows(2).all(|w| w[0].0 <= w[1].0),
            "{q}: in due order"
        );
        assert!(ids.contains(&"retry-1".to_owned()) && ids.contains(&"nightly-report".to_owned()));

        let dead = exits(admin(st, &["entries", q, "--state", "dead", "--json"]), 0).json();
        let dead = dead["entries"].as_array().unwrap().clone();
        assert_eq!(dead.len(), 3, "{q}");
        assert_eq!(dead[0]["last_error"], "card declined (issuer code 51)");
        is_rfc3339_utc(&dead[0]["died_at"]);
        let leased = exits(admin(st, &["entries", q, "--state", "leased", "--json"]), 0).json();
        assert_eq!(leased["entries"][0]["id"], "leased-1");
        is_rfc3339_utc(&leased["entries"][0]["lease_until"]);
        let due = exits(admin(st, &["entries", q, "--state", "due", "--json"]), 0).json();
        assert_eq!(due["entries"].as_array().unwrap().len(), 2);
        assert_eq!(due["next"], Value::Null);
    }
    let human = exits(
        admin(
            st,
            &[
                "entries",
                "redis:orders",
                "--state",
                "pending",
                "--limit",
                "2",
            ],
        ),
        0,
    );
    assert!(human.stdout.contains("next page: --cursor "), "{human:?}");
    // A cursor of another queue, a malformed one, a bad state: exit 2.
    let pg_page = exits(
        admin(
            st,
            &[
                "entries",
                "postgres:orders",
                "--state",
                "pending",
                "--limit",
                "1",
                "--json",
            ],
        ),
        0,
    )
    .json();
    let pg_cursor = pg_page["next"].as_str().unwrap();
    exits(
        admin(
            st,
            &[
                "entries",
                "redis:orders",
                "--state",
                "pending",
                "--cursor",
                pg_cursor,
            ],
        ),
        2,
    );
    exits(
        admin(
            st,
            &[
                "entries",
                "redis:orders",
                "--state",
                "pending",
                "--cursor",
                "zzz",
            ],
        ),
        2,
    );
    exits(
        admin(st, &["entries", "redis:orders", "--state", "sleeping"]),
        2,
    );
    exits(admin(st, &["entries", "redis:orders"]), 2);
    exits(admin(st, &["entries", "nope", "--state", "dead"]), 1);

    // show: one entry in any state.
    let dead = exits(
        admin(st, &["show", "postgres:orders", "dead-1", "--json"]),
        0,
    )
    .json();
    assert_eq!(
        (
            &dead["state"],
            &dead["attempt"],
            &dead["last_error"],
            &dead["value"]["order"]
        ),
        (
            &json!("dead"),
            &json!(1),
            &json!("card declined (issuer code 51)"),
            &json!(100)
        )
    );
    let tick = exits(admin(st, &["show", "redis:orders", "cleanup", "--json"]), 0).json();
    assert_eq!(
        (&tick["schedule"], &tick["state"]),
        (&json!("cleanup"), &json!("pending"))
    );
    let human = exits(admin(st, &["show", "redis:orders", "retry-1"]), 0)
        .stdout
        .clone();
    assert!(human.contains("last error  smtp 421"), "{human}");
    exits(admin(st, &["show", "redis:orders", "nope"]), 1);
    exits(admin(st, &["show", "redis:orders"]), 2);

    // schedules: name, spec, next run, value.
    let list = exits(admin(st, &["schedules", "postgres:orders", "--json"]), 0).json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    for sched in list {
        assert_eq!(
            keys(sched),
            set(&[
                "name",
                "spec",
                "next",
                "paused",
                "last_run",
                "last_outcome",
                "value"
            ])
        );
        is_rfc3339_utc(&sched["next"]);
    }
    let specs: BTreeSet<(String, String)> = list
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().into(),
                s["spec"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        specs,
        BTreeSet::from([
            ("cleanup".into(), common::cleanup_spec().into()),
            ("nightly-report".into(), "every 1h skip".into())
        ])
    );
    let weekly = exits(admin(st, &["schedules", "reports"]), 0)
        .stdout
        .clone();
    assert!(
        weekly.contains("weekly  every 7d skip") || weekly.contains("weekly  every 168h skip"),
        "{weekly}"
    );
    exits(admin(st, &["schedules", "emails", "--json"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_change_the_store() {
    let s = seeded("cli_writes").await;
    let st = &s.stores;
    let r = redis_queue(&s.redis_url, "orders").await;
    let p = pg_queue_in(&s.pg_url, "cli_writes", "orders").await;
    let ok = |n: u64| json!({"ok": true, "changed": n});

    // requeue one dead letter, then the rest.
    assert_eq!(
        exits(
            admin(st, &["requeue", "redis:orders", "dead-1", "--json"]),
            0
        )
        .json(),
        ok(1)
    );
    let back = r.entry("dead-1").await.unwrap().expect("still there");
    assert_eq!((back.state, back.attempt), (EntryState::Due, 0));
    assert_eq!(
        exits(
            admin(st, &["requeue", "redis:orders", "order-001", "--json"]),
            0
        )
        .json(),
        ok(0)
    );
    exits(admin(st, &["requeue", "redis:orders", "nope"]), 1);
    exits(admin(st, &["requeue", "redis:orders"]), 2);
    exits(
        admin(st, &["requeue", "redis:orders", "dead-2", "--all-dead"]),
        2,
    );
    let all = exits(admin(st, &["requeue", "redis:orders", "--all-dead"]), 0);
    assert!(all.stdout.contains("requeued 2 dead letters"), "{all:?}");
    assert_eq!(r.stats().await.unwrap().dead, 0);

    // remove
    assert_eq!(
        exits(
            admin(st, &["remove", "redis:orders", "order-002", "--json"]),
            0
        )
        .json(),
        ok(1)
    );
    assert!(r.entry("order-002").await.unwrap().is_none());
    exits(admin(st, &["remove", "redis:orders", "order-002"]), 1);

    // clear-dead
    assert_eq!(
        exits(admin(st, &["clear-dead", "postgres:orders", "--json"]), 0).json(),
        ok(3)
    );
    assert_eq!(p.stats().await.unwrap().dead, 0);
    assert_eq!(
        exits(admin(st, &["clear-dead", "postgres:orders", "--json"]), 0).json(),
        ok(0)
    );

    // pause, resume
    assert_eq!(
        exits(admin(st, &["pause", "postgres:orders", "--json"]), 0).json(),
        ok(1)
    );
    assert!(p.is_paused().await.unwrap());
    assert_eq!(
        exits(admin(st, &["pause", "postgres:orders", "--json"]), 0).json(),
        ok(0)
    );
    assert_eq!(
        exits(admin(st, &["stats", "postgres:orders", "--json"]), 0).json()["paused"],
        true
    );
    let resumed = exits(admin(st, &["resume", "postgres:orders"]), 0);
    assert!(
        resumed.stdout.contains("resumed postgres:orders"),
        "{resumed:?}"
    );
    assert!(!p.is_paused().await.unwrap());
    assert!(
        !r.is_paused().await.unwrap(),
        "the other store's queue of that name is untouched"
    );

    // run-now: the tick is due now on the store's clock.
    assert_eq!(
        exits(
            admin(
                st,
                &["run-now", "postgres:orders", "nightly-report", "--json"]
            ),
            0
        )
        .json(),
        ok(1)
    );
    let tick = p.entry("nightly-report").await.unwrap().unwrap();
    let now = p.now().await.unwrap();
    assert!(tick.due <= now, "{:?} > {now:?}", tick.due);
    exits(admin(st, &["run-now", "postgres:orders", "nope"]), 1);

    // unschedule
    assert_eq!(
        exits(
            admin(st, &["unschedule", "redis:orders", "cleanup", "--json"]),
            0
        )
        .json(),
        ok(1)
    );
    assert!(
        r.schedules()
            .await
            .unwrap()
            .iter()
            .all(|s| s.name != "cleanup")
    );
    assert_eq!(
        p.schedules().await.unwrap().len(),
        2,
        "postgres:orders keeps its own"
    );
    exits(admin(st, &["unschedule", "redis:orders", "cleanup"]), 1);
    let e = exits(admin(st, &["unschedule", "orders", "cleanup", "--json"]), 2).json();
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("redis:orders or postgres:orders")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_and_unreachable_stores_exit_2() {
    let none: Vec<String> = Vec::new();
    let help = exits(admin(&none, &["--help"]), 0);
    assert!(
        help.stdout.contains("run-now") && help.stdout.contains("--postgres"),
        "{help:?}"
    );
    exits(admin(&none, &["queues"]), 2);
    exits(
        admin(
            &["--redis".into(), "redis://127.0.0.1:1/".into()],
            &["frobnicate"],
        ),
        2,
    );
    let schema_first = exits(
        admin(
            &[
                "--schema".into(),
                "s".into(),
                "--postgres".into(),
                "postgres://x/".into(),
            ],
            &["queues"],
        ),
        2,
    );
    assert!(schema_first.stderr.contains("--schema"), "{schema_first:?}");
    // Port 1: nothing listens there.
    let down = exits(
        admin(
            &["--redis".into(), "redis://127.0.0.1:1/".into()],
            &["queues", "--json"],
        ),
        2,
    );
    assert!(
        down.json()["error"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:1"),
        "{down:?}"
    );
    exits(
        admin(
            &[
                "--postgres".into(),
                "postgres://postgres@127.0.0.1:1/x".into(),
            ],
            &["stats", "q"],
        ),
        2,
    );
    // serve refuses an address others can reach without a token or read-only.
    let public = exits(
        admin(
            &["--redis".into(), "redis://127.0.0.1:1/".into()],
            &["serve", "--bind", "0.0.0.0:0"],
        ),
        2,
    );
    assert!(
        public.stderr.contains("--token or --read-only"),
        "{public:?}"
    );
}

/// `rediss://` and `sslmode=verify-full`: the binary is built with both TLS
/// features. The servers offer TLS (PostgreSQL: only TLS) with a
/// certificate of a throwaway CA, which the binary trusts through
/// `SSL_CERT_FILE` (Redis) and `sslrootcert` (PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_urls_work() {
    let dir = std::env::temp_dir().join(format!("punctual-admin-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pki = tls::Pki::new(&dir);
    pki.server_cert("localhost", "DNS:localhost,IP:127.0.0.1", "trusted-ca");
    let (redis, tls_port) = block_in_place(|| {
        RedisServer::start_with_port_args(|port| pki.server_args("localhost", port))
    });
    // Seeded through the plain port, which stays open.
    redis_queue(&redis.url(), "secure")
        .await
        .insert(&json!(1), Duration::from_secs(60))
        .await
        .unwrap();
    let pg = block_in_place(|| {
        pg_server::PgServer::start_with(|data| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::copy(pki.path("localhost.crt"), data.join("server.crt")).unwrap();
            std::fs::copy(pki.path("localhost.key"), data.join("server.key")).unwrap();
            std::fs::set_permissions(
                data.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
            let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
            conf.push_str(
                "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
            );
            std::fs::write(data.join("postgresql.conf"), conf).unwrap();
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
            )
            .unwrap();
        })
    });
    let pg_url = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        pg.port(),
        pki.path("trusted-ca.crt")
    );
    pg_queue(&pg_url, "secure")
        .await
        .insert(&json!(2), Duration::from_secs(60))
        .await
        .unwrap();
    let stores = vec![
        "--redis".into(),
        format!("rediss://localhost:{tls_port}/"),
        "--postgres".into(),
        pg_url.clone(),
    ];
    let ca = pki.path("trusted-ca.crt");
    let run = admin_env(&stores, &["queues", "--json"], &[("SSL_CERT_FILE", &ca)]);
    let all = exits(run, 0).json();
    assert_eq!(
        all.as_array()
            .unwrap()
            .iter()
            .map(|q| (q["store"].clone(), q["pending"].clone()))
            .collect::<Vec<_>>(),
        [(json!("redis"), json!(1)), (json!("postgres"), json!(1))]
    );
    // Without the CA, neither certificate is trusted: a store error.
    exits(admin(&stores[..2], &["queues"]), 2);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What an entry's id, a schedule's name or a handler's error holds is
/// printed for people without its control characters (an escape sequence
/// in a last error must not drive the operator's terminal), under a
/// heading that says which time it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_is_printed_harmlessly() {
    use punctual::durable::{Outcome, Worker};
    let redis = RedisServer::start_in_memory();
    let stores = vec!["--redis".to_owned(), redis.url()];
    let q = redis_queue(&redis.url(), "hostile").await;
    q.insert_with_id(
        "boom",
        &json!({"fail": "\u{1b}]0;pwned\u{7}\u{1b}[2Jdeclined"}),
        Duration::ZERO,
    )
    .await
    .unwrap();
    let worker = Worker::builder(q.clone()).spawn(|job| async move {
        Outcome::discard(job.value()["fail"].as_str().unwrap().to_owned())
    });
    common::eventually("boom dies", || async { q.stats().await.unwrap().dead == 1 }).await;
    worker.shutdown(Duration::from_secs(5)).await;
    q.insert_with_id("id\u{1b}[31mred", &json!(1), Duration::from_secs(600))
        .await
        .unwrap();
    q.schedule_every(
        "tick\u{1b}[2J",
        Duration::from_secs(3600),
        punctual::MissedTicks::Skip,
        &json!(2),
    )
    .await
    .unwrap();

    for args in [
        &["entries", "hostile", "--state", "dead"][..],
        &["entries", "hostile", "--state", "pending"],
        &["show", "hostile", "boom"],
        &["show", "hostile", "id\u{1b}[31mred"],
        &["schedules", "hostile"],
    ] {
        let run = exits(admin(&stores, args), 0);
        assert!(
            !run.stdout.contains(['\u{1b}', '\u{7}']),
            "{args:?} prints a control character: {run:?}"
        );
    }
    let dead = exits(
        admin(&stores, &["entries", "hostile", "--state", "dead"]),
        0,
    );
    assert!(
        dead.stdout.starts_with("ID")
            && dead.stdout.contains("DIED")
            && dead.stdout.contains("declined"),
        "{dead:?}"
    );
    // --json keeps the text as it is (JSON escapes it).
    let json = exits(admin(&stores, &["show", "hostile", "boom", "--json"]), 0).json();
    assert!(json["last_error"].as_str().unwrap().contains('\u{1b}'));
}

/// `(store, source, name, pending)` of each queue `queues --json` lists.
fn listed(all: &Value) -> Vec<(String, Option<String>, String, u64)> {
    all.as_array()
        .expect("a list")
        .iter()
        .map(|q| {
            (
                q["store"].as_str().unwrap().to_owned(),
                q.get("source").map(|s| s.as_str().unwrap().to_owned()),
                q["name"].as_str().unwrap().to_owned(),
                q["pending"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Two Redis servers and two schemas of one PostgreSQL database, each
/// holding a queue `plain`: each is listed once under its own identity
/// (`redis`, `redis@2`; `postgres`, and `west` by its label), and each is
/// reached by `STORE:plain`, for reads and for writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_of_one_kind_are_each_reachable() {
    let (red1, red2) = (
        RedisServer::start_in_memory(),
        RedisServer::start_in_memory(),
    );
    let db = PgDb::new();
    let (url1, url2, pg) = (red1.url(), red2.url(), db.url());
    let r1 = redis_queue(&url1, "plain").await;
    let r2 = redis_queue(&url2, "plain").await;
    let p1 = pg_queue_in(&pg, "cli_two_a", "plain").await;
    let p2 = pg_queue_in(&pg, "cli_two_b", "plain").await;
    for (n, q) in [(1, &r1), (2, &r2)] {
        for i in 0..n {
            q.insert_with_id(&format!("r{n}-{i}"), &json!(i), Duration::from_secs(600))
                .await
                .unwrap();
        }
    }
    for (n, q) in [(3, &p1), (4, &p2)] {
        for i in 0..n {
            q.insert_with_id(&format!("p{n}-{i}"), &json!(i), Duration::from_secs(600))
                .await
                .unwrap();
        }
    }
    let st: Vec<String> = [
        "--redis".into(),
        url1.clone(),
        "--redis".into(),
        url2.clone(),
        "--postgres".into(),
        pg.clone(),
        "--schema".into(),
        "cli_two_a".into(),
        "--postgres".into(),
        format!("west={pg}"),
        "--schema".into(),
        "cli_two_b".into(),
    ]
    .into();
    let st = &st;
    let some = |s: &str| Some(s.to_owned());
    let plain = "plain".to_owned();

    let all = exits(admin(st, &["queues", "--json"]), 0).json();
    assert_eq!(
        listed(&all),
        [
            ("redis".into(), None, plain.clone(), 1),
            ("redis".into(), some("redis@2"), plain.clone(), 2),
            ("postgres".into(), None, plain.clone(), 3),
            ("postgres".into(), some("west"), plain.clone(), 4),
        ],
        "the JSON's store stays a kind; source tells two of a kind apart"
    );
    let human = exits(admin(st, &["queues"]), 0).stdout.clone();
    assert!(
        human.contains("redis@2") && human.contains("west (postgres)"),
        "{human}"
    );

    // Plain, the name is ambiguous, and the error says how to write each.
    let both = exits(admin(st, &["stats", "plain", "--json"]), 2).json();
    assert_eq!(
        both["error"].as_str().unwrap(),
        r#"several stores hold a queue "plain": write redis:plain or redis@2:plain or postgres:plain or west:plain"#
    );
    for (q, source, pending, ids_from) in [
        ("redis:plain", None, 1, "r1-"),
        ("redis@2:plain", some("redis@2"), 2, "r2-"),
        ("postgres:plain", None, 3, "p3-"),
        ("west:plain", some("west"), 4, "p4-"),
    ] {
        let one = exits(admin(st, &["stats", q, "--json"]), 0).json();
        assert_eq!(
            (
                one.get("source").map(|s| s.as_str().unwrap().to_owned()),
                one["pending"].as_u64().unwrap()
            ),
            (source, pending),
            "{q}: {one}"
        );
        let page = exits(
            admin(st, &["entries", q, "--state", "pending", "--json"]),
            0,
        )
        .json();
        let ids: Vec<&str> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len() as u64, pending, "{q}: {ids:?}");
        assert!(
            ids.iter().all(|id| id.starts_with(ids_from)),
            "{q}: the entries of its own store: {ids:?}"
        );
    }
    let human = exits(admin(st, &["stats", "redis@2:plain"]), 0)
        .stdout
        .clone();
    assert!(human.contains("store    redis@2 ("), "{human}");

    // Writes reach the store named, and only it.
    let ok = |n: u64| json!({"ok": true, "changed": n});
    assert_eq!(
        exits(admin(st, &["pause", "redis@2:plain", "--json"]), 0).json(),
        ok(1)
    );
    assert!(r2.is_paused().await.unwrap());
    assert!(!r1.is_paused().await.unwrap());
    assert_eq!(
        exits(admin(st, &["remove", "west:plain", "p4-0", "--json"]), 0).json(),
        ok(1)
    );
    assert!(p2.entry("p4-0").await.unwrap().is_none());
    assert_eq!(p1.stats().await.unwrap().pending, 3);
    exits(admin(st, &["remove", "postgres:plain", "p4-1"]), 1);
    assert_eq!(
        exits(admin(st, &["pause", "postgres:plain", "--json"]), 0).json(),
        ok(1)
    );
    assert!(p1.is_paused().await.unwrap());
    assert!(!p2.is_paused().await.unwrap());

    // Labels must tell the stores apart, and may not be a kind's name.
    let twice = exits(
        admin(
            &[
                "--redis".into(),
                format!("eu={url1}"),
                "--redis".into(),
                format!("eu={url2}"),
            ],
            &["queues", "--json"],
        ),
        2,
    );
    assert!(
        twice.json()["error"].as_str().unwrap().contains("\"eu\""),
        "{twice:?}"
    );
    exits(
        admin(&["--redis".into(), format!("postgres={url1}")], &["queues"]),
        2,
    );
    // A label alone names its store; a kind still finds the one store of
    // that kind holding a name.
    let labelled = vec!["--redis".to_owned(), format!("eu={url2}")];
    let eu = exits(admin(&labelled, &["stats", "eu:plain", "--json"]), 0).json();
    assert_eq!((&eu["source"], &eu["pending"]), (&json!("eu"), &json!(2)));
    exits(admin(&labelled, &["stats", "redis:plain", "--json"]), 0);
}

/// `--limit 0` is an empty page whose `next` is the cursor given (the
/// library's rule), and a limit above 1000, however large, is 1000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_0_is_an_empty_page_and_large_limits_are_clamped() {
    let redis = RedisServer::start_in_memory();
    let stores = vec!["--redis".to_owned(), redis.url()];
    let q = redis_queue(&redis.url(), "many").await;
    let many: Vec<(Value, Duration)> = (0..1005)
        .map(|i| (json!(i), Duration::from_secs(600 + i)))
        .collect();
    q.insert_many(&many).await.unwrap();
    let page = |args: &[&str]| {
        let mut all = vec!["entries", "many", "--state", "pending", "--json"];
        all.extend(args);
        exits(admin(&stores, &all), 0).json()
    };

    let first = page(&["--limit", "3"]);
    let cursor = first["next"].as_str().unwrap().to_owned();
    assert_eq!(
        page(&["--limit", "0"]),
        json!({"entries": [], "next": null})
    );
    assert_eq!(
        page(&["--limit", "0", "--cursor", &cursor]),
        json!({"entries": [], "next": cursor})
    );
    let human = exits(
        admin(
            &stores,
            &[
                "entries", "many", "--state", "pending", "--limit", "0", "--cursor", &cursor,
            ],
        ),
        0,
    );
    assert!(
        human.stdout.contains(&format!("--cursor {cursor}")),
        "{human:?}"
    );
    // The cursor is still checked.
    exits(
        admin(
            &stores,
            &[
                "entries", "many", "--state", "pending", "--limit", "0", "--cursor", "zzz",
            ],
        ),
        2,
    );
    for limit in ["1000000", "99999999999999999999999999"] {
        let big = page(&["--limit", limit]);
        assert_eq!(big["entries"].as_array().unwrap().len(), 1000, "{limit}");
        assert!(big["next"].is_string(), "{limit}");
    }
}

/// With `--json`, a bad argument (one clap refuses before the program
/// knows of `--json`, or one found later) is one JSON document on stdout,
/// `{"error": "..."}`, the message on stderr too, and exit code 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_under_json_are_one_json_error() {
    let redis = RedisServer::start_in_memory();
    redis_queue(&redis.url(), "q")
        .await
        .insert(&json!(1), Duration::from_secs(600))
        .await
        .unwrap();
    let stores = vec!["--redis".to_owned(), redis.url()];
    let none: Vec<String> = Vec::new();
    let cases: Vec<(&[String], Vec<&str>, &str)> = vec![
        (
            &stores,
            vec!["entries", "q", "--state", "due", "--limit", "-1", "--json"],
            "-1",
        ),
        (
            &stores,
            vec!["entries", "q", "--state", "due", "--limit", "ten", "--json"],
            "ten",
        ),
        (
            &stores,
            vec!["entries", "q", "--state", "sleeping", "--json"],
            "sleeping",
        ),
        (
            &stores,
            vec![
                "entries", "q", "--state", "due", "--cursor", "zzz", "--json",
            ],
            "",
        ),
        (&stores, vec!["entries", "q", "--json"], "--state"),
        (&stores, vec!["--json", "stats", "q"], "--json"),
        (&stores, vec!["stats", "--json"], "QUEUE"),
        (&stores, vec!["frobnicate", "--json"], "frobnicate"),
        (
            &stores,
            vec!["requeue", "q", "x", "--all-dead", "--json"],
            "--all-dead",
        ),
        (&stores, vec!["serve", "--json"], "--json"),
        (
            &stores,
            vec!["set-limit", "q", "k", "--rate", "5", "--json"],
            "MAX/PER",
        ),
        (
            &stores,
            vec!["set-limit", "q", "k", "--rate", "5/soon", "--json"],
            "soon",
        ),
        (
            &stores,
            vec!["set-limit", "q", "k", "--concurrency", "-1", "--json"],
            "-1",
        ),
        (&stores, vec!["remove-limit", "q", "--json"], "KEY"),
        (&none, vec!["queues", "--json"], "no store"),
        (
            &none,
            vec![
                "--schema",
                "s",
                "--postgres",
                "postgres://x/",
                "queues",
                "--json",
            ],
            "--schema",
        ),
    ];
    for (stores, args, says) in cases {
        let run = exits(admin(stores, &args), 2);
        let doc = run.json();
        assert_eq!(keys(&doc), set(&["error"]), "{args:?}: {run:?}");
        let error = doc["error"].as_str().unwrap();
        assert!(
            !error.is_empty() && error.contains(says),
            "{args:?}: {error:?} should say {says:?}"
        );
        assert!(!run.stderr.is_empty(), "{args:?}: and on stderr");
    }
    // Without --json, nothing on stdout; --help is no error.
    let plain = exits(
        admin(
            &stores,
            &["entries", "q", "--state", "due", "--limit", "-1"],
        ),
        2,
    );
    assert!(plain.stdout.is_empty(), "{plain:?}");
    let help = exits(admin(&stores, &["entries", "--help", "--json"]), 0);
    assert!(help.stdout.contains("--limit"), "{help:?}");
    // An id written after `--` may be `--json`: it asks for no JSON.
    let dashed = admin(&stores, &["show", "q", "--", "--json"]);
    assert!(dashed.code != 0 && dashed.stdout.is_empty(), "{dashed:?}");
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

/// Issue 39 on the command line, on Redis and PostgreSQL (each with a
/// queue `tenants` seeded by `seed_keyed`, its due entries held): entries
/// show their key and priority; `limits` lists each limit with what runs
/// of its key; `set-limit` and `remove-limit` change the store; bad
/// arguments exit 2, a queue that does not exist 1. (The same commands
/// over a memory queue: the unit tests of `cli`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_limits_through_the_command_line() {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let r = redis_queue(&redis.url(), "tenants").await;
    let p = pg_queue_in(&db.url(), "cli_keys", "tenants").await;
    seed_keyed(&r).await;
    seed_keyed(&p).await;
    let mut held_r = Vec::new();
    let mut held_p = Vec::new();
    for _ in 0..KEYED_DUE {
        held_r.push(r.try_take().await.unwrap().expect("due"));
        held_p.push(p.try_take().await.unwrap().expect("due"));
    }
    let st: &[String] = &[
        "--redis".into(),
        redis.url(),
        "--postgres".into(),
        db.url(),
        "--schema".into(),
        "cli_keys".into(),
    ];
    let ok = |n: u64| json!({"ok": true, "changed": n});
    let help = exits(admin(st, &["--help"]), 0);
    for command in ["limits", "set-limit", "remove-limit"] {
        assert!(help.stdout.contains(command), "{command} in {help:?}");
    }
    let help = exits(admin(st, &["set-limit", "--help"]), 0);
    assert!(
        help.stdout.contains("--rate <MAX/PER>") && help.stdout.contains("100/1m"),
        "{help:?}"
    );

    for q in ["redis:tenants", "postgres:tenants"] {
        // Entries: their key and priority.
        let leased = exits(admin(st, &["entries", q, "--state", "leased", "--json"]), 0).json();
        let mut keys: Vec<(String, Value)> = leased["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["key"].as_str().unwrap().to_owned(), e["priority"].clone()))
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            keys,
            [
                ("tenant-a".to_owned(), json!(5)),
                ("tenant-a".to_owned(), json!(5)),
                ("tenant-b".to_owned(), json!(5))
            ],
            "{q}"
        );
        let table = exits(admin(st, &["entries", q, "--state", "pending"]), 0);
        assert!(table.stdout.contains("PRIO  KEY"), "{table:?}");
        let later = table
            .stdout
            .lines()
            .find(|l| l.starts_with("later"))
            .unwrap();
        assert!(later.contains("-2  tenant-c"), "{later}");
        let show = exits(admin(st, &["show", q, "urgent"]), 0);
        assert!(
            show.stdout.contains("key         -\npriority    9\n"),
            "{show:?}"
        );

        // Limits, with what runs of each key.
        let limits = exits(admin(st, &["limits", q, "--json"]), 0).json();
        assert_eq!(
            limits,
            json!({
                "limits": [
                    {"key": "*", "concurrency": null, "rate": {"max": 100, "per_ms": 60000}, "running": 1},
                    {"key": "tenant-a", "concurrency": 2, "rate": null, "running": 2},
                ],
                "others": [{"key": "tenant-b", "running": 1}],
                "capped": false,
            }),
            "{q}"
        );
        let text = exits(admin(st, &["limits", q]), 0).stdout;
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("KEY") && lines[0].contains("RUNNING"),
            "{text}"
        );
        assert!(
            lines[1].starts_with('*') && lines[1].contains("100/1m"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("tenant-a") && lines[2].ends_with(" 2"),
            "{text}"
        );
        assert_eq!(
            lines[3],
            "running without a limit of their own: tenant-b (1)"
        );
    }

    // set-limit: an upsert on the store named, and only it.
    assert_eq!(
        exits(
            admin(
                st,
                &[
                    "set-limit",
                    "redis:tenants",
                    "tenant-b",
                    "--concurrency",
                    "1",
                    "--rate",
                    "5/30s",
                    "--json"
                ]
            ),
            0
        )
        .json(),
        ok(1)
    );
    let tenant_b = KeyLimit {
        concurrency: Some(1),
        rate: Some(Rate {
            max: 5,
            per: Duration::from_secs(30),
        }),
    };
    assert_eq!(
        kept(&r).await,
        [
            ("*".to_owned(), DEFAULT_LIMIT),
            ("tenant-a".to_owned(), TENANT_A),
            ("tenant-b".to_owned(), tenant_b)
        ]
    );
    assert_eq!(kept(&p).await.len(), 2, "postgres:tenants keeps its own");
    let again = exits(
        admin(
            st,
            &[
                "set-limit",
                "redis:tenants",
                "tenant-b",
                "--concurrency",
                "1",
                "--rate",
                "5/30000ms",
            ],
        ),
        0,
    );
    assert!(again.stdout.contains("nothing changed"), "{again:?}");
    let set = exits(
        admin(
            st,
            &["set-limit", "postgres:tenants", "*", "--concurrency", "4"],
        ),
        0,
    );
    assert!(
        set.stdout
            .contains("the default key limit (*) of postgres:tenants is now concurrency 4"),
        "{set:?}"
    );
    assert!(kept(&p).await.contains(&(
        "*".to_owned(),
        KeyLimit {
            concurrency: Some(4),
            rate: None
        }
    )));

    // remove-limit: 1, then 0 (no error).
    for (n, key) in [(1, "tenant-b"), (0, "tenant-b"), (1, "*")] {
        assert_eq!(
            exits(
                admin(st, &["remove-limit", "redis:tenants", key, "--json"]),
                0
            )
            .json(),
            ok(n),
            "{key}"
        );
    }
    assert_eq!(kept(&r).await, [("tenant-a".to_owned(), TENANT_A)]);
    let removed = exits(
        admin(st, &["remove-limit", "postgres:tenants", "tenant-a"]),
        0,
    );
    assert!(
        removed.stdout.contains("removed the limit of key tenant-a"),
        "{removed:?}"
    );

    // Bad arguments exit 2 and change nothing; a queue not there, 1.
    for bad in [
        &["set-limit", "redis:tenants", "k", "--rate", "5"][..],
        &["set-limit", "redis:tenants", "k", "--rate", "x/1m"],
        &["set-limit", "redis:tenants", "k", "--concurrency", "many"],
        &["set-limit", "redis:tenants", "", "--concurrency", "1"],
        &["set-limit", "tenants", "k", "--concurrency", "1"],
        &["remove-limit", "redis:tenants"],
    ] {
        exits(admin(st, bad), 2);
    }
    let zero = exits(
        admin(
            st,
            &[
                "set-limit",
                "redis:tenants",
                "k",
                "--rate",
                "5/0s",
                "--json",
            ],
        ),
        2,
    );
    assert!(
        zero.json()["error"]
            .as_str()
            .unwrap()
            .contains("invalid key limit"),
        "{zero:?}"
    );
    assert_eq!(kept(&r).await, [("tenant-a".to_owned(), TENANT_A)]);
    exits(admin(st, &["limits", "nope"]), 1);
    exits(
        admin(st, &["set-limit", "nope", "k", "--concurrency", "1"]),
        1,
    );
    exits(admin(st, &["remove-limit", "postgres:nope", "k"]), 1);
    drop((held_r, held_p));
}

/// The stores from `PUNCTUAL_REDIS_URL` / `PUNCTUAL_POSTGRES_URL` (one URL
/// or several, comma-separated), and the store flags after the command:
/// no password needs to be on the command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_from_the_environment_and_flags_after_the_command() {
    let s = seeded("cli_env").await;
    let other = RedisServer::start_in_memory();
    redis_queue(&other.url(), "second")
        .await
        .insert(&json!(1), Duration::from_secs(60))
        .await
        .unwrap();
    let none: Vec<String> = Vec::new();
    let env = [
        ("PUNCTUAL_REDIS_URL", s.redis_url.as_str()),
        ("PUNCTUAL_POSTGRES_URL", s.pg_url.as_str()),
    ];
    let all = exits(
        admin_env(&none, &["queues", "--schema", "cli_env", "--json"], &env),
        0,
    )
    .json();
    let names: Vec<String> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            format!(
                "{}:{}",
                q["store"].as_str().unwrap(),
                q["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "redis:emails",
            "redis:orders",
            "postgres:orders",
            "postgres:reports"
        ]
    );
    // Several of a kind, comma-separated.
    let both = format!("{}, {}", s.redis_url, other.url());
    let all = exits(
        admin_env(
            &none,
            &["queues", "--json"],
            &[("PUNCTUAL_REDIS_URL", &both)],
        ),
        0,
    )
    .json();
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .any(|q| q["source"] == "redis@2" && q["name"] == "second"),
        "{all}"
    );
    // A flag on the line wins over the environment's kind.
    let stats = exits(
        admin_env(
            &none,
            &["stats", "orders", "--redis", &s.redis_url, "--json"],
            &[("PUNCTUAL_REDIS_URL", "redis://127.0.0.1:1/")],
        ),
        0,
    )
    .json();
    assert_eq!(stats["dead"], SEEDED.dead);
    // The flags after the command, --schema after its --postgres.
    let stats = exits(
        admin(
            &none,
            &[
                "stats",
                "postgres:orders",
                "--redis",
                &s.redis_url,
                "--postgres",
                &s.pg_url,
                "--schema",
                "cli_env",
                "--json",
            ],
        ),
        0,
    )
    .json();
    assert_eq!(stats["pending"], SEEDED.pending);
    let help = exits(admin(&none, &["--help"]), 0);
    assert!(help.stdout.contains("PUNCTUAL_REDIS_URL"), "{help:?}");
}

/// One store down no longer hides the others: `queues` lists what it
/// could read and says which store it left out; only when every store is
/// down does it fail (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_store_down_lists_the_others() {
    let redis = RedisServer::start_in_memory();
    redis_queue(&redis.url(), "jobs")
        .await
        .insert(&json!(1), Duration::from_secs(60))
        .await
        .unwrap();
    let stores = vec![
        "--redis".to_owned(),
        redis.url(),
        "--redis".to_owned(),
        "redis://127.0.0.1:1/".to_owned(),
    ];
    let run = exits(admin(&stores, &["queues", "--json"]), 0);
    let all = run.json();
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["name"], "jobs");
    assert!(
        run.stderr.contains("store redis@2 left out") && run.stderr.contains("127.0.0.1:1"),
        "{run:?}"
    );
    let human = exits(admin(&stores, &["queues"]), 0);
    assert!(human.stdout.contains("jobs"), "{human:?}");
    let down = vec![
        "--redis".to_owned(),
        "redis://127.0.0.1:1/".to_owned(),
        "--postgres".to_owned(),
        "postgres://postgres@127.0.0.1:1/x".to_owned(),
    ];
    let all_down = exits(admin(&down, &["queues", "--json"]), 2);
    assert!(
        all_down.json()["error"]
            .as_str()
            .unwrap()
            .contains("no store could be listed"),
        "{all_down:?}"
    );
}

/// A Redis id such as `#24` is printed quoted where a shell would cut it
/// (`#` starts a comment), in lists and in the commands a person copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_a_shell_would_cut_are_quoted() {
    let redis = RedisServer::start_in_memory();
    let q = redis_queue(&redis.url(), "jobs").await;
    let id = q
        .insert(&json!({"n": 1}), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(id.starts_with('#'), "{id}");
    let stores = vec!["--redis".to_owned(), redis.url()];
    let list = exits(
        admin(&stores, &["entries", "jobs", "--state", "pending"]),
        0,
    );
    assert!(list.stdout.contains(&format!("'{id}'")), "{list:?}");
    let shown = exits(admin(&stores, &["show", "jobs", &id]), 0);
    assert!(
        shown
            .stdout
            .contains(&format!("punctual-admin remove jobs '{id}'")),
        "{shown:?}"
    );
    // The quoted form, read back by a shell, names the entry.
    let line = format!(
        "{} --redis {} show jobs '{id}' --json",
        env!("CARGO_BIN_EXE_punctual-admin"),
        redis.url()
    );
    let out = block_in_place(|| Command::new("sh").args(["-c", &line]).output().unwrap());
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["id"], json!(id));
}

/// A store URL that points at another kind of server, or a schema that
/// does not exist, is said in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_port_or_schema_is_named() {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let pg_port = db
        .url()
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .map(|host| host.rsplit(':').next().unwrap().to_owned())
        .unwrap();
    // Redis at PostgreSQL's port.
    let wrong = exits(
        admin(
            &["--redis".into(), format!("redis://127.0.0.1:{pg_port}/")],
            &["queues"],
        ),
        2,
    );
    assert!(
        wrong.stderr.contains("not a Redis server")
            && wrong.stderr.contains("a PostgreSQL server answers there"),
        "{wrong:?}"
    );
    // PostgreSQL at Redis's port.
    let wrong = exits(
        admin(
            &[
                "--postgres".into(),
                format!("postgres://postgres@127.0.0.1:{}/x", redis.port()),
            ],
            &["queues"],
        ),
        2,
    );
    assert!(
        wrong.stderr.contains("not a PostgreSQL server")
            && wrong.stderr.contains("a Redis server answers there"),
        "{wrong:?}"
    );
    // Redis at an HTTP server.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http_port = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in http.incoming().flatten().take(8) {
            let mut stream = stream;
            let mut buf = [0_u8; 256];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let wrong = exits(
        admin(
            &["--redis".into(), format!("redis://127.0.0.1:{http_port}/")],
            &["queues"],
        ),
        2,
    );
    assert!(
        wrong.stderr.contains("not a Redis server")
            && wrong.stderr.contains("an HTTP server answers there")
            && !wrong.stderr.contains("Parse error"),
        "{wrong:?}"
    );
    // A schema that is not there.
    let missing = exits(
        admin(
            &[
                "--postgres".into(),
                db.url(),
                "--schema".into(),
                "no_such_schema".into(),
            ],
            &["queues", "--json"],
        ),
        2,
    );
    assert!(
        missing.json()["error"]
            .as_str()
            .unwrap()
            .contains("no schema \"no_such_schema\""),
        "{missing:?}"
    );
}

/// The health and jobs commands against a real store: workers, running,
/// cancel, history, show with its result, pause-schedule and
/// resume-schedule, requeue --delay, entries --order newest, audit.
async fn health_commands_on<Q>(stores: &[String], queue: &Q, store: &str)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    let worker = common::seed_runs(queue).await;
    let workers = exits(admin(stores, &["workers", "renders", "--json"]), 0).json();
    assert_eq!(workers[0]["name"], "renderer", "{workers}");
    let human = exits(admin(stores, &["workers", "renders"]), 0);
    assert!(human.stdout.contains("renderer"), "{human:?}");
    let running = exits(admin(stores, &["running", "renders", "--json"]), 0).json();
    assert_eq!(running["running"][0]["id"], "slow-1", "{running}");
    assert_eq!(running["running"][0]["worker"]["pid"], std::process::id());
    let shown = exits(admin(stores, &["show", "renders", "quick-1", "--json"]), 0).json();
    assert_eq!(shown["result"]["output"], json!({"pages": 1}), "{shown}");
    let cancel = exits(admin(stores, &["cancel", "renders", "slow-1", "--json"]), 0).json();
    assert_eq!(cancel, json!({"ok": true, "changed": 1}));
    common::eventually("slow-1 is gone", || async {
        queue.entry("slow-1").await.unwrap().is_none()
    })
    .await;
    let history = exits(admin(stores, &["history", "renders", "--json"]), 0).json();
    assert!(
        !history["minutes"].as_array().unwrap().is_empty(),
        "{history}"
    );
    queue
        .schedule_every(
            "hourly",
            Duration::from_secs(3600),
            punctual::MissedTicks::Skip,
            &json!(1),
        )
        .await
        .unwrap();
    exits(admin(stores, &["pause-schedule", "renders", "hourly"]), 0);
    assert!(queue.schedules().await.unwrap()[0].paused);
    exits(admin(stores, &["resume-schedule", "renders", "hourly"]), 0);
    assert!(!queue.schedules().await.unwrap()[0].paused);
    exits(admin(stores, &["pause-schedule", "renders", "nope"]), 1);
    worker.shutdown(Duration::from_secs(1)).await;
    common::seed_dead(queue, 3).await;
    let newest = exits(
        admin(
            stores,
            &[
                "entries", "renders", "--state", "dead", "--order", "newest", "--json",
            ],
        ),
        0,
    )
    .json();
    assert_eq!(newest["entries"][0]["id"], "dead-3", "{newest}");
    let now = queue.now().await.unwrap();
    exits(
        admin(stores, &["requeue", "renders", "dead-1", "--delay", "10m"]),
        0,
    );
    let e = queue.entry("dead-1").await.unwrap().unwrap();
    assert!(e.due.duration_since(now).unwrap() >= Duration::from_secs(590));
    let audit = exits(admin(stores, &["audit", "--store", store, "--json"]), 0).json();
    let actions: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions[..4],
        [
            "requeue",
            "pause-schedule",
            "resume-schedule",
            "pause-schedule"
        ],
        "{audit}"
    );
    assert_eq!(audit["records"][0]["via"], "cli");
    assert_eq!(actions.last(), Some(&"cancel"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_commands_on_redis() {
    let redis = RedisServer::start_in_memory();
    let q: punctual::redis::RedisQueue<Value> = punctual::redis::RedisQueue::builder("renders")
        .url(&redis.url())
        .keep_results(Duration::from_secs(3600))
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    assert_supported!(&q, "health_commands_on_redis");
    health_commands_on(&["--redis".into(), redis.url()], &q, "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_commands_on_postgres() {
    let db = PgDb::new();
    let q: punctual::postgres::PgQueue<Value> = punctual::postgres::PgQueue::builder("renders")
        .url(&db.url())
        .schema("cli_health")
        .keep_results(Duration::from_secs(3600))
        .max_attempts(1)
        .build()
        .await
        .unwrap();
    assert_supported!(&q, "health_commands_on_postgres");
    health_commands_on(
        &[
            "--postgres".into(),
            db.url(),
            "--schema".into(),
            "cli_health".into(),
        ],
        &q,
        "postgres",
    )
    .await;
}
