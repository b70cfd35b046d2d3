#![cfg(feature = "redis")]
//! Checks the fault-injection proxy of `tests/common/proxy.rs` against a
//! real `redis-server`, speaking plain blocking RESP through it: each fault
//! does what its docs say, seen from the client and, past the proxy, from
//! the server.
//!
//! Real time. Time is asserted only as a lower bound (a latency); "nothing
//! arrives" is watched for [`QUIET`]; everything expected to happen is
//! bounded by [`PATIENCE`], far above what a healthy run needs.

mod common;

use common::proxy::{Direction, Proxy};
use common::redis_server::{RedisServer, Reply, command_on, connect, send};
use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

/// Bound on anything expected to happen (a reply, a close).
const PATIENCE: Duration = Duration::from_secs(5);
/// How long a silenced connection is watched for a reply or a close.
const QUIET: Duration = Duration::from_millis(300);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[allow(clippy::disallowed_methods)] // the proxy and the server run in real time
fn now() -> Instant {
    Instant::now()
}

fn simple(s: &str) -> Reply {
    Reply::Simple(s.to_owned())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

/// A new connection through the proxy.
fn client(proxy: &Proxy) -> TcpStream {
    connect(proxy.port(), PATIENCE).expect("connect through the proxy")
}

/// `args` on `stream`, expecting a reply.
fn call(stream: &TcpStream, args: &[&str]) -> Reply {
    command_on(stream, args).unwrap_or_else(|e| panic!("{args:?} through the proxy: {e}"))
}

/// What one read on `stream` gives within `wait`.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    Data,
    Closed,
    Nothing,
}

fn listen(stream: &TcpStream, wait: Duration) -> Heard {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0];
    let heard = match (&mut &*stream).read(&mut byte) {
        Ok(0) => Heard::Closed,
        Ok(_) => Heard::Data,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Heard::Nothing,
        Err(e) => match e.kind() {
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                Heard::Closed
            }
            _ => panic!("read through the proxy: {e}"),
        },
    };
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    heard
}

/// Nothing, not even a close, arrives on `stream` within [`QUIET`].
fn assert_silent(stream: &TcpStream, what: &str) {
    assert_eq!(listen(stream, QUIET), Heard::Nothing, "{what}");
}

/// `stream` is closed (without a byte more) within [`PATIENCE`].
fn assert_closed(stream: &TcpStream, what: &str) {
    assert_eq!(listen(stream, PATIENCE), Heard::Closed, "{what}");
}

/// Polls `check` until it holds; panics naming `what` after [`PATIENCE`].
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let give_up = now() + PATIENCE;
    while !check() {
        assert!(now() < give_up, "{what}: not true after {PATIENCE:?}");
        thread::sleep(ms(5));
    }
}

#[test]
fn forwards_both_ways_and_counts_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    assert_ne!(proxy.port(), server.port());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));

    let a = client(&proxy);
    assert_eq!(call(&a, &["SET", "k", "through"]), simple("OK"));
    assert_eq!(server.cli(&["GET", "k"]), "through");
    server.cli(&["SET", "direct", "d"]);
    assert_eq!(call(&a, &["GET", "direct"]), bulk("d"));
    // Larger than a chunk, both ways.
    let big = "x".repeat(300_000);
    assert_eq!(call(&a, &["SET", "big", &big]), simple("OK"));
    assert_eq!(call(&a, &["GET", "big"]), bulk(&big));

    let b = client(&proxy);
    assert_eq!(call(&b, &["PING"]), simple("PONG"));
    assert_eq!(proxy.accepted(), 2);
    assert_eq!(proxy.open(), 2);
    drop(a);
    eventually("the closed connection leaves the count", || {
        proxy.open() == 1
    });
    assert_eq!(proxy.accepted(), 2);
}

