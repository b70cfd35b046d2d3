//! A TCP proxy between a test and its `redis-server` that injects, on
//! demand, the network faults a deployed queue meets.
//!
//! [`Proxy::start`] listens on a free loopback port chosen by the OS; each
//! connection it accepts gets its own connection to the upstream port, and
//! bytes are copied both ways, one chunk (what one `read` returned) at a
//! time, in order. Point the code under test at [`Proxy::url`] and keep
//! [`RedisServer::command`](super::redis_server::RedisServer::command) for
//! checks made directly on the server, past the faults.
//!
//! | call | what happens | what it stands for in production |
//! |---|---|---|
//! | [`set_latency`](Proxy::set_latency), [`set_latency_in`](Proxy::set_latency_in) | every chunk read from then on is written that much later, in order | a slow or congested network, a far region |
//! | [`black_hole_open`](Proxy::black_hole_open) | connections open now forward nothing more, either way, and are never closed by the server's side; new ones work | a NAT, load balancer or firewall that dropped its connection state: no FIN, no RST, just silence |
//! | [`cut_after_next_request`](Proxy::cut_after_next_request) | the next request (or the next one containing a pattern) reaches the server, then the client's side is closed and the reply is lost | the connection breaks while a request is in flight: applied on the server, unknown to the client |
//! | [`swallow_replies_after_next_request`](Proxy::swallow_replies_after_next_request) | the same request reaches the server, then that connection goes silent both ways but stays open | the state is dropped mid-request: applied on the server, and the client waits for a reply that never comes |
//! | [`refuse`](Proxy::refuse) | the port is closed: connecting is refused until re-enabled; open connections go on | the server or its proxy is down or restarting |
//! | [`kill_all`](Proxy::kill_all) | every open connection is closed on both sides at once | a failover, a proxy restart, `CLIENT KILL` |
//!
//! Ground rules:
//!
//! - Everything is std threads and blocking sockets: four threads per
//!   connection (a reader and a writer each way, joined by a channel so that
//!   latency never stops the reading), one for accepting. Nothing polls:
//!   threads block on a socket, a channel or a condition variable. The proxy
//!   runs in real time, whatever a Tokio runtime in the test does with its
//!   clock.
//! - A chunk is numbered when read. Each direction of a connection has a
//!   cutoff, `u64::MAX` until a fault lowers it: a writer drops every chunk
//!   numbered above it, so faults decide at read time what crosses.
//! - The close of one side is passed on after the chunks read before it (a
//!   FIN to the other side), except to a silenced client, which hears
//!   nothing. A failed write closes both sides.
//! - A connection leaves the table, and [`Proxy::open`], when its four
//!   threads have ended. Dropping the proxy closes its port and every
//!   connection, and waits (boundedly) for every thread to end.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Bytes asked of one `read`: at most one chunk.
const CHUNK: usize = 64 * 1024;
/// Bound on connecting to the upstream server for a new client.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (e.g. out of file descriptors), so that a
/// lasting failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// Bound on waiting for threads to end after their sockets were closed
/// (they end in microseconds; this only keeps a bug from hanging a test).
const SETTLE: Duration = Duration::from_secs(10);
/// Attempts at binding the port again after [`Proxy::refuse`]`(false)`.
const REBIND_ATTEMPTS: usize = 100;
const REBIND_PAUSE: Duration = Duration::from_millis(20);
/// No chunk dropped yet.
const OPEN: u64 = u64::MAX;

/// One direction of the proxied traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    Requests,
    /// Server to client.
    Replies,
}

impl Direction {
    fn index(self) -> usize {
        self as usize
    }
}

