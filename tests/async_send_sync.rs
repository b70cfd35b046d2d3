//! Pins the auto traits of every public type.

#![allow(dead_code)]

use punctual::{
    Builder, DelayQueue, JobError, JobHandle, Key, ScheduleError, Scheduler, Stats, StreamNext,
    TakeStream,
};
use std::rc::Rc;

fn send_sync<T: Send + Sync>(_: &T) {}
fn send<T: Send>(_: &T) {}
fn is_debug<T: std::fmt::Debug>() {}

#[test]
fn queue_types_are_send_and_sync() {
    let q: DelayQueue<String> = DelayQueue::new();
    send_sync(&q);
    send_sync(&q.stream());
    let mut stream = q.stream();
    send_sync(&stream.next());
    let key = q.insert(String::new(), std::time::Duration::ZERO);
    send_sync(&key);
    is_debug::<DelayQueue<Rc<()>>>();
    is_debug::<TakeStream<Rc<()>>>();
    is_debug::<StreamNext<'static, Rc<()>>>();
    is_debug::<Key>();
}

#[test]
fn take_futures_are_send() {
    let q: DelayQueue<String> = DelayQueue::new();
    send(&q.take());
    send(&q.take_timeout(std::time::Duration::ZERO));
}

/// `DelayQueue<Rc<_>>` must not be `Send`: this only compiles while that holds.
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

#[test]
fn queue_of_non_send_is_not_send() {
    <DelayQueue<Rc<()>> as AmbiguousIfSend<_>>::some_item();
    <TakeStream<Rc<()>> as AmbiguousIfSend<_>>::some_item();
}

#[test]
fn scheduler_types_are_send_and_sync() {
    fn send_sync_type<T: Send + Sync + std::fmt::Debug>() {}
    fn send_type<T: Send + std::fmt::Debug>() {}
    send_sync_type::<Scheduler>();
    send_sync_type::<Builder>();
    send_sync_type::<JobHandle<String>>();
    send_sync_type::<Stats>();
    send_sync_type::<ScheduleError>();
    send_type::<JobError>();
}

#[tokio::test(start_paused = true)]
async fn scheduler_futures_are_send() {
    let scheduler = Scheduler::new(1);
    send(&scheduler.terminated());
    let handle = scheduler
        .schedule(std::time::Duration::ZERO, async { 1u8 })
        .unwrap();
    send(&handle);
    assert_eq!(handle.await.unwrap(), 1);
}

#[cfg(feature = "redis")]
#[test]
fn redis_types_are_send_and_sync() {
    use punctual::redis::{DeadLetter, Delivery, Error, RedisQueue, RedisQueueBuilder, RedisStats};
    fn types_send_sync<T: Send + Sync>() {}
    types_send_sync::<RedisQueue<String>>();
    types_send_sync::<RedisQueueBuilder<String>>();
    types_send_sync::<Delivery<String>>();
    types_send_sync::<DeadLetter<String>>();
    types_send_sync::<RedisStats>();
    types_send_sync::<Error>();
    // Handles do not need `T: Debug` to be `Debug`; deliveries show the value.
    is_debug::<RedisQueue<Rc<()>>>();
    is_debug::<RedisQueueBuilder<Rc<()>>>();
    is_debug::<Delivery<String>>();
    is_debug::<Error>();

    async fn futures_are_send(q: RedisQueue<String>) {
        send(&q.insert(&String::new(), std::time::Duration::ZERO));
        send(&q.take());
        send(&q.take_timeout(std::time::Duration::ZERO));
        send(&q.try_take());
        send(&q.take_many(2));
        send(&q.stream());
        send(&q.stats());
        let delivery = q.take().await.unwrap();
        send(&delivery.ack());
    }
    let _ = futures_are_send;
}

