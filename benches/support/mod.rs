//! Helpers shared by the bench binaries: a seeded RNG, memory readings, the
//! medians Criterion stored, the side-by-side table, numbers from the
//! environment, and the wait for a worker's drain. (`drain.rs` keeps its
//! own copies: it is built at older commits too.)

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// xorshift64*: cheap, seeded, good enough to shuffle bench inputs.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// Counts the bytes currently requested from the allocator.
pub struct CountingAlloc;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; the counter is only
// bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

pub fn allocated_bytes() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// Resident set size of this process, from `/proc/self/statm`.
pub fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Runs this bench binary again with `PUNCTUAL_BENCH_CHILD=task`, so that a
/// memory reading starts from a fresh process, and returns the numbers the
/// child printed on its `RESULT` line.
pub fn in_child(task: &str) -> Vec<f64> {
    let exe = std::env::current_exe().expect("bench binary path");
    let out = Command::new(exe)
        .env("PUNCTUAL_BENCH_CHILD", task)
        .output()
        .expect("run bench child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "child {task} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .split_whitespace()
        .map(|n| n.parse().expect("number"))
        .collect()
}

/// If this process is a child started by [`in_child`], the task it must run.
pub fn child_task() -> Option<String> {
    std::env::var("PUNCTUAL_BENCH_CHILD").ok()
}

pub fn child_result(values: &[f64]) {
    let line: Vec<String> = values.iter().map(|v| format!("{v}")).collect();
    println!("RESULT {}", line.join(" "));
}

/// The median Criterion measured for `group/id`, in nanoseconds per
/// iteration, read from its `estimates.json`.
pub fn criterion_median_ns(group: &str, id: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{dir}/criterion/{group}/{id}/new/estimates.json");
    let json = std::fs::read_to_string(path).ok()?;
    let median = &json[json.find("\"median\"")?..];
    let point = &median[median.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = point.find([',', '}'])?;
    point[..end].trim().parse().ok()
}

/// The number in environment variable `name`, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Waits until `worker` acked `n` (no failure, no lost lease on the way);
/// the time since `start`.
pub async fn acked(
    worker: &punctual::durable::Worker,
    n: u64,
    start: tokio::time::Instant,
) -> std::time::Duration {
    loop {
        let stats = worker.stats();
        assert_eq!(stats.failed + stats.lost, 0, "{stats:?}");
        if stats.completed >= n {
            return start.elapsed();
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// One row of the side-by-side table.
pub struct Row {
    pub workload: String,
    pub unit: &'static str,
    pub ours: f64,
    pub peer_name: String,
    pub peer: f64,
    /// Whether a bigger number is better (throughput) or worse (time).
    pub higher_is_better: bool,
}

pub fn print_table(title: &str, rows: &[Row]) {
    println!("\n## {title}\n");
    println!("| workload | unit | punctual | peer | peer value | ours / peer |");
    println!("|---|---|---:|---|---:|---:|");
    for r in rows {
        let ratio = if r.peer == 0.0 {
            f64::NAN
        } else {
            r.ours / r.peer
        };
        let hint = if r.higher_is_better {
            "higher is better"
        } else {
            "lower is better"
        };
        println!(
            "| {} | {} | {:.1} | {} | {:.1} | {:.2} ({hint}) |",
            r.workload, r.unit, r.ours, r.peer_name, r.peer, ratio
        );
    }
}
