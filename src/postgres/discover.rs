//! [`queue_names`]: the queues a schema of a PostgreSQL database holds.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::error::{Error, check_schema};

/// The names of every queue kept in `schema` of the database at `url`
/// (`sslmode` and the rest as `PgQueueBuilder::url` takes them), sorted:
/// what a dashboard or a command-line tool lists without being told. A
/// schema without the queue's tables holds none.
///
/// One statement: a walk of the entries' primary key from one queue name
/// to the next (a loose index scan, as many steps as there are queues),
/// and the small tables of schedules, paused queues, workers and the
/// history's minutes (a queue whose entries all finished stays listed
/// for a day). It opens one connection for the call.
///
/// # Errors
///
/// [`Error::InvalidName`] for a schema that is not a plain identifier;
/// [`Error::Database`] if the database cannot be reached or refuses.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), punctual::postgres::Error> {
/// for name in punctual::postgres::queue_names("postgres://localhost/shop", "punctual").await? {
///     println!("{name}");
/// }
/// # Ok(()) }
/// ```
pub async fn queue_names(url: &str, schema: &str) -> Result<Vec<String>, Error> {
    check_schema(schema)?;
    let limit = Duration::from_secs(10);
    let timed_out = || super::inner::timed_out("listing the queues", limit);
    let mut conn = tokio::time::timeout(limit, PgConnection::connect(url))
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| Error::Database(super::tls::explain(e, url)))?;
    let s = format!("\"{schema}\"");
    let exists: bool = sqlx::query_scalar(
        "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL \
         AND to_regclass($3) IS NOT NULL",
    )
    .bind(format!("{s}.entries"))
    .bind(format!("{s}.schedules"))
    .bind(format!("{s}.queues"))
    .fetch_one(&mut conn)
    .await?;
    if !exists {
        return Ok(Vec::new());
    }
    // A queue whose entries all finished is still listed while a worker
    // serves it or its history keeps a minute (tables of VERSION 8).
    let health: bool =
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL")
            .bind(format!("{s}.workers"))
            .bind(format!("{s}.minutes"))
            .fetch_one(&mut conn)
            .await?;
    let more = if health {
        format!("UNION SELECT queue FROM {s}.workers UNION SELECT DISTINCT queue FROM {s}.minutes")
    } else {
        String::new()
    };
    let names = tokio::time::timeout(
        limit,
        sqlx::query_scalar(&format!(
            "WITH RECURSIVE walk AS ( \
               (SELECT e.queue FROM {s}.entries e ORDER BY e.queue LIMIT 1) \
               UNION ALL \
               SELECT (SELECT e.queue FROM {s}.entries e WHERE e.queue > w.queue \
                       ORDER BY e.queue LIMIT 1) \
               FROM walk w WHERE w.queue IS NOT NULL) \
             SELECT queue FROM walk WHERE queue IS NOT NULL \
             UNION SELECT queue FROM {s}.schedules \
             UNION SELECT queue FROM {s}.queues {more} \
             ORDER BY 1"
        ))
        .fetch_all(&mut conn),
    )
    .await
    .map_err(|_| timed_out())??;
    let _ = conn.close().await;
    Ok(names)
}
