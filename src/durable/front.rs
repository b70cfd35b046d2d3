//! The public methods that every store's queue has alike, written once:
//! inserts with options and key limits. Each checks its arguments here and
//! calls what its store does differently (`insert_plans`, `put_limit`,
//! `read_limits`: a step on the memory state, a Lua script, an SQL
//! function), so a new option lands here once and once per store's script
//! or statement.

/// Implements the shared methods for a store's queue `$queue` (its `Error`
/// in scope). `$attr` marks the examples (`no_run` where a server is
/// needed); `$open` is the example's hidden set-up: an async `main`
/// returning the store's `Result` and a `queue: $queue<String>`.
macro_rules! jobs_front {
    ($queue:ident, $attr:literal, $open:literal) => {
        impl<T> $queue<T>
        where
            T: ::serde::Serialize + ::serde::de::DeserializeOwned + Send + Sync + 'static,
        {
            /// Inserts `value` as `options` say: when it is due, under
            /// which id, its priority and key, its own `max_attempts`, a
            /// unique window, a replace (see
            /// [`InsertOptions`](crate::durable::InsertOptions)). `Some(id)`
            /// when it inserted (or replaced a pending entry); `None` when it
            /// was refused: an entry has that id (leased, dead, or pending
            /// without `replace`), or the id's unique window is open.
            ///
            /// # Errors
            ///
            /// `InvalidId` for an id or key the id rules refuse, or for
            /// `unique_for` or `replace` without an id (the message names the
            /// option); `Encode` if the value does not serialize; the
            /// store's own error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::durable::InsertOptions;
            /// use std::time::Duration;
            #[doc = $open]
            /// // Re-index 2 s after the last edit, not on every keystroke.
            /// let later = InsertOptions::new()
            ///     .id("reindex:doc-7")
            ///     .delay(Duration::from_secs(2))
            ///     .replace(true);
            /// assert!(queue.insert_with(&"edit 1".into(), &later).await?.is_some());
            /// assert!(queue.insert_with(&"edit 2".into(), &later).await?.is_some());
            /// assert_eq!(queue.stats().await?.pending, 1);
            /// # Ok(()) }
            /// ```
            pub async fn insert_with(
                &self,
                value: &T,
                options: &$crate::durable::InsertOptions,
            ) -> Result<Option<String>, Error> {
                let json = ::serde_json::to_string(value).map_err(Error::Encode)?;
                let plan = options.plan(json).map_err(Error::InvalidId)?;
                Ok(self.insert_plans(vec![plan]).await?.pop().flatten())
            }

            /// Inserts many entries as [`insert_with`](Self::insert_with)
            /// does, in one step and one round trip, each answered in order
            /// (`Some(id)`, or `None` where refused). An entry whose id an
            /// earlier entry of the same call took is refused, unless it has
            /// `replace` (then it replaces that one). An empty slice is
            /// `Ok(vec![])`.
            ///
            /// # Errors
            ///
            /// As [`insert_with`](Self::insert_with), for any entry: then
            /// nothing is inserted.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::durable::InsertOptions;
            #[doc = $open]
            /// let imports: Vec<(String, InsertOptions)> = (0..3)
            ///     .map(|n| (format!("row {n}"), InsertOptions::new().key("tenant-a")))
            ///     .collect();
            /// let ids = queue.insert_many_with(&imports).await?;
            /// assert!(ids.iter().all(Option::is_some));
            /// # Ok(()) }
            /// ```
            pub async fn insert_many_with(
                &self,
                entries: &[(T, $crate::durable::InsertOptions)],
            ) -> Result<Vec<Option<String>>, Error> {
                if entries.is_empty() {
                    return Ok(Vec::new());
                }
                let plans = entries
                    .iter()
                    .map(|(value, options)| {
                        let json = ::serde_json::to_string(value).map_err(Error::Encode)?;
                        options.plan(json).map_err(Error::InvalidId)
                    })
                    .collect::<Result<Vec<_>, Error>>()?;
                self.insert_plans(plans).await
            }

            /// Sets the limits the entries of `key` run under (an upsert;
            /// see [`KeyLimit`](crate::durable::KeyLimit)); `true` if it
            /// created or changed them. Kept in the store: every consumer
            /// in every process follows it from its next claim. The key
            /// `*` is the default ([`set_default_key_limit`](Self::set_default_key_limit)).
            ///
            /// # Errors
            ///
            /// `InvalidId` for a key the id rules refuse; `InvalidLimit`
            /// for a rate whose period is zero; the store's own error if it
            /// cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::durable::{KeyLimit, Rate};
            /// use std::time::Duration;
            #[doc = $open]
            /// // At most 5 calls at once to the payment provider, 100 a minute.
            /// let limit = KeyLimit {
            ///     concurrency: Some(5),
            ///     rate: Some(Rate { max: 100, per: Duration::from_secs(60) }),
            /// };
            /// assert!(queue.set_key_limit("payments", limit).await?);
            /// assert!(!queue.set_key_limit("payments", limit).await?); // no change
            /// assert_eq!(queue.key_limits().await?, [("payments".to_owned(), limit)]);
            /// # Ok(()) }
            /// ```
            pub async fn set_key_limit(
                &self,
                key: &str,
                limit: $crate::durable::KeyLimit,
            ) -> Result<bool, Error> {
                if let Some(why) = $crate::durable::options::key_problem(key) {
                    return Err(Error::InvalidId(why));
                }
                limit.encode().map_err(Error::InvalidLimit)?;
                self.put_limit(key, Some(limit)).await
            }

            /// Sets the limits of every key that has none of its own (kept
            /// under the key `*`); entries without a key are never
            /// limited.
            ///
            /// # Errors
            ///
            /// As [`set_key_limit`](Self::set_key_limit).
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::durable::KeyLimit;
            #[doc = $open]
            /// // One sync per account at a time, for every account.
            /// let one = KeyLimit { concurrency: Some(1), rate: None };
            /// assert!(queue.set_default_key_limit(one).await?);
            /// assert_eq!(queue.key_limits().await?, [("*".to_owned(), one)]);
            /// # Ok(()) }
            /// ```
            pub async fn set_default_key_limit(
                &self,
                limit: $crate::durable::KeyLimit,
            ) -> Result<bool, Error> {
                self.set_key_limit($crate::durable::options::DEFAULT_KEY, limit)
                    .await
            }

            /// Removes the limits of `key` (`*`: the default); `true` if it
            /// had some. Its entries then run under the default, if any.
            ///
            /// # Errors
            ///
            /// As [`set_key_limit`](Self::set_key_limit).
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::durable::KeyLimit;
            #[doc = $open]
            /// let two = KeyLimit { concurrency: Some(2), rate: None };
            /// queue.set_key_limit("tenant-a", two).await?;
            /// assert!(queue.remove_key_limit("tenant-a").await?);
            /// assert!(!queue.remove_key_limit("tenant-a").await?);
            /// # Ok(()) }
            /// ```
            pub async fn remove_key_limit(&self, key: &str) -> Result<bool, Error> {
                if let Some(why) = $crate::durable::options::key_problem(key) {
                    return Err(Error::InvalidId(why));
                }
                self.put_limit(key, None).await
            }

            /// Every key limit of the queue, by key (the default under
            /// `*`).
            ///
            /// # Errors
            ///
            /// The store's own error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            #[doc = $open]
            /// assert!(queue.key_limits().await?.is_empty());
            /// # Ok(()) }
            /// ```
            pub async fn key_limits(
                &self,
            ) -> Result<Vec<(String, $crate::durable::KeyLimit)>, Error> {
                self.read_limits().await
            }

            /// What became of entry `id`, if its result is kept: the queue
            /// keeps one for `keep_results` (a builder setting; default 0:
            /// none) after an entry finishes (acked, dead-lettered,
            /// cancelled). `None` otherwise (not finished, not kept, or
            /// expired).
            ///
            /// # Errors
            ///
            /// `InvalidId` for an id the id rules refuse; the store's own
            /// error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            #[doc = $open]
            /// if let Some(done) = queue.result("invoice-42").await? {
            ///     println!("{}: {} at {:?}", done.id, done.state, done.finished_at);
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn result(
                &self,
                id: &str,
            ) -> Result<Option<$crate::durable::JobResult>, Error> {
                if let Some(why) = $crate::durable::rules::id_problem(id) {
                    return Err(Error::InvalidId(why));
                }
                self.read_result(id).await
            }

            /// Waits until entry `id` finishes, at most `timeout`: its
            /// result at once if it is kept; else as soon as the entry
            /// finishes (the store pushes it; a lost push costs at most the
            /// poll interval), its result if the queue keeps results (else
            /// `None`: the entry is gone); `None` at `timeout`, and at once
            /// for an id with neither a live entry nor a kept result. Any
            /// number of waiters on one handle share its one subscription.
            ///
            /// # Errors
            ///
            /// As [`result`](Self::result).
            ///
            /// # Cancel safety
            ///
            /// Dropping the future changes nothing (it only reads).
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use std::time::Duration;
            #[doc = $open]
            /// let id = queue.insert(&"render".into(), Duration::ZERO).await?;
            /// // ... a worker somewhere runs it ...
            /// match queue.wait(&id, Duration::from_millis(10)).await? {
            ///     Some(result) => println!("{id}: {}", result.state),
            ///     None => println!("{id}: not finished yet"),
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn wait(
                &self,
                id: &str,
                timeout: ::std::time::Duration,
            ) -> Result<Option<$crate::durable::JobResult>, Error> {
                if let Some(why) = $crate::durable::rules::id_problem(id) {
                    return Err(Error::InvalidId(why));
                }
                $crate::durable::results::wait(self, id, timeout).await
            }

            /// Cancels entry `id`: a pending, due or dead entry is removed
            /// (as [`remove`](Self::remove)); a leased one is deleted at once
            /// and its lease revoked: its holder's `ack`, `retry` and
            /// `extend` answer `Ok(false)`, and a [`Worker`](crate::durable::Worker)
            /// holding it learns it by a push (or at its next lease
            /// extension, within a third of the lease), resolves
            /// [`Job::cancelled`](crate::durable::Job::cancelled) and stops the
            /// run at its next await, never to retry it. The result
            /// `Cancelled` is kept where the queue keeps results; a unique
            /// window starts; a schedule's tick is cancelled alone (the
            /// schedule goes on with its next instant). `false` when no
            /// entry has that id.
            ///
            /// # Errors
            ///
            /// As [`result`](Self::result).
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use std::time::Duration;
            #[doc = $open]
            /// let id = queue.insert(&"export".into(), Duration::from_secs(60)).await?;
            /// assert!(queue.cancel(&id).await?);
            /// assert!(!queue.cancel(&id).await?);
            /// # Ok(()) }
            /// ```
            pub async fn cancel(&self, id: &str) -> Result<bool, Error> {
                if let Some(why) = $crate::durable::rules::id_problem(id) {
                    return Err(Error::InvalidId(why));
                }
                self.cancel_entry(id).await
            }

            /// The live workers of the queue: each one's id, name, host,
            /// process, places, the runs it had under way and when each
            /// began, as of its last refresh (its heartbeats refresh it, at
            /// least every `min(lease / 3, 5 s)`); a worker not heard from for
            /// three of those periods, or shut down, is not listed. One round
            /// trip.
            ///
            /// # Errors
            ///
            /// The store's own error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            #[doc = $open]
            /// for worker in queue.workers().await? {
            ///     println!("{} on {} ({} running)", worker.id, worker.host, worker.running.len());
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn workers(&self) -> Result<Vec<$crate::durable::WorkerInfo>, Error> {
                self.read_workers().await
            }

            /// What happened minute by minute since `since` (within the last
            /// 24 hours, by the store's clock): entries inserted, acked,
            /// failed attempts and deaths, oldest first; minutes with no event
            /// are left out. Counted in the same steps as the events
            /// themselves; one round trip.
            ///
            /// # Errors
            ///
            /// The store's own error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use std::time::{Duration, SystemTime};
            #[doc = $open]
            /// let hour_ago = queue.now().await? - Duration::from_secs(3600);
            /// let failed: u64 = queue.history(hour_ago).await?.iter().map(|m| m.failed).sum();
            /// println!("{failed} failed attempts in the last hour");
            /// # let _ = SystemTime::UNIX_EPOCH;
            /// # Ok(()) }
            /// ```
            pub async fn history(
                &self,
                since: ::std::time::SystemTime,
            ) -> Result<Vec<$crate::durable::Minute>, Error> {
                let since = since
                    .duration_since(::std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                self.read_history(since).await
            }

            /// How long the oldest due entry (not leased) has waited: now minus
            /// its due time, by the store's clock; `None` when nothing is due.
            /// One round trip, O(log n).
            ///
            /// # Errors
            ///
            /// The store's own error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use std::time::Duration;
            #[doc = $open]
            /// if queue.latency().await?.is_some_and(|late| late > Duration::from_secs(60)) {
            ///     println!("jobs wait more than a minute: add workers");
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn latency(&self) -> Result<Option<::std::time::Duration>, Error> {
                self.read_latency().await
            }

            /// Pauses schedule `name`: its tick stays pending and is not
            /// delivered (a tick running now runs to its end, retries and
            /// a redelivery after its lease included) until
            /// [`resume_schedule`](Self::resume_schedule); `run_now` runs
            /// one tick of it meanwhile. While paused, the tick counts as
            /// pending in `stats()`, is listed among the pending entries
            /// (after the others) at its instant, also once that instant
            /// has passed, and is left out of `latency()`. `true` if it
            /// changed; `false` if it was paused already or there is no
            /// such schedule.
            ///
            /// # Errors
            ///
            /// `InvalidId` for a name the id rules refuse; the store's own
            /// error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::MissedTicks;
            /// use std::time::Duration;
            #[doc = $open]
            /// queue.schedule_every("sweep", Duration::from_secs(60), MissedTicks::Skip, &"sweep".into()).await?;
            /// assert!(queue.pause_schedule("sweep").await?);
            /// assert!(queue.schedules().await?[0].paused);
            /// assert!(queue.resume_schedule("sweep").await?);
            /// # Ok(()) }
            /// ```
            pub async fn pause_schedule(&self, name: &str) -> Result<bool, Error> {
                if let Some(why) = $crate::durable::rules::id_problem(name) {
                    return Err(Error::InvalidId(why));
                }
                self.put_schedule_paused(name, true).await
            }

            /// Resumes schedule `name`: a tick that came due while it was
            /// paused runs once (late), then the schedule's `MissedTicks`
            /// rule applies at its ack, as after downtime. `true` if it
            /// changed.
            ///
            /// # Errors
            ///
            /// As [`pause_schedule`](Self::pause_schedule).
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            #[doc = $open]
            /// assert!(!queue.resume_schedule("no-such-schedule").await?);
            /// # Ok(()) }
            /// ```
            pub async fn resume_schedule(&self, name: &str) -> Result<bool, Error> {
                if let Some(why) = $crate::durable::rules::id_problem(name) {
                    return Err(Error::InvalidId(why));
                }
                self.put_schedule_paused(name, false).await
            }

            /// As `entries`, but walking the state's order backwards: the
            /// newest first (the dead letters that died last, the entries
            /// due last). Its cursors walk on backwards (a cursor of
            /// `entries` is refused here, and the other way round).
            ///
            /// # Errors
            ///
            /// `InvalidId` for a cursor of another queue, state or
            /// direction; the store's own error if it cannot be reached.
            ///
            /// # Examples
            ///
            #[doc = concat!("```", $attr)]
            /// use punctual::durable::EntryState;
            #[doc = $open]
            /// let latest = queue.entries_newest(EntryState::Dead, None, 20).await?;
            /// for dead in &latest.entries {
            ///     println!("{} died: {:?}", dead.id, dead.last_error);
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn entries_newest(
                &self,
                state: $crate::durable::EntryState,
                cursor: Option<&$crate::durable::Cursor>,
                limit: usize,
            ) -> Result<$crate::durable::Page<T>, Error> {
                self.newest_page(state, cursor, limit).await
            }
        }
    };
}
pub(crate) use jobs_front;
