#![cfg(feature = "redis-tls")]
//! `RedisQueue` over TLS (`rediss://`, feature `redis-tls`) against a
//! `redis-server --tls-port` with a throwaway CA made by the test: the
//! queue's rules, an ACL user on every connection (pub/sub included), a
//! worker, a server restart, and `build()` failing on a certificate the
//! client does not trust or that names another host.
//!
//! The trusted CA reaches rustls the way a deployment's bundle does,
//! through `SSL_CERT_FILE`; the untrusted one only through a client built
//! by hand.

mod common;

use common::redis_queue::{HOUR, WAIT, eventually, ms, next, within};
use common::redis_server::RedisServer;
use common::tls::Pki;
use punctual::durable::{Job, Worker};
use punctual::redis::{RedisQueue, RedisStats, client};
use std::sync::LazyLock;
use std::time::Duration;

static PKI: LazyLock<Pki> = LazyLock::new(|| {
    // Nothing removes this directory when the process ends (statics are
    // not dropped), so each run removes those of runs that have ended.
    let tmp = std::env::temp_dir();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ended = name
            .strip_prefix("punctual-tls-")
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if ended {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = tmp.join(format!("punctual-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pki = Pki::new(&dir);
    pki.server_cert("localhost", "DNS:localhost,IP:127.0.0.1", "trusted-ca");
    pki.server_cert("other-host", "DNS:other.example", "trusted-ca");
    pki.server_cert("untrusted", "DNS:localhost,IP:127.0.0.1", "untrusted-ca");
    // SAFETY: every test of this binary forces `PKI` before it does
    // anything else (no connection, no child process), and `LazyLock`
    // blocks them until this returns, so no thread reads the environment
    // while it is written.
    unsafe { std::env::set_var("SSL_CERT_FILE", pki.path("trusted-ca.crt")) };
    pki
});

/// The ACL user of these tests, given on the command line so that it
/// survives a restart.
const USER: &str = "queue on >s3cret resetkeys ~punctual:* resetchannels &punctual:* +@all";

/// A server with TLS on a second port, presenting certificate `cert`.
fn tls_server(cert: &str) -> (RedisServer, u16) {
    let pki = &*PKI;
    RedisServer::start_with_port_args(|port| {
        let mut args = pki.server_args(cert, port);
        args.push("--user".to_owned());
        args.extend(USER.split(' ').map(str::to_owned));
        args
    })
}

/// `CLIENT LIST` lines of user `queue`.
fn queue_clients(server: &RedisServer) -> Vec<String> {
    server
        .cli(&["CLIENT", "LIST"])
        .lines()
        .filter(|line| line.contains(" user=queue "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_url_with_a_user_runs_the_queue_a_worker_and_rides_through_a_restart() {
    let (mut server, tls_port) = tls_server("localhost");
    let url = format!("rediss://queue:s3cret@localhost:{tls_port}/");
    // A long poll interval: a waiting consumer is woken in time only by an
    // announcement, which comes over the pub/sub connection.
    let q: RedisQueue<u64> = RedisQueue::builder("tls")
        .url(&url)
        .lease(ms(500))
        .poll_interval(Duration::from_secs(60))
        .build()
        .await
        .expect("build over TLS");

    // Order, and a waiting consumer woken by an insert.
    q.insert_many(&[(3, ms(30)), (2, ms(20)), (1, ms(10))])
        .await
        .unwrap();
    for want in 1..=3 {
        let d = next(&q).await;
        assert_eq!(*d.value(), want);
        assert!(d.ack().await.unwrap());
    }
    let waiting = tokio::spawn({
        let q = q.clone();
        async move { q.take().await }
    });
    tokio::time::sleep(ms(200)).await;
    q.insert(&4, Duration::ZERO).await.unwrap();
    let d = within("a waiting take woken by the announcement", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*d.value(), 4);
    assert!(d.ack().await.unwrap());

    // Every connection of the queue, pub/sub included, came in on the TLS
    // port as the URL's user.
    let clients = queue_clients(&server);
    assert!(
        clients.iter().any(|c| c.contains(" flags=P ")),
        "no pub/sub connection as user queue: {clients:#?}"
    );
    assert!(clients.len() >= 2, "{clients:#?}");
    let laddr = format!(" laddr=127.0.0.1:{tls_port} ");
    assert!(
        clients.iter().all(|c| c.contains(&laddr)),
        "a connection not on the TLS port: {clients:#?}"
    );

    // A worker over TLS.
    let values: Vec<(u64, Duration)> = (0..20).map(|i| (i, ms(i))).collect();
    q.insert_many(&values).await.unwrap();
    let worker = Worker::builder(q.clone())
        .concurrency(4)
        .spawn(|_job: Job<u64>| async { Ok::<(), String>(()) });
    eventually("the worker acks 20", || {
        let done = worker.stats().completed == 20;
        async move { done }
    })
    .await;
    assert_eq!(worker.shutdown(ms(100)).await.completed, 20);
    assert_eq!(q.stats().await.unwrap(), RedisStats::default());

    // A restart: the handle reconnects (TLS handshake and login again).
    q.insert_with_id("kept", &5, ms(10)).await.unwrap();
    server.restart();
    let q2 = q.clone();
    eventually("an insert after the restart", || {
        let q = q2.clone();
        async move { q.insert_with_id("after", &6, ms(10)).await.is_ok() }
    })
    .await;
    let mut got = vec![next(&q).await, next(&q).await];
    got.sort_by_key(|d| *d.value());
    assert_eq!(got[0].id(), "kept");
    assert_eq!(got[1].id(), "after");
    for d in got {
        assert!(d.ack().await.unwrap());
    }
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_ca_fails_build() {
    let (_server, tls_port) = tls_server("untrusted");
    let err = RedisQueue::<u64>::builder("untrusted")
        .url(&format!("rediss://queue:s3cret@localhost:{tls_port}/"))
        .response_timeout(WAIT)
        .build()
        .await
        .expect_err("a certificate of an unknown CA");
    let message = err.to_string();
    assert!(
        message.contains("certificate") && message.contains("UnknownIssuer"),
        "{message}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_host_fails_build() {
    let (_server, tls_port) = tls_server("other-host");
    let err = RedisQueue::<u64>::builder("other-host")
        .url(&format!("rediss://queue:s3cret@localhost:{tls_port}/"))
        .response_timeout(WAIT)
        .build()
        .await
        .expect_err("a certificate for other.example");
    let message = err.to_string();
    assert!(
        message.contains("certificate not valid for name \"localhost\""),
        "{message}"
    );
}

#[tokio::test]
async fn a_client_built_with_a_private_ca_reaches_a_server_the_platform_does_not_trust() {
    let (_server, tls_port) = tls_server("untrusted");
    let ca = std::fs::read(PKI.path("untrusted-ca.crt")).unwrap();
    let client = client::Client::build_with_tls(
        format!("rediss://queue:s3cret@localhost:{tls_port}/"),
        client::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca),
        },
    )
    .unwrap();
    let q: RedisQueue<u64> = RedisQueue::builder("private-ca")
        .client(client)
        .poll_interval(ms(50))
        .build()
        .await
        .expect("a client that trusts the private CA");
    q.insert_with_id("a", &1, HOUR).await.unwrap();
    assert_eq!(q.stats().await.unwrap().pending, 1);
}
