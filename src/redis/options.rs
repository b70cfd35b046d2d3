//! What the redis store does for inserts with options and for key
//! limits (the public methods are written once for every store, in
//! `durable/front.rs`): the insert script with each entry's options, and
//! the `limit` and `limits` scripts.

use super::error::Error;
use super::queue::{ALONE_FROM, RedisQueue};
use super::scripts::SCRIPTS;
use crate::durable::KeyLimit;
use crate::durable::options::{Plan, When};

crate::durable::front::jobs_front!(
    RedisQueue,
    "no_run",
    "# use punctual::redis::RedisQueue;
# #[tokio::main(flavor = \"current_thread\")]
# async fn main() -> Result<(), punctual::redis::Error> {
let queue: RedisQueue<String> = RedisQueue::connect(\"redis://127.0.0.1/\", \"jobs\").await?;"
);

/// The longest unique window a script keeps (ms, about 142,000 years): a
/// Lua number stays exact and prints as an integer.
const MAX_WINDOW: u64 = 1 << 52;

/// A plan's options as the insert script reads them: `''` for a plain
/// entry, else `<priority>:<max attempts>:<unique ms>:<replace 0/1>:<key>`
/// (empty where not set).
fn options_arg(plan: &Plan) -> String {
    if plan.is_plain() {
        return String::new();
    }
    let opt = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    format!(
        "{}:{}:{}:{}:{}",
        plan.priority,
        opt(plan.max_attempts.map(u64::from)),
        opt(plan.unique_ms.map(|ms| ms.min(MAX_WINDOW))),
        u8::from(plan.replace),
        plan.key.as_deref().unwrap_or(""),
    )
}

impl<T> RedisQueue<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// Inserts `plans` in one step (one run of the insert script), each
    /// answered in order: its id, or `None` where it was refused.
    pub(crate) async fn insert_plans(
        &self,
        plans: Vec<Plan>,
    ) -> Result<Vec<Option<String>>, Error> {
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.insert);
        invocation.arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        invocation.arg(plans.len());
        for plan in &plans {
            let (kind, ms) = match plan.due {
                When::In(delay) => ("d", delay),
                When::At(at) => ("a", at),
            };
            invocation
                .arg(plan.id.as_deref().unwrap_or(""))
                .arg(&plan.json)
                .arg(kind)
                .arg(ms)
                .arg(options_arg(plan))
                .arg(plan.trace.as_deref().unwrap_or(""));
        }
        // {inserted, id, ...}, in order. A value the server may refuse to
        // read goes on a connection of its own (see `RedisQueue::insert`).
        let reply: Vec<(i64, String)> = if plans.iter().any(|p| p.json.len() >= ALONE_FROM) {
            inner.conn.run_apart(&invocation).await?
        } else {
            inner.run(&invocation).await?
        };
        if reply.len() != plans.len() {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "the insert script answered for another number of entries",
                format!("{} for {}", reply.len(), plans.len()),
            ))));
        }
        let ids: Vec<Option<String>> = reply
            .into_iter()
            .map(|(inserted, id)| (inserted == 1).then_some(id))
            .collect();
        let inserted = ids.iter().filter(|id| id.is_some()).count() as u64;
        crate::durable::metrics::inserted("redis", &inner.name, "insert", inserted);
        Ok(ids)
    }

    /// Sets (`Some`) or removes the limit of `key`; whether that changed it.
    pub(crate) async fn put_limit(
        &self,
        key: &str,
        limit: Option<KeyLimit>,
    ) -> Result<bool, Error> {
        let text = match limit {
            Some(limit) => limit.encode().map_err(Error::InvalidLimit)?,
            None => String::new(),
        };
        let inner = self.inner();
        let mut invocation = inner.script(&SCRIPTS.limit);
        invocation.arg(key).arg(text).arg(&inner.keys.channel);
        inner.identify(&mut invocation);
        inner.run(&invocation).await
    }

    /// Every key limit, by key (the default under `*`).
    pub(crate) async fn read_limits(&self) -> Result<Vec<(String, KeyLimit)>, Error> {
        let invocation = self.inner().script(&SCRIPTS.limits);
        let reply: Vec<(String, String)> = self.inner().run(&invocation).await?;
        let mut limits: Vec<(String, KeyLimit)> = reply
            .into_iter()
            .filter_map(|(key, text)| KeyLimit::decode(&text).map(|limit| (key, limit)))
            .collect();
        limits.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(limits)
    }
}
