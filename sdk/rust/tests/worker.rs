//! The worker against the in-memory fake runtime: slots, eager dispatch, failures and their
//! codes, 5xx retries with backoff, re-registration, heartbeat cancellation, graceful stop and
//! its grace.

mod common;

use common::FakeServer;
use orbit::{
    Attempt, Backoff, Error, Level, Logger, Task, TaskDefinition, TaskError, Worker, WorkerOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Deserialize)]
struct In {
    n: i64,
}

#[derive(Serialize, Deserialize)]
struct Out {
    doubled: i64,
}

fn quiet() -> (Logger, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    let logger: Logger = Arc::new(move |level: Level, line: &str| {
        l.lock()
            .unwrap()
            .push(format!("{} {}", level.as_str(), line));
    });
    (logger, lines)
}

fn double() -> Arc<dyn TaskDefinition> {
    Task::new("t.double", "1", |i: In, _: &Attempt| {
        Ok(Out { doubled: i.n * 2 })
    })
    .check_input(|i| {
        if i.n < 0 {
            Err("n must not be negative".into())
        } else {
            Ok(())
        }
    })
    .boxed()
}

fn options(
    f: &FakeServer,
    tasks: Vec<Arc<dyn TaskDefinition>>,
    concurrency: usize,
) -> WorkerOptions {
    let (logger, _) = quiet();
    WorkerOptions {
        server: f.url.clone(),
        worker_id: "w-test".into(),
        tasks,
        concurrency,
        poll_wait: Duration::from_secs(1),
        heartbeat_interval: Duration::from_millis(50),
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            ..Backoff::default()
        },
        logger: Some(logger),
        ..WorkerOptions::default()
    }
}

fn result_of(f: &FakeServer, token: &str) -> Value {
    f.with(|st| {
        st.results
            .iter()
            .find(|r| r["token"] == token)
            .cloned()
            .unwrap()
    })
}

#[test]
fn completes_tasks_and_asks_for_the_next_in_each_result() {
    let f = FakeServer::start();
    let tokens: Vec<String> = (0..3)
        .map(|n| f.enqueue("t.double", json!({ "n": n })))
        .collect();
    let w = Worker::new(options(&f, vec![double()], 1)).unwrap();
    w.start().unwrap();
    f.wait_until("three results", |st| st.results.len() == 3);
    w.stop(Duration::from_secs(5)).unwrap();
    for (n, t) in tokens.iter().enumerate() {
        let r = result_of(&f, t);
        assert_eq!(r["path"], "/v1/tasks/complete");
        assert_eq!(r["output"], json!({ "doubled": 2 * n as i64 }));
    }
    f.with(|st| {
        // The second and third task came in the answers to the first and second result.
        assert!(st.results[..2]
            .iter()
            .all(|r| r["max_tasks"] == 1 && r["session_id"].is_string()));
        assert!(st.polls.iter().all(|p| p["max_tasks"] == 1));
        assert_eq!(st.unregs, 1);
        assert!(st.sessions.is_empty());
    });
}

#[test]
fn holds_one_poll_per_slot() {
    let f = FakeServer::start();
    let w = Worker::new(options(&f, vec![double()], 3)).unwrap();
    w.start().unwrap();
    f.wait_until("three polls held at once", |st| st.active_polls == 3);
    let reg = f.with(|st| st.registers[0].1.clone());
    assert_eq!(reg["concurrency"], 3);
    assert_eq!(reg["runtime"], "rust");
    assert_eq!(
        reg["tasks"],
        json!([{ "name": "t.double", "contract": "1" }])
    );
    w.stop(Duration::from_secs(5)).unwrap();
}

