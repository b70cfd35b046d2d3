//! [`queue_names`]: the queues a Redis server holds, found by their keys.

use std::collections::BTreeSet;
use std::time::Duration;

use super::conn::Conn;
use super::error::Error;

/// The names of every queue whose keys are on the Redis server at `url`
/// (`rediss://` with the feature `redis-tls`), sorted: what a dashboard or
/// a command-line tool lists without being told.
///
/// It walks the server's key space with `SCAN` (never `KEYS`, which would
/// hold the server), matching `punctual:{*}:*`: its cost grows with the
/// number of keys on the server, not with the entries of the queues, so
/// call it once in a while, not per request. A queue that holds nothing
/// (every key deleted) is not found. On a Redis Cluster, give each node's
/// URL in turn.
///
/// # Errors
///
/// [`Error::Redis`] if the server cannot be reached or refuses the login
/// or the command.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), punctual::redis::Error> {
/// for name in punctual::redis::queue_names("redis://127.0.0.1/").await? {
///     println!("{name}");
/// }
/// # Ok(()) }
/// ```
pub async fn queue_names(url: &str) -> Result<Vec<String>, Error> {
    let conn = Conn::connect(redis::Client::open(url)?, Duration::from_secs(10)).await?;
    let mut names = BTreeSet::new();
    let mut cursor = 0_u64;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg("punctual:{*}:*")
            .arg("COUNT")
            .arg(1000);
        let (next, keys): (u64, Vec<String>) = conn.query(&scan).await?;
        names.extend(keys.iter().filter_map(|key| name_of(key)));
        if next == 0 {
            return Ok(names.into_iter().collect());
        }
        cursor = next;
    }
}

/// The queue name in a key `punctual:{<name>}:<suffix>` (names hold no
/// braces).
fn name_of(key: &str) -> Option<String> {
    let rest = key.strip_prefix("punctual:{")?;
    let (name, suffix) = rest.split_once("}:")?;
    (!name.is_empty() && !suffix.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::name_of;

    #[test]
    fn names_are_read_from_keys() {
        assert_eq!(
            name_of("punctual:{orders}:schedule").as_deref(),
            Some("orders")
        );
        assert_eq!(name_of("punctual:{a:b}:entries").as_deref(), Some("a:b"));
        assert_eq!(name_of("punctual:{orders}"), None);
        assert_eq!(name_of("other:{orders}:schedule"), None);
    }
}
