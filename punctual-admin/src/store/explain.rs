//! Why a store could not be read, in words a person can act on: when a
//! store's answer is not its protocol (a Redis URL pointing at an HTTP
//! server answers "Parse error at 1 Unexpected `84`"; a PostgreSQL URL
//! pointing at Redis waits for an answer that never comes), the address is
//! probed once with the store's own first message and the error says what
//! answers there instead.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::redact;
use crate::error::OpError;

/// How long the probe waits for the connection and for an answer.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// What answers at an address, from the first bytes it sends back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    Redis,
    Postgres,
    Http,
    /// It closed the connection without a word.
    Closed,
    /// It said nothing within the probe's time.
    Silent,
    /// Something else.
    Other,
}

impl Peer {
    /// What the first bytes of an answer say. `postgres_probe`: whether
    /// the question was PostgreSQL's `SSLRequest` (a server answers one
    /// byte, `S` or `N`) rather than Redis's `PING`.
    pub(crate) fn of(answer: &[u8], postgres_probe: bool) -> Peer {
        match answer {
            [] => Peer::Closed,
            [b'S' | b'N'] if postgres_probe => Peer::Postgres,
            _ if answer.starts_with(b"HTTP/") => Peer::Http,
            // An HTTP/0.9-style answer to a line that is no request: a page.
            _ if answer.trim_ascii_start().starts_with(b"<") => Peer::Http,
            [b'+' | b'-', ..] => Peer::Redis,
            // PostgreSQL's ErrorResponse: 'E', then a 4-byte length.
            [b'E', 0, ..] => Peer::Postgres,
            _ => Peer::Other,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Peer::Redis => "a Redis server answers there",
            Peer::Postgres => "a PostgreSQL server answers there",
            Peer::Http => "an HTTP server answers there",
            Peer::Closed => "whatever listens there closed the connection without answering",
            Peer::Silent => "whatever listens there did not answer",
            Peer::Other => "whatever listens there answers in another protocol",
        }
    }
}

/// `host:port` of a `redis://` or `postgres://` URL (the default port
/// when none is written); `None` for what cannot be probed plainly (TLS,
/// Unix sockets, several hosts).
fn address(url: &str, default_port: u16) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "redis" | "postgres" | "postgresql") {
        return None;
    }
    if url.contains("sslmode=require") || url.contains("sslmode=verify") {
        return None;
    }
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() || host_port.contains(',') {
        return None;
    }
    let has_port = match host_port.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => host_port.contains(':'),
    };
    Some(if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    })
}

