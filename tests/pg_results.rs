#![cfg(feature = "postgres")]
//! What the PostgreSQL store keeps of finished entries and of its health,
//! as only PostgreSQL can show it: results, a cancel, the history and a
//! paused schedule survive a SIGKILL and restart of a private server
//! (`tests/common/pg_server.rs`); a schema of VERSION 7 is upgraded with
//! its entries and schedules; results past their time are neither read nor
//! kept; a finish notifies nothing while no one waits.

mod common;
#[path = "common/pg_server.rs"]
mod pg_server;

use common::pg::PgDb;
use pg_server::PgServer;
use punctual::MissedTicks;
use punctual::durable::{Finished, Outcome, Worker};
use punctual::postgres::PgQueue;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::block_in_place;
use tokio::time::{Instant, sleep};

const HOUR: Duration = Duration::from_secs(3600);
const PATIENCE: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn schema() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "pr{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn open(url: &str, schema: &str, name: &str, keep: Duration) -> PgQueue<u64> {
    PgQueue::builder(name)
        .url(url)
        .schema(schema)
        .lease(Duration::from_secs(5))
        .poll_interval(ms(100))
        .keep_results(keep)
        .build()
        .await
        .expect("build")
}

/// `call` until it succeeds (the pool's first calls after a restart may
/// meet connections that died with the server), within [`PATIENCE`].
async fn second_try<R, E: std::fmt::Debug, F: Future<Output = Result<R, E>>>(
    what: &str,
    mut call: impl FnMut() -> F,
) -> R {
    let until = Instant::now() + PATIENCE;
    loop {
        match call().await {
            Ok(r) => return r,
            Err(e) if Instant::now() < until => {
                let _ = e;
                sleep(ms(100)).await;
            }
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
}

/// Results (done with an output, dead, cancelled), the history and a
/// paused schedule are written durably by the statements that made them:
/// a SIGKILL of the server and a restart keep them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_history_and_paused_schedules_survive_a_kill_9_and_restart() {
    let mut server = block_in_place(PgServer::start);
    let url = server.url();
    let schema = schema();
    let q = open(&url, &schema, "kept", HOUR).await;
    let since = q.now().await.unwrap() - Duration::from_secs(1);
    let done = q.insert(&1, Duration::ZERO).await.unwrap();
    let dead = q.insert(&2, Duration::ZERO).await.unwrap();
    let cancelled = q.insert(&3, HOUR).await.unwrap();
    assert!(q.cancel(&cancelled).await.unwrap());
    assert!(
        q.schedule_every("nightly", HOUR, MissedTicks::Skip, &9)
            .await
            .unwrap()
    );
    assert!(q.pause_schedule("nightly").await.unwrap());
    let worker = Worker::builder(q.clone()).spawn(|job: punctual::durable::Job<u64>| async move {
        match *job.value() {
            1 => Outcome::done_with(&"ok"),
            _ => Outcome::discard("no"),
        }
    });
    let result = q.wait(&done, PATIENCE).await.unwrap().expect("done");
    assert_eq!(result.output_as::<String>().unwrap().as_deref(), Some("ok"));
    q.wait(&dead, PATIENCE).await.unwrap().expect("dead");
    worker.shutdown(ms(100)).await;

    block_in_place(|| server.kill());
    block_in_place(|| server.restart());

    let result = second_try("result after the restart", || q.result(&done))
        .await
        .unwrap();
    assert_eq!((result.state, result.attempts), (Finished::Done, 1));
    assert_eq!(result.output_as::<String>().unwrap().as_deref(), Some("ok"));
    let result = q.result(&dead).await.unwrap().unwrap();
    assert_eq!(
        (result.state, result.reason.as_deref()),
        (Finished::Dead, Some("no"))
    );
    let result = q.result(&cancelled).await.unwrap().unwrap();
    assert_eq!(result.state, Finished::Cancelled);
    let minutes = q.history(since).await.unwrap();
    let sum = |f: fn(&punctual::durable::Minute) -> u64| minutes.iter().map(f).sum::<u64>();
    assert_eq!(
        (sum(|m| m.inserted), sum(|m| m.done), sum(|m| m.dead)),
        (4, 1, 1),
        "{minutes:?}"
    );
    let info = q.schedules().await.unwrap().remove(0);
    assert!(info.paused, "{info:?}");
    assert!(
        info.next.is_some(),
        "a parked tick keeps its instant: {info:?}"
    );
    // A dead letter's errors survive too.
    let info = q.entry(&dead).await.unwrap().unwrap();
    assert_eq!(info.errors.len(), 1);
    // Requeued, its result is gone: its next finish is the one to wait for.
    assert_eq!(q.requeue_all_dead(HOUR).await.unwrap(), 1);
    assert_eq!(q.result(&dead).await.unwrap(), None);
    assert!(q.entry(&dead).await.unwrap().unwrap().errors.is_empty());
}

/// A schema of VERSION 7 (no results, waits, cancels, workers, schedule
/// runs or minutes; entries and schedules without the new columns) is
/// upgraded by `build`,
/// its entries, leases and schedules kept, and everything new works on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_at_version_7_migrates_to_8_with_its_entries() {
    let db = PgDb::new();
    let schema = schema();
    let s = format!("\"{schema}\"");
    let q = open(&db.url(), &schema, "old", Duration::ZERO).await;
    q.insert_with_id("pending", &1, HOUR).await.unwrap();
    q.insert_with_id("leased", &2, Duration::ZERO)
        .await
        .unwrap();
    let held = q.take().await.unwrap();
    assert!(
        q.schedule_every("tick", HOUR, MissedTicks::Skip, &3)
            .await
            .unwrap()
    );
    // Back to what VERSION 7 had.
    db.psql(&format!(
        "DROP TABLE {s}.results, {s}.waits, {s}.cancels, {s}.workers, {s}.minutes, \
         {s}.schedule_runs; \
         ALTER TABLE {s}.entries DROP COLUMN trace, DROP COLUMN errors, DROP COLUMN schedule; \
         ALTER TABLE {s}.schedules DROP COLUMN paused; \
         DROP FUNCTION {s}.lookup(text, text, bigint); \
         UPDATE {s}.meta SET version = 7"
    ));
    let q = open(&db.url(), &schema, "old", HOUR).await;
    assert_eq!(db.psql(&format!("SELECT max(version) FROM {s}.meta")), "8");
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.leased), (2, 1), "{stats:?}");
    // The lease taken before the upgrade is still held: a cancel revokes
    // it and keeps its result.
    assert!(q.cancel("leased").await.unwrap());
    assert!(!held.ack().await.unwrap(), "acked after its cancel");
    let result = q.result("leased").await.unwrap().unwrap();
    assert_eq!((result.state, result.attempts), (Finished::Cancelled, 1));
    assert!(q.cancel("pending").await.unwrap());
    assert_eq!(
        q.result("pending").await.unwrap().unwrap().state,
        Finished::Cancelled
    );
    assert!(q.pause_schedule("tick").await.unwrap());
    assert!(q.schedules().await.unwrap()[0].paused);
    assert!(q.resume_schedule("tick").await.unwrap());
    assert!(q.latency().await.unwrap().is_none());
}

