//! A small shop whose unpaid orders expire.
//!
//! Every order placed goes into a `DelayQueue` with the payment timeout; paying
//! removes the order by its key, so its timeout never fires. Three expiry
//! workers share the queue and cancel whatever comes due. Time is scaled down:
//! one second here stands for fifteen minutes in the shop, so the 30-minute
//! payment window lasts two seconds and the whole run about four.
//!
//! Run with `cargo run --example order_timeouts`.

use punctual::{DelayQueue, Key};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};

const ORDERS: u64 = 16;
const PAYMENT_WINDOW: Duration = Duration::from_secs(2);
const WORKERS: usize = 3;

struct Order {
    id: u64,
    deadline: Instant,
}

#[derive(Default)]
struct Ledger {
    open: HashMap<u64, Key>,
    paid: Vec<u64>,
    expired: Vec<(u64, Duration)>,
}

/// A tiny deterministic generator, so every run tells the same story.
struct Dice(u64);
impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides
    }
}

#[tokio::main]
async fn main() {
    let start = Instant::now();
    let stamp = move || format!("[{:>5} ms]", start.elapsed().as_millis());
    let timeouts: DelayQueue<Order> = DelayQueue::new();
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    println!(
        "{} shop opens: payment window {PAYMENT_WINDOW:?}, {WORKERS} expiry workers",
        stamp()
    );
    let workers: Vec<_> = (1..=WORKERS)
        .map(|worker| {
            let (timeouts, ledger) = (timeouts.clone(), ledger.clone());
            tokio::spawn(async move {
                loop {
                    let order = timeouts.take().await;
                    let late = order.deadline.elapsed();
                    let expired = {
                        let mut ledger = ledger.lock().unwrap();
                        // Payment and expiry race: the ledger decides who won.
                        let expired = ledger.open.remove(&order.id).is_some();
                        if expired {
                            ledger.expired.push((order.id, late));
                        }
                        expired
                    };
                    if expired {
                        println!(
                            "{} worker {worker}: order #{} expired ({} µs late), releasing stock",
                            stamp(),
                            order.id,
                            late.as_micros()
                        );
                        // Meanwhile another worker leads the queue.
                        sleep(Duration::from_millis(150)).await;
                    }
                }
            })
        })
        .collect();

    let mut dice = Dice(0x5EED_1234_ABCD_0001);
    let mut payments = Vec::new();
    for id in 1..=ORDERS {
        sleep(Duration::from_millis(40 + dice.roll(60))).await;
        let deadline = Instant::now() + PAYMENT_WINDOW;
        let key = timeouts.insert_at(Order { id, deadline }, deadline);
        ledger.lock().unwrap().open.insert(id, key);
        println!(
            "{} order #{id} placed, pay by +{} ms",
            stamp(),
            deadline.duration_since(start).as_millis()
        );
        // Two customers in three pay, some of them just too late.
        if dice.roll(3) != 0 {
            let pay_at = Instant::now() + Duration::from_millis(dice.roll(2_400));
            payments.push((pay_at, id));
        }
    }

    payments.sort_unstable();
    for (pay_at, id) in payments {
        sleep_until(pay_at).await;
        let mut ledger = ledger.lock().unwrap();
        match ledger.open.remove(&id) {
            Some(key) => {
                // The order's timeout is dropped from the queue at once.
                let removed = timeouts.remove(key).is_some();
                ledger.paid.push(id);
                println!("{} order #{id} paid, timeout removed: {removed}", stamp());
            }
            None => println!(
                "{} order #{id}: payment refused, order already expired",
                stamp()
            ),
        }
    }

    // Let the last windows run out, then close.
    while !timeouts.is_empty() {
        sleep(Duration::from_millis(50)).await;
    }
    sleep(Duration::from_millis(50)).await;
    for worker in workers {
        worker.abort();
    }

    let ledger = ledger.lock().unwrap();
    println!("\n--- summary after {:?} ---", start.elapsed());
    println!("placed:  {ORDERS}");
    println!("paid:    {} {:?}", ledger.paid.len(), ledger.paid);
    println!("expired: {}", ledger.expired.len());
    for (id, late) in &ledger.expired {
        println!(
            "  order #{id:<3} expired {:>6} µs after its deadline",
            late.as_micros()
        );
    }
    assert_eq!(
        ledger.paid.len() + ledger.expired.len(),
        ORDERS as usize,
        "every order settled"
    );
}
