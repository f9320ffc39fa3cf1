//! A small in-memory ORBIT runtime for the SDK's tests: a task queue, long polls, results,
//! heartbeats with cancellations, and faults to inject; HTTP/1.1 on std's TcpListener.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct FakeState {
    pub sessions: HashSet<String>,
    pub next_id: u64,
    pub queue: VecDeque<Value>,
    /// Bodies of complete and fail, in order, with "path".
    pub results: Vec<Value>,
    /// Tokens for the next heartbeat's cancel list.
    pub cancels: Vec<String>,
    /// Paths, in order.
    pub requests: Vec<String>,
    pub polls: Vec<Value>,
    pub registers: Vec<(Instant, Value)>,
    /// When each registration request arrived, refused ones included.
    pub register_attempts: Vec<Instant>,
    /// path -> statuses to answer before serving it.
    pub fail: HashMap<String, VecDeque<u16>>,
    pub heartbeats: usize,
    pub active_polls: usize,
    pub unregs: usize,
    /// Canned answers of the client's routes: "METHOD path" -> (status, body).
    pub canned: HashMap<String, (u16, Value)>,
    /// Every session id counts as known (a server of a shared cluster: the worker registered
    /// through another one).
    pub any_session: bool,
    /// Paths whose requests are held (unanswered) while listed.
    pub stall: HashSet<String>,
    /// Requests held now.
    pub stalled: usize,
}

pub struct FakeServer {
    pub url: String,
    pub state: Arc<(Mutex<FakeState>, Condvar)>,
}

impl FakeServer {
    pub fn start() -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state: Arc<(Mutex<FakeState>, Condvar)> = Arc::default();
        let s = state.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                thread::spawn(move || serve_conn(conn, s));
            }
        });
        FakeServer { url, state }
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        let mut st = self.state.0.lock().unwrap();
        let r = f(&mut st);
        self.state.1.notify_all();
        r
    }

    pub fn enqueue(&self, task: &str, input: Value) -> String {
        self.enqueue_with_deadline(task, input, Value::Null)
    }

    /// A task whose attempt has a deadline (`deadline_ms`: epoch milliseconds).
    pub fn enqueue_with_deadline(&self, task: &str, input: Value, deadline_ms: Value) -> String {
        self.with(|st| {
            st.next_id += 1;
            let n = st.next_id;
            let token = format!("x-{}/t{}", n, n);
            st.queue.push_back(json!({
                "token": token, "execution_id": format!("x-{}", n), "step": "s", "attempt": 1,
                "task": task, "contract": "1", "input": input, "idempotency_key": format!("k-{}", token),
                "redelivery": false, "deadline_ms": deadline_ms,
            }));
            token
        })
    }

    pub fn inject(&self, path: &str, statuses: &[u16]) {
        self.with(|st| {
            st.fail
                .entry(path.to_string())
                .or_default()
                .extend(statuses.iter().copied())
        });
    }

    pub fn drop_sessions(&self) {
        self.with(|st| st.sessions.clear());
    }

    /// Waits until `cond` holds (checked under the lock); a condition, not a sleep.
    pub fn wait_until(&self, what: &str, cond: impl Fn(&FakeState) -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        let mut st = self.state.0.lock().unwrap();
        while !cond(&st) {
            let now = Instant::now();
            assert!(now < end, "timed out waiting for {}", what);
            st = self
                .state
                .1
                .wait_timeout(st, Duration::from_millis(20))
                .unwrap()
                .0;
        }
    }
}

fn serve_conn(conn: TcpStream, state: Arc<(Mutex<FakeState>, Condvar)>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut length = 0;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (status, answer, chunked) = handle(&state, &method, &path, body);
        let text = answer.to_string();
        let reason = if status < 300 { "OK" } else { "Error" };
        let res = if chunked {
            // Two chunks, as a server that streams its answer would send them.
            let (a, b) = text.split_at(text.len() / 2);
            format!(
                "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                status, reason, a.len(), a, b.len(), b
            )
        } else {
            format!(
                "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
                status,
                reason,
                text.len(),
                text
            )
        };
        if out.write_all(res.as_bytes()).is_err() {
            return;
        }
    }
}

fn err(status: u16, code: &str) -> (u16, Value, bool) {
    (
        status,
        json!({"error": {"code": code, "message": format!("fake {}", code), "leader_addr": "http://leader"}}),
        false,
    )
}

fn handle(
    state: &Arc<(Mutex<FakeState>, Condvar)>,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, Value, bool) {
    let (lock, cv) = &**state;
    let mut st = lock.lock().unwrap();
    st.requests.push(path.to_string());
    if path == "/v1/workers/register" {
        st.register_attempts.push(Instant::now());
    }
    if let Some(s) = st.fail.get_mut(path).and_then(|q| q.pop_front()) {
        cv.notify_all();
        let code = match s {
            503 => "NOT_LEADER",
            404 => "UNKNOWN_SESSION",
            401 => "UNAUTHORIZED",
            _ => "STORAGE_ERROR",
        };
        return err(s, code);
    }
    if let Some((s, v)) = st.canned.get(&format!("{} {}", method, path)).cloned() {
        let chunked = path.contains("history");
        return (s, v, chunked);
    }
    let session = body["session_id"].as_str().unwrap_or("").to_string();
    if st.any_session && !session.is_empty() {
        st.sessions.insert(session.clone());
    }
    if st.stall.contains(path) {
        st.stalled += 1;
        cv.notify_all();
        while st.stall.contains(path) {
            st = cv.wait_timeout(st, Duration::from_millis(20)).unwrap().0;
        }
        st.stalled -= 1;
    }
    let answer = match path {
        "/v1/workers/register" => {
            st.next_id += 1;
            let id = format!("sess-{}", st.next_id);
            st.sessions.insert(id.clone());
            st.registers.push((Instant::now(), body));
            (200, json!({ "session_id": id }), false)
        }
        "/v1/workers/poll" => {
            st.polls.push(body);
            st.active_polls += 1;
            cv.notify_all();
            let end = Instant::now() + Duration::from_secs(1);
            while st.queue.is_empty() && st.sessions.contains(&session) && Instant::now() < end {
                st = cv.wait_timeout(st, Duration::from_millis(20)).unwrap().0;
            }
            st.active_polls -= 1;
            if !st.sessions.contains(&session) {
                drop(st);
                cv.notify_all();
                return err(404, "UNKNOWN_SESSION");
            }
            let tasks: Vec<Value> = st.queue.pop_front().into_iter().collect();
            (200, json!({ "tasks": tasks }), false)
        }
        "/v1/workers/heartbeat" => {
            st.heartbeats += 1;
            if !st.sessions.contains(&session) {
                drop(st);
                cv.notify_all();
                return err(404, "UNKNOWN_SESSION");
            }
            let c = std::mem::take(&mut st.cancels);
            (200, json!({ "cancel": c }), false)
        }
        "/v1/workers/unregister" => {
            st.unregs += 1;
            st.sessions.remove(&session);
            (200, json!({}), false)
        }
        "/v1/tasks/complete" | "/v1/tasks/fail" => {
            let mut b = body;
            let take = b.get("max_tasks").is_some();
            b["path"] = json!(path);
            st.results.push(b);
            let tasks: Vec<Value> = if take {
                st.queue.pop_front().into_iter().collect()
            } else {
                Vec::new()
            };
            (200, json!({ "accepted": true, "tasks": tasks }), false)
        }
        _ => err(404, "NOT_FOUND"),
    };
    drop(st);
    cv.notify_all();
    answer
}
