//! A throwaway `redis-server` for the Redis bench, after
//! `tests/common/redis_server.rs`: its own process from `PATH`, on a free
//! loopback port (never 6379), in its own temporary directory, but with
//! persistence off (`--appendonly no --save ""`) so the numbers measure the
//! queue, not the disk. Dropping it kills the process and removes the
//! directory. Blocking std code, usable before the runtime starts.

use std::fs;
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(10);
const SPAWN_ATTEMPTS: usize = 5;

/// A `redis-server` child process owned by the bench.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a fresh server and waits until it answers `PING`.
    ///
    /// Panics if `redis-server` is not on `PATH` or does not come up.
    pub fn start() -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir: fresh_dir(),
        };
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
        panic!("redis-server did not start after {SPAWN_ATTEMPTS} attempts: {last_failure}");
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis-server --version`'s first line, for the report.
    pub fn version() -> String {
        Command::new("redis-server")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Spawns `redis-server` and waits for `PONG` from this very process.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--dir"])
            .arg(&self.dir)
            .args(["--appendonly", "no", "--save", ""])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(["--loglevel", "warning", "--logfile"])
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| match e.kind() {
                ErrorKind::NotFound => panic!(
                    "redis-server not found on PATH: this bench starts its own server; install it \
                     (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`)"
                ),
                _ => panic!("cannot spawn redis-server: {e}"),
            });
        let pid = child.id();
        self.child = Some(child);
        let deadline = now() + START_TIMEOUT;
        loop {
            if !self.is_running() {
                return Err(format!(
                    "redis-server exited on port {}; log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            if let Ok(reply) = ask(self.port, "PING") {
                if reply == "+PONG" {
                    // Make sure the answer came from our process.
                    let info = ask(self.port, "INFO server").unwrap_or_default();
                    let expected = format!("process_id:{pid}");
                    if info.lines().any(|l| l.trim() == expected) {
                        return Ok(());
                    }
                    return Err(format!("port {} answered by another process", self.port));
                }
            }
            if now() >= deadline {
                return Err(format!(
                    "redis-server on port {} not ready after {START_TIMEOUT:?}; log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[allow(clippy::disallowed_methods)] // deadlines on a real child process
fn now() -> Instant {
    Instant::now()
}

/// A loopback port the kernel just handed out (so free a moment ago).
fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
        let port = listener.local_addr().expect("local_addr").port();
        if port != 6379 {
            return port;
        }
    }
}

/// A new, empty directory under the system temporary directory.
fn fresh_dir() -> PathBuf {
    #[allow(clippy::disallowed_methods)] // only to make the name unique
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "punctual-redis-bench-{}-{nanos}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// One inline command on a new connection: a simple reply or error as its
/// line (`+PONG`), a bulk reply as its content.
fn ask(port: u16, inline: &str) -> io::Result<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    (&stream).write_all(format!("{inline}\r\n").as_bytes())?;
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end().to_owned();
    match line.strip_prefix('$').map(str::parse::<usize>) {
        Some(Ok(len)) => {
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len);
            Ok(String::from_utf8_lossy(&body).into_owned())
        }
        _ => Ok(line),
    }
}
