//! Store-neutral test bodies: one body per behaviour, run against every
//! durable store, so the stores cannot drift apart.
//!
//! ```ignore
//! common::stores::on_every_store! {
//!     #[tokio::test]
//!     async fn ack_deletes_the_entry() {
//!         let store = Store::start();
//!         let q: Q<u64> = store.open("ack").await;
//!         // ...
//!     }
//! }
//! ```
//!
//! expands to a module per store (`redis_store`, `pg_store`, each behind its
//! cargo feature), each seeing the test file's imports and its store's
//! [`Store`], `Q<T>`, `Builder<T>`, `Stats`, `Error` and `Delivery<T>`.
//! Times are real: the store's clock decides what is due.

#![allow(dead_code, unused_imports)]

use std::time::Duration;

/// The lease of the queues that `Store::open` makes.
pub const LEASE: Duration = Duration::from_millis(300);
/// The poll interval of the queues that `Store::open` makes.
pub const POLL: Duration = Duration::from_millis(50);

#[allow(unused_macros)]
macro_rules! on_every_store {
    ($($item:item)*) => {
        mod memory_store {
            #![allow(unused_imports)]
            use super::*;
            use crate::common::stores::memory::*;
            $($item)*
        }
        #[cfg(feature = "redis")]
        mod redis_store {
            #![allow(unused_imports)]
            use super::*;
            use crate::common::stores::redis::*;
            $($item)*
        }
        #[cfg(feature = "postgres")]
        mod pg_store {
            #![allow(unused_imports)]
            use super::*;
            use crate::common::stores::pg::*;
            $($item)*
        }
    };
}
pub(crate) use on_every_store;

/// As [`on_every_store!`], on the stores across a network only (Redis,
/// PostgreSQL), in modules `on_redis` and `on_postgres`: for what the
/// memory store cannot have (a server to restart or cut off, a process
/// killed holding a lease, raw stored bytes).
#[allow(unused_macros)]
macro_rules! on_durable_stores {
    ($($item:item)*) => {
        #[cfg(feature = "redis")]
        mod on_redis {
            #![allow(unused_imports)]
            use super::*;
            use crate::common::stores::redis::*;
            $($item)*
        }
        #[cfg(feature = "postgres")]
        mod on_postgres {
            #![allow(unused_imports)]
            use super::*;
            use crate::common::stores::pg::*;
            $($item)*
        }
    };
}
pub(crate) use on_durable_stores;

/// The memory store: queues of one `Store` are found by name, as on a
/// server (a second `open` of a name joins the first one's queue, with its
/// own settings).
pub mod memory {
    use super::LEASE;
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    pub use punctual::memory::{
        DeadLetter, Delivery, Error, MemoryQueue as Q, MemoryStats as Stats,
    };

    /// The store's name, for messages.
    pub const STORE: &str = "memory";

    type Registry = Arc<Mutex<HashMap<String, Q<serde_json::Value>>>>;

    /// The queues of one test, by name.
    #[derive(Default)]
    pub struct Store {
        pub queues: Registry,
    }

    /// A memory queue's builder that joins the queue of its name, if the
    /// store has one.
    pub struct Builder<T> {
        queues: Registry,
        name: String,
        inner: punctual::memory::MemoryQueueBuilder<T>,
    }

    impl<T> Builder<T>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        pub fn lease(mut self, lease: Duration) -> Self {
            self.inner = self.inner.lease(lease);
            self
        }

        pub fn max_attempts(mut self, n: u32) -> Self {
            self.inner = self.inner.max_attempts(n);
            self
        }

        pub fn dead_max_age(mut self, age: Duration) -> Self {
            self.inner = self.inner.dead_max_age(age);
            self
        }

        pub fn dead_max_count(mut self, n: u64) -> Self {
            self.inner = self.inner.dead_max_count(n);
            self
        }

        pub fn keep_results(mut self, for_: Duration) -> Self {
            self.inner = self.inner.keep_results(for_);
            self
        }