#[cfg(feature = "redis")]
#[test]
fn durable_types_are_send_and_sync() {
    use punctual::durable::{Backoff, Job, ScheduleInfo, Worker, WorkerBuilder, WorkerStats};
    use punctual::redis::RedisQueue;
    fn types_send_sync<T: Send + Sync>() {}
    types_send_sync::<Worker>();
    types_send_sync::<WorkerBuilder<RedisQueue<String>>>();
    types_send_sync::<Job<String>>();
    types_send_sync::<Backoff>();
    types_send_sync::<WorkerStats>();
    types_send_sync::<ScheduleInfo<String>>();
    is_debug::<Worker>();
    is_debug::<WorkerBuilder<RedisQueue<Rc<()>>>>();
    is_debug::<Job<String>>();
    is_debug::<Backoff>();
    is_debug::<WorkerStats>();
    is_debug::<ScheduleInfo<String>>();

    async fn futures_are_send(q: RedisQueue<String>, w: Worker) {
        send(&q.insert_many(&[]));
        send(&q.schedule_every(
            "s",
            std::time::Duration::from_secs(1),
            punctual::MissedTicks::Skip,
            &String::new(),
        ));
        send(&q.unschedule("s"));
        send(&q.schedules());
        send(&w.shutdown(std::time::Duration::ZERO));
    }
    let _ = futures_are_send;
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_types_are_send_and_sync() {
    use punctual::durable::{Worker, WorkerBuilder};
    use punctual::postgres::{DeadLetter, Delivery, Error, PgQueue, PgQueueBuilder, PgStats};
    fn types_send_sync<T: Send + Sync>() {}
    types_send_sync::<PgQueue<String>>();
    types_send_sync::<PgQueueBuilder<String>>();
    types_send_sync::<Delivery<String>>();
    types_send_sync::<DeadLetter<String>>();
    types_send_sync::<PgStats>();
    types_send_sync::<Error>();
    types_send_sync::<WorkerBuilder<PgQueue<String>>>();
    is_debug::<PgQueue<Rc<()>>>();
    is_debug::<PgQueueBuilder<Rc<()>>>();
    is_debug::<Delivery<String>>();
    is_debug::<Error>();
    is_debug::<WorkerBuilder<PgQueue<Rc<()>>>>();

    async fn futures_are_send(q: PgQueue<String>, tx: &mut punctual::postgres::sqlx::PgConnection) {
        send(&q.insert(&String::new(), std::time::Duration::ZERO));
        send(&q.take());
        send(&q.take_timeout(std::time::Duration::ZERO));
        send(&q.try_take());
        send(&q.take_many(2));
        send(&q.stream());
        send(&q.stats());
        send(&q.insert_many(&[]));
        send(&q.schedules());
        send(&q.insert_in(tx, &String::new(), std::time::Duration::ZERO));
        send(&PgQueue::<String>::builder("q").build());
        send(&PgQueue::<String>::connect("postgres://localhost/", "q"));
        let delivery = q.take().await.unwrap();
        send(&delivery.ack());
        let _ = Worker::builder(q);
    }
    let _ = futures_are_send;
}

#[test]
fn memory_and_store_neutral_types_are_send_and_sync() {
    use punctual::durable::{
        Cursor, DeadLetter, Durable, EntryInfo, EntryState, Outcome, Page, QueueStats, Worker,
        WorkerBuilder,
    };
    use punctual::memory::{Delivery, Error, MemoryQueue, MemoryQueueBuilder, MemoryStats};
    fn types_send_sync<T: Send + Sync>() {}
    types_send_sync::<MemoryQueue<String>>();
    types_send_sync::<MemoryQueueBuilder<String>>();
    types_send_sync::<Delivery<String>>();
    types_send_sync::<DeadLetter<String>>();
    types_send_sync::<MemoryStats>();
    types_send_sync::<QueueStats>();
    types_send_sync::<Error>();
    types_send_sync::<Outcome>();
    types_send_sync::<WorkerBuilder<MemoryQueue<String>>>();
    is_debug::<MemoryQueue<Rc<()>>>();
    is_debug::<MemoryQueueBuilder<Rc<()>>>();
    is_debug::<Delivery<String>>();
    is_debug::<DeadLetter<String>>();
    is_debug::<Error>();
    is_debug::<Outcome>();
    is_debug::<QueueStats>();
    types_send_sync::<EntryInfo<String>>();
    types_send_sync::<Page<String>>();
    types_send_sync::<Cursor>();
    types_send_sync::<EntryState>();
    is_debug::<EntryInfo<String>>();
    is_debug::<Page<String>>();
    is_debug::<Cursor>();

    async fn futures_are_send(q: MemoryQueue<String>) {
        send(&q.insert(&String::new(), std::time::Duration::ZERO));
        send(&q.take());
        send(&q.take_timeout(std::time::Duration::ZERO));
        send(&q.try_take());
        send(&q.take_many(2));
        send(&q.stream());
        send(&q.stats());
        send(&q.insert_many(&[]));
        send(&q.schedules());
        let delivery = q.take().await.unwrap();
        send(&delivery.ack());
        let _ = Worker::builder(q);
    }
    /// Every method of the store-neutral trait returns a `Send` future.
    async fn durable_futures_are_send<Q: Durable<Item = String>>(q: Q) {
        let v = String::new();
        let d = std::time::Duration::ZERO;
        send(&q.now());
        send(&q.insert(&v, d));
        send(&q.insert_with_id("a", &v, d));
        send(&q.remove("a"));
        send(&q.stats());
        send(&q.schedules());
        send(&q.requeue_dead("a", d));
        send(&q.entries(EntryState::Dead, None, 10));
        send(&q.entry("a"));
        send(&q.pause());
        send(&q.run_now("a"));
        send(&q.clear_dead());
    }
    let _ = futures_are_send;
    let _ = durable_futures_are_send::<MemoryQueue<String>>;
}

fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>(_: &T) {}

/// A queue and a scheduler can be used across `catch_unwind`, as with the
/// `std` mutexes they were first built on.
#[test]
fn queue_and_scheduler_are_unwind_safe() {
    let q: DelayQueue<String> = DelayQueue::new();
    unwind_safe(&q);
    let key = q.insert(String::new(), std::time::Duration::ZERO);
    unwind_safe(&key);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    unwind_safe(&Scheduler::new(1));
}
