//! A small worker for tests/cluster_shared_spread_rust_test.ts: serves `t.spread` (contract 1,
//! echoes its input) as the worker `spread-rust`, with 4 slots spread over a shared cluster's
//! live servers, reading them every 200 ms. Log lines and one `ran <execution> <step>` line per
//! attempt go to standard output.
//!
//! ```sh
//! cargo run --offline --example spread -- http://127.0.0.1:7233
//! ```
//!
//! SIGTERM or Ctrl+C: finish running tasks and report them.

use orbit::{timestamp, Attempt, Backoff, Level, Logger, Task, Worker, WorkerOptions};
use serde_json::Value;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

static OUT: Mutex<()> = Mutex::new(());

fn say(line: &str) {
    let _g = OUT.lock().unwrap();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line);
    let _ = out.flush();
}

fn main() -> Result<(), orbit::Error> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:7233".into());
    let spread = Task::new("t.spread", "1", |input: Value, a: &Attempt| {
        say(&format!("ran {} {}", a.execution_id, a.step));
        Ok(input)
    });
    let logger: Logger = Arc::new(|level: Level, line: &str| {
        say(&format!("{} {} {}", timestamp(), level.as_str(), line));
    });
    let w = Worker::new(WorkerOptions {
        server,
        worker_id: "spread-rust".into(),
        tasks: vec![spread.boxed()],
        concurrency: 4,
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
