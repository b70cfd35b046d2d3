//! What `build()` says when a connection fails over TLS, or for want of it.
//!
//! The TLS itself is sqlx's: the cargo feature `postgres-tls` turns on its
//! rustls backend, and the URL's `sslmode` and `sslrootcert` drive it. Its
//! errors say what failed but not what to change, and a server that
//! accepts only TLS refuses a plain connection with a `pg_hba.conf` line
//! that names neither TLS nor a cargo feature. [`explain`] adds the
//! missing half to the error of the connection `build()` opens; any other
//! error passes through untouched, and so does one whose text does not
//! match (a server answering in another language, say).

use std::error::Error as StdError;
use std::fmt;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// `error`, from connecting to `url`, with advice added where there is
/// some: the cause stays reachable as the advice's `source()`, and the
/// sqlx variant is [`sqlx::Error::Tls`] for a failed handshake (sqlx
/// reports a certificate it rejects as `Io`), a missing TLS backend, and
/// [`sqlx::Error::Configuration`] for a refused plain connection.
pub(crate) fn explain(error: sqlx::Error, url: &str) -> sqlx::Error {
    // The mode sqlx used: the URL's, else `PGSSLMODE`, else `prefer`.
    let Ok(options) = url.parse::<PgConnectOptions>() else {
        return error;
    };
    let mode = options.get_ssl_mode();
    match error {
        sqlx::Error::Database(db) => {
            let code = db.code();
            match refused_plain(code.as_deref(), db.message(), mode, TLS_BUILT) {
                Some(advice) => sqlx::Error::Configuration(Box::new(Advised {
                    error: db.into_error(),
                    advice,
                })),
                None => sqlx::Error::Database(db),
            }
        }
        sqlx::Error::Tls(error) => match no_backend(&*error, mode) {
            Some(advice) => sqlx::Error::Tls(Box::new(Advised { error, advice })),
            None => sqlx::Error::Tls(error),
        },
        sqlx::Error::Io(error) => match certificate(&error, mode) {
            Some(advice) => sqlx::Error::Tls(Box::new(Advised {
                error: Box::new(error),
                advice,
            })),
            None => sqlx::Error::Io(error),
        },
        other => other,
    }
}

/// Whether this build asks sqlx for TLS (sqlx may have it anyway, from a
/// feature the application turned on: cargo unifies them).
const TLS_BUILT: bool = cfg!(feature = "postgres-tls");

/// What to change when the server refused a connection for not being
/// encrypted: `pg_hba.conf` has `hostssl` lines only, or rejects plain
/// ones. PostgreSQL 14 and later end the message with `no encryption`,
/// 12 and 13 with `SSL off`; the code is `28000` either way.
fn refused_plain(
    code: Option<&str>,
    message: &str,
    mode: PgSslMode,
    tls_built: bool,
) -> Option<String> {
    let hba = message.starts_with("no pg_hba.conf entry for ")
        || message.starts_with("pg_hba.conf rejects connection for ");
    let plain = message.ends_with(", no encryption") || message.ends_with(", SSL off");
    if code != Some("28000") || !hba || !plain {
        return None;
    }
    let why = "the server accepts only TLS connections";
    Some(match mode {
        _ if !tls_built => format!(
            "{why}, and punctual was built without TLS: enable its cargo feature \
             `postgres-tls` and add `sslmode=verify-full` (or `require`) to the URL"
        ),
        PgSslMode::Disable | PgSslMode::Allow => format!(
            "{why}, and the URL's sslmode={} does not ask for TLS: use \
             `sslmode=verify-full` (or `require`)",
            mode_name(mode)
        ),
        _ => format!("{why}: add `sslmode=verify-full` (or `require`) to the URL"),
    })
}

