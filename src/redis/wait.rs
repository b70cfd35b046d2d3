//! The pub/sub listener that turns a queue's announcements into kicks of
//! its [`Waiter`](crate::durable::wait::Waiter).

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{oneshot, watch};

use crate::durable::wait::Backoff;

/// What the listener task needs.
#[derive(Debug)]
pub(crate) struct Listener {
    /// Where to subscribe: the server, or a cluster's seed nodes, tried in
    /// turn (a cluster forwards every `PUBLISH` to every node).
    pub(crate) clients: Vec<redis::Client>,
    pub(crate) channel: String,
    pub(crate) queue: String,
    /// The longest wait for a reply (the subscription, a PING).
    pub(crate) response_timeout: Duration,
    /// How long the connection may stay silent before a PING checks it.
    pub(crate) ping_after: Duration,
}

impl Listener {
    /// Subscribes to the channel and kicks the leader on each message, until
    /// `stop` closes. A connection that stays silent is PINGed, and replaced
    /// when the answer does not come within the response timeout (a
    /// half-open connection delivers nothing and says nothing). Reconnects
    /// with capped back-off; a (re)subscription kicks once, since
    /// announcements made while it was down are lost. A user without the
    /// right to subscribe gets a warning, and consumers rely on polling.
    pub(crate) async fn run(self, kicks: watch::Sender<u64>, mut stop: oneshot::Receiver<()>) {
        let kick = || kicks.send_modify(|count| *count = count.wrapping_add(1));
        let queue = &self.queue;
        let mut backoff = Backoff::default();
        let mut next = 0;
        loop {
            let Some(client) = self.clients.get(next % self.clients.len().max(1)) else {
                return;
            };
            let session = async {
                let pubsub = tokio::time::timeout(self.response_timeout, client.get_async_pubsub())
                    .await
                    .map_err(|_| timed_out("a pub/sub connection"))??;
                let (mut sink, mut messages) = pubsub.split();
                tokio::time::timeout(self.response_timeout, sink.subscribe(&self.channel))
                    .await
                    .map_err(|_| timed_out("the subscription"))??;
                backoff.reset();
                kick();
                loop {
                    match tokio::time::timeout(self.ping_after, messages.next()).await {
                        Ok(Some(_)) => kick(),
                        Ok(None) => return Ok::<(), redis::RedisError>(()),
                        Err(_) => {
                            let pong = tokio::time::timeout(
                                self.response_timeout,
                                sink.ping::<redis::Value>(),
                            );
                            pong.await.map_err(|_| timed_out("a PING"))??;
                        }
                    }
                }
            };
            tokio::select! {
                _ = &mut stop => return,
                result = session => match result {
                    Ok(()) => tracing::debug!(queue, "redis pub/sub connection closed; reconnecting"),
                    Err(error) if error.code() == Some("NOPERM") => {
                        tracing::warn!(queue, %error,
                            "this user may not subscribe to the queue's channel: \
                             consumers rely on polling (poll_interval)");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(queue, %error, "redis pub/sub failed; reconnecting");
                        // The next seed node of a cluster, in case this one is gone.
                        next += 1;
                    }
                },
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(backoff.next()) => {}
            }
        }
    }
}

fn timed_out(what: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer to {what} in time"),
    ))
}
