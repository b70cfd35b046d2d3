//! The pub/sub listener that turns a queue's announcements into kicks of
//! its [`Waiter`](crate::durable::wait::Waiter), and the done channel's
//! into pushes of finished ids (for `wait`) and of cancels (for workers).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, oneshot, watch};

use crate::durable::wait::Backoff;

/// What the listener task needs.
#[derive(Debug)]
pub(crate) struct Listener {
    /// Where to subscribe: the server, or a cluster's seed nodes, tried in
    /// turn (a cluster forwards every `PUBLISH` to every node).
    pub(crate) clients: Vec<redis::Client>,
    pub(crate) channel: String,
    /// The done channel: `f` and the finished ids whose results are kept
    /// (`<length>:<id>` each), or `c` for a cancelled lease.
    pub(crate) done: String,
    pub(crate) finishes: broadcast::Sender<Arc<str>>,
    pub(crate) cancels: watch::Sender<u64>,
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
        let cancelled = || {
            self.cancels
                .send_modify(|count| *count = count.wrapping_add(1));
        };
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
                // A user whose ACL allows the wake channel alone (the rules
                // of earlier releases) still gets its kicks.
                let done = tokio::time::timeout(self.response_timeout, sink.subscribe(&self.done))
                    .await
                    .map_err(|_| timed_out("the subscription"))?;
                match done {
                    Err(error) if error.code() == Some("NOPERM") => {
                        tracing::warn!(queue, %error,
                            "this user may not subscribe to the queue's done channel: \
                             `wait` and cancels rely on polling and lease extensions");
                    }
                    done => done?,
                }
                backoff.reset();
                kick();
                // Cancels announced while it was down: workers look.
                cancelled();
                loop {
                    match tokio::time::timeout(self.ping_after, messages.next()).await {
                        Ok(Some(message)) if message.get_channel_name() == self.done => {
                            let payload = message.get_payload_bytes();
                            match payload.first() {
                                Some(b'c') => cancelled(),
                                Some(b'f') => {
                                    for id in finished_ids(&payload[1..]) {
                                        // No receiver: nobody waits.
                                        let _ = self.finishes.send(id);
                                    }
                                }
                                _ => {}
                            }
                        }
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

/// The ids of a finish announcement: `<length>:<id>` each (an id may hold
/// any byte); what does not read so ends the list.
fn finished_ids(mut rest: &[u8]) -> Vec<Arc<str>> {
    let mut ids = Vec::new();
    while let Some(colon) = rest.iter().position(|&b| b == b':') {
        let Some(len) = std::str::from_utf8(&rest[..colon])
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
        else {
            break;
        };
        let Some(id) = rest.get(colon + 1..colon + 1 + len) else {
            break;
        };
        ids.push(Arc::from(String::from_utf8_lossy(id).as_ref()));
        rest = &rest[colon + 1 + len..];
    }
    ids
}

fn timed_out(what: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer to {what} in time"),
    ))
}