/// A result is read until its time and no longer; the writes of later
/// results delete those past their time (no sweeper); without
/// keep_results nothing is written.
#[tokio::test]
async fn results_past_their_time_are_neither_read_nor_kept() {
    let db = PgDb::new();
    let schema = schema();
    let s = format!("\"{schema}\"");
    let short = open(&db.url(), &schema, "short", ms(300)).await;
    let first = short.insert(&1, Duration::ZERO).await.unwrap();
    assert!(short.take().await.unwrap().ack().await.unwrap());
    assert!(short.result(&first).await.unwrap().is_some());
    sleep(ms(400)).await;
    assert!(
        short.result(&first).await.unwrap().is_none(),
        "read after its time"
    );
    let count = |db: &PgDb| db.psql(&format!("SELECT count(*) FROM {s}.results"));
    assert_eq!(count(&db), "1", "kept until a later write");
    let second = short.insert(&2, HOUR).await.unwrap();
    assert!(short.cancel(&second).await.unwrap());
    assert_eq!(
        count(&db),
        "1",
        "the later write deleted the one past its time"
    );
    let unkept = open(&db.url(), &schema, "unkept", Duration::ZERO).await;
    let id = unkept.insert(&3, Duration::ZERO).await.unwrap();
    assert!(unkept.take().await.unwrap().ack().await.unwrap());
    assert!(
        unkept
            .cancel(&unkept.insert(&4, HOUR).await.unwrap())
            .await
            .unwrap()
    );
    assert_eq!(count(&db), "1", "written without keep_results");
    assert!(unkept.result(&id).await.unwrap().is_none());
}