        /// (No polling in memory: every change wakes the consumers.)
        pub fn poll_interval(self, _every: Duration) -> Self {
            self
        }

        pub async fn build(self) -> Result<Q<T>, Error> {
            let mut queues = self.queues.lock().unwrap();
            let queue = match queues.get(&self.name) {
                Some(first) => self.inner.join(first).build(),
                None => {
                    let queue = self.inner.build();
                    queues.insert(self.name, queue.typed());
                    queue
                }
            };
            Ok(queue)
        }
    }

    impl Store {
        pub fn start() -> Store {
            Store::default()
        }

        /// A builder for queue `name`, with `LEASE`.
        pub fn builder<T>(&self, name: &str) -> Builder<T>
        where
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
        {
            Builder {
                queues: Arc::clone(&self.queues),
                name: name.to_owned(),
                inner: Q::builder(name).lease(LEASE),
            }
        }

        /// Queue `name`, as `builder` configures it.
        pub async fn open<T>(&self, name: &str) -> Q<T>
        where
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
        {
            self.builder(name).build().await.expect("open")
        }
    }
}

#[cfg(feature = "redis")]
pub mod redis {
    use super::{LEASE, POLL};
    use crate::common::redis_server::RedisServer;
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    pub use punctual::redis::{
        DeadLetter, Delivery, Error, RedisQueue as Q, RedisQueueBuilder as Builder,
        RedisStats as Stats,
    };

    /// The store's name, for messages.
    pub const STORE: &str = "redis";

    /// A throwaway redis-server for one test.
    pub struct Store {
        pub server: RedisServer,
    }

    impl Store {
        pub fn start() -> Store {
            Store {
                server: RedisServer::start(),
            }
        }

        /// A builder for queue `name`, with `LEASE` and `POLL`.
        pub fn builder<T>(&self, name: &str) -> Builder<T>
        where
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
        {
            Q::builder(name)
                .url(&self.server.url())
                .lease(LEASE)
                .poll_interval(POLL)
        }

        /// Queue `name`, as `builder` configures it.
        pub async fn open<T>(&self, name: &str) -> Q<T>
        where
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
        {
            self.builder(name).build().await.expect("connect")
        }

        /// The URL a child process opens the queue with.
        pub fn url(&self) -> String {
            self.server.url()
        }
    }
}

#[cfg(feature = "postgres")]
pub mod pg {
    use super::{LEASE, POLL};
    use crate::common::pg::PgDb;
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    pub use punctual::postgres::{
        DeadLetter, Delivery, Error, PgQueue as Q, PgQueueBuilder as Builder, PgStats as Stats,
    };

    /// The store's name, for messages.
    pub const STORE: &str = "postgres";

    /// This test binary's database, and a schema of this test's own (so
    /// tests that use the same queue names do not meet).
    pub struct Store {
        pub db: PgDb,
        pub schema: String,
    }

    impl Store {
        pub fn start() -> Store {
            use std::sync::atomic::{AtomicU64, Ordering};
            static NEXT: AtomicU64 = AtomicU64::new(0);
            Store {
                db: PgDb::new(),
                schema: format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            }
        }

        /// A builder for queue `name`, with `LEASE` and `POLL`.
        pub fn builder<T>(&self, name: &str) -> Builder<T>
        where
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
        {
            Q::builder(name)
                .url(&self.db.url())
                .schema(&self.schema)
                .lease(LEASE)
                .poll_interval(POLL)
        }

        /// Queue `name`, as `builder` configures it.
        pub async fn open<T>(&self, name: &str) -> Q<T>
        where
            T: Serialize + DeserializeOwned + Send + Sync + 'static,
        {
            self.builder(name).build().await.expect("connect")
        }

        /// The URL a child process opens the queue with (its schema is
        /// `self.schema`).
        pub fn url(&self) -> String {
            self.db.url()
        }
    }
}
