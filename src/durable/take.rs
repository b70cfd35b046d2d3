//! `take` for every durable store: the Leader-Follower wait loop around the
//! store's claim (see [`wait`](super::wait)).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;

use super::store::{Sealed, Taken};
use super::wait::Backoff;
use crate::queue::deadline_after;

/// How long past a take's `until` a claim in flight may stay unanswered
/// before the take gives it up.
const GIVE_UP_CLAIM_AFTER: Duration = Duration::from_secs(1);

/// Waits until an entry is due, then takes between 1 and `max` due entries
/// in one claim; with `until`, gives up then with an empty vector. Errors a
/// retry can fix are retried with capped back-off and reported through
/// `tracing`; the others end the wait.
///
/// Cancel safety: a claim whose reply was lost is sent again with its
/// token, to get what it leased; if this future ends first (timeout, error,
/// dropped), the store gives that back with the handle's next claim or
/// finish.
pub(crate) async fn take_until<Q: Sealed>(
    store: &Q,
    max: usize,
    until: Option<Instant>,
) -> Result<Vec<Taken<Q::Value, Q::Lease>>, Q::Failure> {
    let waiter = store.waiter();
    let mut lead = None;
    let mut backoff = Backoff::default();
    let mut pending = Abandon(store, store.new_attempt());
    // Set while this process's last claim said nothing is due before then:
    // the consumer waits instead of asking again. Only an insert, reset,
    // retry, requeue or shortened lease can make an entry due earlier, and
    // each announces itself (a kick cuts the leader's nap short).
    let mut known_idle_until = waiter.next_due();
    let mut kicks = waiter.kicks();
    loop {
        let next_due = match known_idle_until.take() {
            Some(next_due) => next_due,
            None => {
                // Announcements from here on cut the nap after this claim.
                kicks.borrow_and_update();
                // A claim still unanswered well after `until` is given up
                // (its reply may be lost on a link that went silent):
                // `pending` gives back what it leased. Not at `until`
                // itself: a short timeout would then never take anything,
                // and the give-back could reach the store before the claim.
                let claim = store.claim(&mut pending.1, max, &[]);
                let reply = match until {
                    Some(until) => match tokio::time::timeout_at(
                        deadline_after(until, GIVE_UP_CLAIM_AFTER),
                        claim,
                    )
                    .await
                    {
                        Ok(reply) => reply,
                        Err(_) => return Ok(Vec::new()),
                    },
                    None => claim.await,
                };
                let batch = match reply {
                    Ok(batch) => {
                        backoff.reset();
                        batch
                    }
                    Err(error) if Q::is_transient(&error) => {
                        let pause = backoff.next();
                        tracing::warn!(queue = %store.queue_name(), %error, ?pause,
                            "store unreachable while taking; retrying");
                        if !sleep_within(pause, until).await {
                            return Ok(Vec::new());
                        }
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                if batch.more_due {
                    // Another consumer of this process can take the rest.
                    waiter.followers.notify_one();
                }
                if !batch.taken.is_empty() {
                    return Ok(batch.taken); // dropping `lead` hands leadership over
                }
                pending.1 = store.new_attempt();
                if batch.more_due {
                    continue;
                }
                batch.next_due
            }
        };
        if lead.is_none() {
            // Enabled before looking at the leader flag: a leader that
            // leaves after we saw it notifies us (see `Lead::drop`).
            let mut parked = pin!(waiter.followers.notified());
            parked.as_mut().enable();
            lead = waiter.try_lead();
            if lead.is_none() {
                if !wait_within(parked, until).await {
                    return Ok(Vec::new());
                }
                // Woken by a leader that left or by a claim that saw more
                // due. Take a vacant lead at once, in this poll: a consumer
                // that then leaves (with an entry, or dropped) wakes the
                // next one through `Lead::drop`, so no follower stays parked
                // with nobody leading.
                lead = waiter.try_lead();
                // An announcement since the last claim left a kick that cuts
                // the nap short, so skipping the claim is safe.
                known_idle_until = waiter.next_due();
                continue;
            }
        }
        // Starts the listener (once per handle).
        drop(store.kicks());
        let nap = next_due
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), store.poll_interval());
        tokio::select! {
            _ = kicks.changed() => {}
            timed_in = sleep_within(nap, until) => if !timed_in {
                return Ok(Vec::new());
            },
        }
    }
}

/// Leaves a claim in doubt to the handle's next claim when dropped: a claim
/// whose reply was lost and that is not sent again gives back what it holds.
pub(crate) struct Abandon<'a, Q: Sealed>(pub(crate) &'a Q, pub(crate) Q::Attempt);

impl<Q: Sealed> Drop for Abandon<'_, Q> {
    fn drop(&mut self) {
        let _ = self.0.abandon(&self.1);
    }
}

/// Sleeps `pause`, but not past `until`; `false` if `until` came first.
pub(crate) async fn sleep_within(pause: Duration, until: Option<Instant>) -> bool {
    let wake = deadline_after(Instant::now(), pause);
    match until {
        Some(until) if until <= wake => {
            tokio::time::sleep_until(until).await;
            false
        }
        _ => {
            tokio::time::sleep_until(wake).await;
            true
        }
    }
}

/// Awaits `parked`, but not past `until`; `false` if `until` came first.
async fn wait_within(parked: impl Future<Output = ()>, until: Option<Instant>) -> bool {
    match until {
        None => {
            parked.await;
            true
        }
        Some(until) => tokio::time::timeout_at(until, parked).await.is_ok(),
    }
}
