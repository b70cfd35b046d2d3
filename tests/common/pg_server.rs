//! A private, throwaway PostgreSQL server for the fault tests that kill the
//! server itself (the shared one on port 5432 must live on).
//!
//! [`PgServer::start`] runs `initdb` into a fresh temporary directory and
//! starts `postgres` on a free loopback port, with its unix socket in that
//! directory and trust authentication for the `postgres` role. PostgreSQL
//! refuses to run as root, so when the tests run as root (they do in CI
//! containers) both run as the `postgres` OS user (`setuid` in the child,
//! like `runuser` without its extra process: the child we hold *is* the
//! postmaster), and the directory is handed to that user. Durability is the
//! server's default: `fsync` and `synchronous_commit` on.
//!
//! [`PgServer::kill`] SIGKILLs the postmaster (a crash: no shutdown
//! checkpoint) and waits for its backends to notice and exit;
//! [`PgServer::restart`] starts it again on the same port and data
//! directory (crash recovery replays the WAL). Dropping it kills everything
//! and removes the directory. Nothing is skipped: without the server's
//! binaries the test fails with a message saying what to install.
//!
//! Blocking std code, usable inside or outside a Tokio runtime (wrap the
//! calls in `block_in_place` on a multi-thread runtime).

#![allow(dead_code)]

use std::fs;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How long a (re)starting server may take to accept connections (crash
/// recovery included).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the backends of a killed postmaster may take to exit before
/// they are SIGKILLed too.
const ORPHANS_TIMEOUT: Duration = Duration::from_secs(5);
/// Spawns tried before giving up when the server exits right away (its port
/// taken between picking and binding it, say).
const SPAWN_ATTEMPTS: usize = 5;

const NOT_FOUND: &str = "the PostgreSQL server binaries (initdb, postgres, pg_isready) were not found: \
     the fault tests start a private server; install them (Debian/Ubuntu: \
     `apt-get install postgresql`), or point PUNCTUAL_PG_BIN at their directory";

/// A private PostgreSQL server owned by one test.
pub struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// `(uid, gid)` to run the server as; `None`: as ourselves.
    user: Option<(u32, u32)>,
    child: Option<Child>,
}

impl PgServer {
    /// Creates a cluster in a fresh temporary directory and starts it;
    /// returns once it accepts connections.
    ///
    /// Panics, saying why, if the binaries are missing or the server does
    /// not come up.
    pub fn start() -> PgServer {
        PgServer::start_with(|_| {})
    }

