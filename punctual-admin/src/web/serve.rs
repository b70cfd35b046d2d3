//! `punctual-admin serve`: the dashboard on its own, safe by default. It
//! binds loopback unless told otherwise, refuses an address others can
//! reach without `--token` or `--read-only`, and on loopback answers only
//! requests addressed to a loopback name (so a web page of another site
//! cannot reach it through a host name of its own that resolves to
//! 127.0.0.1, DNS rebinding).

use std::net::SocketAddr;
use std::process::ExitCode;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use super::Dashboard;
use crate::store::Source;

pub(crate) async fn run(
    sources: Vec<Source>,
    bind: &str,
    read_only: bool,
    token: Option<String>,
    latency_threshold: std::time::Duration,
) -> ExitCode {
    let fail = |why: String| {
        eprintln!("punctual-admin: {why}");
        ExitCode::from(2)
    };
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host(bind).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            return fail(format!(
                "--bind {bind}: {e} (write HOST:PORT, e.g. 127.0.0.1:8080)"
            ));
        }
    };
    let Some(addr) = addrs.first().copied() else {
        return fail(format!("--bind {bind} names no address"));
    };
    let loopback = addrs.iter().all(|a| a.ip().is_loopback());
    if token.as_deref() == Some("") {
        return fail("--token is empty".to_owned());
    }
    if !loopback && token.is_none() && !read_only {
        return fail(format!(
            "refusing to serve on {bind}, which others can reach, without --token or --read-only: \
             anyone who reaches it could requeue, delete and pause"
        ));
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => return fail(format!("cannot listen on {addr}: {e}")),
    };
    let local = listener.local_addr().unwrap_or(addr);
    let mut builder = Dashboard::builder()
        .sources(sources)
        .read_only(read_only)
        .latency_threshold(latency_threshold);
    if let Some(token) = &token {
        builder = builder.token(token);
    }
    let dashboard = builder.build();
    // Says at once when a store cannot be reached, rather than on the
    // first page.
    let found = dashboard.shared.ops.found().await;
    let mut queues = 0;
    for names in &found.stores {
        match names {
            Ok(names) => queues += names.len(),
            Err(e) => eprintln!("punctual-admin: warning: cannot list the queues of {e}"),
        }
    }
    let mut router = dashboard.router();
    if loopback {
        router = router.layer(middleware::from_fn(loopback_host));
    }
    eprintln!(
        "punctual-admin: {queues} queues; dashboard on http://{local}/{}{} (Ctrl-C stops it)",
        if read_only { " read-only" } else { "" },
        if token.is_some() {
            ", token required"
        } else {
            ""
        },
    );
    // The peer's address goes into the audit log of every write.
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    match axum::serve(listener, service)
        .with_graceful_shutdown(interrupted())
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("serving: {e}")),
    }
}

/// Refuses a request whose `Host` is not a loopback name.
async fn loopback_host(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    if is_loopback_host(host) {
        next.run(request).await
    } else {
        (
            StatusCode::FORBIDDEN,
            "this dashboard listens on loopback and answers only requests addressed to \
             localhost, 127.0.0.1 or [::1]",
        )
            .into_response()
    }
}

fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Ctrl-C, or SIGTERM where there is one.
async fn interrupted() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    term.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            () = ctrl_c => {}
            () = term => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn only_loopback_names_pass() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "app.localhost",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1:8080",
            "127.0.0.1.evil.example",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