#[test]
fn reports_failures_with_their_codes() {
    let f = FakeServer::start();
    let failing = Task::new(
        "t.fail",
        "1",
        |i: Value, _: &Attempt| -> orbit::HandlerResult<Value> {
            match i["kind"].as_str() {
                Some("task") => Err(TaskError::fail("CARD_DECLINED", "declined")
                    .with_details(json!({ "x": 1 }))
                    .into()),
                Some("io") => Err(std::io::Error::other("disk full").into()),
                _ => panic!("boom"),
            }
        },
    )
    .boxed();
    let declined = f.enqueue("t.fail", json!({ "kind": "task" }));
    let io = f.enqueue("t.fail", json!({ "kind": "io" }));
    let panicked = f.enqueue("t.fail", json!({ "kind": "panic" }));
    let invalid = f.enqueue("t.double", json!({ "n": -1 }));
    let unknown = f.enqueue("t.nobody", json!({}));
    let w = Worker::new(options(&f, vec![double(), failing], 2)).unwrap();
    w.start().unwrap();
    f.wait_until("five results", |st| st.results.len() == 5);
    w.stop(Duration::from_secs(5)).unwrap();
    let e = result_of(&f, &declined)["error"].clone();
    assert_eq!(
        e,
        json!({ "code": "CARD_DECLINED", "message": "declined", "retryable": false, "details": { "x": 1 } })
    );
    let e = result_of(&f, &io)["error"].clone();
    assert_eq!(
        (e["code"].as_str(), e["retryable"].as_bool()),
        (Some("TASK_ERROR"), Some(true))
    );
    assert_eq!(e["message"], "disk full");
    let e = result_of(&f, &panicked)["error"].clone();
    assert_eq!(e["code"], "TASK_PANIC");
    assert!(e["message"].as_str().unwrap().contains("boom"));
    let e = result_of(&f, &invalid)["error"].clone();
    assert_eq!(
        (e["code"].as_str(), e["retryable"].as_bool()),
        (Some("INVALID_INPUT"), Some(false))
    );
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("n must not be negative"));
    assert_eq!(result_of(&f, &unknown)["error"]["code"], "UNKNOWN_TASK");
}

#[test]
fn retries_not_leader_and_server_errors_with_backoff() {
    let f = FakeServer::start();
    f.inject("/v1/workers/register", &[503, 500, 502, 503]);
    f.inject("/v1/tasks/complete", &[503, 500]);
    let token = f.enqueue("t.double", json!({ "n": 21 }));
    let mut o = options(&f, vec![double()], 1);
    // Delays of 50, 100, 200, 400 ms: long enough to tell apart on a loaded machine.
    o.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_secs(1),
        ..Backoff::default()
    };
    let w = Worker::new(o).unwrap();
    w.start().unwrap();
    f.wait_until("the result, after two refusals", |st| st.results.len() == 1);
    w.stop(Duration::from_secs(5)).unwrap();
    assert_eq!(result_of(&f, &token)["output"], json!({ "doubled": 42 }));
    f.with(|st| {
        let at = &st.register_attempts;
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps[0] >= Duration::from_millis(50),
            "retried without a pause: {:?}",
            gaps
        );
        assert!(
            gaps[3] > gaps[0].mul_f64(2.0),
            "the delays do not grow: {:?}",
            gaps
        );
        assert_eq!(st.registers.len(), 1, "one successful registration");
        let n = st
            .requests
            .iter()
            .filter(|p| *p == "/v1/workers/register")
            .count();
        assert_eq!(n, 5, "four refusals, then the registration");
        let reports = st
            .requests
            .iter()
            .filter(|p| *p == "/v1/tasks/complete")
            .count();
        assert_eq!(reports, 3, "two refused reports, then the delivered one");
    });
}

#[test]
fn registers_again_after_unknown_session() {
    let f = FakeServer::start();
    let w = Worker::new(options(&f, vec![double()], 2)).unwrap();
    w.start().unwrap();
    let first = w.session_id().unwrap();
    f.drop_sessions();
    f.wait_until("a second registration", |st| st.registers.len() >= 2);
    let token = f.enqueue("t.double", json!({ "n": 1 }));
    f.wait_until("the task served", |st| {
        st.results.iter().any(|r| r["token"] == token)
    });
    assert_ne!(w.session_id().unwrap(), first);
    w.stop(Duration::from_secs(5)).unwrap();
    assert_eq!(
        f.with(|st| st.registers.len()),
        2,
        "one registration for all slots"
    );
}