    /// As [`start`](Self::start), with `configure` run on the data
    /// directory between `initdb` and the first start (to append to
    /// `postgresql.conf`, replace `pg_hba.conf`, add certificates). The
    /// files it leaves directly in the data directory are handed to the
    /// server's OS user (a server key must belong to it).
    pub fn start_with(configure: impl FnOnce(&Path)) -> PgServer {
        let bin = bin_dir();
        let user = server_user();
        let dir = fresh_dir();
        let mut server = PgServer {
            bin,
            dir,
            port: 0,
            user,
            child: None,
        };
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&server.dir, Some(uid), Some(gid)).unwrap_or_else(|e| {
                panic!(
                    "cannot hand {} to the postgres user: {e}",
                    server.dir.display()
                )
            });
        }
        server.initdb();
        let data = server.dir.join("data");
        configure(&data);
        if let Some((uid, gid)) = user {
            for entry in fs::read_dir(&data).expect("the data directory").flatten() {
                if entry.file_type().is_ok_and(|t| t.is_file()) {
                    std::os::unix::fs::chown(entry.path(), Some(uid), Some(gid)).unwrap_or_else(
                        |e| {
                            panic!(
                                "cannot hand {} to the postgres user: {e}",
                                entry.path().display()
                            )
                        },
                    );
                }
            }
        }
        let mut last_failure = String::new();
        for _ in 0..SPAWN_ATTEMPTS {
            server.port = free_port();
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(failure) => {
                    server.kill();
                    last_failure = failure;
                }
            }
        }
        // `server` drops while unwinding: the directory goes away.
        panic!("postgres did not start after {SPAWN_ATTEMPTS} attempts: {last_failure}");
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory: `data/` (the cluster), the unix socket,
    /// `server.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log so far (every start appends to it).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// The postmaster's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the postmaster, reaps it, and waits until its backends have
    /// noticed and exited (SIGKILLing those that take longer than 5 s), so a
    /// restart finds no process attached to the old shared memory. Does
    /// nothing if it is not running.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let orphans = children_of(child.id());
        let _ = child.kill();
        let _ = child.wait();
        let start = now();
        loop {
            let alive: Vec<u32> = orphans.iter().copied().filter(|&p| is_alive(p)).collect();
            if alive.is_empty() {
                return;
            }
            if start.elapsed() > ORPHANS_TIMEOUT {
                for pid in alive {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .stderr(Stdio::null())
                        .status();
                }
                thread::sleep(Duration::from_millis(50));
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the server if it runs, then starts it again on the same port
    /// and data directory, and waits until it accepts connections (after
    /// crash recovery).
    pub fn restart(&mut self) {
        self.kill();
        let mut last_failure = String::new();
        for _ in 0..SPAWN_ATTEMPTS {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(failure) => {
                    self.kill();
                    last_failure = failure;
                    thread::sleep(Duration::from_millis(200));
                }
            }
        }
        panic!(
            "postgres did not restart on port {} after {SPAWN_ATTEMPTS} attempts: {last_failure}",
            self.port
        );
    }

    /// Whether the postmaster is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => child.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    /// Runs `sql` on the server's `postgres` database with `psql`.
    pub fn psql(&self, sql: &str) -> String {
        crate::common::pg::psql(&self.url(), sql)
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        command.current_dir(&self.dir);
        command
    }

    fn initdb(&self) {
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args([
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--no-locale",
                // Only the cluster's creation skips fsync; the server keeps
                // its default (fsync on).
                "--no-sync",
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb from {}: {e}", self.bin.display()));
        assert!(
            out.status.success(),
            "initdb failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .map_err(|e| format!("cannot open the server log: {e}"))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("cannot open the server log: {e}"))?;
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=60",
                "-c",
                "shared_buffers=16MB",
                "-c",
                "fsync=on",
                "-c",
                "synchronous_commit=on",
                "-c",
                "logging_collector=off",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot spawn postgres: {e}"))?;
        self.child = Some(child);
        let start = now();
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap_or(None) {
                self.child = None;
                return Err(format!(
                    "postgres exited on port {} ({status}); log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
                .args(["-p", &self.port.to_string(), "-t", "1"])
                .stdin(Stdio::null())
                .status()
                .map_err(|e| format!("cannot run pg_isready: {e}"))?;
            if ready.success() {
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "postgres on port {} not ready after {READY_TIMEOUT:?}; log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("postgres log (port {}):\n{}", self.port, self.log());
        }
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The directory of `initdb`, `postgres` and `pg_isready`:
/// `PUNCTUAL_PG_BIN`, else `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> PathBuf {
    let has_all = |dir: &Path| {
        ["initdb", "postgres", "pg_isready"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    if let Ok(dir) = std::env::var("PUNCTUAL_PG_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            has_all(&dir),
            "PUNCTUAL_PG_BIN={}: {NOT_FOUND}",
            dir.display()
        );
        return dir;
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_all(&dir) {
            return dir;
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let dir = entry.path().join("bin");
            has_all(&dir).then_some((version, dir))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir).expect(NOT_FOUND)
}

/// `None` when not root (the server runs as ourselves); as root, the uid and
/// gid of the `postgres` OS user (PostgreSQL refuses to run as root).
fn server_user() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"]).expect("`id -u` runs") != 0 {
        return None;
    }
    match (id(&["-u", "postgres"]), id(&["-g", "postgres"])) {
        (Some(uid), Some(gid)) => Some((uid, gid)),
        _ => panic!(
            "the tests run as root and there is no `postgres` OS user to run the private \
             PostgreSQL server as (PostgreSQL refuses to run as root); create one \
             (`useradd --system postgres`) or run the tests as another user"
        ),
    }
}

/// Real time: the server runs in real time even under paused Tokio time.
#[allow(clippy::disallowed_methods)] // deadlines on a real child process
fn now() -> Instant {
    Instant::now()
}

/// A loopback port the kernel just handed out (so free a moment ago).
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
    listener.local_addr().expect("local_addr").port()
}

/// A new, empty directory `punctual-pg-<pid>-<counter>` under the system
/// temporary directory (kept short: a unix socket path has ~100 bytes).
fn fresh_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("punctual-pg-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // Left by a killed run with our pid: reuse nothing.
                let _ = fs::remove_dir_all(&dir);
                continue;
            }
            Err(e) => panic!("cannot create {}: {e}", dir.display()),
        }
    }
}

/// The processes whose parent is `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let (_, ppid) = stat(child)?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

/// State and parent of `pid` from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Alive and not a zombie.
fn is_alive(pid: u32) -> bool {
    matches!(stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}
