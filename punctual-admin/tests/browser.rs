//! The dashboard in a real browser: `punctual-admin serve` (the binary)
//! in front of a seeded Redis and PostgreSQL, driven over WebDriver
//! (chromedriver and headless Chromium, Debian's `chromium` and
//! `chromium-driver`) as a person clicks through it. After each click the
//! test reads the store and checks it changed. Read-only mode shows no
//! button and refuses a forged POST; a token keeps out whoever lacks it.
//!
//! A failing run saves a screenshot of the page it was on under
//! `target/tmp/`. With `PUNCTUAL_ADMIN_SCREENSHOT=1` a passing run saves
//! the README's screenshot, `punctual-admin/docs/dashboard.png`.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::pg::PgDb;
use common::redis_server::RedisServer;
use common::{
    KEYED_DUE, ORDERS, SEEDED, TENANT_A, pg_queue_in, redis_queue, seed_keyed, seed_pg, seed_redis,
};
use fantoccini::{Client, ClientBuilder, Locator};
use punctual::durable::{Durable, EntryState, KeyLimit, Rate};
use punctual::memory::MemoryQueue;
use punctual_admin::Dashboard;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// `PUNCTUAL_CHROMIUM` / `PUNCTUAL_CHROMEDRIVER`, else Debian's paths.
fn program(var: &str, default: &str) -> String {
    let path = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    assert!(
        Path::new(&path).exists(),
        "{path} not found: the browser tests drive Chromium over WebDriver; install them \
         (Debian/Ubuntu: `apt-get install chromium chromium-driver`, or run scripts/test), \
         or name them in {var}"
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// chromedriver on a free port, and a headless Chromium session with a
/// fresh profile.
struct Browser {
    client: Client,
    _driver: Killed,
    profile: PathBuf,
}

impl Browser {
    async fn start() -> Browser {
        let port = free_port();
        let driver = Killed(
            Command::new(program("PUNCTUAL_CHROMEDRIVER", CHROMEDRIVER))
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts"),
        );
        common::eventually("chromedriver listens", || async {
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
        })
        .await;
        let profile = std::env::temp_dir().join(format!(
            "punctual-admin-chromium-{}-{port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&profile);
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1360,1000",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect::<Vec<_>>();
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": program("PUNCTUAL_CHROMIUM", CHROMIUM),
                "args": args,
            }
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Browser {
            client,
            _driver: driver,
            profile,
        }
    }

    /// Runs `steps`; if they panic, saves a screenshot of the page first.
    async fn run<F, Fut>(&self, name: &str, steps: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let outcome = tokio::spawn(steps(self.client.clone())).await;
        if let Err(failure) = outcome {
            let path =
                PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-failure.png"));
            match self.client.screenshot().await {
                Ok(png) => {
                    let _ = std::fs::write(&path, png);
                    eprintln!("screenshot of the failure: {}", path.display());
                }
                Err(e) => eprintln!("no screenshot of the failure: {e}"),
            }
            // Ends the browser (chromedriver, killed, would leave it running).
            let _ = self.client.clone().close().await;
            std::panic::resume_unwind(failure.into_panic());
        }
    }

    async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    /// Kills what is left of the browser if the session was not closed (a
    /// panic outside [`Browser::run`]): chromedriver, killed, leaves it
    /// running. Its processes are those of a Chromium binary whose command
    /// line names this session's profile.
    fn drop(&mut self) {
        let marker = format!("--user-data-dir={}", self.profile.display());
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
            if !exe.to_string_lossy().contains("chrom") {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&marker) {
                let _ = Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `punctual-admin serve` on a free loopback port with `args`; its base
/// URL.
fn serve(stores: &[String], args: &[&str]) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_punctual-admin"))
        .args(stores)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("serve says where it listens")
            .expect("stderr reads");
        if let Some(rest) = line.split("dashboard on ").nth(1) {
            break rest.split('/').take(3).collect::<Vec<_>>().join("/");
        }
    };
    // Keeps draining its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, url)
}

/// `router` served on a free loopback port, in this process (a memory
/// queue lives here, where the binary cannot reach it); its base URL.
async fn serve_router(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn text(c: &Client, css: &str) -> String {
    element(c, css).await.text().await.unwrap()
}

/// Clicks what `css` finds without leaving the page (a box to tick).
async fn tick(c: &Client, css: &str) {
    element(c, css)
        .await
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

/// Clicks a link or a button that loads another page, and waits until it
/// has (chromedriver may answer the click before a form's answer came).
async fn click(c: &Client, css: &str) {
    let old = c.find(Locator::Css("html")).await.unwrap();
    tick(c, css).await;
    common::eventually(&format!("the page after clicking {css} loads"), || async {
        // The old page's root is gone once the new page replaced it.
        old.tag_name().await.is_err()
            && c.execute("return document.readyState", vec![])
                .await
                .is_ok_and(|state| state == "complete")
    })
    .await;
}

async fn element(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
}

/// The ids of the entries on the page.
async fn ids(c: &Client) -> Vec<String> {
    let mut ids = Vec::new();
    for row in c.find_all(Locator::Css("tr[data-entry]")).await.unwrap() {
        ids.push(row.attr("data-entry").await.unwrap().unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_clicks_through_the_dashboard() {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let r = redis_queue(&redis.url(), "orders").await;
    let p = pg_queue_in(&db.url(), "browser", "orders").await;
    drop(seed_redis(&r).await);
    drop(seed_pg(&p).await);
    redis_queue(&redis.url(), "emails")
        .await
        .insert(&json!({"to": "a@example.com"}), Duration::from_secs(90))
        .await
        .unwrap();
    let stores = vec![
        "--redis".to_owned(),
        redis.url(),
        "--postgres".to_owned(),
        db.url(),
        "--schema".to_owned(),
        "browser".to_owned(),
    ];
    let (_server, base) = serve(&stores, &[]);
    let browser = Browser::start().await;

    let (r2, p2, base2) = (r.clone(), p.clone(), base.clone());
    browser
        .run("clicks", move |c| async move {
            let (r, p, base) = (r2, p2, base2);
            // The overview: every queue with its counts.
            c.goto(&format!("{base}/")).await.unwrap();
            assert_eq!(c.title().await.unwrap(), "Queues · punctual");
            let row = r#"tr[data-queue="redis:orders"]"#;
            let dead = text(&c, &format!("{row} td.count:nth-of-type(6) .n")).await;
            assert_eq!(dead, "3");
            assert_eq!(
                c.find_all(Locator::Css("tr[data-queue]"))
                    .await
                    .unwrap()
                    .len(),
                3
            );

            // A queue's page, then its pending entries, page by page.
            click(&c, &format!("{row} a.qname")).await;
            assert!(text(&c, "h1").await.starts_with("orders"));
            assert_eq!(
                text(&c, r#"a.tile[data-state="pending"] .big"#).await,
                SEEDED.pending.to_string()
            );
            click(&c, r#"a.tile[data-state="pending"]"#).await;
            let mut seen = ids(&c).await;
            assert_eq!(seen.len(), 50);
            click(&c, r#"a[data-page="next"]"#).await;
            let second = ids(&c).await;
            assert_eq!(second.len(), 50);
            assert!(!seen.contains(&second[0]));
            seen.extend(second);
            click(&c, r#"a[data-page="next"]"#).await;
            seen.extend(ids(&c).await);
            assert!(
                c.find(Locator::Css(r#"a[data-page="next"]"#))
                    .await
                    .is_err(),
                "the last page"
            );
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len() as u64, SEEDED.pending, "each pending entry once");
            assert!(seen.contains(&format!("order-{ORDERS:03}")));
            click(&c, r#"a[data-page="first"]"#).await;
            assert_eq!(ids(&c).await.len(), 50);

            // A dead letter, opened and requeued.
            click(&c, r#".tabs a[data-state="dead"]"#).await;
            click(&c, r#"a[data-order="oldest"]"#).await;
            assert_eq!(ids(&c).await, ["dead-1", "dead-2", "dead-3"]);
            click(&c, r#"tr[data-entry="dead-1"] a.id"#).await;
            assert_eq!(text(&c, "[data-entry-state]").await, "dead");
            assert!(text(&c, "pre.err").await.contains("card declined"));
            assert!(text(&c, "pre.json").await.contains("\"order\": 100"));
            click(&c, r#"button[data-action="requeue"]"#).await;
            assert!(text(&c, ".flash").await.contains("Requeued dead-1"));
            assert_eq!(text(&c, "[data-entry-state]").await, "due");
            let back = r.entry("dead-1").await.unwrap().unwrap();
            assert_eq!((back.state, back.attempt), (EntryState::Due, 0));
            assert_eq!(r.stats().await.unwrap().dead, 2);

            // Pause and resume.
            click(&c, "nav.crumbs a").await;
            click(&c, r#"button[data-action="pause"]"#).await;
            assert!(text(&c, ".flash").await.contains("Paused orders"));
            assert_eq!(text(&c, ".head .pill").await, "paused");
            assert!(r.is_paused().await.unwrap());
            click(&c, r#"button[data-action="resume"]"#).await;
            assert_eq!(text(&c, ".head .pill").await, "running");
            assert!(!r.is_paused().await.unwrap());

            // Run a schedule now.
            let before = r.entry("nightly-report").await.unwrap().unwrap().due;
            click(
                &c,
                r#"tr[data-schedule="nightly-report"] button[data-action="run-now"]"#,
            )
            .await;
            assert!(
                text(&c, ".flash")
                    .await
                    .contains("nightly-report is due now")
            );
            let next = r.entry("nightly-report").await.unwrap().unwrap();
            assert!(next.due < before && next.due <= r.now().await.unwrap());

            // The other store: delete its dead letters, which wants the box
            // ticked first (the browser refuses to send the form until then).
            c.goto(&format!(
                "{base}/queues/postgres:orders/entries?state=dead&order=oldest"
            ))
            .await
            .unwrap();
            let page = c.find(Locator::Css("html")).await.unwrap();
            tick(&c, r#"button[data-action="clear-dead"]"#).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                page.tag_name().await.is_ok(),
                "the form was not sent unticked"
            );
            assert_eq!(p.stats().await.unwrap().dead, 3);
            tick(&c, r#"input[data-confirm="clear-dead"]"#).await;
            click(&c, r#"button[data-action="clear-dead"]"#).await;
            assert!(text(&c, ".flash").await.contains("Deleted 3 dead letters"));
            assert_eq!(p.stats().await.unwrap().dead, 0);
            assert_eq!(text(&c, r#".tabs a[data-state="dead"] .count"#).await, "0");

            // A pending entry removed from its page.
            c.goto(&format!(
                "{base}/queues/postgres:orders/entries?state=pending"
            ))
            .await
            .unwrap();
            // A row's Delete wants its box ticked, as the entry page's does.
            let page = c.find(Locator::Css("html")).await.unwrap();
            let row = r#"tr[data-entry="order-005"]"#;
            tick(&c, &format!(r#"{row} button[data-action="remove"]"#)).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                page.tag_name().await.is_ok(),
                "the form was not sent unticked"
            );
            assert!(p.entry("order-005").await.unwrap().is_some());
            tick(&c, &format!(r#"{row} input[data-confirm="remove"]"#)).await;
            click(&c, &format!(r#"{row} button[data-action="remove"]"#)).await;
            assert!(text(&c, ".flash").await.contains("Deleted order-005"));
            assert!(p.entry("order-005").await.unwrap().is_none());
        })
        .await;

    if std::env::var_os("PUNCTUAL_ADMIN_SCREENSHOT").is_some() {
        let c = &browser.client;
        c.goto(&format!("{base}/queues/redis:orders"))
            .await
            .unwrap();
        c.set_window_size(1360, 1180).await.unwrap();
        let png = c.screenshot().await.unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard.png");
        std::fs::write(&path, png).unwrap();
        eprintln!("saved {}", path.display());
        // The other pages, to look at (not committed).
        for (name, path) in [
            ("overview", "/"),
            (
                "entries",
                "/queues/redis:orders/entries?state=dead&order=oldest",
            ),
            ("entry", "/queues/redis:orders/entries/dead-2"),
        ] {
            c.goto(&format!("{base}{path}")).await.unwrap();
            let png = c.screenshot().await.unwrap();
            let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"));
            std::fs::write(&path, png).unwrap();
        }
    }
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_and_token_keep_writes_out() {
    let redis = RedisServer::start_in_memory();
    let r = redis_queue(&redis.url(), "orders").await;
    drop(seed_redis(&r).await);
    let stores = vec!["--redis".to_owned(), redis.url()];
    let (_ro, ro_base) = serve(&stores, &["--read-only"]);
    let (_locked, locked_base) = serve(&stores, &["--token", "open sesame"]);
    let browser = Browser::start().await;

    let r2 = r.clone();
    browser
        .run("safety", move |c| async move {
            let r = r2;
            // Read-only: the pages show no button at all.
            for path in ["/", "/queues/orders", "/queues/orders/entries?state=dead&order=oldest", "/queues/orders/entries/dead-1"] {
                c.goto(&format!("{ro_base}{path}")).await.unwrap();
                text(&c, "main h1").await;
                assert!(
                    c.find_all(Locator::Css("button[data-action], form.act")).await.unwrap().is_empty(),
                    "a write button on {path}"
                );
                assert_eq!(text(&c, ".badge.ro").await, "read-only");
            }
            // A forged POST from the page itself, and a forged form: 403.
            let status = c
                .execute(
                    "return fetch('/api/queues/orders/pause', {method: 'POST'}).then(r => r.status)",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(status, json!(403));
            let page = c.find(Locator::Css("html")).await.unwrap();
            c.execute(
                "const f = document.createElement('form'); f.method = 'post'; \
                 f.action = '/queues/orders/requeue'; \
                 const i = document.createElement('input'); i.name = 'all_dead'; i.value = 'true'; \
                 f.appendChild(i); document.body.appendChild(f); f.submit();",
                vec![],
            )
            .await
            .unwrap();
            common::eventually("the forged form's answer loads", || async {
                page.tag_name().await.is_err()
            })
            .await;
            assert!(text(&c, "main h1").await.starts_with("403"));
            assert!(!r.is_paused().await.unwrap());
            assert_eq!(r.stats().await.unwrap().dead, 3, "nothing requeued");

            // A token: without it, the login form; the API answers 401.
            c.goto(&format!("{locked_base}/queues/orders")).await.unwrap();
            assert!(c.current_url().await.unwrap().path().ends_with("/login"));
            let status = c
                .execute("return fetch('/api/queues').then(r => r.status)", vec![])
                .await
                .unwrap();
            assert_eq!(status, json!(401));
            let form = c.form(Locator::Css("form[action='/login']")).await.unwrap();
            form.set_by_name("token", "wrong").await.unwrap();
            click(&c, r#"button[data-action="login"]"#).await;
            assert_eq!(text(&c, ".error").await, "That is not the token.");
            let form = c.form(Locator::Css("form[action='/login']")).await.unwrap();
            form.set_by_name("token", "open sesame").await.unwrap();
            click(&c, r#"button[data-action="login"]"#).await;
            assert_eq!(text(&c, "main h1").await, "Queues");
            // Logged in, the buttons work.
            c.goto(&format!("{locked_base}/queues/orders")).await.unwrap();
            click(&c, r#"button[data-action="pause"]"#).await;
            assert!(r.is_paused().await.unwrap());
            click(&c, "button.linkish").await;
            assert!(c.current_url().await.unwrap().path().ends_with("/login"));
            c.goto(&format!("{locked_base}/")).await.unwrap();
            assert!(c.current_url().await.unwrap().path().ends_with("/login"), "logged out");
        })
        .await;
    browser.close().await;
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

/// Issue 39 by hand, on queue `q` of the dashboard at `base` (the store's
/// `queue`, seeded by `seed_keyed`, its due entries held): the queue page
/// lists the key limits with what runs of each key; a person sets one
/// with the form and removes one (ticking the box first), and the store
/// changes; the entries and an entry show key and priority.
async fn limits_by_hand<Q>(c: Client, base: String, q: String, queue: Q)
where
    Q: Durable<Item = Value>,
    Q::Error: std::fmt::Debug,
{
    c.goto(&format!("{base}/queues/{q}")).await.unwrap();
    assert_eq!(text(&c, "section.limits h2").await, "KEY LIMITS");
    assert_eq!(
        text(&c, r#"tr[data-limit="tenant-a"] td[data-running]"#).await,
        "2"
    );
    assert_eq!(
        text(&c, r#"tr[data-limit="*"] td[data-running]"#).await,
        "1"
    );
    assert!(
        text(&c, r#"tr[data-limit="*"]"#)
            .await
            .contains("100 per 1m")
    );
    assert_eq!(text(&c, r#"[data-other="tenant-b"]"#).await, "tenant-b");

    // Set a limit with the form.
    let form = c.form(Locator::Css("form.set-limit")).await.unwrap();
    form.set_by_name("key", "tenant-b").await.unwrap();
    form.set_by_name("concurrency", "1").await.unwrap();
    form.set_by_name("rate_max", "5").await.unwrap();
    form.set_by_name("rate_per", "30s").await.unwrap();
    click(&c, r#"button[data-action="set-limit"]"#).await;
    assert!(
        text(&c, ".flash")
            .await
            .contains("The limit of key tenant-b is set."),
        "{}",
        text(&c, "main").await
    );
    let tenant_b = KeyLimit {
        concurrency: Some(1),
        rate: Some(Rate {
            max: 5,
            per: Duration::from_secs(30),
        }),
    };
    assert!(
        kept(&queue)
            .await
            .contains(&("tenant-b".to_owned(), tenant_b))
    );
    assert_eq!(
        text(&c, r#"tr[data-limit="tenant-b"] td[data-running]"#).await,
        "1",
        "tenant-b runs under its own limit now"
    );
    assert_eq!(
        text(&c, r#"tr[data-limit="*"] td[data-running]"#).await,
        "0"
    );

    // Remove one: the browser sends nothing until the box is ticked.
    let page = c.find(Locator::Css("html")).await.unwrap();
    tick(
        &c,
        r#"tr[data-limit="tenant-a"] button[data-action="remove-limit"]"#,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        page.tag_name().await.is_ok(),
        "the form was not sent unticked"
    );
    assert!(kept(&queue).await.iter().any(|(k, _)| k == "tenant-a"));
    tick(
        &c,
        r#"tr[data-limit="tenant-a"] input[data-confirm="remove-limit"]"#,
    )
    .await;
    click(
        &c,
        r#"tr[data-limit="tenant-a"] button[data-action="remove-limit"]"#,
    )
    .await;
    assert!(
        text(&c, ".flash")
            .await
            .contains("The limit of key tenant-a is removed.")
    );
    assert!(!kept(&queue).await.iter().any(|(k, _)| k == "tenant-a"));
    assert!(
        c.find(Locator::Css(r#"tr[data-limit="tenant-a"]"#))
            .await
            .is_err(),
        "its row is gone"
    );
    assert!(
        kept(&queue).await.iter().any(|(k, _)| k == "*"),
        "the others stay"
    );

    // Entries show their key and priority.
    c.goto(&format!("{base}/queues/{q}/entries?state=pending"))
        .await
        .unwrap();
    assert_eq!(text(&c, r#"tr[data-entry="later"] td.prio"#).await, "-2");
    assert_eq!(
        text(&c, r#"tr[data-entry="later"] td.key"#).await,
        "tenant-c"
    );
    assert_eq!(text(&c, r#"tr[data-entry="urgent"] td.prio"#).await, "9");
    click(&c, r#"tr[data-entry="urgent"] a.id"#).await;
    assert_eq!(text(&c, r#"dd[data-field="priority"]"#).await, "9");
    assert_eq!(text(&c, r#"dd[data-field="key"]"#).await, "none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sets_and_removes_key_limits_on_memory() {
    let queue: MemoryQueue<Value> = MemoryQueue::builder("tenants")
        .lease(Duration::from_secs(3600))
        .build();
    seed_keyed(&queue).await;
    let mut held = Vec::new();
    for _ in 0..KEYED_DUE {
        held.push(queue.try_take().await.unwrap().expect("due"));
    }
    let base = serve_router(Dashboard::builder().memory(queue.clone()).router()).await;
    let ro_base = serve_router(
        Dashboard::builder()
            .memory(queue.clone())
            .read_only(true)
            .router(),
    )
    .await;
    let browser = Browser::start().await;
    let q = queue.clone();
    browser
        .run("limits-memory", move |c| async move {
            limits_by_hand(c.clone(), base, "tenants".to_owned(), q.clone()).await;

            // Read-only: the limits shown, no form and no button; a forged
            // POST from the page refused.
            c.goto(&format!("{ro_base}/queues/tenants")).await.unwrap();
            assert_eq!(
                text(&c, r#"tr[data-limit="tenant-b"] td[data-running]"#).await,
                "1"
            );
            assert!(
                c.find_all(Locator::Css(
                    "form.set-limit, button[data-action], form.act"
                ))
                .await
                .unwrap()
                .is_empty()
            );
            let status = c
                .execute(
                    "return fetch('/api/queues/tenants/limits', {method: 'POST', \
                     headers: {'content-type': 'application/json'}, \
                     body: JSON.stringify({key: 'x', concurrency: 1})}).then(r => r.status)",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(status, json!(403));
            assert!(!kept(&q).await.iter().any(|(k, _)| k == "x"));
        })
        .await;
    browser.close().await;
    drop(held);
}

/// The same by hand on Redis and PostgreSQL, through `punctual-admin
/// serve`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sets_and_removes_key_limits_on_redis_and_postgres() {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let r = redis_queue(&redis.url(), "tenants").await;
    let p = pg_queue_in(&db.url(), "browser_keys", "tenants").await;
    seed_keyed(&r).await;
    seed_keyed(&p).await;
    let mut held_r = Vec::new();
    let mut held_p = Vec::new();
    for _ in 0..KEYED_DUE {
        held_r.push(r.try_take().await.unwrap().expect("due"));
        held_p.push(p.try_take().await.unwrap().expect("due"));
    }
    let stores = vec![
        "--redis".to_owned(),
        redis.url(),
        "--postgres".to_owned(),
        db.url(),
        "--schema".to_owned(),
        "browser_keys".to_owned(),
    ];
    let (_server, base) = serve(&stores, &[]);
    let browser = Browser::start().await;
    let (r2, p2) = (r.clone(), p.clone());
    browser
        .run("limits-stores", move |c| async move {
            limits_by_hand(
                c.clone(),
                base.clone(),
                "redis:tenants".to_owned(),
                r2.clone(),
            )
            .await;
            assert_eq!(
                kept(&p2).await.iter().find(|(k, _)| k == "tenant-a"),
                Some(&("tenant-a".to_owned(), TENANT_A)),
                "postgres:tenants keeps its own"
            );
            limits_by_hand(c, base, "postgres:tenants".to_owned(), p2).await;
        })
        .await;
    browser.close().await;
    drop((held_r, held_p));
}