#[test]
fn latency_delays_every_chunk_and_keeps_their_order() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);

    proxy.set_latency(ms(100));
    let start = now();
    assert_eq!(call(&a, &["PING"]), simple("PONG"));
    let round_trip = start.elapsed();
    assert!(round_trip >= ms(200), "100 ms each way: {round_trip:?}");

    proxy.set_latency(Duration::ZERO);
    proxy.set_latency_in(Direction::Replies, ms(150));
    assert_eq!(proxy.latency(Direction::Requests), Duration::ZERO);
    let start = now();
    assert_eq!(call(&a, &["PING"]), simple("PONG"));
    let round_trip = start.elapsed();
    assert!(round_trip >= ms(150), "150 ms on the reply: {round_trip:?}");

    // The request direction alone, seen from the server.
    proxy.set_latency_in(Direction::Replies, Duration::ZERO);
    proxy.set_latency_in(Direction::Requests, ms(200));
    let b = client(&proxy);
    let start = now();
    send(&b, &["RPUSH", "list", "a"]).unwrap();
    eventually("the delayed request reaches the server", || {
        server.cli(&["LLEN", "list"]) == "1"
    });
    let one_way = start.elapsed();
    assert!(one_way >= ms(200), "200 ms on the request: {one_way:?}");

    // A chunk held 200 ms is not overtaken by later ones held less.
    send(&b, &["RPUSH", "list", "b"]).unwrap();
    thread::sleep(ms(20)); // two reads, so two chunks
    proxy.set_latency_in(Direction::Requests, Duration::ZERO);
    send(&b, &["RPUSH", "list", "c"]).unwrap();
    eventually("both requests reach the server", || {
        server.cli(&["LLEN", "list"]) == "3"
    });
    assert_eq!(server.cli(&["LRANGE", "list", "0", "-1"]), "a\nb\nc");
}

#[test]
fn black_hole_open_silences_open_connections_while_new_ones_pass() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let old = client(&proxy);
    assert_eq!(call(&old, &["PING"]), simple("PONG"));

    proxy.black_hole_open();
    send(&old, &["SET", "hole", "1"]).unwrap();
    assert_silent(&old, "a black-holed connection gets no reply");
    assert_eq!(
        server.cli(&["GET", "hole"]),
        "(nil)",
        "nor does its request reach the server"
    );

    let new = client(&proxy);
    assert_eq!(call(&new, &["PING"]), simple("PONG"));
    assert_eq!(call(&new, &["SET", "after", "1"]), simple("OK"));
    assert_eq!(server.cli(&["GET", "after"]), "1");
    assert_eq!(proxy.open(), 2);

    // The server drops both connections: the new one hears it, the
    // black-holed one does not.
    assert_eq!(
        server.cli(&["CLIENT", "KILL", "TYPE", "normal"]),
        "2",
        "the proxy's two server-side connections"
    );
    assert_closed(&new, "a normal connection is closed with the server's side");
    assert_silent(&old, "a black-holed connection never hears of it");
}

#[test]
fn cut_after_next_request_applies_it_and_closes_the_client() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);
    let b = client(&proxy);

    proxy.cut_after_next_request(Some(b"applied"));
    assert!(proxy.armed());
    assert_eq!(call(&a, &["PING"]), simple("PONG"), "no match, no cut");
    assert_eq!(call(&b, &["GET", "cut"]), Reply::Bulk(None), "no match");
    send(&a, &["SET", "cut", "applied"]).unwrap();
    assert_closed(&a, "the client is cut off without its reply");
    assert!(!proxy.armed(), "the fault fired");
    eventually("the cut request is applied on the server", || {
        server.cli(&["GET", "cut"]) == "applied"
    });
    assert_eq!(
        call(&b, &["SET", "other", "applied"]),
        simple("OK"),
        "one shot: the next match goes through"
    );

    // Without a pattern, the next request of any connection.
    proxy.cut_after_next_request(None);
    send(&b, &["INCR", "n"]).unwrap();
    assert_closed(&b, "the client is cut off without its reply");
    eventually("the cut request is applied on the server", || {
        server.cli(&["GET", "n"]) == "1"
    });
    eventually("both cut connections are gone", || proxy.open() == 0);

    let c = client(&proxy);
    assert_eq!(call(&c, &["INCR", "n"]), Reply::Integer(2));
}