/// Sends `question` to `addr` and reads the first bytes of the answer.
async fn probe(addr: &str, question: &[u8], postgres_probe: bool) -> Option<Peer> {
    let mut stream = tokio::time::timeout(PROBE_LIMIT, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    stream.write_all(question).await.ok()?;
    let mut answer = [0_u8; 64];
    match tokio::time::timeout(PROBE_LIMIT, stream.read(&mut answer)).await {
        Err(_) => Some(Peer::Silent),
        Ok(Err(_)) => Some(Peer::Closed),
        Ok(Ok(n)) => Some(Peer::of(&answer[..n], postgres_probe)),
    }
}

/// What answers at `addr`: asked first as `ours` asks (Redis's `PING`,
/// or PostgreSQL's `SSLRequest`), then, when that tells nothing, as the
/// other store would.
async fn identify(addr: &str, postgres_first: bool) -> Option<Peer> {
    let ask = |postgres: bool| async move {
        if postgres {
            probe(addr, &SSL_REQUEST, true).await
        } else {
            probe(addr, b"PING\r\n", false).await
        }
    };
    let first = ask(postgres_first).await?;
    if matches!(first, Peer::Closed | Peer::Silent | Peer::Other) {
        if let Some(second @ (Peer::Redis | Peer::Postgres | Peer::Http)) =
            ask(!postgres_first).await
        {
            return Some(second);
        }
    }
    Some(first)
}

/// Whether a Redis error looks like the other side speaking another
/// protocol (or hanging up on Redis's).
fn redis_confused(error: &str) -> bool {
    [
        "Parse error",
        "Incompatible type",
        "Unexpected",
        "broken pipe",
        "Connection reset",
        "did not answer",
    ]
    .iter()
    .any(|sign| error.contains(sign))
}

/// A Redis store's error: what the probe found at its address when the
/// error looks like the wrong server, else the error as it came.
pub(crate) async fn redis(url: &str, error: &str) -> OpError {
    let shown = redact(url);
    if redis_confused(error) {
        if let Some(addr) = address(url, 6379) {
            if let Some(peer) = identify(&addr, false).await {
                if peer != Peer::Redis {
                    return OpError::Store(format!(
                        "{shown}: not a Redis server at {addr}: {} (a wrong port?)",
                        peer.words()
                    ));
                }
            }
        }
    }
    OpError::Store(format!("{shown}: {error}"))
}

/// When what answers at a PostgreSQL store's address is not PostgreSQL,
/// the error saying so (for a listing that is slow to answer: a server
/// of another protocol leaves it waiting for its response timeout).
pub(crate) async fn not_postgres(url: &str) -> Option<OpError> {
    let addr = address(url, 5432)?;
    match identify(&addr, true).await? {
        peer @ (Peer::Redis | Peer::Http) => Some(OpError::Store(format!(
            "{}: not a PostgreSQL server at {addr}: {} (a wrong port?)",
            redact(url),
            peer.words()
        ))),
        _ => None,
    }
}

/// PostgreSQL's `SSLRequest`: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A PostgreSQL store's error: what the probe found at its address when
/// the error looks like the wrong server, else the error as it came.
pub(crate) async fn postgres(url: &str, error: &str) -> OpError {
    let shown = redact(url);
    let confused = [
        "communicating",
        "unexpected",
        "did not answer",
        "no answer",
        "protocol",
    ]
    .iter()
    .any(|sign| error.contains(sign));
    if confused {
        if let Some(addr) = address(url, 5432) {
            if let Some(peer) = identify(&addr, true).await {
                if peer != Peer::Postgres {
                    return OpError::Store(format!(
                        "{shown}: not a PostgreSQL server at {addr}: {} (a wrong port?)",
                        peer.words()
                    ));
                }
            }
        }
    }
    OpError::Store(format!("{shown}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_the_url() {
        assert_eq!(address("redis://h/", 6379).as_deref(), Some("h:6379"));
        assert_eq!(
            address("redis://:pw@h:7000/0", 6379).as_deref(),
            Some("h:7000")
        );
        assert_eq!(
            address("postgres://u:p@[::1]:6000/db?x=1", 5432).as_deref(),
            Some("[::1]:6000")
        );
        assert_eq!(
            address("postgres://u@db/x", 5432).as_deref(),
            Some("db:5432")
        );
        assert_eq!(address("rediss://h/", 6379), None);
        assert_eq!(address("postgres://h/x?sslmode=verify-full", 5432), None);
        assert_eq!(address("postgres://a,b/x", 5432), None);
    }

    #[test]
    fn first_bytes_tell_the_protocol() {
        assert_eq!(Peer::of(b"HTTP/1.0 400 Bad", false), Peer::Http);
        assert_eq!(Peer::of(b"+PONG\r\n", false), Peer::Redis);
        assert_eq!(Peer::of(b"-NOAUTH", false), Peer::Redis);
        assert_eq!(Peer::of(b"N", true), Peer::Postgres);
        assert_eq!(Peer::of(b"N", false), Peer::Other);
        assert_eq!(Peer::of(b"E\0\0\0\x50SFATAL", false), Peer::Postgres);
        assert_eq!(Peer::of(b"", true), Peer::Closed);
        assert_eq!(Peer::of(b"<!DOCTYPE HTML>", false), Peer::Http);
    }
}
