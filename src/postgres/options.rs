//! What the postgres store does for inserts with options and for key
//! limits (the public methods are written once for every store, in
//! `durable/front.rs`).

use super::error::Error;
use super::inner::call;
use super::queue::PgQueue;
use crate::durable::KeyLimit;
use crate::durable::options::{Plan, When};

crate::durable::front::jobs_front!(
    PgQueue,
    "no_run",
    "# use punctual::postgres::PgQueue;
# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), punctual::postgres::Error> {
let queue: PgQueue<String> = PgQueue::connect(\"postgres://localhost/shop\", \"jobs\").await?;"
);

impl<T> PgQueue<T> {
    /// Inserts `plans` in one step, each answered in order: its id, or
    /// `None` where it was refused. One statement (`insert_plans` in
    /// `sql/schema.sql`), one transaction, one round trip; the plans go as
    /// parallel arrays.
    pub(crate) async fn insert_plans(
        &self,
        plans: Vec<Plan>,
    ) -> Result<Vec<Option<String>>, Error> {
        let inner = self.inner();
        let n = plans.len();
        let mut ids = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        let mut absolute = Vec::with_capacity(n);
        let mut ms = Vec::with_capacity(n);
        let mut priorities = Vec::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        let mut max_attempts = Vec::with_capacity(n);
        let mut unique_ms = Vec::with_capacity(n);
        let mut replace = Vec::with_capacity(n);
        let mut traces = Vec::with_capacity(n);
        for plan in plans {
            let (at, time) = match plan.due {
                When::In(delay) => (false, delay),
                When::At(at) => (true, at),
            };
            ids.push(plan.id);
            values.push(plan.json);
            absolute.push(at);
            ms.push(i64::try_from(time).unwrap_or(i64::MAX));
            priorities.push(plan.priority);
            keys.push(plan.key);
            max_attempts.push(
                plan.max_attempts
                    .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            );
            unique_ms.push(plan.unique_ms.map(|w| i64::try_from(w).unwrap_or(i64::MAX)));
            replace.push(plan.replace);
            traces.push(plan.trace);
        }
        let made: Vec<Option<String>> = call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.insert_plans)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(&ids)
                .bind(&values)
                .bind(&absolute)
                .bind(&ms)
                .bind(&priorities)
                .bind(&keys)
                .bind(&max_attempts)
                .bind(&unique_ms)
                .bind(&replace)
                .bind(&traces)
                .fetch_one(conn)
        })?;
        if made.len() != n {
            return Err(Error::Database(sqlx::Error::Protocol(format!(
                "an insert of {n} entries answered {} ids",
                made.len()
            ))));
        }
        let inserted = made.iter().filter(|id| id.is_some()).count() as u64;
        crate::durable::metrics::inserted("postgres", &inner.name, "insert", inserted);
        Ok(made)
    }

    /// Sets (`Some`) or removes the limit of `key`; whether that changed it
    /// (`set_limit` in `sql/schema.sql`: a change wakes waiting consumers).
    pub(crate) async fn put_limit(
        &self,
        key: &str,
        limit: Option<KeyLimit>,
    ) -> Result<bool, Error> {
        let text = limit
            .map(|limit| limit.encode())
            .transpose()
            .map_err(Error::InvalidLimit)?;
        let inner = self.inner();
        call!(inner, |conn| {
            sqlx::query_scalar(&inner.sql.set_limit)
                .bind(&inner.name)
                .bind(&inner.channel)
                .bind(key)
                .bind(&text)
                .fetch_one(conn)
        })
    }

    /// Every key limit, by key (the default under `*`); a row that does not
    /// read as a limit (written by something else) is left out.
    pub(crate) async fn read_limits(&self) -> Result<Vec<(String, KeyLimit)>, Error> {
        let inner = self.inner();
        let rows: Vec<(String, String)> = call!(inner, |conn| {
            sqlx::query_as(&inner.sql.limits)
                .bind(&inner.name)
                .fetch_all(conn)
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, text)| Some((key, KeyLimit::decode(&text)?)))
            .collect())
    }
}
