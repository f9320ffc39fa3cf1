//! A worker whose slots are spread over two servers keeps its threads and sockets: many results
//! later it holds as many as after the first few (no thread, socket or cancellation hook per
//! poll or per result). A test binary of its own, so that no other test opens sockets meanwhile.
//! Linux only (/proc/self).

mod common;

use common::FakeServer;
use orbit::{Attempt, Backoff, Level, Logger, Task, Worker, WorkerOptions};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Open descriptors and threads of this process.
fn usage() -> Option<(usize, usize)> {
    let fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()?;
    Some((fds, threads))
}

fn shared_health(addrs: &[&str]) -> Value {
    let nodes: Vec<Value> = addrs
        .iter()
        .map(|a| json!({ "node_id": a, "addr": a, "live": true }))
        .collect();
    json!({ "role": "shared", "nodes": nodes })
}

/// Enqueues `n` tasks on each server and waits until each has `total` results.
fn run(a: &FakeServer, b: &FakeServer, n: usize, total: usize) {
    for f in [a, b] {
        for i in 0..n {
            f.enqueue("t.echo", json!({ "i": i }));
        }
    }
    for f in [a, b] {
        f.wait_until("the results", |st| st.results.len() == total);
    }
}

#[test]
fn many_results_later_the_worker_holds_as_many_threads_and_sockets() {
    if usage().is_none() {
        eprintln!("no /proc/self: not checked");
        return;
    }
    let a = FakeServer::start();
    let b = FakeServer::start();
    let h = shared_health(&[&a.url, &b.url]);
    for (f, first_id) in [(&a, 0), (&b, 100_000)] {
        f.with(|st| {
            st.any_session = true;
            st.next_id = first_id;
            st.canned.insert("GET /v1/health".into(), (200, h.clone()));
        });
    }
    let logger: Logger = Arc::new(|_: Level, _: &str| {});
    let w = Worker::new(WorkerOptions {
        server: a.url.clone(),
        worker_id: "w-leaks".into(),
        tasks: vec![Task::new("t.echo", "1", |v: Value, _: &Attempt| Ok(v)).boxed()],
        concurrency: 4,
        poll_wait: Duration::from_secs(1),
        heartbeat_interval: Duration::from_millis(50),
        node_refresh: Duration::from_millis(50),
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            ..Backoff::default()
        },
        logger: Some(logger),
        ..WorkerOptions::default()
    })
    .unwrap();
    w.start().unwrap();
    a.wait_until("two polls on a", |st| st.active_polls == 2);
    b.wait_until("two polls on b", |st| st.active_polls == 2);
    run(&a, &b, 20, 20);
    let (fds, threads) = usage().unwrap();
    run(&a, &b, 300, 320);
    let (fds_after, threads_after) = usage().unwrap();
    eprintln!(
        "descriptors {} -> {}, threads {} -> {}",
        fds, fds_after, threads, threads_after
    );
    w.stop(Duration::from_secs(5)).unwrap();
    // A few sockets and threads may come and go (a health read and a heartbeat in flight: a
    // socket each on both sides, its clone for the cancellation, the fake's thread); one per
    // result would be 600.
    assert!(
        fds_after <= fds + 12,
        "open descriptors grew from {} to {}",
        fds,
        fds_after
    );
    assert!(
        threads_after <= threads + 6,
        "threads grew from {} to {}",
        threads,
        threads_after
    );
}
