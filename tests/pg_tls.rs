#![cfg(feature = "postgres-tls")]
//! `PgQueue` over TLS (feature `postgres-tls`) against private PostgreSQL
//! servers (`initdb` in a temporary directory) with `ssl = on`, a
//! throwaway CA made by the test, and `hostssl` lines only in
//! `pg_hba.conf`, so every connection they accept is encrypted: the queue,
//! a worker and a restart with `sslmode=verify-full` and the CA in
//! `sslrootcert`; `build()` failing at once, saying what to change, on an
//! unknown CA, another host's certificate and an unencrypted connection;
//! the platform's roots taken from `SSL_CERT_FILE`; a pool the user built.
//!
//! Two CAs: `trusted-ca` stands for the platform's roots (this process's
//! `SSL_CERT_FILE` names it), `untrusted-ca` for a provider's private CA
//! that the client knows only through `sslrootcert`.

mod common;
#[path = "common/pg_server.rs"]
mod pg_server;

use common::tls::Pki;
use common::wait::{HOUR, eventually, ms, within};
use pg_server::PgServer;
use punctual::durable::{Job, Worker};
use punctual::postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use punctual::postgres::{Error, PgQueue, PgStats};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tokio::task::block_in_place;

static PKI: LazyLock<Pki> = LazyLock::new(|| {
    // Statics are never dropped, so each run removes the directories of
    // runs that have ended.
    let tmp = std::env::temp_dir();
    for entry in fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ended = name
            .strip_prefix("punctual-pgtls-")
            .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if ended {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    let dir = tmp.join(format!("punctual-pgtls-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let pki = Pki::new(&dir);
    // The name only, no IP address: connecting by 127.0.0.1 is "another
    // host".
    pki.server_cert("private", "DNS:localhost", "untrusted-ca");
    pki.server_cert("public", "DNS:localhost", "trusted-ca");
    // SAFETY: every test of this binary forces `PKI` before it does
    // anything else (no connection, no child process), and `LazyLock`
    // blocks them until this returns, so no thread reads the environment
    // while it is written.
    unsafe { std::env::set_var("SSL_CERT_FILE", pki.path("trusted-ca.crt")) };
    pki
});

/// A private server presenting certificate `cert`, accepting TLS
/// connections only (trust authentication for every user).
fn tls_server(cert: &str) -> PgServer {
    let pki = &*PKI;
    block_in_place(|| {
        PgServer::start_with(|data| {
            fs::copy(pki.path(&format!("{cert}.crt")), data.join("server.crt")).unwrap();
            fs::copy(pki.path(&format!("{cert}.key")), data.join("server.key")).unwrap();
            // PostgreSQL refuses a key that others may read.
            fs::set_permissions(data.join("server.key"), fs::Permissions::from_mode(0o600))
                .unwrap();
            let mut conf = fs::read_to_string(data.join("postgresql.conf")).unwrap();
            conf.push_str(
                "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
            );
            fs::write(data.join("postgresql.conf"), conf).unwrap();
            fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostssl all all ::1/128 trust\n",
            )
            .unwrap();
        })
    })
}

/// The server's URL by host name `host`, with the query `query`.
fn url(server: &PgServer, host: &str, query: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?{query}",
        server.port()
    )
}

/// `sslrootcert=<the private CA>`
fn private_ca() -> String {
    format!("sslrootcert={}", PKI.path("untrusted-ca.crt"))
}

/// `build()` of a queue at `url`: it must finish (either way) well before a
/// retry loop or a handshake left waiting could.
async fn build(url: &str) -> Result<PgQueue<u64>, Error> {
    within(
        "build()",
        PgQueue::builder("tls")
            .url(url)
            .lease(ms(500))
            .poll_interval(ms(50))
            .build(),
    )
    .await
}

/// The message of `build()` at `url`, which must fail.
async fn build_error(url: &str) -> String {
    match build(url).await {
        Ok(_) => panic!("build() at {url} succeeded"),
        Err(e) => e.to_string(),
    }
}

/// Backends of `application_name` and how many of them are encrypted.
fn encrypted(server: &PgServer, application_name: &str) -> String {
    block_in_place(|| {
        server.psql(&format!(
            "SELECT count(*) || '/' || count(*) FILTER (WHERE s.ssl) \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = '{application_name}'"
        ))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_sslrootcert_runs_the_queue_and_a_worker_through_a_restart() {
    let mut server = tls_server("private");
    let url = url(
        &server,
        "localhost",
        &format!(
            "sslmode=verify-full&{}&application_name=pgtls",
            private_ca()
        ),
    );
    let q = build(&url).await.expect("build over TLS");

    q.insert_many(&[(2, ms(20)), (1, ms(10))]).await.unwrap();
    for want in 1..=2 {
        let d = within("a take", q.take()).await.unwrap();
        assert_eq!(*d.value(), want);
        assert!(d.ack().await.unwrap());
    }
    let backends = encrypted(&server, "pgtls");
    let (all, tls) = backends.split_once('/').unwrap();
    assert!(all != "0" && all == tls, "backends/encrypted: {backends}");

    // A worker over TLS, then a restart of the server under it.
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let worker = Worker::builder(q.clone()).concurrency(4).spawn({
        let seen = seen.clone();
        move |job: Job<u64>| {
            seen.lock().unwrap().insert(job.id().to_owned());
            async { Ok::<(), String>(()) }
        }
    });
    let before: Vec<(u64, Duration)> = (0..10).map(|i| (i, ms(i))).collect();
    q.insert_many(&before).await.unwrap();
    eventually("the worker acks 10", || {
        let done = worker.stats().completed == 10;
        async move { done }
    })
    .await;

    block_in_place(|| server.restart());
    let after: Vec<String> = (0..10).map(|i| format!("after-{i}")).collect();
    for (i, id) in after.iter().enumerate() {
        // The first calls may meet the pool's dead connections; the id
        // makes a retry harmless.
        eventually("an insert after the restart", || {
            let q = q.clone();
            async move { q.insert_with_id(id, &(i as u64), ms(10)).await.is_ok() }
        })
        .await;
    }
    eventually("the worker acks every entry after the restart", || {
        let q = q.clone();
        let all_seen = after.iter().all(|id| seen.lock().unwrap().contains(id));
        async move { all_seen && q.stats().await.is_ok_and(|s| s == PgStats::default()) }
    })
    .await;
    let stats = worker.shutdown(ms(500)).await;
    assert!(stats.completed >= 20, "{stats:?}");
    assert_eq!(stats.failed, 0, "{stats:?}");
    let backends = encrypted(&server, "pgtls");
    let (all, tls) = backends.split_once('/').unwrap();
    assert!(all != "0" && all == tls, "after the restart: {backends}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_fails_at_once_on_an_unknown_ca_another_host_or_no_tls() {
    let server = tls_server("private");

    // The private CA is in neither the platform's roots (here
    // `SSL_CERT_FILE`) nor the URL.
    let message = build_error(&url(&server, "localhost", "sslmode=verify-full")).await;
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer")
            && message.contains("not signed by a CA this client trusts")
            && message.contains("sslrootcert=<path>"),
        "{message}"
    );

    // The certificate names localhost, not 127.0.0.1.
    let by_ip = url(
        &server,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", private_ca()),
    );
    let message = build_error(&by_ip).await;
    assert!(
        message.contains("certificate not valid for name \"127.0.0.1\"")
            && message.contains("names another host"),
        "{message}"
    );
    // sqlx 0.8 checks the name under verify-ca too (launchbadge/sqlx#3793),
    // and the message says so.
    let message = build_error(&by_ip.replace("verify-full", "verify-ca")).await;
    assert!(
        message.contains("certificate not valid for name \"127.0.0.1\"")
            && message.contains("under sslmode=verify-ca too"),
        "{message}"
    );

    // No TLS: pg_hba.conf has hostssl lines only.
    let message = build_error(&url(&server, "localhost", "sslmode=disable")).await;
    assert!(
        message.contains("no pg_hba.conf entry")
            && message.contains("the server accepts only TLS connections")
            && message.contains("sslmode=disable does not ask for TLS")
            && message.contains("sslmode=verify-full"),
        "{message}"
    );

    // The same server, asked as each mode wants: verify-ca by the name,
    // and require, which encrypts without checking the certificate.
    for query in [
        format!("sslmode=verify-ca&{}", private_ca()),
        "sslmode=require".to_owned(),
    ] {
        let q = build(&url(&server, "localhost", &query))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        q.insert_with_id("a", &1, HOUR).await.unwrap();
        assert!(q.remove("a").await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platform_roots_come_from_ssl_cert_file() {
    let server = tls_server("public");
    let q = build(&url(&server, "localhost", "sslmode=verify-full"))
        .await
        .expect("a server whose CA is in SSL_CERT_FILE");
    q.insert(&7, Duration::ZERO).await.unwrap();
    let d = within("a take", q.take()).await.unwrap();
    assert_eq!(*d.value(), 7);
    assert!(d.ack().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_built_by_the_user_keeps_its_tls_settings() {
    let server = tls_server("private");
    let options = PgConnectOptions::new()
        .host("localhost")
        .port(server.port())
        .username("postgres")
        .database("postgres")
        .application_name("pgtls-pool")
        .ssl_mode(PgSslMode::VerifyFull)
        .ssl_root_cert(PKI.path("untrusted-ca.crt"));
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect_with(options)
        .await
        .expect("the user's pool over TLS");
    let q: PgQueue<u64> = within(
        "build()",
        PgQueue::builder("tls-pool")
            .pool(pool)
            .poll_interval(ms(50))
            .build(),
    )
    .await
    .expect("build() on the user's pool");
    q.insert(&8, Duration::ZERO).await.unwrap();
    let d = within("a take", q.take()).await.unwrap();
    assert_eq!(*d.value(), 8);
    assert!(d.ack().await.unwrap());
    let backends = encrypted(&server, "pgtls-pool");
    let (all, tls) = backends.split_once('/').unwrap();
    assert!(all != "0" && all == tls, "backends/encrypted: {backends}");
}