/// What to change when sqlx was asked for TLS but has no TLS backend.
fn no_backend(error: &(dyn StdError + 'static), mode: PgSslMode) -> Option<String> {
    // sqlx 0.8's only words for it: "TLS upgrade required by connect
    // options but SQLx was built without TLS support enabled".
    if !error.to_string().contains("without TLS support") {
        return None;
    }
    Some(format!(
        "sslmode={} needs TLS, and punctual was built without it: enable its cargo \
         feature `postgres-tls`",
        mode_name(mode)
    ))
}

/// What to change when rustls rejected the server's certificate.
#[cfg(feature = "postgres-tls")]
fn certificate(error: &std::io::Error, mode: PgSslMode) -> Option<String> {
    use rustls::CertificateError;
    // rustls fails the handshake with its error inside an `InvalidData`
    // I/O error, and sqlx hands that on as it is.
    let rustls::Error::InvalidCertificate(why) =
        error.get_ref()?.downcast_ref::<rustls::Error>()?
    else {
        return None;
    };
    match why {
        CertificateError::UnknownIssuer => Some(
            "the server's certificate is not signed by a CA this client trusts (the \
             URL's `sslrootcert`, and the platform's roots or the bundle `SSL_CERT_FILE` \
             names): name the CA's certificate file with `sslrootcert=<path>` in the URL"
                .to_owned(),
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            Some(match mode {
                // sqlx 0.8 with rustls 0.23.24 or later checks the name
                // under verify-ca too (launchbadge/sqlx#3793).
                PgSslMode::VerifyCa => "the server's certificate names another host, and \
                     sqlx 0.8 checks the name under sslmode=verify-ca too: connect by a \
                     host name the certificate lists"
                    .to_owned(),
                _ => "the server's certificate names another host: connect by a host name \
                     the certificate lists"
                    .to_owned(),
            })
        }
        _ => None,
    }
}

/// Without `postgres-tls` a handshake error can only come from a sqlx
/// backend the application chose; it is left as sqlx words it.
#[cfg(not(feature = "postgres-tls"))]
fn certificate(_error: &std::io::Error, _mode: PgSslMode) -> Option<String> {
    None
}

fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// An error and what to do about it: displayed as `<error>; <advice>`, its
/// `source()` the error itself.
#[derive(Debug)]
struct Advised {
    error: BoxError,
    advice: String,
}

impl fmt::Display for Advised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.error, self.advice)
    }
}

impl StdError for Advised {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFUSED: &str = "no pg_hba.conf entry for host \"10.0.0.7\", user \"app\", \
                           database \"shop\", no encryption";

    #[test]
    fn a_plain_connection_refused_names_the_feature_when_it_is_off() {
        let advice = refused_plain(Some("28000"), REFUSED, PgSslMode::Prefer, false).unwrap();
        assert!(advice.contains("`postgres-tls`"), "{advice}");
        assert!(advice.contains("sslmode=verify-full"), "{advice}");
    }

    #[test]
    fn a_plain_connection_refused_names_the_sslmode_that_turned_tls_off() {
        let advice = refused_plain(Some("28000"), REFUSED, PgSslMode::Disable, true).unwrap();
        assert!(advice.contains("sslmode=disable"), "{advice}");
        assert!(!advice.contains("postgres-tls"), "{advice}");
        let old =
            "no pg_hba.conf entry for host \"10.0.0.7\", user \"app\", database \"shop\", SSL off";
        assert!(refused_plain(Some("28000"), old, PgSslMode::Allow, true).is_some());
    }

    #[test]
    fn other_login_failures_get_no_tls_advice() {
        let tls = "no pg_hba.conf entry for host \"10.0.0.7\", user \"app\", \
                   database \"shop\", SSL encryption";
        assert_eq!(
            refused_plain(Some("28000"), tls, PgSslMode::Require, true),
            None
        );
        assert_eq!(
            refused_plain(Some("28P01"), REFUSED, PgSslMode::Disable, true),
            None
        );
    }

    #[test]
    fn a_url_asking_for_tls_without_a_backend_names_the_feature() {
        let sqlx_says = "TLS upgrade required by connect options but SQLx was built \
                         without TLS support enabled";
        let error = sqlx::Error::Tls(sqlx_says.into());
        let url = "postgres://app@db.example/shop?sslmode=verify-full";
        let message = explain(error, url).to_string();
        assert!(message.contains(sqlx_says), "{message}");
        assert!(
            message.contains("sslmode=verify-full needs TLS") && message.contains("`postgres-tls`"),
            "{message}"
        );
    }
}
