//! The Rust side of the OrderProcessing example (examples/order-processing): all six tasks and
//! both compensations, as the worker `orders-rust`, with the Rust SDK.
//!
//! ```sh
//! cargo run --offline --example orders -- --server http://127.0.0.1:7233 [--concurrency 8]
//! ```
//!
//! Environment: ORBIT_SERVER, ORBIT_TOKEN, ORDER_WORKER_ID (default orders-rust),
//! ORDER_CONCURRENCY, and for tests ORDER_CHARGE_DELAY_MS (a slow payment provider) and
//! ORDER_TRACE=1 (one JSON line per attempt on stdout). SIGTERM or Ctrl+C: finish running tasks
//! (at most 30 s) and report them.

use orbit::{Attempt, HandlerResult, Task, TaskDefinition, TaskError, Worker, WorkerOptions};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

// ---- contracts: the input is decoded (and checked) before the handler runs (INVALID_INPUT,
// not retried).

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    sku: String,
    qty: i64,
    price: f64,
}

#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
    customer: String,
    #[serde(default)]
    items: Vec<Item>,
}

fn check_order(o: &Order) -> Result<(), String> {
    if o.order_id.is_empty() || o.customer.is_empty() {
        return Err("order_id and customer are required".into());
    }
    for i in &o.items {
        if i.qty < 1 {
            return Err(format!("item {}: qty must be at least 1", i.sku));
        }
        if i.price < 0.0 {
            return Err(format!("item {}: price must not be negative", i.sku));
        }
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct Validated {
    order_id: String,
    total: f64,
}

#[derive(Deserialize)]
struct Reservation {
    order_id: String,
}

#[derive(Serialize, Deserialize)]
struct Reserved {
    reservation_id: String,
}

#[derive(Deserialize)]
struct Release {
    #[serde(default)]
    #[allow(dead_code)]
    reservation_id: String,
}

#[derive(Serialize, Deserialize)]
struct Released {
    released: bool,
}

#[derive(Deserialize)]
struct Charge {
    #[serde(default)]
    #[allow(dead_code)]
    order_id: String,
    amount: f64,
    customer: String,
}

#[derive(Serialize, Deserialize)]
struct Charged {
    charge_id: String,
    amount: f64,
}

#[derive(Deserialize)]
struct Refund {
    #[serde(default)]
    #[allow(dead_code)]
    charge_id: String,
    amount: f64,
}

#[derive(Serialize, Deserialize)]
struct Refunded {
    refunded: f64,
}

#[derive(Deserialize)]
struct Shipment {
    order_id: String,
}

#[derive(Serialize, Deserialize)]
struct Shipped {
    tracking: String,
}

#[derive(Deserialize)]
struct Confirmation {}

#[derive(Serialize, Deserialize)]
struct Sent {
    sent: bool,
}

#[derive(Deserialize)]
struct Points {
    points: f64,
}

#[derive(Serialize, Deserialize)]
struct Loyalty {
    points: f64,
}

/// A task whose every attempt is one JSON line on stdout with ORDER_TRACE=1.
fn traced<In, Out>(
    name: &'static str,
    handler: impl Fn(In, &Attempt) -> HandlerResult<Out> + Send + Sync + 'static,
) -> Task<In, Out>
where
    In: DeserializeOwned + 'static,
    Out: Serialize + 'static,
{
    let trace = std::env::var("ORDER_TRACE").as_deref() == Ok("1");
    Task::new(name, "1", move |input: In, a: &Attempt| {
        if trace {
            println!(
                "{}",
                serde_json::json!({
                    "event": "executing", "task": name, "execution_id": a.execution_id,
                    "step": a.step, "attempt": a.attempt, "redelivery": a.redelivery,
                    "idempotency_key": a.idempotency_key,
                })
            );
        }
        handler(input, a)
    })
}

fn tasks(charge_delay: Duration) -> Vec<Arc<dyn TaskDefinition>> {
    vec![
        traced("orders.validate", |o: Order, _| {
            if o.items.is_empty() {
                return Err(TaskError::fail("INVALID_ORDER", "an order needs items").into());
            }
            let total: f64 = o.items.iter().map(|i| i.qty as f64 * i.price).sum();
            Ok(Validated {
                order_id: o.order_id,
                total: (total * 100.0).round() / 100.0,
            })
        })
        .check_input(check_order)
        .boxed(),
        traced("inventory.reserve", |r: Reservation, _| {
            Ok(Reserved {
                reservation_id: format!("res-{}", r.order_id),
            })
        })
        .boxed(),
        traced("inventory.release", |_: Release, _| {
            Ok(Released { released: true })
        })
        .boxed(),
        traced("payments.charge", move |c: Charge, a| {
            // Ends early when the runtime cancels the attempt.
            if !charge_delay.is_zero() && a.sleep(charge_delay).is_err() {
                return Err(a.cancelled_error());
            }
            if c.customer == "declined" {
                return Err(TaskError::fail("CARD_DECLINED", "the card was declined").into());
            }
            // The idempotency key is what a real payment provider would deduplicate on.
            Ok(Charged {
                charge_id: format!("ch-{}", a.idempotency_key),
                amount: c.amount,
            })
        })
        .boxed(),
        traced("payments.refund", |r: Refund, _| {
            Ok(Refunded { refunded: r.amount })
        })
        .boxed(),
        traced("shipping.create", |s: Shipment, _| {
            Ok(Shipped {
                tracking: format!("trk-{}", s.order_id),
            })
        })
        .boxed(),
        traced("email.confirm", |_: Confirmation, _| {
            Ok(Sent { sent: true })
        })
        .boxed(),
        traced("loyalty.update", |p: Points, _| {
            Ok(Loyalty { points: p.points })
        })
        .boxed(),
    ]
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

fn main() {
    let mut server = env_or("ORBIT_SERVER", "http://127.0.0.1:7233");
    let mut concurrency: usize = std::env::var("ORDER_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0)
        .unwrap_or(8);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).unwrap_or_default();
        match flag.as_str() {
            "--server" => server = value(),
            "--concurrency" => {
                concurrency = value().parse().unwrap_or_else(|_| {
                    eprintln!("error: --concurrency takes a number");
                    std::process::exit(2)
                })
            }
            "-h" | "--help" => {
                println!("usage: orders [--server URL] [--concurrency N]");
                return;
            }
            other => {
                eprintln!("error: unknown argument {}", other);
                std::process::exit(2);
            }
        }
    }
    let delay_ms: u64 = std::env::var("ORDER_CHARGE_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let served = tasks(Duration::from_millis(delay_ms));
    let n = served.len();
    let w = match Worker::new(WorkerOptions {
        server: server.clone(),
        token: std::env::var("ORBIT_TOKEN").ok(),
        worker_id: env_or("ORDER_WORKER_ID", "orders-rust"),
        tasks: served,
        concurrency,
        shutdown_grace: Duration::from_secs(30),
        ..WorkerOptions::default()
    }) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {}", e);
            std::process::exit(2);
        }
    };
    eprintln!(
        "order worker (rust) serving {} tasks on {} (concurrency {})",
        n, server, concurrency
    );
    // Serves until SIGTERM or Ctrl+C; a refused registration (401, 403 TASK_NOT_ALLOWED…) is
    // the error.
    if let Err(e) = w.run_until_signal() {
        eprintln!("error: {}", e);
        std::process::exit(1);
    }
}
