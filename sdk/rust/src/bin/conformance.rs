//! The Rust SDK's conformance worker: the program the language-neutral conformance suite
//! (tests/conformance/README.md) drives. It serves the suite's four tasks with the Rust SDK and
//! prints one JSON line per event on standard output.
//!
//! ```sh
//! cargo run --offline --bin conformance -- --server http://127.0.0.1:7233
//! ```
//!
//! Environment: ORBIT_SERVER, ORBIT_TOKEN, CONFORMANCE_WORKER_ID, CONFORMANCE_TASKS (names,
//! comma-separated; default all), CONFORMANCE_CONCURRENCY (default 2), CONFORMANCE_HEARTBEAT_MS
//! (default 500), CONFORMANCE_POLL_WAIT_S (default 10), CONFORMANCE_STOP_GRACE_MS (default
//! 30000). SIGTERM or SIGINT: stop gracefully, print {"event":"stopped"}, exit 0.

use orbit::signals::Termination;
use orbit::{Attempt, HandlerResult, Task, TaskDefinition, TaskError, Worker, WorkerOptions};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

static OUT: Mutex<()> = Mutex::new(());

/// Prints one event line on standard output.
fn emit(event: &str, mut fields: serde_json::Map<String, Value>) {
    fields.insert("event".into(), Value::String(event.into()));
    let line = Value::Object(fields).to_string();
    let _g = OUT.lock().unwrap();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line);
    let _ = out.flush();
}

fn attempt_fields(a: &Attempt) -> serde_json::Map<String, Value> {
    match json!({
        "task": a.task, "execution_id": a.execution_id, "step": a.step, "attempt": a.attempt,
        "redelivery": a.redelivery, "idempotency_key": a.idempotency_key, "token": a.token,
    }) {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// Reports the attempt's cancellation and answers the error the SDK reports as CANCELLED,
/// DEADLINE_EXCEEDED or WORKER_STOPPED.
fn cancelled<T>(a: &Attempt) -> HandlerResult<T> {
    emit("cancelled", attempt_fields(a));
    Err(a.cancelled_error())
}

#[derive(Deserialize)]
struct EchoIn {
    #[serde(default)]
    value: Value,
}

#[derive(Serialize, Deserialize)]
struct EchoOut {
    value: Value,
    attempt: u32,
    redelivery: bool,
    idempotency_key: String,
    runtime: String,
}

#[derive(Deserialize)]
struct FailIn {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    retryable: bool,
    #[serde(default)]
    succeed_on_attempt: u32,
}

#[derive(Serialize, Deserialize)]
struct AttemptOut {
    attempt: u32,
}

#[derive(Deserialize)]
struct SleepIn {
    #[serde(default)]
    ms: u64,
}

#[derive(Serialize, Deserialize)]
struct SleepOut {
    slept_ms: u64,
}

#[derive(Deserialize)]
struct HoldIn {}

#[derive(Serialize, Deserialize)]
struct HoldOut {
    redelivered: bool,
}

fn tasks() -> Vec<Arc<dyn TaskDefinition>> {
    vec![
        Task::new("conformance.echo", "1", |i: EchoIn, a: &Attempt| {
            emit("executing", attempt_fields(a));
            Ok(EchoOut {
                value: i.value,
                attempt: a.attempt,
                redelivery: a.redelivery,
                idempotency_key: a.idempotency_key.clone(),
                runtime: "rust".into(),
            })
        })
        .boxed(),
        Task::new("conformance.fail", "1", |i: FailIn, a: &Attempt| {
            emit("executing", attempt_fields(a));
            if i.succeed_on_attempt > 0 && a.attempt >= i.succeed_on_attempt {
                return Ok(AttemptOut { attempt: a.attempt });
            }
            let e = TaskError {
                code: i.code,
                message: i.message,
                retryable: i.retryable,
                details: json!({ "attempt": a.attempt }),
            };
            Err(e.into())
        })
        .check_input(|i| {
            if i.code.is_empty() {
                Err("code is required".into())
            } else {
                Ok(())
            }
        })
        .boxed(),
        Task::new("conformance.sleep", "1", |i: SleepIn, a: &Attempt| {
            emit("executing", attempt_fields(a));
            match a.sleep(Duration::from_millis(i.ms)) {
                Ok(()) => Ok(SleepOut { slept_ms: i.ms }),
                Err(_) => cancelled(a),
            }
        })
        .boxed(),
        Task::new("conformance.hold", "1", |_: HoldIn, a: &Attempt| {
            emit("executing", attempt_fields(a));
            if a.redelivery {
                return Ok(HoldOut { redelivered: true });
            }
            a.cancel_token().wait();
            cancelled(a)
        })
        .boxed(),
    ]
}

fn env_ms(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

fn main() {
    let mut server = std::env::var("ORBIT_SERVER").unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--server" {
            server = args.next().unwrap_or_default();
        } else if let Some(v) = a.strip_prefix("--server=") {
            server = v.to_string();
        }
    }
    if server.is_empty() {
        server = "http://127.0.0.1:7233".into();
    }
    let worker_id =
        std::env::var("CONFORMANCE_WORKER_ID").unwrap_or_else(|_| "conformance-rust".into());
    let want: Vec<String> = std::env::var("CONFORMANCE_TASKS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let served: Vec<_> = tasks()
        .into_iter()
        .filter(|t| want.is_empty() || want.iter().any(|w| w == t.name()))
        .collect();
    let n = served.len();
    let grace = Duration::from_millis(env_ms("CONFORMANCE_STOP_GRACE_MS", 30_000));
    let w = match Worker::new(WorkerOptions {
        server,
        token: std::env::var("ORBIT_TOKEN").ok(),
        worker_id: worker_id.clone(),
        tasks: served,
        concurrency: env_ms("CONFORMANCE_CONCURRENCY", 2) as usize,
        heartbeat_interval: Duration::from_millis(env_ms("CONFORMANCE_HEARTBEAT_MS", 500)),
        poll_wait: Duration::from_secs(env_ms("CONFORMANCE_POLL_WAIT_S", 10)),
        shutdown_grace: grace,
        ..WorkerOptions::default()
    }) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {}", e);
            std::process::exit(2);
        }
    };
    let signals = match Termination::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", e);
            std::process::exit(2);
        }
    };
    // A signal during registration stops it too.
    let stopper = {
        let w = w.clone();
        std::thread::spawn(move || {
            signals.wait();
            w.stop(grace)
        })
    };
    if let Err(e) = w.start() {
        eprintln!("error: {}", e);
        std::process::exit(1);
    }
    if w.state() == orbit::State::Running {
        let mut f = serde_json::Map::new();
        f.insert("sdk".into(), json!("rust"));
        f.insert("worker_id".into(), json!(worker_id));
        f.insert("runtime".into(), json!("rust"));
        f.insert("tasks".into(), json!(n));
        emit("ready", f);
    }
    match stopper.join() {
        Ok(Ok(())) => {
            emit("stopped", serde_json::Map::new());
        }
        Ok(Err(e)) => {
            eprintln!("error: {}", e);
            std::process::exit(1);
        }
        Err(_) => std::process::exit(1),
    }
}
