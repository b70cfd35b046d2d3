//! Helpers shared by the integration tests.
//!
//! Each test binary uses only some of them.

#![allow(dead_code)]

/// xorshift64*: deterministic per seed, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n` for test inputs.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A value whose `Drop` panics (unless the thread is already unwinding,
/// which would abort): a hostile user value for containment tests.
pub struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("bomb went off");
        }
    }
}

pub mod ledger;
#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub mod proxied;
pub mod proxy;
pub mod redis_cluster;
#[cfg(feature = "redis")]
pub mod redis_queue;
pub mod redis_server;
pub mod stores;
pub mod tls;
pub mod wait;
