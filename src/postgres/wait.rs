//! The `LISTEN` task that turns a queue's notifications into kicks of its
//! [`Waiter`](crate::durable::wait::Waiter), pushes to `wait` (payload
//! `f<id>`: entry `id` finished) and to workers (`c`: a leased entry was
//! cancelled).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{broadcast, oneshot, watch};

use crate::durable::wait::Backoff;

/// What the listener task needs.
#[derive(Debug)]
pub(crate) struct Listener {
    pub(crate) pool: PgPool,
    pub(crate) channel: String,
    pub(crate) queue: String,
    /// How long the connection may stay silent before a `SELECT 1` checks
    /// it (and the longest wait for that answer).
    pub(crate) ping_after: Duration,
    pub(crate) finishes: broadcast::Sender<Arc<str>>,
    /// Counted before each push of `finishes`: a lookup sent after the
    /// count moved sees the finish pushed.
    pub(crate) pushes: Arc<AtomicU64>,
    pub(crate) cancels: Arc<watch::Sender<u64>>,
}

impl Listener {
    /// Listens on the channel and kicks the leader on each notification,
    /// until `stop` closes. A (re)connection kicks once, since
    /// notifications sent while it was down are lost; a connection that
    /// stays silent is checked with a query and replaced when no answer
    /// comes. Reconnects with capped back-off.
    pub(crate) async fn run(self, kicks: watch::Sender<u64>, mut stop: oneshot::Receiver<()>) {
        let kick = || kicks.send_modify(|count| *count = count.wrapping_add(1));
        let cancelled = || {
            self.cancels
                .send_modify(|count| *count = count.wrapping_add(1));
        };
        let heard = |payload: &str| match payload.as_bytes().first() {
            Some(b'f') => {
                self.pushes.fetch_add(1, Ordering::SeqCst);
                let _ = self.finishes.send(Arc::from(&payload[1..]));
            }
            Some(b'c') => cancelled(),
            _ => kick(),
        };
        let queue = &self.queue;
        let mut backoff = Backoff::default();
        loop {
            let session = async {
                let mut listener = PgListener::connect_with(&self.pool).await?;
                listener.listen(&self.channel).await?;
                backoff.reset();
                kick();
                cancelled();
                loop {
                    match tokio::time::timeout(self.ping_after, listener.try_recv()).await {
                        Ok(Ok(Some(notification))) => heard(notification.payload()),
                        // The connection was lost (the next call reconnects
                        // and listens again): notifications may be lost.
                        Ok(Ok(None)) => {
                            kick();
                            cancelled();
                        }
                        Ok(Err(error)) => return Err(error),
                        Err(_) => {
                            let check = sqlx::query("SELECT 1").execute(&mut listener);
                            tokio::time::timeout(self.ping_after, check)
                                .await
                                .map_err(|_| {
                                    sqlx::Error::Io(std::io::Error::new(
                                        std::io::ErrorKind::TimedOut,
                                        "no answer on the LISTEN connection in time",
                                    ))
                                })??;
                        }
                    }
                }
            };
            tokio::select! {
                _ = &mut stop => return,
                result = session => {
                    let error: sqlx::Error = match result {
                        Ok(never) => never,
                        Err(error) => error,
                    };
                    tracing::warn!(queue, %error, "postgres LISTEN failed; reconnecting");
                }
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(backoff.next()) => {}
            }
        }
    }
}
