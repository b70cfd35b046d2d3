//! The SQL of the store: `sql/schema.sql` (tables and functions, installed
//! by `build()`) and the calls of its functions, for one schema.

use sqlx::{PgConnection, PgPool};

use super::error::Error;

/// The version of `sql/schema.sql`; `build()` installs it when the
/// schema's `meta` table holds an older one.
const VERSION: i32 = 8;

const SCHEMA: &str = include_str!("sql/schema.sql");

/// The calls of one schema's functions.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) insert: String,
    /// `insert` for each row of the arrays, in order, in one statement.
    pub(crate) insert_batch: String,
    pub(crate) insert_many: String,
    /// Inserts with options (`insert_with`, `insert_many_with`).
    pub(crate) insert_plans: String,
    pub(crate) remove: String,
    pub(crate) reset: String,
    pub(crate) deadline: String,
    pub(crate) claim: String,
    pub(crate) finish: String,
    pub(crate) extend: String,
    pub(crate) stats: String,
    pub(crate) dead_letters: String,
    pub(crate) requeue_dead: String,
    pub(crate) purge: String,
    pub(crate) schedule: String,
    pub(crate) schedules: String,
    pub(crate) channel: String,
    pub(crate) now: String,
    pub(crate) pause: String,
    pub(crate) paused: String,
    pub(crate) dead_all: String,
    pub(crate) page: String,
    pub(crate) entry: String,
    pub(crate) set_limit: String,
    pub(crate) limits: String,
    pub(crate) page_newest: String,
    pub(crate) lookup: String,
    pub(crate) result: String,
    pub(crate) cancel: String,
    pub(crate) beat: String,
    pub(crate) leave: String,
    pub(crate) workers: String,
    pub(crate) history: String,
    pub(crate) latency: String,
    pub(crate) pause_schedule: String,
}

impl Statements {
    /// `schema` was checked to be a plain identifier.
    pub(crate) fn new(schema: &str) -> Statements {
        let s = format!("\"{schema}\"");
        Statements {
            insert: format!("SELECT {s}.insert($1, $2, $3, $4, $5, $6, $7)"),
            insert_batch: format!("SELECT {s}.insert_batch($1, $2, $3, $4, $5, $6, $7)"),
            insert_many: format!("SELECT {s}.insert_many($1, $2, $3, $4, $5)"),
            insert_plans: format!(
                "SELECT {s}.insert_plans($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
            ),
            remove: format!("SELECT {s}.remove($1, $2, $3, $4)"),
            reset: format!("SELECT {s}.reset($1, $2, $3, $4, $5)"),
            deadline: format!(
                "SELECT CASE WHEN run_at >= {s}.parked() THEN tick ELSE run_at END \
                 FROM {s}.entries WHERE queue = $1 AND id = $2 AND run_at IS NOT NULL"
            ),
            claim: format!(
                "SELECT * FROM {s}.claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                 $14, $15)"
            ),
            finish: format!(
                "SELECT * FROM {s}.finish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
            ),
            extend: format!("SELECT {s}.extend($1, $2, $3, $4, $5)"),
            stats: format!("SELECT * FROM {s}.stats($1)"),
            dead_letters: format!(
                "SELECT id, value, attempt, reason FROM {s}.entries \
                 WHERE queue = $1 AND run_at IS NULL ORDER BY died_at, seq LIMIT $2"
            ),
            requeue_dead: format!("SELECT {s}.requeue_dead($1, $2, $3, $4)"),
            purge: format!("SELECT {s}.purge($1)"),
            schedule: format!("SELECT * FROM {s}.schedule($1, $2, $3, $4, $5, $6)"),
            schedules: format!("SELECT * FROM {s}.schedules($1)"),
            channel: "SELECT 'punctual_' || md5($1 || '.' || $2), \
                (SELECT system_identifier::text FROM pg_control_system()) || '/' || \
                (SELECT oid::text FROM pg_database WHERE datname = current_database())"
                .to_owned(),
            now: format!("SELECT {s}.now_ms()"),
            pause: format!("SELECT {s}.pause($1, $2, $3)"),
            paused: format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.queues WHERE queue = $1 AND paused_at IS NOT NULL)"
            ),
            dead_all: format!("SELECT {s}.dead_all($1, $2, $3, $4)"),
            page: format!("SELECT * FROM {s}.page($1, $2, $3, $4, $5)"),
            entry: format!(
                "SELECT {s}.now_ms() AS now, run_at, died_at, token IS NOT NULL AS leased, attempt, \
                 CASE WHEN run_at >= {s}.parked() THEN tick ELSE deadline END AS deadline, \
                 tick IS NOT NULL AS tick, reason, value, key, priority, schedule, \
                 errors::text AS errors, since, token \
                 FROM {s}.entries WHERE queue = $1 AND id = $2"
            ),
            set_limit: format!("SELECT {s}.set_limit($1, $2, $3, $4)"),
            limits: format!("SELECT key, lim FROM {s}.key_limits WHERE queue = $1 ORDER BY key"),
            page_newest: format!("SELECT * FROM {s}.page_newest($1, $2, $3, $4, $5)"),
            lookup: format!("SELECT * FROM {s}.lookup($1, $2, $3)"),
            result: format!(
                "SELECT state, at, attempts, output, reason FROM {s}.results \
                 WHERE queue = $1 AND id = $2 AND until > {s}.now_ms()"
            ),
            cancel: format!("SELECT * FROM {s}.cancel($1, $2, $3, $4, $5, $6)"),
            beat: format!("SELECT {s}.beat($1, $2, $3, $4, $5, $6, $7, $8)"),
            leave: format!("SELECT {s}.leave($1, $2)"),
            workers: format!(
                "SELECT record, first, last, {s}.now_ms() AS now FROM {s}.workers \
                 WHERE queue = $1 AND NOT gone ORDER BY id"
            ),
            history: format!(
                "SELECT at, sum(inserted)::bigint AS inserted, sum(done)::bigint AS done, \
                 sum(failed)::bigint AS failed, sum(dead)::bigint AS dead FROM {s}.minutes \
                 WHERE queue = $1 AND at >= greatest($2 - $2 % 60000, \
                 (SELECT d - d % 60000 FROM (SELECT {s}.now_ms() - 86400000 AS d) AS day)) \
                 GROUP BY at ORDER BY at"
            ),
            latency: format!("SELECT {s}.now_ms() AS now, {s}.head($1) AS head"),
            pause_schedule: format!("SELECT {s}.pause_schedule($1, $2, $3, $4)"),
        }
    }
}