#[test]
fn cancels_a_handler_when_a_heartbeat_says_so() {
    let f = FakeServer::start();
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let hold = Task::new(
        "t.hold",
        "1",
        move |_: Value, a: &Attempt| -> orbit::HandlerResult<Value> {
            let r = a.cancel_token().wait();
            *s.lock().unwrap() = Some(r);
            Err(a.cancelled_error())
        },
    )
    .boxed();
    let token = f.enqueue("t.hold", json!({}));
    let w = Worker::new(options(&f, vec![hold], 1)).unwrap();
    w.start().unwrap();
    let t = token.clone();
    let w2 = w.clone();
    f.wait_until("the attempt running", move |_| {
        w2.running_tokens() == vec![t.clone()]
    });
    f.with(|st| st.cancels.push(token.clone()));
    f.wait_until("the cancelled result", |st| st.results.len() == 1);
    w.stop(Duration::from_secs(5)).unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(orbit::Reason::Cancel));
    let e = result_of(&f, &token)["error"].clone();
    assert_eq!(e["code"], "CANCELLED");
}

#[test]
fn a_graceful_stop_finishes_the_running_task_then_unregisters() {
    let f = FakeServer::start();
    let started = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let s = started.clone();
    let slow = Task::new("t.slow", "1", move |_: Value, a: &Attempt| {
        *s.0.lock().unwrap() = true;
        s.1.notify_all();
        a.sleep(Duration::from_millis(300))
            .map_err(|_| a.cancelled_error())?;
        Ok(json!({ "slept": true }))
    })
    .boxed();
    let token = f.enqueue("t.slow", json!({}));
    let w = Worker::new(options(&f, vec![slow], 2)).unwrap();
    w.start().unwrap();
    let mut g = started.0.lock().unwrap();
    while !*g {
        g = started.1.wait(g).unwrap();
    }
    drop(g);
    let began = Instant::now();
    w.stop(Duration::from_secs(10)).unwrap();
    assert!(began.elapsed() < Duration::from_secs(5));
    let r = result_of(&f, &token);
    assert_eq!(r["output"], json!({ "slept": true }));
    assert!(
        r.get("max_tasks").is_none(),
        "asked for a task while stopping: {}",
        r
    );
    f.with(|st| {
        assert_eq!(st.unregs, 1);
        assert!(st.sessions.is_empty());
    });
    assert_eq!(w.state(), orbit::State::Stopped);
}

#[test]
fn a_stop_gives_up_on_a_task_after_its_grace() {
    let f = FakeServer::start();
    let hold = Task::new(
        "t.hold",
        "1",
        |_: Value, a: &Attempt| -> orbit::HandlerResult<Value> {
            a.cancel_token().wait();
            Err(a.cancelled_error())
        },
    )
    .boxed();
    f.enqueue("t.hold", json!({}));
    let w = Worker::new(options(&f, vec![hold], 1)).unwrap();
    w.start().unwrap();
    let w2 = w.clone();
    f.wait_until("the attempt running", move |_| {
        w2.running_tokens().len() == 1
    });
    let began = Instant::now();
    w.stop(Duration::from_millis(200)).unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    f.with(|st| assert_eq!(st.unregs, 1, "the unregistration gives the attempt back"));
}