#[test]
fn swallow_replies_after_next_request_applies_it_and_keeps_the_client_waiting() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);
    assert_eq!(call(&a, &["PING"]), simple("PONG"));

    proxy.swallow_replies_after_next_request(Some(b"swallowed"));
    send(&a, &["SET", "k", "swallowed"]).unwrap();
    assert_silent(&a, "the reply is swallowed and the connection stays open");
    eventually("the request is applied on the server", || {
        server.cli(&["GET", "k"]) == "swallowed"
    });
    assert!(!proxy.armed());

    send(&a, &["SET", "k2", "later"]).unwrap();
    assert_silent(&a, "nothing more crosses");
    assert_eq!(
        server.cli(&["GET", "k2"]),
        "(nil)",
        "a later request is dropped"
    );

    let b = client(&proxy);
    assert_eq!(call(&b, &["SET", "k3", "swallowed"]), simple("OK"));
    assert_eq!(proxy.open(), 2);
}

#[test]
fn refuse_turns_new_connections_away_until_re_enabled() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);
    assert_eq!(call(&a, &["PING"]), simple("PONG"));

    proxy.refuse(true);
    proxy.refuse(true); // a no-op
    let refused = connect(proxy.port(), PATIENCE).expect_err("the port is closed");
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(proxy.accepted(), 1);
    assert_eq!(
        call(&a, &["PING"]),
        simple("PONG"),
        "open connections go on"
    );

    proxy.refuse(false);
    let b = client(&proxy);
    assert_eq!(call(&b, &["PING"]), simple("PONG"));
    assert_eq!(proxy.accepted(), 2);
    assert_eq!(proxy.open(), 2);
}

#[test]
fn kill_all_closes_every_connection_and_new_ones_pass() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);
    let b = client(&proxy);
    assert_eq!(call(&a, &["PING"]), simple("PONG"));
    assert_eq!(call(&b, &["PING"]), simple("PONG"));

    // A chunk held back for an hour does not keep kill_all waiting.
    proxy.set_latency(Duration::from_secs(3600));
    send(&a, &["PING"]).unwrap();
    proxy.kill_all();
    assert_eq!(proxy.open(), 0);
    assert_closed(&a, "killed");
    assert_closed(&b, "killed");
    eventually("the server sees both connections closed", || {
        server
            .cli(&["CLIENT", "LIST", "TYPE", "normal"])
            .lines()
            .count()
            == 1
    });

    proxy.set_latency(Duration::ZERO);
    let c = client(&proxy);
    assert_eq!(call(&c, &["PING"]), simple("PONG"));
    assert_eq!(proxy.accepted(), 3);
}

#[test]
fn dropping_the_proxy_closes_its_port_and_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);
    assert_eq!(call(&a, &["PING"]), simple("PONG"));

    let port = proxy.port();
    drop(proxy);
    assert_closed(&a, "the proxy is gone");
    let refused = connect(port, PATIENCE).expect_err("the port is closed");
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
}

#[test]
fn the_server_going_away_closes_the_clients() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let a = client(&proxy);
    assert_eq!(call(&a, &["PING"]), simple("PONG"));

    server.kill();
    assert_closed(&a, "the server's close is passed on");
    let b = client(&proxy);
    assert_closed(&b, "accepted, then closed: the server is down");
    assert_eq!(proxy.accepted(), 2);
    assert_eq!(proxy.open(), 1, "a's side stays open until a closes it");
    drop(a);
    eventually("no connection left", || proxy.open() == 0);
}