/// A fault-injecting TCP proxy on `127.0.0.1`, in front of one upstream
/// port; see the module docs. Dropping it closes its port and every
/// connection.
pub struct Proxy {
    shared: Arc<Shared>,
    port: u16,
    /// `None` while [`refuse`](Proxy::refuse) holds the port closed.
    acceptor: Mutex<Option<Acceptor>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port, forwarding to
    /// `127.0.0.1:<upstream_port>`, with no latency and no fault.
    ///
    /// Panics if no loopback port can be bound.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("proxy: cannot bind a loopback port: {e}"));
        let port = listener.local_addr().expect("proxy: local_addr").port();
        let shared = Arc::new(Shared {
            upstream: upstream_port,
            latency: [AtomicU64::new(0), AtomicU64::new(0)],
            armed: Mutex::new(None),
            conns: Mutex::new(HashMap::new()),
            gone: Condvar::new(),
            accepted: AtomicU64::new(0),
        });
        let acceptor = Acceptor::start(&shared, listener, port)
            .unwrap_or_else(|e| panic!("proxy: cannot spawn its accept thread: {e}"));
        Proxy {
            shared,
            port,
            acceptor: Mutex::new(Some(acceptor)),
        }
    }

    /// The port the proxy listens on (on 127.0.0.1); it keeps it across
    /// [`refuse`](Proxy::refuse).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`, the proxy's address for a Redis client.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The upstream port the proxy forwards to.
    pub fn upstream_port(&self) -> u16 {
        self.shared.upstream
    }

    /// Delays every chunk read from now on, both ways, by `latency` (so a
    /// request and its reply take twice as long); zero turns it off. Chunks
    /// already read keep their delay, and a chunk is never written before
    /// one read earlier in the same direction.
    pub fn set_latency(&self, latency: Duration) {
        self.set_latency_in(Direction::Requests, latency);
        self.set_latency_in(Direction::Replies, latency);
    }

    /// As [`set_latency`](Proxy::set_latency), for one direction only.
    pub fn set_latency_in(&self, direction: Direction, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.shared.latency[direction.index()].store(nanos, Ordering::SeqCst);
    }

    /// The latency currently added in `direction`.
    pub fn latency(&self, direction: Direction) -> Duration {
        self.shared.latency(direction)
    }

    /// Silences every connection the proxy holds now: nothing more crosses
    /// either way (chunks read but held back by latency included), and the
    /// client never hears that the server closed. Connections accepted
    /// afterwards work normally.
    ///
    /// A client that connected a moment ago may not be accepted yet (it
    /// waits in the listen backlog) and escapes: wait until
    /// [`accepted`](Proxy::accepted) counts it first. When the client closes
    /// a silenced connection, the proxy still closes the server's side.
    pub fn black_hole_open(&self) {
        for conn in self.shared.conns().values() {
            conn.silence(Direction::Requests, 0);
            conn.silence(Direction::Replies, 0);
        }
    }

    /// Arms a one-shot fault on the next chunk a client sends (on any
    /// connection), or with `Some(pattern)`, on the next one whose bytes
    /// contain `pattern`: the chunk is written to the server, then the
    /// client's side is closed (FIN) and the reply is lost. Whatever the
    /// client sent after that chunk is dropped, and the server's side is
    /// closed after the request (FIN), so the server executes it; replies
    /// read from the server before the chunk still go to the client if they
    /// can. Replaces a fault armed before and not fired yet.
    pub fn cut_after_next_request(&self, pattern: Option<&[u8]>) {
        self.shared.arm(Fault::Cut, pattern);
    }

    /// As [`cut_after_next_request`](Proxy::cut_after_next_request), but the
    /// client's side stays open: the request reaches the server, then that
    /// connection is silenced both ways as by
    /// [`black_hole_open`](Proxy::black_hole_open), so the client waits for
    /// its reply forever.
    pub fn swallow_replies_after_next_request(&self, pattern: Option<&[u8]>) {
        self.shared.arm(Fault::Swallow, pattern);
    }

    /// Whether a fault armed by `cut_after_next_request` or
    /// `swallow_replies_after_next_request` waits for its chunk still.
    pub fn armed(&self) -> bool {
        lock(&self.shared.armed).is_some()
    }

    /// Removes an armed fault that has not fired.
    pub fn disarm(&self) {
        *lock(&self.shared.armed) = None;
    }

    /// With `true`, closes the proxy's port, so new connections are refused
    /// (`ConnectionRefused`); connections already open go on. With `false`,
    /// listens on the same port again. Either is a no-op when already so.
    ///
    /// Panics if the port cannot be bound again (another process took it
    /// meanwhile; very unlikely on loopback).
    pub fn refuse(&self, refuse: bool) {
        let mut acceptor = lock(&self.acceptor);
        match (refuse, acceptor.is_some()) {
            (true, true) => acceptor.take().expect("checked").stop(),
            (false, false) => {
                let listener = rebind(self.port);
                *acceptor = Some(
                    Acceptor::start(&self.shared, listener, self.port)
                        .unwrap_or_else(|e| panic!("proxy: cannot spawn its accept thread: {e}")),
                );
            }
            _ => {}
        }
    }

    /// Closes every open connection on both sides at once (FIN both ways:
    /// std cannot make a reset), and returns once they are gone from
    /// [`open`](Proxy::open).
    ///
    /// Panics if a connection's threads do not end within 10 s (a bug).
    pub fn kill_all(&self) {
        assert!(
            self.shared.kill_all(),
            "proxy: connections still open {SETTLE:?} after kill_all"
        );
    }

    /// Connections accepted so far, including those closed at once because
    /// the upstream server could not be reached.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections still open: a connection counts until both its sides are
    /// closed and its threads have ended.
    pub fn open(&self) -> usize {
        self.shared.conns().len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(acceptor) = lock(&self.acceptor).take() {
            acceptor.stop();
        }
        if !self.shared.kill_all() {
            eprintln!("proxy: connections still open {SETTLE:?} after drop");
        }
    }
}

