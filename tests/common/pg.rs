//! A fresh PostgreSQL database for each test binary, on the local server
//! (`postgres://postgres@127.0.0.1:5432/postgres`, or the server of
//! `PUNCTUAL_PG_URL`).
//!
//! The database is created when a test of the binary first asks for it and
//! dropped (`WITH (FORCE)`) when the last test holding a [`PgDb`] ends; a
//! database left behind by a killed run (its process is gone) is dropped by
//! the next run. Everything here is blocking std code over `psql`, usable
//! from inside or outside a Tokio runtime.

use std::process::Command;
use std::sync::Mutex;

/// The admin URL of the server the tests use.
pub fn admin_url() -> String {
    std::env::var("PUNCTUAL_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// The URL of database `db` through a fault proxy listening on `port`, in
/// plain text (`sslmode=disable`): the proxy's faults look for a request's
/// bytes, which TLS would hide (with the feature `postgres-tls`, sqlx asks
/// for TLS by default, and the test server may offer it).
pub fn proxied_url(port: u16, db: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/{db}?sslmode=disable")
}

/// Runs `sql` on the database at `url` with `psql`; its output, trimmed.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql runs (install the Debian package postgresql-client)");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `url` with its database replaced by `db`.
pub fn with_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let cut = base.rfind('/').expect("a postgres:// URL");
    let head = &base[..cut];
    // `postgres://host` has no path: the slash found is the scheme's.
    let head = if head.ends_with('/') { base } else { head };
    format!("{head}/{db}{query}")
}

struct Shared {
    users: usize,
    name: Option<String>,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared {
    users: 0,
    name: None,
});

/// A handle on this binary's test database; the last one dropped drops it.
pub struct PgDb {
    name: String,
}

impl PgDb {
    /// Creates this binary's database if no test holds it.
    pub fn new() -> PgDb {
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if shared.name.is_none() {
            drop_stale();
            let exe = std::env::current_exe().unwrap();
            let stem = exe.file_stem().unwrap().to_string_lossy().to_lowercase();
            let stem: String = stem
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .take(30)
                .collect();
            let name = format!("punctual_t_{}_{stem}", std::process::id());
            psql(&admin_url(), &format!("CREATE DATABASE \"{name}\""));
            shared.name = Some(name);
        }
        shared.users += 1;
        PgDb {
            name: shared.name.clone().unwrap(),
        }
    }

    /// The database's URL.
    pub fn url(&self) -> String {
        with_db(&admin_url(), &self.name)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `sql` on the database.
    pub fn psql(&self, sql: &str) -> String {
        psql(&self.url(), sql)
    }
}

impl Default for PgDb {
    fn default() -> Self {
        PgDb::new()
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        shared.users -= 1;
        if shared.users == 0 {
            if let Some(name) = shared.name.take() {
                let _ = Command::new("psql")
                    .args([
                        &admin_url(),
                        "-X",
                        "-At",
                        "-c",
                        &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
                    ])
                    .output();
            }
        }
    }
}

/// Drops the test databases of runs whose process is gone.
fn drop_stale() {
    let names = psql(
        &admin_url(),
        "SELECT datname FROM pg_database WHERE datname LIKE 'punctual\\_t\\_%'",
    );
    for name in names.lines() {
        let pid = name
            .strip_prefix("punctual_t_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = Command::new("psql")
            .args([
                &admin_url(),
                "-X",
                "-At",
                "-c",
                &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
            ])
            .output();
    }
}

/// The local server's port (from `PUNCTUAL_PG_URL` or 5432), for a proxy
/// in front of it; the server must be on this host.
pub fn admin_port() -> u16 {
    let url = admin_url();
    let authority = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(['/', '?']).next())
        .expect("a postgres:// URL");
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "5432"));
    assert!(
        matches!(host, "127.0.0.1" | "localhost"),
        "the proxy tests need the server on this host, not {host}"
    );
    port.parse().expect("a port")
}