/// A finish notifies its id only while a wait looks for it: the drain
/// of a queue no one waits on sends no notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_notifies_only_the_ids_waited_for() {
    use punctual::postgres::sqlx::postgres::PgListener;
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db.url(), &schema, "quiet", HOUR).await;
    let channel = db.psql(&format!(
        "SELECT 'punctual_' || md5('{schema}' || '.' || 'quiet')"
    ));
    let mut listener = PgListener::connect(&db.url()).await.unwrap();
    listener.listen(&channel).await.unwrap();
    let ids = q
        .insert_many(&[(1, Duration::ZERO), (2, Duration::ZERO), (3, HOUR)])
        .await
        .unwrap();
    for _ in 0..2 {
        assert!(q.take().await.unwrap().ack().await.unwrap());
    }
    // Only announcements of heads: no 'f' payload.
    while let Ok(Ok(Some(n))) = tokio::time::timeout(ms(300), listener.try_recv()).await {
        assert!(!n.payload().starts_with('f'), "{}", n.payload());
    }
    let waiter = tokio::spawn({
        let (q, id) = (q.clone(), ids[2].clone());
        async move { q.wait(&id, PATIENCE).await.unwrap() }
    });
    sleep(ms(300)).await;
    assert!(q.reset(&ids[2], Duration::ZERO).await.unwrap());
    assert!(q.take().await.unwrap().ack().await.unwrap());
    let mut pushed = false;
    while let Ok(Ok(Some(n))) = tokio::time::timeout(ms(1000), listener.try_recv()).await {
        if n.payload() == format!("f{}", ids[2]) {
            pushed = true;
            break;
        }
    }
    assert!(pushed, "no push for the id waited for");
    assert_eq!(waiter.await.unwrap().unwrap().state, Finished::Done);
}

/// A tick's last run is recorded while another transaction holds its
/// schedule's row (as `schedule`, `unschedule` and `pause_schedule` do
/// before they lock the tick): the ack neither waits for that row nor
/// loses the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticks_last_run_is_kept_while_its_schedules_row_is_held() {
    use punctual::postgres::sqlx;
    let db = PgDb::new();
    let schema = schema();
    let q = open(&db.url(), &schema, "runs", Duration::ZERO).await;
    assert!(
        q.schedule_every("tick", ms(100), MissedTicks::Skip, &1)
            .await
            .unwrap()
    );
    let other = sqlx::PgPool::connect(&db.url()).await.unwrap();
    let mut holder = other.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM \"{schema}\".schedules WHERE queue = 'runs' AND name = 'tick' FOR UPDATE"
    ))
    .execute(&mut *holder)
    .await
    .unwrap();
    let tick = q.take().await.unwrap();
    let acked = tokio::time::timeout(PATIENCE, tick.ack()).await;
    assert!(
        acked
            .expect("the ack waited for the schedule's row")
            .unwrap()
    );
    holder.commit().await.unwrap();
    let info = q.schedules().await.unwrap().remove(0);
    assert_eq!(info.last_outcome, Some(Finished::Done), "{info:?}");
    assert!(info.last_run.is_some(), "{info:?}");
}
