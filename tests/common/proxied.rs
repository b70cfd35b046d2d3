//! Stores whose server a fault proxy (`proxy.rs`) can stand in front of,
//! for the store-neutral fault tests.

use super::proxy::Proxy;
use super::wait::ms;

/// A store whose server a proxy can stand in front of.
pub trait Proxied {
    type Builder;
    /// The port of the store's server.
    fn upstream_port(&self) -> u16;
    /// A builder of queue `name` (`u64`), as `Store::builder` configures it
    /// (lease, poll interval, schema), connecting through `proxy`, with a
    /// response timeout of 3 s.
    fn via(&self, proxy: &Proxy, name: &str) -> Self::Builder;
}

#[cfg(feature = "redis")]
impl Proxied for super::stores::redis::Store {
    type Builder = punctual::redis::RedisQueueBuilder<u64>;

    fn upstream_port(&self) -> u16 {
        self.server.port()
    }

    fn via(&self, proxy: &Proxy, name: &str) -> Self::Builder {
        self.builder(name)
            .url(&proxy.url())
            .response_timeout(ms(3000))
    }
}

#[cfg(feature = "postgres")]
impl Proxied for super::stores::pg::Store {
    type Builder = punctual::postgres::PgQueueBuilder<u64>;

    fn upstream_port(&self) -> u16 {
        super::pg::admin_port()
    }

    fn via(&self, proxy: &Proxy, name: &str) -> Self::Builder {
        self.builder(name)
            .url(&super::pg::proxied_url(proxy.port(), self.db.name()))
            .response_timeout(ms(3000))
    }
}
