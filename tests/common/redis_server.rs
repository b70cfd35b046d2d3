//! A real, throwaway `redis-server` for the Redis integration tests.
//!
//! Each [`RedisServer`] runs its own `redis-server` from `PATH` on a free
//! loopback port (never 6379) with its own temporary directory, and an
//! append-only file fsynced on every write, so [`RedisServer::restart`]
//! brings the data back ([`RedisServer::start_in_memory`] runs one without
//! persistence, for the bench). Dropping it kills the process and removes
//! the directory. Everything here is blocking std code, usable from inside or
//! outside a Tokio runtime.

use std::fs;
use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How long a starting server may take to answer `PONG`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Socket timeouts of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Socket timeouts of [`RedisServer::cli`] (long enough for `DEBUG SLEEP`).
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// Spawns tried before giving up when the server exits right away
/// (typically: its port was taken between picking and binding it).
const SPAWN_ATTEMPTS: usize = 5;

const NOT_FOUND: &str = "redis-server not found on PATH: the Redis tests start their own server; \
     install it (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`)";

/// A `redis-server` child process owned by one test.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// Append-only file fsynced on every write, or no persistence at all.
    durable: bool,
    /// Extra arguments of every start (TLS, ACL, cluster settings).
    extra: Vec<String>,
}

/// One RESP2 reply, as read by [`RedisServer::command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`: the whole message, error code included.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`, or `None` for the nil `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`, or `None` for the nil `*-1`.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// Printable form: simple strings and errors as their text (an error
    /// starts with its code, e.g. `ERR ...`, `WRONGTYPE ...`), integers in
    /// decimal, bulk strings as their (lossy UTF-8) content, arrays as their
    /// elements joined by newlines, nil as `(nil)`.
    pub fn render(&self) -> String {
        match self {
            Reply::Simple(s) | Reply::Error(s) => s.clone(),
            Reply::Integer(n) => n.to_string(),
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            Reply::Bulk(None) | Reply::Array(None) => "(nil)".to_owned(),
            Reply::Array(Some(items)) => items
                .iter()
                .map(Reply::render)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

impl RedisServer {
    /// Starts a fresh server on a free loopback port with an empty temporary
    /// directory, and waits until it answers `PING`.
    ///
    /// Panics if `redis-server` is not on `PATH` or does not come up.
    pub fn start() -> RedisServer {
        Self::start_with(true)
    }

    /// As [`start`](Self::start), with persistence off (`--appendonly no`),
    /// so measurements see the queue, not the disk.
    pub fn start_in_memory() -> RedisServer {
        Self::start_with(false)
    }

    /// As [`start`](Self::start), with `extra` arguments on every start
    /// (e.g. `--tls-port`, `--cluster-enabled yes`). The probes keep using
    /// the plain port, which stays open.
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        Self::start_full(true, extra.iter().map(|a| (*a).to_owned()).collect())
    }

    /// As [`start_with_args`](Self::start_with_args), with arguments that
    /// name a second free port (`--tls-port <port>`): `extra` gets it and
    /// returns the arguments.
    pub fn start_with_port_args(extra: impl Fn(u16) -> Vec<String>) -> (RedisServer, u16) {
        let mut last_failure = String::new();
        for _ in 0..SPAWN_ATTEMPTS {
            let second = free_port();
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                dir: fresh_dir(),
                durable: true,
                extra: extra(second),
            };
            if server.port == second {
                continue;
            }
            match server.spawn_and_wait() {
                Ok(()) => return (server, second),
                Err(failure) => {
                    server.kill();
                    last_failure = failure;
                }
            }
        }
        panic!("redis-server did not start after {SPAWN_ATTEMPTS} attempts: {last_failure}");
    }

    fn start_with(durable: bool) -> RedisServer {
        Self::start_full(durable, Vec::new())
    }

    fn start_full(durable: bool, extra: Vec<String>) -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir: fresh_dir(),
            durable,
            extra,
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
        // `server` drops while unwinding: the directory goes away.
        panic!("redis-server did not start after {SPAWN_ATTEMPTS} attempts: {last_failure}");
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's working directory (append-only file, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log so far (warnings and up), empty if unreadable.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Kills the server with SIGKILL (no shutdown save) and reaps it.
    /// Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, then starts it again on the same port and
    /// directory, so it reloads its append-only file; waits until it answers
    /// `PONG` (not `-LOADING`).
    ///
    /// Panics if it does not come back.
    pub fn restart(&mut self) {
        self.kill();
        let mut last_failure = String::new();
        for _ in 0..SPAWN_ATTEMPTS {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(failure) => {
                    last_failure = failure;
                    self.kill();
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
        panic!(
            "redis-server did not restart on port {} after {SPAWN_ATTEMPTS} attempts: {last_failure}",
            self.port
        );
    }

    /// Whether the process is still alive (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Runs one command on a new connection and returns the reply in
    /// printable form (see [`Reply::render`]), e.g. `cli(&["GET", "k"])`.
    ///
    /// Panics on I/O errors and protocol violations, not on Redis errors.
    pub fn cli(&self, args: &[&str]) -> String {
        self.command(args).render()
    }

    /// Runs one command on a new connection and returns the parsed reply.
    ///
    /// Panics on I/O errors and protocol violations, not on Redis errors.
    pub fn command(&self, args: &[&str]) -> Reply {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("redis command {args:?} on port {}: {e}", self.port))
    }

    /// [`RedisServer::command`], with I/O errors returned instead.
    pub fn try_command(&self, args: &[&str]) -> io::Result<Reply> {
        let stream = connect(self.port, CLI_TIMEOUT)?;
        (&stream).write_all(&encode(args))?;
        read_reply(&mut BufReader::new(&stream))
    }

    /// Spawns `redis-server` and waits for `PONG` from this very process;
    /// `Err` (with the reason) if it exits first or answers as another one.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--dir"])
            .arg(&self.dir)
            .args(if self.durable {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "no"]
            })
            .args(["--save", ""])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(["--loglevel", "warning", "--logfile"])
            .arg(self.dir.join("redis.log"));
        if debug_command_option() {
            // Redis 7 refuses `DEBUG` (e.g. `DEBUG SLEEP`) unless enabled.
            command.args(["--enable-debug-command", "yes"]);
        }
        command.args(&self.extra);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| match e.kind() {
                ErrorKind::NotFound => panic!("{NOT_FOUND}"),
                _ => panic!("cannot spawn redis-server: {e}"),
            });
        let pid = child.id();
        self.child = Some(child);

        let deadline = now() + START_TIMEOUT;
        let mut last = String::from("no answer");
        loop {
            if !self.is_running() {
                return Err(format!(
                    "redis-server exited on port {} ({last}); log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            match probe(self.port) {
                Ok(Reply::Simple(s)) if s == "PONG" => {
                    // Make sure the answer came from our process, not from
                    // another server that took the port first.
                    let expected = format!("process_id:{pid}");
                    match self.try_command(&["INFO", "server"]) {
                        Ok(info) if info.render().lines().any(|l| l.trim() == expected) => {
                            return Ok(());
                        }
                        Ok(_) => {
                            return Err(format!("port {} answered by another process", self.port));
                        }
                        Err(e) => last = e.to_string(),
                    }
                }
                Ok(reply) => last = reply.render(), // e.g. `LOADING ...`
                Err(e) => last = e.to_string(),
            }
            if now() >= deadline {
                let log = self.log();
                self.kill();
                panic!(
                    "redis-server on port {} not ready after {START_TIMEOUT:?} ({last}); log:\n{log}",
                    self.port
                );
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if thread::panicking() {
            let log = self.log();
            if !log.is_empty() {
                eprintln!("redis-server log (port {}):\n{log}", self.port);
            }
        }
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Real time: the server runs in real time even under paused Tokio time.
#[allow(clippy::disallowed_methods)] // deadlines on a real child process
fn now() -> Instant {
    Instant::now()
}

/// A loopback port the kernel just handed out (so free a moment ago).
fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
        let port = listener.local_addr().expect("local_addr").port();
        if port != 6379 {
            return port;
        }
    }
}

/// Creates a new, empty directory `punctual-redis-<pid>-<counter>-<nanos>`
/// under the system temporary directory.
fn fresh_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    #[allow(clippy::disallowed_methods)] // only to make the name unique
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("punctual-redis-{}-{n}-{nanos}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create {}: {e}", dir.display()),
        }
    }
}

