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

/// How a browser session sees the pages.
#[derive(Clone, Copy, Default)]
struct Looks {
    /// A phone: 390 by 844 CSS pixels, touch, its user agent.
    phone: bool,
    /// The browser's time zone (`TZ`), else the machine's.
    zone: Option<&'static str>,
}

impl Browser {
    async fn start() -> Browser {
        Browser::start_with(Looks::default()).await
    }

    async fn start_with(looks: Looks) -> Browser {
        let port = free_port();
        let mut driver = Command::new(program("PUNCTUAL_CHROMEDRIVER", CHROMEDRIVER));
        if let Some(zone) = looks.zone {
            // Inherited by the browser it starts.
            driver.env("TZ", zone);
        }
        let driver = Killed(
            driver
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
        let mut caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": program("PUNCTUAL_CHROMIUM", CHROMIUM),
                "args": args,
            }
        });
        if looks.phone {
            caps["goog:chromeOptions"]["mobileEmulation"] = json!({
                "deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 3.0, "touch": true},
                "userAgent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
            });
        }
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
    // With the peer's address, as `serve` does (the audit log says it).
    let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    url
}

/// Where the pages' screenshots go: `PUNCTUAL_SCREENSHOTS`, else
/// `target/screenshots/` (a CI artifact).
fn screenshots() -> PathBuf {
    let dir = std::env::var_os("PUNCTUAL_SCREENSHOTS").map_or_else(
        || {
            Path::new(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("target/tmp is in target/")
                .join("screenshots")
        },
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Saves a screenshot of the page `c` shows as `name.png`, all of it
/// (a desktop window grows to the page's height for it).
async fn screenshot(c: &Client, name: &str) {
    let size = c
        .execute(
            "return [window.innerWidth, document.documentElement.scrollHeight]",
            vec![],
        )
        .await
        .unwrap();
    let (width, height) = (size[0].as_u64().unwrap(), size[1].as_u64().unwrap());
    let desktop = width > 600;
    if desktop {
        let tall = u32::try_from(height.clamp(1000, 6000)).unwrap();
        c.set_window_size(1360, tall + 100).await.unwrap();
    }
    let png = c.screenshot().await.unwrap();
    if desktop {
        c.set_window_size(1360, 1000).await.unwrap();
    }
    let path = screenshots().join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
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

/// The ids of the entries on the page, in order.
async fn ids_in_order(c: &Client) -> Vec<String> {
    ids(c).await
}

/// Health at a glance and the runs, by hand, on memory queues: the
/// overview's marks, a queue's health and activity, the Running page and
/// its Cancel (the store's entry gone, its result Cancelled), the Workers
/// page, a schedule paused and resumed, a result, dead letters newest
/// first both ways, a long error opened, a bulk delete confirmed, a
/// requeue with a delay, the audit log; times in the viewer's zone (UTC on
/// hover). A screenshot of each page goes to `target/screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_watches_health_and_acts_on_runs_and_dead_letters() {
    let renders: MemoryQueue<Value> = MemoryQueue::builder("renders")
        .keep_results(Duration::from_secs(3600))
        .lease(Duration::from_secs(3))
        .build();
    let stuck: MemoryQueue<Value> = MemoryQueue::new("stuck");
    stuck
        .insert_many(&[(json!(1), Duration::ZERO), (json!(2), Duration::ZERO)])
        .await
        .unwrap();
    let mail: MemoryQueue<Value> = MemoryQueue::builder("mail").max_attempts(1).build();
    common::seed_dead(&mail, 7).await;
    let worker = common::seed_runs(&renders).await;
    renders
        .schedule_every(
            "nightly",
            Duration::from_secs(3600),
            punctual::MissedTicks::Skip,
            &json!("n"),
        )
        .await
        .unwrap();
    let base = serve_router(
        Dashboard::builder()
            .memory(renders.clone())
            .memory(stuck.clone())
            .memory(mail.clone())
            .refresh_every(Duration::ZERO)
            .router(),
    )
    .await;
    let browser = Browser::start_with(Looks {
        phone: false,
        zone: Some("Asia/Kolkata"),
    })
    .await;
    let (r, m) = (renders.clone(), mail.clone());
    let started = tokio::time::Instant::now();
    browser
        .run("health", move |c| async move {
            // The overview: stuck is red, renders green, with its workers.
            c.goto(&format!("{base}/")).await.unwrap();
            let mark = |q: &str| format!(r#"tr[data-queue="{q}"] .health"#);
            let attr = |css: String| {
                let c = c.clone();
                async move {
                    element(&c, &css)
                        .await
                        .attr("data-health")
                        .await
                        .unwrap()
                        .unwrap()
                }
            };
            assert_eq!(attr(mark("stuck")).await, "red");
            assert_eq!(attr(mark("renders")).await, "green");
            assert_eq!(text(&c, r#"tr[data-queue="renders"] td.wk"#).await, "1");
            assert!(
                element(&c, &mark("stuck"))
                    .await
                    .attr("title")
                    .await
                    .unwrap()
                    .unwrap()
                    .contains("no worker alive")
            );
            screenshot(&c, "overview").await;

            // Times: <time> in UTC, shown in the viewer's zone.
            let times = c.find_all(Locator::Css("time[datetime]")).await.unwrap();
            assert!(!times.is_empty());
            for t in &times {
                let datetime = t.attr("datetime").await.unwrap().unwrap();
                let title = t.attr("title").await.unwrap().unwrap();
                assert!(
                    datetime.ends_with('Z') && title.ends_with(" UTC"),
                    "{datetime} {title}"
                );
                assert!(
                    t.attr("data-local").await.unwrap().is_some(),
                    "rewritten: {title}"
                );
                let shown = t.text().await.unwrap();
                assert_ne!(shown, title, "Asia/Kolkata is not UTC");
                assert!(
                    shown.contains("GMT+5:30") || shown.contains("IST") || shown.contains("+05:30"),
                    "{shown}"
                );
            }

            // A queue: its health, its activity per minute from the store.
            click(&c, r#"tr[data-queue="renders"] a.qname"#).await;
            assert_eq!(
                element(&c, "h1 .health")
                    .await
                    .attr("data-health")
                    .await
                    .unwrap()
                    .unwrap(),
                "green"
            );
            let inserted: u64 = element(&c, "figure.throughput")
                .await
                .attr("data-inserted")
                .await
                .unwrap()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                inserted >= 5,
                "five inserts, and the schedule's tick: {inserted}"
            );
            screenshot(&c, "queue").await;

            // A schedule paused and resumed.
            click(
                &c,
                r#"tr[data-schedule="nightly"] button[data-action="pause-schedule"]"#,
            )
            .await;
            assert!(text(&c, ".flash").await.contains("Paused schedule nightly"));
            assert!(r.schedules().await.unwrap()[0].paused);
            assert_eq!(
                text(&c, r#"tr[data-schedule="nightly"] .pill.paused"#).await,
                "paused"
            );
            click(
                &c,
                r#"tr[data-schedule="nightly"] button[data-action="resume-schedule"]"#,
            )
            .await;
            assert!(!r.schedules().await.unwrap()[0].paused);

            // The Workers page.
            click(&c, r#"nav.qnav a[data-nav="workers"]"#).await;
            let row = element(&c, "tr[data-worker]").await.text().await.unwrap();
            assert!(
                row.contains("renderer") && row.contains(&std::process::id().to_string()),
                "{row}"
            );
            screenshot(&c, "workers").await;

            // The Running page: slow-1, its worker, and Cancel (the box
            // first).
            click(&c, r#"nav.qnav a[data-nav="running"]"#).await;
            let row = r#"tr[data-run="slow-1"]"#;
            assert!(text(&c, row).await.contains("renderer"));
            screenshot(&c, "running").await;
            let page = c.find(Locator::Css("html")).await.unwrap();
            tick(&c, &format!(r#"{row} button[data-action="cancel"]"#)).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(page.tag_name().await.is_ok(), "not sent unticked");
            assert!(r.entry("slow-1").await.unwrap().is_some());
            tick(&c, &format!(r#"{row} input[data-confirm="cancel"]"#)).await;
            click(&c, &format!(r#"{row} button[data-action="cancel"]"#)).await;
            assert!(text(&c, ".flash").await.contains("Cancelled slow-1"));
            common::eventually("slow-1 is gone", || async {
                r.entry("slow-1").await.unwrap().is_none()
            })
            .await;
            assert_eq!(
                r.result("slow-1").await.unwrap().map(|x| x.state),
                Some(punctual::durable::Finished::Cancelled)
            );

            // A finished entry's result.
            c.goto(&format!("{base}/queues/renders/entries/quick-2"))
                .await
                .unwrap();
            assert_eq!(text(&c, r#"[data-field="outcome"]"#).await, "done");
            assert!(
                text(&c, r#"pre[data-field="output"]"#)
                    .await
                    .contains("\"pages\": 2")
            );
            screenshot(&c, "entry-result").await;

            // Dead letters: newest first, three a page, older and newer.
            let mut newest: Vec<String> = m
                .entries(EntryState::Dead, None, 10)
                .await
                .unwrap()
                .entries
                .into_iter()
                .map(|e| e.id)
                .collect();
            newest.reverse();
            c.goto(&format!("{base}/queues/mail/entries?state=dead&limit=3"))
                .await
                .unwrap();
            assert_eq!(ids_in_order(&c).await, newest[..3]);
            click(&c, r#"a[data-page="next"]"#).await;
            assert_eq!(ids_in_order(&c).await, newest[3..6]);
            click(&c, r#"a[data-page="prev"]"#).await;
            assert_eq!(ids_in_order(&c).await, newest[..3]);
            c.goto(&format!("{base}/queues/mail/entries?state=dead"))
                .await
                .unwrap();
            // A long error: one line until clicked.
            let details = r#"tr[data-entry="dead-2"] details.clamp"#;
            assert!(
                element(&c, details)
                    .await
                    .attr("open")
                    .await
                    .unwrap()
                    .is_none()
            );
            tick(&c, &format!("{details} summary")).await;
            assert!(
                element(&c, details)
                    .await
                    .attr("open")
                    .await
                    .unwrap()
                    .is_some()
            );
            assert!(
                text(&c, &format!("{details} pre"))
                    .await
                    .contains("Traceback")
            );
            screenshot(&c, "dead-letters").await;

            // Bulk: two ticked, confirmed, deleted; each answered.
            tick(&c, r#"tr[data-entry="dead-5"] input[name="ids"]"#).await;
            tick(&c, r#"tr[data-entry="dead-6"] input[name="ids"]"#).await;
            let page = c.find(Locator::Css("html")).await.unwrap();
            tick(&c, r#"button[data-action="bulk-delete"]"#).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(page.tag_name().await.is_ok(), "not sent unconfirmed");
            tick(&c, r#"input[data-confirm="bulk"]"#).await;
            click(&c, r#"button[data-action="bulk-delete"]"#).await;
            assert_eq!(
                c.find_all(Locator::Css(r#"tr[data-changed="true"]"#))
                    .await
                    .unwrap()
                    .len(),
                2
            );
            screenshot(&c, "bulk").await;
            assert!(
                m.entry("dead-5").await.unwrap().is_none()
                    && m.entry("dead-6").await.unwrap().is_none()
            );
            assert!(m.entry("dead-7").await.unwrap().is_some());

            // Requeue with a delay, from the entry page.
            c.goto(&format!("{base}/queues/mail/entries/dead-4"))
                .await
                .unwrap();
            let now = m.now().await.unwrap();
            element(&c, r#"input[name="delay"]"#)
                .await
                .send_keys("10m")
                .await
                .unwrap();
            click(&c, r#"button[data-action="requeue"]"#).await;
            assert!(text(&c, ".flash").await.contains("due in 10m"));
            let e = m.entry("dead-4").await.unwrap().unwrap();
            assert_eq!(e.state, EntryState::Pending);
            assert!(e.due.duration_since(now).unwrap() >= Duration::from_secs(595));

            // The audit log: each of those writes, from this browser's
            // address, without a token (the dashboard has none).
            click(&c, r#"footer a[data-nav="audit"]"#).await;
            let rows = c.find_all(Locator::Css("tr[data-audit]")).await.unwrap();
            let mut actions = Vec::new();
            for row in &rows {
                actions.push(
                    row.find(Locator::Css(r#"[data-field="action"] strong"#))
                        .await
                        .unwrap()
                        .text()
                        .await
                        .unwrap(),
                );
            }
            assert_eq!(
                actions,
                [
                    "requeue",
                    "bulk-delete",
                    "cancel",
                    "resume-schedule",
                    "pause-schedule"
                ]
            );
            let from = text(&c, r#"tr[data-audit] [data-field="from"]"#).await;
            assert!(
                from.contains("page") && from.contains("127.0.0.1:"),
                "{from}"
            );
            assert_eq!(
                text(&c, r#"tr[data-audit] [data-field="token"]"#).await,
                "no"
            );
            screenshot(&c, "audit").await;
        })
        .await;
    browser.close().await;
    worker.shutdown(Duration::from_secs(1)).await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// On a phone (390 by 844): no page scrolls sideways, and every count of
/// the overview is in view. A screenshot of each page, as a phone shows
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_fit_a_phone() {
    let mut queues = Vec::new();
    for (name, n) in [
        ("orders", 1234_u64),
        ("notifications-with-a-long-name-for-a-queue", 98_765),
    ] {
        let q: MemoryQueue<Value> = MemoryQueue::builder(name).max_attempts(1).build();
        let entries: Vec<(Value, Duration)> = (0..n)
            .map(|i| (json!({"n": i}), Duration::from_secs(60 + i % 3600)))
            .collect();
        for chunk in entries.chunks(5000) {
            q.insert_many(chunk).await.unwrap();
        }
        q.insert_many(&[(json!("now"), Duration::ZERO)])
            .await
            .unwrap();
        queues.push(q);
    }
    let mail: MemoryQueue<Value> = MemoryQueue::builder("mail").max_attempts(1).build();
    common::seed_dead(&mail, 3).await;
    queues.push(mail);
    let mut builder = Dashboard::builder();
    for q in &queues {
        builder = builder.memory(q.clone());
    }
    let base = serve_router(builder.router()).await;
    let browser = Browser::start_with(Looks {
        phone: true,
        zone: None,
    })
    .await;
    browser
        .run("phone", move |c| async move {
            let fits = |page: &'static str| {
                let c = c.clone();
                async move {
                    let widths = c
                        .execute(
                            "return [document.scrollingElement.scrollWidth, window.innerWidth]",
                            vec![],
                        )
                        .await
                        .unwrap();
                    let (scroll, inner) = (widths[0].as_f64().unwrap(), widths[1].as_f64().unwrap());
                    assert_eq!(inner, 390.0, "a phone's width");
                    assert!(scroll <= inner, "{page}: scrolls sideways ({scroll} > {inner})");
                }
            };
            c.goto(&format!("{base}/")).await.unwrap();
            fits("the overview").await;
            let boxes = c
                .execute(
                    "return Array.from(document.querySelectorAll('table.queues td.count .n')).map(e => { \
                       const r = e.getBoundingClientRect(); \
                       return [e.textContent, r.left, r.right, r.top, r.bottom, r.width]; })",
                    vec![],
                )
                .await
                .unwrap();
            let boxes = boxes.as_array().unwrap();
            assert_eq!(boxes.len(), 4 * 4, "every count of three queues and the totals");
            for b in boxes {
                let (left, right, width) = (b[1].as_f64().unwrap(), b[2].as_f64().unwrap(), b[5].as_f64().unwrap());
                assert!(width > 0.0 && left >= 0.0 && right <= 390.0, "out of view: {b}");
            }
            assert!(boxes.iter().any(|b| b[0] == "98,765"), "{boxes:?}");
            screenshot(&c, "phone-overview").await;
            for (name, path) in [
                ("phone-queue", "/queues/orders"),
                ("phone-entries", "/queues/orders/entries?state=pending"),
                ("phone-dead-letters", "/queues/mail/entries?state=dead"),
                ("phone-entry", "/queues/mail/entries/dead-2"),
                ("phone-running", "/queues/orders/running"),
                ("phone-workers", "/queues/orders/workers"),
                ("phone-audit", "/audit"),
            ] {
                c.goto(&format!("{base}{path}")).await.unwrap();
                text(&c, "main h1").await;
                fits(name).await;
                screenshot(&c, name).await;
            }
        })
        .await;
    browser.close().await;
}

/// Stopping a run by hand on Redis and PostgreSQL, through `punctual-admin
/// serve` (once those stores answer the health calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_cancels_a_run_on_redis_and_postgres() {
    let redis = RedisServer::start_in_memory();
    let db = PgDb::new();
    let r: punctual::redis::RedisQueue<Value> = punctual::redis::RedisQueue::builder("renders")
        .url(&redis.url())
        .keep_results(Duration::from_secs(3600))
        .lease(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let p: punctual::postgres::PgQueue<Value> = punctual::postgres::PgQueue::builder("renders")
        .url(&db.url())
        .schema("browser_runs")
        .keep_results(Duration::from_secs(3600))
        .lease(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let mut stores = Vec::new();
    let mut workers = Vec::new();
    if let Some(why) = common::unsupported(&r).await {
        panic!("redis: the store does not answer {why}");
    } else {
        workers.push(common::seed_runs(&r).await);
        stores.extend(["--redis".to_owned(), redis.url()]);
    }
    if let Some(why) = common::unsupported(&p).await {
        panic!("postgres: the store does not answer {why}");
    } else {
        workers.push(common::seed_runs(&p).await);
        stores.extend([
            "--postgres".to_owned(),
            db.url(),
            "--schema".to_owned(),
            "browser_runs".to_owned(),
        ]);
    }
    if stores.is_empty() {
        return;
    }
    let kinds: Vec<&str> = stores
        .iter()
        .filter_map(|s| s.strip_prefix("--"))
        .filter(|k| *k != "schema")
        .map(|k| if k == "redis" { "redis" } else { "postgres" })
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    let (_server, base) = serve(&stores, &[]);
    let browser = Browser::start().await;
    let (r2, p2) = (r.clone(), p.clone());
    let kinds: Vec<String> = kinds.into_iter().map(str::to_owned).collect();
    browser
        .run("runs-stores", move |c| async move {
            for kind in &kinds {
                let q = if kinds.len() > 1 {
                    format!("{kind}:renders")
                } else {
                    "renders".to_owned()
                };
                c.goto(&format!("{base}/queues/{q}/running")).await.unwrap();
                let row = r#"tr[data-run="slow-1"]"#;
                assert!(text(&c, row).await.contains("renderer"));
                tick(&c, &format!(r#"{row} input[data-confirm="cancel"]"#)).await;
                click(&c, &format!(r#"{row} button[data-action="cancel"]"#)).await;
                assert!(text(&c, ".flash").await.contains("Cancelled slow-1"));
                let result = if kind == "redis" {
                    common::eventually("gone", || async {
                        r2.entry("slow-1").await.unwrap().is_none()
                    })
                    .await;
                    r2.result("slow-1").await.unwrap()
                } else {
                    common::eventually("gone", || async {
                        p2.entry("slow-1").await.unwrap().is_none()
                    })
                    .await;
                    p2.result("slow-1").await.unwrap()
                };
                assert_eq!(
                    result.map(|x| x.state),
                    Some(punctual::durable::Finished::Cancelled)
                );
                c.goto(&format!("{base}/queues/{q}/workers")).await.unwrap();
                assert!(text(&c, "tr[data-worker]").await.contains("renderer"));
            }
        })
        .await;
    browser.close().await;
    for w in workers {
        w.shutdown(Duration::from_secs(1)).await;
    }
}
