//! What every request passes before a handler: the token (when the
//! dashboard has one), read-only mode, and the same-origin check on
//! writes; and the login form that turns the token into a cookie.
//!
//! The order: a request without the token is refused (401, or the login
//! form for a page); then in read-only mode every write is refused (403);
//! then a write must come from the dashboard's own pages: its `Origin`
//! (or, without one, its `Referer`) must name the host it was sent to. A
//! cross-site form or script cannot forge that, so a dashboard on
//! loopback cannot be driven by another site the operator has open. A
//! request that carries the token in `Authorization` needs no such check:
//! a browser never adds that header on its own.

use std::sync::Arc;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Form, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::Markup;
use serde::Deserialize;

use super::views::{self, Ctx};
use super::{Base, Shared};
use crate::audit::{Via, Who};
use crate::json::ErrorJson;

/// The login form's cookie.
const COOKIE: &str = "punctual_admin_token";

pub(crate) async fn guard(
    State(shared): State<Arc<Shared>>,
    base: Base,
    mut request: Request,
    next: Next,
) -> Response {
    shared.start_sampling();
    let path = request.uri().path().to_owned();
    let api = path == "/api" || path.starts_with("/api/");
    let machine = api || path == "/metrics";
    let open = path == "/login" || path.starts_with("/assets/");
    let headers = request.headers();
    let bearer = shared
        .token
        .as_deref()
        .is_some_and(|token| bearer_of(headers).is_some_and(|given| same(given, token)));
    let cookie = shared
        .token
        .as_deref()
        .is_some_and(|token| cookie_of(headers).is_some_and(|given| same(&given, token)));
    let who = Who {
        via: if api { Via::Api } else { Via::Page },
        from: request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.to_string()),
        forwarded_for: headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        token: bearer || cookie,
    };
    if shared.token.is_some() && !bearer && !cookie && !open {
        return if machine {
            let mut response = refuse(
                &shared,
                true,
                &base,
                StatusCode::UNAUTHORIZED,
                "this dashboard needs its token: Authorization: Bearer <token>",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"punctual-admin\""),
            );
            response
        } else if request.method() == Method::GET || request.method() == Method::HEAD {
            Redirect::to(&format!("{}/login", base.0)).into_response()
        } else {
            refuse(
                &shared,
                false,
                &base,
                StatusCode::UNAUTHORIZED,
                "log in first",
            )
        };
    }
    request.extensions_mut().insert(who);
    let headers = request.headers();
    let write = !matches!(*request.method(), Method::GET | Method::HEAD);
    let session = path == "/login" || path == "/logout";
    if write && shared.read_only && !session {
        return refuse(
            &shared,
            machine,
            &base,
            StatusCode::FORBIDDEN,
            "this dashboard is read-only",
        );
    }
    if write && !bearer && !same_origin(headers) {
        return refuse(
            &shared,
            machine,
            &base,
            StatusCode::FORBIDDEN,
            "a write must come from the dashboard's own pages: its Origin or Referer \
             header must name the host it is sent to",
        );
    }
    let mut response = next.run(request).await;
    protect(response.headers_mut());
    response
}

/// Headers on every answer: no page of another site may frame the
/// dashboard (it would take a person's clicks on its buttons), no type is
/// guessed, and the `Referer` goes to the dashboard only.
fn protect(headers: &mut HeaderMap) {
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// A refusal: JSON for the API and metrics, a page otherwise.
fn refuse(shared: &Shared, machine: bool, base: &Base, status: StatusCode, why: &str) -> Response {
    let mut response = refusal(shared, machine, base, status, why);
    protect(response.headers_mut());
    response
}

fn refusal(shared: &Shared, machine: bool, base: &Base, status: StatusCode, why: &str) -> Response {
    if machine {
        (
            status,
            axum::Json(ErrorJson {
                error: why.to_owned(),
            }),
        )
            .into_response()
    } else {
        let mut ctx = Ctx::bare(base);
        ctx.read_only = shared.read_only;
        (status, views::error_page(&ctx, status, why)).into_response()
    }
}

/// Who asked, as the guard saw it: what a write's audit record says. The
/// guard puts it on every request it lets through.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Who {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Who>().cloned().unwrap_or(Who {
            via: if parts.uri.path().starts_with("/api/") {
                Via::Api
            } else {
                Via::Page
            },
            from: None,
            forwarded_for: None,
            token: false,
        }))
    }
}

fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| {
            percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned()
        })
}

/// Compares in time independent of where they differ.
fn same(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request's `Origin` (else its `Referer`) names the host it
/// was sent to (`Host`, or `X-Forwarded-Host` behind a proxy).
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let from = match (text("origin"), text("referer")) {
        (Some(origin), _) => origin,
        (None, Some(referer)) => referer,
        (None, None) => return false,
    };
    let Some(from_host) = authority_of(from) else {
        return false;
    };
    [text("host"), text("x-forwarded-host")]
        .into_iter()
        .flatten()
        .any(|host| host.trim().eq_ignore_ascii_case(from_host))
}

/// `host[:port]` of an absolute URL (`null` and the like have none).
fn authority_of(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    (!authority.is_empty() && !authority.contains('@')).then_some(authority)
}

pub(crate) async fn login_form(State(shared): State<Arc<Shared>>, base: Base) -> Markup {
    views::login_page(&Ctx::bare(&base), shared.token.is_some(), None)
}

#[derive(Debug, Deserialize)]
pub(crate) struct Login {
    token: String,
}

pub(crate) async fn login(
    State(shared): State<Arc<Shared>>,
    base: Base,
    Form(form): Form<Login>,
) -> Response {
    let Some(token) = &shared.token else {
        return Redirect::to(&home(&base)).into_response();
    };
    if !same(form.token.trim(), token) {
        let page = views::login_page(&Ctx::bare(&base), true, Some("That is not the token."));
        return (StatusCode::UNAUTHORIZED, page).into_response();
    }
    let cookie = format!(
        "{COOKIE}={}; Path={}; HttpOnly; SameSite=Strict",
        super::enc(token),
        cookie_path(&base)
    );
    let mut response = Redirect::to(&home(&base)).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

pub(crate) async fn logout(base: Base) -> Response {
    let cookie = format!(
        "{COOKIE}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0",
        cookie_path(&base)
    );
    let mut response = Redirect::to(&format!("{}/login", base.0)).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn cookie_path(base: &Base) -> String {
    if base.0.is_empty() {
        "/".to_owned()
    } else {
        base.0.clone()
    }
}

/// The overview's path.
pub(crate) fn home(base: &Base) -> String {
    if base.0.is_empty() {
        "/".to_owned()
    } else {
        base.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn writes_must_name_their_own_host() {
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(same_origin(&headers(&[
            host,
            ("referer", "http://127.0.0.1:8080/queues/x")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[host, ("origin", "null")])));
        // The Origin decides when both are there.
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "http://evil.example"),
            ("referer", "http://127.0.0.1:8080/")
        ])));
        assert!(!same_origin(&headers(&[host])));
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8081")
        ])));
        assert!(same_origin(&headers(&[
            host,
            ("x-forwarded-host", "ops.example"),
            ("origin", "https://ops.example")
        ])));
    }

    #[test]
    fn tokens_come_from_the_header_or_the_cookie() {
        let h = headers(&[
            ("authorization", "Bearer s3cret"),
            ("cookie", "a=1; punctual_admin_token=s%203; b=2"),
        ]);
        assert_eq!(bearer_of(&h), Some("s3cret"));
        assert_eq!(cookie_of(&h).as_deref(), Some("s 3"));
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
    }
}
