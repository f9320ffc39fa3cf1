//! A small worker for tests/cluster_shared_spread_rust_test.ts: serves `t.spread` (contract 1,
//! echoes its input) and `t.slow` (contract 1, echoes its input once a line arrives on standard
//! input, or it ends) as the worker `spread-rust`, with `SPREAD_CONCURRENCY` (default 4) slots
//! spread over a shared cluster's live servers, reading them every 200 ms. Log lines and one
//! `ran <execution> <step>` line per attempt go to standard output. `SPREAD_REQUEST_TIMEOUT_MS`
//! sets `request_timeout` (default 30 s).
//!
//! ```sh
//! cargo run --offline --example spread -- http://127.0.0.1:7233
//! ```
//!
//! SIGTERM or Ctrl+C: finish running tasks and report them.

use orbit::{timestamp, Attempt, Backoff, Level, Logger, Task, Worker, WorkerOptions};
use serde_json::Value;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

static OUT: Mutex<()> = Mutex::new(());

fn say(line: &str) {
    let _g = OUT.lock().unwrap();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line);
    let _ = out.flush();
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), orbit::Error> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:7233".into());
    let spread = Task::new("t.spread", "1", |input: Value, a: &Attempt| {
        say(&format!("ran {} {}", a.execution_id, a.step));
        Ok(input)
    });
    // Released by a line on standard input (or its end).
    let release = Arc::new((Mutex::new(false), Condvar::new()));
    let r = release.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        *r.0.lock().unwrap() = true;
        r.1.notify_all();
    });
    let slow = Task::new("t.slow", "1", move |input: Value, a: &Attempt| {
        say(&format!("ran {} {}", a.execution_id, a.step));
        let mut done = release.0.lock().unwrap();
        while !*done {
            done = release.1.wait(done).unwrap();
        }
        Ok(input)
    });
    let logger: Logger = Arc::new(|level: Level, line: &str| {
        say(&format!("{} {} {}", timestamp(), level.as_str(), line));
    });
    let w = Worker::new(WorkerOptions {
        server,
        worker_id: "spread-rust".into(),
        tasks: vec![spread.boxed(), slow.boxed()],
        concurrency: env_u64("SPREAD_CONCURRENCY", 4) as usize,
        request_timeout: Duration::from_millis(env_u64("SPREAD_REQUEST_TIMEOUT_MS", 30_000)),
        poll_wait: Duration::from_secs(5),
        heartbeat_interval: Duration::from_millis(500),
        node_refresh: Duration::from_millis(200),
        backoff: Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            ..Backoff::default()
        },
        shutdown_grace: Duration::from_secs(5),
        logger: Some(logger),
        ..WorkerOptions::default()
    })?;
    w.run_until_signal()
}