#[test]
fn start_answers_a_refused_registration() {
    let f = FakeServer::start();
    f.inject("/v1/workers/register", &[401]);
    let w = Worker::new(options(&f, vec![double()], 1)).unwrap();
    match w.start() {
        Err(Error::Api(e)) => {
            assert_eq!((e.status, e.code.as_str()), (401, "UNAUTHORIZED"));
        }
        other => panic!("expected a 401, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn new_refuses_bad_options() {
    let f = FakeServer::start();
    let mut o = options(&f, vec![double()], 1);
    o.worker_id = String::new();
    assert!(matches!(Worker::new(o), Err(Error::Config(_))));
    assert!(matches!(
        Worker::new(options(&f, vec![], 1)),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Worker::new(options(&f, vec![double(), double()], 1)),
        Err(Error::Config(_))
    ));
    let mut o = options(&f, vec![double()], 1);
    o.server = "https://example.invalid".into();
    assert!(matches!(Worker::new(o), Err(Error::Config(m)) if m.contains("TLS")));
}

#[test]
fn backoff_grows_to_its_maximum_with_jitter() {
    let b = Backoff::default();
    for attempt in 0..10 {
        let base = (0.2 * 2f64.powi(attempt)).min(5.0);
        let d = b.delay(attempt as u32).as_secs_f64();
        assert!(
            d >= base - 1e-9 && d <= (base * 1.2).min(5.0) + 1e-9,
            "{} {}",
            attempt,
            d
        );
    }
}

#[test]
fn a_handler_past_its_deadline_is_cancelled_and_reported_as_deadline_exceeded() {
    let f = FakeServer::start();
    let hold = Task::new(
        "t.hold",
        "1",
        |_: Value, a: &Attempt| -> orbit::HandlerResult<Value> {
            assert!(a.deadline.is_some());
            a.cancel_token().wait();
            Err(a.cancelled_error())
        },
    )
    .boxed();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let token = f.enqueue_with_deadline("t.hold", json!({}), json!(now_ms + 200));
    let w = Worker::new(options(&f, vec![hold], 1)).unwrap();
    w.start().unwrap();
    f.wait_until("the result", |st| st.results.len() == 1);
    w.stop(Duration::from_secs(5)).unwrap();
    let e = result_of(&f, &token)["error"].clone();
    assert_eq!(
        (e["code"].as_str(), e["retryable"].as_bool()),
        (Some("DEADLINE_EXCEEDED"), Some(true))
    );
}

// ---- spreading the slots over a shared cluster's live nodes (src/nodes.rs) -----------------

/// A `/v1/health` answer of a shared cluster whose live nodes advertise `addrs`.
fn shared_health(addrs: &[&str]) -> Value {
    let nodes: Vec<Value> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| json!({ "node_id": format!("node-{}", i + 1), "addr": a, "live": true }))
        .collect();
    json!({ "role": "shared", "nodes": nodes })
}

/// Two fake servers of one shared cluster (each knows every session), both live in the health
/// answer of each; their task tokens differ.
fn two_nodes() -> (FakeServer, FakeServer) {
    let a = FakeServer::start();
    let b = FakeServer::start();
    let h = shared_health(&[&a.url, &b.url]);
    for (f, first_id) in [(&a, 0), (&b, 100)] {
        f.with(|st| {
            st.any_session = true;
            st.next_id = first_id;
            st.canned.insert("GET /v1/health".into(), (200, h.clone()));
        });
    }
    (a, b)
}

fn spread_options(f: &FakeServer, logger: Logger) -> WorkerOptions {
    WorkerOptions {
        logger: Some(logger),
        node_refresh: Duration::from_millis(50),
        ..options(f, vec![double()], 2)
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn spreads_its_slots_over_the_live_nodes_and_reports_each_result_to_its_node() {
    let (a, b) = two_nodes();
    let (logger, lines) = quiet();
    let w = Worker::new(spread_options(&a, logger)).unwrap();
    w.start().unwrap();
    let both = sorted(vec![a.url.clone(), b.url.clone()]);
    assert_eq!(w.node_addresses(), both);
    // Two slots over two nodes: one polls each.
    a.wait_until("a poll on a", |st| st.active_polls == 1);
    b.wait_until("a poll on b", |st| st.active_polls == 1);
    let ta = a.enqueue("t.double", json!({ "n": 1 }));
    let tb = b.enqueue("t.double", json!({ "n": 2 }));
    a.wait_until("the result on a", |st| st.results.len() == 1);
    b.wait_until("the result on b", |st| st.results.len() == 1);
    w.stop(Duration::from_secs(5)).unwrap();
    // Each result went to the server that handed its task out, asking for the next one.
    for (f, t) in [(&a, &ta), (&b, &tb)] {
        let r = result_of(f, t);
        assert_eq!(r["path"], "/v1/tasks/complete");
        assert_eq!(r["max_tasks"], 1);
    }
    // Registration, heartbeats, unregistration and the health reads: the configured address.
    b.with(|st| {
        assert!(st.registers.is_empty());
        assert_eq!(st.heartbeats, 0);
        assert_eq!(st.unregs, 0);
        assert!(!st.requests.iter().any(|p| p == "/v1/health"));
    });
    a.with(|st| {
        assert_eq!(st.registers.len(), 1);
        assert_eq!(st.unregs, 1);
        assert!(st.requests.iter().any(|p| p == "/v1/health"));
    });
    let text = lines.lock().unwrap().join("\n");
    assert!(
        text.contains(&format!(
            "INFO orbit slots spread over 2 node(s): {}",
            both.join(", ")
        )),
        "{}",
        text
    );
}

#[test]
fn a_result_on_its_way_to_a_node_that_leaves_goes_to_the_configured_address_at_once() {
    let (a, b) = two_nodes();
    b.with(|st| {
        st.stall.insert("/v1/tasks/complete".into());
    });
    let (logger, _) = quiet();
    let w = Worker::new(WorkerOptions {
        // Far past the test's patience: only the cut ends the held delivery.
        request_timeout: Duration::from_secs(60),
        ..spread_options(&a, logger)
    })
    .unwrap();
    w.start().unwrap();
    b.wait_until("a poll on b", |st| st.active_polls == 1);
    let t = b.enqueue("t.double", json!({ "n": 3 }));
    b.wait_until("the result held by b", |st| st.stalled == 1);
    let left = Instant::now();
    a.with(|st| {
        st.canned
            .insert("GET /v1/health".into(), (200, shared_health(&[&a.url])));
    });
    a.wait_until("the result on a", |st| {
        st.results.iter().any(|r| r["token"] == t.as_str())
    });
    assert!(
        left.elapsed() < Duration::from_secs(5),
        "{:?}",
        left.elapsed()
    );
    let r = result_of(&a, &t);
    assert_eq!(r["output"], json!({ "doubled": 6 }));
    assert!(r.get("max_tasks").is_none(), "{}", r);
    assert_eq!(w.node_addresses(), vec![a.url.clone()]);
    // Both slots poll the configured address now.
    a.wait_until("two polls on a", |st| st.active_polls == 2);
    w.stop(Duration::from_secs(5)).unwrap();
    b.with(|st| st.stall.clear());
}

#[test]
fn a_node_whose_address_does_not_answer_is_left_out_without_a_backoff() {
    let a = FakeServer::start();
    // A port that nothing listens on: taken, then closed.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    a.with(|st| {
        st.canned.insert(
            "GET /v1/health".into(),
            (200, shared_health(&[&a.url, &dead])),
        );
    });
    let (logger, lines) = quiet();
    let w = Worker::new(spread_options(&a, logger)).unwrap();
    w.start().unwrap();
    // The dead node's slot polls the configured address at once.
    a.wait_until("two polls on a", |st| st.active_polls == 2);
    let tokens: Vec<String> = (0..4)
        .map(|n| a.enqueue("t.double", json!({ "n": n })))
        .collect();
    a.wait_until("four results", |st| st.results.len() == 4);
    w.stop(Duration::from_secs(5)).unwrap();
    for t in &tokens {
        assert_eq!(result_of(&a, t)["path"], "/v1/tasks/complete");
    }
    let text = lines.lock().unwrap().join("\n");
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("WARN orbit node {} did not answer (", dead)))
        .collect();
    assert_eq!(warned.len(), 1, "{}", text);
    assert!(
        warned[0].ends_with(&format!("); its slots use {} for 10 s", a.url)),
        "{}",
        warned[0]
    );
    assert!(!text.contains("poll failed"), "{}", text);
}

#[test]
fn with_spreading_off_every_slot_uses_the_configured_address() {
    let (a, b) = two_nodes();
    let (logger, _) = quiet();
    let w = Worker::new(WorkerOptions {
        spread_over_nodes: false,
        ..spread_options(&a, logger)
    })
    .unwrap();
    w.start().unwrap();
    a.wait_until("two polls on a", |st| st.active_polls == 2);
    assert!(w.node_addresses().is_empty());
    w.stop(Duration::from_secs(5)).unwrap();
    assert!(a.with(|st| !st.requests.iter().any(|p| p == "/v1/health")));
    assert!(b.with(|st| st.requests.is_empty()));
}
