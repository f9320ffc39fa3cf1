//! The client against canned answers: typed results, API errors with their codes and details,
//! history pages (a chunked answer), queries, pending, an unreachable server.

mod common;

use common::FakeServer;
use orbit::{Client, ClientOptions, Error, StartOptions, Workflow};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

#[derive(Serialize)]
struct Order {
    order_id: String,
}

#[derive(Deserialize, Debug, PartialEq)]
struct OrderResult {
    tracking: String,
}

fn client(f: &FakeServer) -> Client {
    Client::new(&f.url, ClientOptions::default()).unwrap()
}

#[test]
fn starts_and_reads_a_typed_result() {
    let f = FakeServer::start();
    f.with(|st| {
        st.canned.insert(
            "POST /v1/executions".into(),
            (201, json!({ "execution_id": "o-1", "status": "running", "workflow": "OrderProcessing" })),
        );
        st.canned.insert(
            "GET /v1/executions/o-1/wait?timeout_s=60".into(),
            (200, json!({ "execution_id": "o-1", "status": "completed", "output": { "tracking": "trk-1" } })),
        );
    });
    let c = client(&f);
    let orders: Workflow<Order, OrderResult> = Workflow::new("OrderProcessing", Some("1.0.0"));
    let x = orders
        .start(
            &c,
            Some("o-1"),
            &Order {
                order_id: "o-1".into(),
            },
        )
        .unwrap();
    assert_eq!(
        (x.execution_id.as_str(), x.status.as_str()),
        ("o-1", "running")
    );
    let res = orders
        .result(&c, "o-1", Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(
        res,
        OrderResult {
            tracking: "trk-1".into()
        }
    );
}

#[test]
fn answers_a_failed_execution_as_an_execution_error() {
    let f = FakeServer::start();
    f.with(|st| {
        st.canned.insert(
            "GET /v1/executions/o-2/wait?timeout_s=5".into(),
            (200, json!({ "execution_id": "o-2", "status": "failed", "error": { "code": "CARD_DECLINED", "message": "declined" } })),
        );
    });
    match client(&f).result::<OrderResult>("o-2", Some(Duration::from_secs(5))) {
        Err(Error::Execution(x)) => {
            assert_eq!(x.error.unwrap().code, "CARD_DECLINED");
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn errors_carry_the_api_code_and_details() {
    let f = FakeServer::start();
    f.inject("/v1/executions/o-3/cancel", &[503]);
    let err = client(&f).cancel("o-3", Some("why")).unwrap_err();
    assert!(err.is_retryable());
    assert!(err.has_code(orbit::codes::NOT_LEADER));
    match err {
        Error::Api(e) => {
            assert_eq!(e.status, 503);
            assert_eq!(e.leader_addr(), Some("http://leader"));
            assert!(e.to_string().contains("503 NOT_LEADER"));
        }
        other => panic!("{:?}", other),
    }
    let err = client(&f).get_execution("nope").unwrap_err();
    assert_eq!(err.code(), Some("NOT_FOUND"));
    assert!(!err.is_retryable());
}

#[test]
fn reads_history_pages_queries_signals_and_pending() {
    let f = FakeServer::start();
    f.with(|st| {
        st.canned.insert(
            "GET /v1/executions/h/history".into(),
            (200, json!({ "events": [{ "seq": 1, "type": "WorkflowCreated", "time_ms": 5 }], "next_after_seq": 1 })),
        );
        st.canned.insert(
            "GET /v1/executions/h/history?after_seq=1".into(),
            (200, json!({ "events": [{ "seq": 2, "type": "StepScheduled", "step": "a", "attempt": 1, "idempotency_key": "k" }] })),
        );
        st.canned.insert("GET /v1/executions/h/queries/status".into(), (200, json!({ "result": { "stage": "ship" } })));
        st.canned.insert("GET /v1/executions/h/pending".into(), (200, json!({ "pending": [] })));
        st.canned.insert("POST /v1/executions/h/signals/address%20changed".into(), (200, json!({ "seq": 7 })));
    });
    let c = client(&f);
    let events = c.history_events("h").unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].kind, "StepScheduled");
    assert_eq!(events[1].step.as_deref(), Some("a"));
    assert_eq!(events[1].fields["idempotency_key"], "k");
    let q: serde_json::Value = c.query("h", "status").unwrap();
    assert_eq!(q["stage"], "ship");
    assert_eq!(c.pending("h").unwrap()["pending"], json!([]));
    assert_eq!(
        c.signal("h", "address changed", Some(json!({ "city": "X" })))
            .unwrap()["seq"],
        7
    );
}

#[test]
fn reports_an_unreachable_server_as_a_connection_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = Client::new(
        &format!("http://127.0.0.1:{}", port),
        ClientOptions {
            get_retries: 0,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let err = c
        .start(StartOptions {
            workflow: "W".into(),
            ..StartOptions::default()
        })
        .unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{:?}", err);
    assert!(err.is_retryable());
    assert!(err
        .to_string()
        .starts_with("cannot reach ORBIT runtime at http://127.0.0.1:"));
}

/// A server that answers one request per connection and then closes it, without saying so
/// (`connection: close` missing): the client's kept-alive connection is found closed and the
/// next request goes on a new one.
#[test]
fn a_kept_alive_connection_the_server_closed_is_replaced() {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().flatten().enumerate() {
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let body = format!("{{\"n\":{}}}", n);
            let mut w = conn;
            let _ = write!(
                w,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
                body.len(),
                body
            );
            // dropped: closed
        }
    });
    let c = Client::new(&url, ClientOptions::default()).unwrap();
    assert_eq!(c.health().unwrap()["n"], 0);
    assert_eq!(c.health().unwrap()["n"], 1);
    assert_eq!(c.health().unwrap()["n"], 2);
}