/// Whether this `redis-server` knows `--enable-debug-command` (Redis 7+),
/// from `redis-server --version` (`Redis server v=7.0.15 ...`).
fn debug_command_option() -> bool {
    static KNOWN: OnceLock<bool> = OnceLock::new();
    *KNOWN.get_or_init(|| {
        let output = match Command::new("redis-server").arg("--version").output() {
            Ok(output) => output,
            Err(e) if e.kind() == ErrorKind::NotFound => panic!("{NOT_FOUND}"),
            Err(e) => panic!("cannot run redis-server --version: {e}"),
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let major = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse::<u32>().ok());
        major.is_some_and(|m| m >= 7)
    })
}

/// Sends one command on `stream` (to a server, or through a proxy) and
/// reads its reply; see [`receive`] for the one-at-a-time rule.
pub fn command_on(stream: &TcpStream, args: &[&str]) -> io::Result<Reply> {
    send(stream, args)?;
    receive(stream)
}

/// Writes one command on `stream`, without reading its reply.
pub fn send(stream: &TcpStream, args: &[&str]) -> io::Result<()> {
    let mut stream = stream;
    stream.write_all(&encode(args))
}

/// Reads one reply from `stream`. Bytes that arrive past it in the same read
/// are lost, so use it with one command in flight at a time.
pub fn receive(stream: &TcpStream) -> io::Result<Reply> {
    read_reply(&mut BufReader::new(stream))
}