/// The thread accepting on the proxy's port, and how to stop it.
struct Acceptor {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    port: u16,
}

impl Acceptor {
    fn start(shared: &Arc<Shared>, listener: TcpListener, port: u16) -> io::Result<Acceptor> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (Arc::clone(shared), Arc::clone(&stop));
            thread::Builder::new()
                .name(format!("proxy-{port}-accept"))
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break; // the connection that woke us, or a late client
                        }
                        match stream {
                            Ok(client) => shared.adopt(client),
                            Err(_) => thread::sleep(ACCEPT_BACKOFF),
                        }
                    }
                    // `listener` drops here: the port closes.
                })?
        };
        Ok(Acceptor { stop, thread, port })
    }

    /// Stops accepting and closes the port before returning.
    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        // `accept` blocks: a connection of our own wakes it. One is enough
        // unless it failed, hence the loop.
        let give_up = now() + SETTLE;
        while !self.thread.is_finished() && now() < give_up {
            let _ = TcpStream::connect_timeout(&loopback(self.port), Duration::from_millis(100));
            thread::sleep(Duration::from_millis(1));
        }
        if self.thread.is_finished() {
            let _ = self.thread.join();
        }
    }
}

/// Binds the proxy's port again (std sets `SO_REUSEADDR`, so connections
/// still open on it do not stand in the way).
fn rebind(port: u16) -> TcpListener {
    let mut last = None;
    for _ in 0..REBIND_ATTEMPTS {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(listener) => return listener,
            Err(e) => last = Some(e),
        }
        thread::sleep(REBIND_PAUSE);
    }
    panic!("proxy: cannot listen on port {port} again: {last:?}");
}

/// A one-shot fault waiting for its request.
struct Armed {
    fault: Fault,
    /// `None`: any chunk; an empty pattern also matches any chunk.
    pattern: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Cut,
    Swallow,
}