/// Creates or upgrades the schema's tables and functions, once, under an
/// advisory lock held by one transaction: processes that start together
/// wait for the first, then find the schema current.
pub(crate) async fn install(pool: &PgPool, schema: &str) -> Result<(), Error> {
    let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
        .fetch_one(pool)
        .await?;
    if version < 120_000 {
        return Err(Error::Unsupported(format!(
            "PostgreSQL 12 or later is needed, the server is version {version}"
        )));
    }
    if installed(pool.acquire().await?.as_mut(), schema).await? >= VERSION {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    // Read committed whatever the database's default: the check after the
    // lock must see what another process committed while this one waited.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('punctual schema'), hashtext($1))")
        .bind(schema)
        .execute(&mut *tx)
        .await?;
    // Another process may have installed it while this one waited.
    if installed(&mut tx, schema).await? < VERSION {
        // An older version's functions may differ in their signatures,
        // which `CREATE OR REPLACE` cannot change: they go first.
        let drop_functions = format!(
            "DO $$ DECLARE f regprocedure; BEGIN \
               FOR f IN SELECT p.oid::regprocedure FROM pg_proc p \
                 JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '{schema}' \
               LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP; END $$"
        );
        let script = SCHEMA.replace("__SCHEMA__", &format!("\"{schema}\""));
        let meta = format!(
            "DELETE FROM \"{schema}\".meta; INSERT INTO \"{schema}\".meta VALUES ({VERSION})"
        );
        // Several statements each: the simple query protocol.
        for sql in [drop_functions, script, meta] {
            sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(&sql)).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// The version of the tables and functions in `schema`: -1 if there are
/// none (a newer version than this process's is left alone).
///
/// The table is looked for in the catalog with the statement's snapshot,
/// not by `to_regclass`: that reads the session's catalog cache, which
/// may still remember the table as missing after another process created
/// it while this one waited for the lock (the session has not yet taken
/// in the other's invalidations), and the schema would be installed twice,
/// dropping functions other sessions are running.
async fn installed(conn: &mut PgConnection, schema: &str) -> Result<i32, Error> {
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = 'meta')",
    )
    .bind(schema)
    .fetch_one(&mut *conn)
    .await?;
    if !exists {
        return Ok(-1);
    }
    // Naming the table locks it, which takes in the invalidations first.
    let version: Option<i32> =
        sqlx::query_scalar(&format!("SELECT max(version) FROM \"{schema}\".meta"))
            .fetch_one(&mut *conn)
            .await?;
    Ok(version.unwrap_or(-1))
}