/// A connection to `127.0.0.1:<port>` with read and write timeouts, and
/// `TCP_NODELAY`.
pub fn connect(port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One inline `PING`: `+PONG` when ready, `-LOADING ...` while the
/// append-only file is being loaded.
fn probe(port: u16) -> io::Result<Reply> {
    let stream = connect(port, PROBE_TIMEOUT)?;
    (&stream).write_all(b"PING\r\n")?;
    read_reply(&mut BufReader::new(&stream))
}

/// A command as a RESP array of bulk strings.
fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn protocol_error(what: impl Into<String>) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, what.into())
}

/// One `\r\n`-terminated line, without the terminator.
fn read_line(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed by redis-server",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(protocol_error(format!(
            "unterminated line {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

/// A length or integer field.
fn parse_int(field: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol_error(format!("bad integer {:?}", String::from_utf8_lossy(field))))
}

/// Reads one RESP2 reply (nested arrays included).
fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(r)?;
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| protocol_error("empty reply line"))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Reply::Simple(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => Ok(Reply::Integer(parse_int(rest)?)),
        b'$' => match parse_int(rest)? {
            -1 => Ok(Reply::Bulk(None)),
            len if len >= 0 => {
                let mut data = vec![0; len as usize + 2];
                r.read_exact(&mut data)?;
                if !data.ends_with(b"\r\n") {
                    return Err(protocol_error("bulk string not followed by CRLF"));
                }
                data.truncate(len as usize);
                Ok(Reply::Bulk(Some(data)))
            }
            len => Err(protocol_error(format!("bad bulk length {len}"))),
        },
        b'*' => match parse_int(rest)? {
            -1 => Ok(Reply::Array(None)),
            len if len >= 0 => (0..len)
                .map(|_| read_reply(r))
                .collect::<io::Result<_>>()
                .map(|items| Reply::Array(Some(items))),
            len => Err(protocol_error(format!("bad array length {len}"))),
        },
        other => Err(protocol_error(format!(
            "unknown reply type {:?} in {:?}",
            other as char,
            String::from_utf8_lossy(&line)
        ))),
    }
}