/// State shared by the handle, the accept thread and the connections.
/// `armed` and `conns` are separate locks, never held together.
struct Shared {
    upstream: u16,
    /// Nanoseconds, by [`Direction::index`].
    latency: [AtomicU64; 2],
    armed: Mutex<Option<Armed>>,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Notified when a connection leaves `conns`.
    gone: Condvar,
    accepted: AtomicU64,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        lock(&self.conns)
    }

    fn latency(&self, direction: Direction) -> Duration {
        Duration::from_nanos(self.latency[direction.index()].load(Ordering::SeqCst))
    }

    fn arm(&self, fault: Fault, pattern: Option<&[u8]>) {
        *lock(&self.armed) = Some(Armed {
            fault,
            pattern: pattern.map(<[u8]>::to_vec),
        });
    }

    /// The armed fault if `chunk` fires it; disarms it then.
    fn fire(&self, chunk: &[u8]) -> Option<Fault> {
        let mut armed = lock(&self.armed);
        let hit = armed.as_ref().is_some_and(|armed| {
            armed
                .pattern
                .as_deref()
                .is_none_or(|pattern| contains(chunk, pattern))
        });
        if hit {
            armed.take().map(|armed| armed.fault)
        } else {
            None
        }
    }

    /// Connects `client` to the upstream server and starts its four threads.
    fn adopt(self: &Arc<Self>, client: TcpStream) {
        let id = self.accepted.fetch_add(1, Ordering::SeqCst);
        // Dropping `client` closes it: with the upstream down, a client is
        // accepted and closed at once, as by a proxy whose backend is gone.
        let Ok(server) = TcpStream::connect_timeout(&loopback(self.upstream), UPSTREAM_TIMEOUT)
        else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let conn = Arc::new(Conn {
            id,
            client,
            server,
            cutoff: [AtomicU64::new(OPEN), AtomicU64::new(OPEN)],
            read: [AtomicU64::new(0), AtomicU64::new(0)],
            cut: AtomicBool::new(false),
            killed: Mutex::new(false),
            wake: Condvar::new(),
            threads: AtomicUsize::new(4),
        });
        self.conns().insert(id, Arc::clone(&conn));
        for direction in [Direction::Requests, Direction::Replies] {
            let (tx, rx) = mpsc::channel();
            self.spawn(&conn, direction, "read", {
                let (shared, conn) = (Arc::clone(self), Arc::clone(&conn));
                move || read_side(&shared, &conn, direction, tx)
            });
            self.spawn(&conn, direction, "write", {
                let conn = Arc::clone(&conn);
                move || write_side(&conn, direction, rx)
            });
        }
    }

    /// Runs `body` on a thread of `conn`, which counts as ended when `body`
    /// returns or unwinds, or at once if the thread cannot be spawned (the
    /// connection is killed then).
    fn spawn(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        direction: Direction,
        role: &str,
        body: impl FnOnce() + Send + 'static,
    ) {
        let done = ThreadDone {
            shared: Arc::clone(self),
            conn: Arc::clone(conn),
        };
        let spawned = thread::Builder::new()
            .name(format!("proxy-conn{}-{direction:?}-{role}", conn.id))
            .spawn(move || {
                let _done = done;
                body();
            });
        if spawned.is_err() {
            // The closure, `done` with it, was dropped: counted as ended.
            conn.kill();
        }
    }

    /// Kills every connection and waits until they have left the table;
    /// `false` if some are still there after [`SETTLE`].
    fn kill_all(&self) -> bool {
        let victims: Vec<Arc<Conn>> = self.conns().values().cloned().collect();
        for conn in &victims {
            conn.kill();
        }
        let give_up = now() + SETTLE;
        let mut conns = self.conns();
        while victims.iter().any(|v| conns.contains_key(&v.id)) {
            let left = give_up.saturating_duration_since(now());
            if left.is_zero() {
                return false;
            }
            conns = self
                .gone
                .wait_timeout(conns, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// Marks one thread of a connection ended, on drop (so a panic counts too);
/// the last one removes the connection from the table.
struct ThreadDone {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
}

impl Drop for ThreadDone {
    fn drop(&mut self) {
        if self.conn.threads.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.shared.conns().remove(&self.conn.id);
            self.shared.gone.notify_all();
        }
    }
}

/// One client connection and its connection to the server.
struct Conn {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    /// By [`Direction::index`]: chunks numbered above are dropped.
    cutoff: [AtomicU64; 2],
    /// By [`Direction::index`]: chunks read so far (the last one's number).
    read: [AtomicU64; 2],
    /// The client's side was closed by a cut: failing to write the client
    /// is expected then, and must not close the server's side early.
    cut: AtomicBool,
    /// Set by [`Conn::kill`]; writers waiting out a latency watch it.
    killed: Mutex<bool>,
    wake: Condvar,
    /// Threads not ended yet.
    threads: AtomicUsize,
}

impl Conn {
    /// The socket a direction reads from, and the one it writes to.
    fn ends(&self, direction: Direction) -> (&TcpStream, &TcpStream) {
        match direction {
            Direction::Requests => (&self.client, &self.server),
            Direction::Replies => (&self.server, &self.client),
        }
    }

    /// Drops every chunk of `direction` numbered above `last`.
    fn silence(&self, direction: Direction, last: u64) {
        self.cutoff[direction.index()].fetch_min(last, Ordering::SeqCst);
    }

    fn passes(&self, direction: Direction, seq: u64) -> bool {
        seq <= self.cutoff[direction.index()].load(Ordering::SeqCst)
    }

    /// Closes both sides; every thread then ends promptly: reads return 0,
    /// writes fail, and writers waiting out a latency are woken.
    fn kill(&self) {
        *lock(&self.killed) = true;
        self.wake.notify_all();
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    /// Sleeps until `due`; `false` (at once) if the connection is killed.
    fn wait_until(&self, due: Instant) -> bool {
        let mut killed = lock(&self.killed);
        loop {
            if *killed {
                return false;
            }
            let left = due.saturating_duration_since(now());
            if left.is_zero() {
                return true;
            }
            killed = self
                .wake
                .wait_timeout(killed, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A chunk on its way from a reader to its writer.
struct Chunk {
    data: Vec<u8>,
    seq: u64,
    due: Instant,
    /// This is the request of a cut: close the client's side once written.
    cut: bool,
}

/// Reads `direction`'s source until it closes, numbering the chunks and
/// firing an armed fault on a request.
fn read_side(shared: &Shared, conn: &Conn, direction: Direction, tx: Sender<Chunk>) {
    let (mut source, _) = conn.ends(direction);
    let mut buf = vec![0; CHUNK];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let data = buf[..n].to_vec();
        let seq = conn.read[direction.index()].fetch_add(1, Ordering::SeqCst) + 1;
        let fault = match direction {
            Direction::Requests => shared.fire(&data),
            Direction::Replies => None,
        };
        if let Some(fault) = fault {
            // This chunk still crosses, nothing after it does; replies read
            // so far answer earlier requests and may still cross.
            conn.silence(Direction::Requests, seq);
            let replies_so_far = conn.read[Direction::Replies.index()].load(Ordering::SeqCst);
            conn.silence(Direction::Replies, replies_so_far);
            if fault == Fault::Cut {
                conn.cut.store(true, Ordering::SeqCst);
            }
        }
        let chunk = Chunk {
            data,
            seq,
            due: now() + shared.latency(direction),
            cut: fault == Some(Fault::Cut),
        };
        if tx.send(chunk).is_err() {
            break; // the writer ended: the connection is being killed
        }
    }
    // Dropping `tx` tells the writer that the source closed.
}

/// Writes `direction`'s chunks when due, then passes the source's close on.
fn write_side(conn: &Conn, direction: Direction, rx: Receiver<Chunk>) {
    let (_, mut sink) = conn.ends(direction);
    for chunk in rx {
        // Checked again after the wait: a fault may come in between.
        if !conn.passes(direction, chunk.seq) {
            continue;
        }
        if !conn.wait_until(chunk.due) {
            return;
        }
        if !conn.passes(direction, chunk.seq) {
            continue;
        }
        if sink.write_all(&chunk.data).is_err() {
            if direction == Direction::Replies && conn.cut.load(Ordering::SeqCst) {
                continue; // the client's side is closed on purpose
            }
            conn.kill();
            return;
        }
        if chunk.cut {
            // The FIN follows the request, so the server reads and runs it
            // before it sees the close.
            let _ = conn.server.shutdown(Shutdown::Write);
            let _ = conn.client.shutdown(Shutdown::Both);
        }
    }
    // The source closed. Pass it on, except to a silenced client, which
    // must not learn that the server went away. A client's close always
    // reaches the server, so the server's side does not outlive it.
    if direction == Direction::Requests || conn.passes(direction, OPEN) {
        let _ = sink.shutdown(Shutdown::Write);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A lock that survives a panic elsewhere (the state stays consistent:
/// every critical section is a single store, take or map update).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Real time: the proxy runs beside a real server, whatever the test's
/// Tokio clock does.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}
