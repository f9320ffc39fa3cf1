//! The worker: registers, long-polls in `concurrency` slots (`max_tasks: 1` each, the next task
//! asked for in each result's report), runs each attempt with a cancellation token that fires
//! when the runtime cancels it (heartbeats carry cancellations) or its deadline passes, reports
//! each result until it is delivered, retries every connection error and 5xx with backoff and
//! jitter, registers again after 404 UNKNOWN_SESSION, and stops gracefully.
//!
//! Why one file of this size: the worker's parts (session, slots, execution, report, heartbeat)
//! share one `Arc<Inner>` of state and its locks; split into modules they would each need that
//! state's private fields made crate-visible. Its sections follow those roles, in that order.

use crate::backoff::{random, stderr_logger, Backoff, Level, Logger, Retrier};
use crate::cancel::{CancelToken, Reason};
use crate::error::{ApiError, Cancelled, Error, TaskError};
use crate::http::{format_duration, Transport};
use crate::nodes::{live_addresses, Nodes};
use crate::task::{Attempt, TaskDefinition};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The options of a [`Worker`]. `server`, `worker_id` and `tasks` are required; the others
/// have defaults (`..WorkerOptions::default()`).
#[derive(Clone)]
pub struct WorkerOptions {
    /// The runtime's base URL (or the load balancer's in front of a cluster); `http://` only.
    pub server: String,
    /// The bearer token (a worker's own token when the server has a workers file).
    pub token: Option<String>,
    /// This worker's identity (`worker_id` of registration and of the workers file).
    pub worker_id: String,
    /// Reported at registration (default `rust`); tasks pinned to a language go to workers of
    /// that runtime.
    pub runtime: String,
    pub tasks: Vec<Arc<dyn TaskDefinition>>,
    /// How many attempts run at once (default 8): one slot each, each polling for one task at a
    /// time on a connection of its own.
    pub concurrency: usize,
    /// The long-poll wait (default 30 s, at most 60 s).
    pub poll_wait: Duration,
    /// The time between heartbeats (default 2 s).
    pub heartbeat_interval: Duration,
    /// Bounds every request but the long poll (default 30 s).
    pub request_timeout: Duration,
    /// Spaces the retries of connection errors and 5xx answers.
    pub backoff: Backoff,
    /// How long [`Worker::run_until_signal`] lets running tasks finish (default 30 s).
    pub shutdown_grace: Duration,
    /// Receives log lines (default: standard error with timestamps).
    pub logger: Option<Logger>,
    /// Adds debug lines.
    pub debug: bool,
    /// In a cluster in shared mode, spread the slots over the live servers at the addresses they
    /// advertise (`/v1/health`), so that each slot polls a server and reports to it; default
    /// true. Registration, heartbeats and unregistration stay on `server`. See README.md and
    /// docs/clusters.md, "Workers connect to every server".
    pub spread_over_nodes: bool,
    /// How often the live servers are read again (default 5 s, at least 50 ms).
    pub node_refresh: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            server: "http://127.0.0.1:7233".into(),
            token: None,
            worker_id: String::new(),
            runtime: "rust".into(),
            tasks: Vec::new(),
            concurrency: 8,
            poll_wait: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
            backoff: Backoff::default(),
            shutdown_grace: Duration::from_secs(30),
            logger: None,
            debug: false,
            spread_over_nodes: true,
            node_refresh: Duration::from_secs(5),
        }
    }
}

/// One attempt as `POST /v1/workers/poll` hands it out.
#[derive(Debug, Clone, Deserialize)]
struct PolledTask {
    #[serde(default)]
    token: String,
    #[serde(default)]
    execution_id: String,
    #[serde(default)]
    step: String,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    task: String,
    #[serde(default)]
    contract: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    idempotency_key: String,
    #[serde(default)]
    redelivery: bool,
    #[serde(default)]
    deadline_ms: Option<f64>,
}

#[derive(Deserialize)]
struct TasksAnswer {
    #[serde(default)]
    tasks: Vec<PolledTask>,
    #[serde(default)]
    accepted: Option<bool>,
}

#[derive(Deserialize)]
struct RegisterAnswer {
    #[serde(default)]
    session_id: String,
}

#[derive(Deserialize)]
struct HeartbeatAnswer {
    #[serde(default)]
    cancel: Vec<String>,
}

#[derive(Serialize)]
struct RegisterTask<'a> {
    name: &'a str,
    contract: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    language: Option<&'a str>,
}

/// The error object of `POST /v1/tasks/fail`.
#[derive(Debug, Clone, Serialize)]
struct Failure {
    code: String,
    message: String,
    retryable: bool,
    details: Value,
}

enum Outcome {
    Output(Value),
    Failed(Failure),
}

struct Inflight {
    step: String,
    cancel: CancelToken,
    handler_done: bool,
}

/// Where a worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    New,
    Starting,
    Running,
    Stopping,
    Stopped,
}

struct St {
    state: State,
    session: Option<String>,
    reg_once: bool,
    hb_pending: bool,
    inflight: HashMap<String, Inflight>,
    backlog: VecDeque<PolledTask>,
    /// Each slot's poll in progress: its session and the token that ends it.
    polls: Vec<Option<(String, CancelToken)>>,
    /// The node each slot talks to (an advertised address), or None: the configured address.
    targets: Vec<Option<String>>,
    /// Each slot's connection, to its target.
    conns: Vec<Arc<Transport>>,
    /// The first delivery of a result each slot has on its way to its node: the token that cuts
    /// it when the node leaves the live list.
    deliveries: Vec<Option<CancelToken>>,
    /// Slot threads and background deliveries still running.
    active: usize,
}

struct Inner {
    opts: WorkerOptions,
    tasks: HashMap<(String, String), Arc<dyn TaskDefinition>>,
    /// Registration, heartbeats, unregistration, the live nodes' reads and results' retries.
    main: Transport,
    /// Which node each slot talks to.
    nodes: Nodes,
    logger: Logger,
    st: Mutex<St>,
    changed: Condvar,
    reg_lock: Mutex<()>,
    /// Ends polls, the slots' backoff sleeps and background registrations.
    stop: CancelToken,
    /// The parent of every handler's token; fires when a stop gives up on running tasks.
    task_parent: CancelToken,
    /// Result deliveries give up when it fires.
    abandon: CancelToken,
    heartbeat: CancelToken,
    hb_thread: Mutex<Option<JoinHandle<()>>>,
    nodes_thread: Mutex<Option<JoinHandle<()>>>,
    stop_once: Mutex<bool>,
}

/// Serves tasks to an ORBIT runtime. Cheap to clone: clones share the worker, so one thread can
/// [`Worker::stop`] what another started.
///
/// ```no_run
/// use orbit::{Task, Worker, WorkerOptions};
/// # let charge = Task::new("payments.charge", "1", |_: serde_json::Value, _: &orbit::Attempt| Ok(serde_json::json!({})));
/// let w = Worker::new(WorkerOptions {
///     server: "http://127.0.0.1:7233".into(),
///     worker_id: "orders-rust".into(),
///     tasks: vec![charge.boxed()],
///     ..WorkerOptions::default()
/// })?;
/// w.run_until_signal()?; // until SIGTERM or SIGINT: stop polling, finish running tasks
/// # Ok::<(), orbit::Error>(())
/// ```
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

impl Worker {
    /// Checks the options and makes a worker; [`Worker::start`] sets it going.
    pub fn new(mut opts: WorkerOptions) -> Result<Worker, Error> {
        if opts.worker_id.is_empty() {
            return Err(Error::Config("Worker::new: worker_id is required".into()));
        }
        if opts.tasks.is_empty() {
            return Err(Error::Config(
                "Worker::new: tasks must list at least one task".into(),
            ));
        }
        if opts.runtime.is_empty() {
            opts.runtime = "rust".into();
        }
        if opts.concurrency == 0 {
            opts.concurrency = 8;
        }
        let zero = Duration::from_millis(0);
        if opts.poll_wait == zero {
            opts.poll_wait = Duration::from_secs(30);
        }
        opts.poll_wait = opts.poll_wait.min(Duration::from_secs(60));
        if opts.heartbeat_interval == zero {
            opts.heartbeat_interval = Duration::from_secs(2);
        }
        if opts.request_timeout == zero {
            opts.request_timeout = Duration::from_secs(30);
        }
        if opts.node_refresh == zero {
            opts.node_refresh = Duration::from_secs(5);
        }
        opts.node_refresh = opts.node_refresh.max(Duration::from_millis(50));
        let mut tasks = HashMap::new();
        for t in &opts.tasks {
            if t.name().is_empty() || t.contract().is_empty() {
                return Err(Error::Config(
                    "Worker::new: every task needs a name and a contract version".into(),
                ));
            }
            let key = (t.name().to_string(), t.contract().to_string());
            if tasks.insert(key, t.clone()).is_some() {
                return Err(Error::Config(format!(
                    "Worker::new: task {} contract {} is listed twice",
                    t.name(),
                    t.contract()
                )));
            }
        }
        let main = Transport::new(&opts.server, opts.token.clone())?;
        let mut conns = Vec::new();
        for _ in 0..opts.concurrency {
            conns.push(Arc::new(Transport::new(&opts.server, opts.token.clone())?));
        }
        let logger = opts.logger.clone().unwrap_or_else(stderr_logger);
        let n = opts.concurrency;
        Ok(Worker {
            inner: Arc::new_cyclic(|me: &std::sync::Weak<Inner>| {
                let me = me.clone();
                let nodes = Nodes::new(
                    &main.server,
                    logger.clone(),
                    (random() * 1024.0) as usize,
                    Arc::new(Instant::now),
                    Box::new(move |left: &BTreeSet<String>| {
                        if let Some(w) = me.upgrade() {
                            w.cut_left(left);
                        }
                    }),
                );
                Inner {
                    opts,
                    tasks,
                    main,
                    nodes,
                    logger,
                    st: Mutex::new(St {
                        state: State::New,
                        session: None,
                        reg_once: false,
                        hb_pending: false,
                        inflight: HashMap::new(),
                        backlog: VecDeque::new(),
                        polls: vec![None; n],
                        targets: vec![None; n],
                        conns,
                        deliveries: vec![None; n],
                        active: 0,
                    }),
                    changed: Condvar::new(),
                    reg_lock: Mutex::new(()),
                    stop: CancelToken::new(),
                    task_parent: CancelToken::new(),
                    abandon: CancelToken::new(),
                    heartbeat: CancelToken::new(),
                    hb_thread: Mutex::new(None),
                    nodes_thread: Mutex::new(None),
                    stop_once: Mutex::new(false),
                }
            }),
        })
    }

    /// The runtime's URL.
    pub fn server(&self) -> &str {
        &self.inner.main.server
    }

    /// The current session, or None while the worker is not registered.
    pub fn session_id(&self) -> Option<String> {
        self.inner.st.lock().unwrap().session.clone()
    }

    pub fn state(&self) -> State {
        self.inner.st.lock().unwrap().state
    }

    /// The live servers' addresses the slots are spread over, as last read (empty: every slot
    /// uses the configured address).
    pub fn node_addresses(&self) -> Vec<String> {
        self.inner.nodes.addresses()
    }

    /// The tokens of the attempts being run or reported.
    pub fn running_tokens(&self) -> Vec<String> {
        self.inner.running_tokens()
    }

    /// Registers (retrying connection errors and 5xx until it succeeds or the worker is
    /// stopped) and sets the slots and the heartbeat going. A refusal (401, 403, 422) is the
    /// answer.
    pub fn start(&self) -> Result<(), Error> {
        let w = &self.inner;
        {
            let mut st = w.st.lock().unwrap();
            if st.state != State::New {
                return Err(Error::Config(format!(
                    "Worker::start: the worker is {:?}",
                    st.state
                )));
            }
            st.state = State::Starting;
        }
        let res = w.ensure_session(&w.stop);
        let mut st = w.st.lock().unwrap();
        if st.state == State::Stopping {
            return Ok(()); // stop was called meanwhile; it finishes the job
        }
        if let Err(e) = res {
            st.state = State::Stopped;
            drop(st);
            w.stop.cancel(Reason::Shutdown);
            *w.stop_once.lock().unwrap() = true;
            w.changed.notify_all();
            return Err(e);
        }
        drop(st);
        // In a shared cluster, the live nodes to spread the slots over (one health read).
        w.nodes_refresh(&w.stop);
        let mut st = w.st.lock().unwrap();
        if st.state == State::Stopping {
            return Ok(()); // stop was called meanwhile; it finishes the job
        }
        st.state = State::Running;
        st.active += w.opts.concurrency;
        drop(st);
        for i in 0..w.opts.concurrency {
            let inner = self.inner.clone();
            thread::Builder::new()
                .name(format!("orbit-slot-{}", i))
                .spawn(move || {
                    inner.slot_loop(i);
                    inner.done_one();
                })
                .map_err(|e| Error::Config(format!("cannot start a thread: {}", e)))?;
        }
        let inner = self.inner.clone();
        let hb = thread::Builder::new()
            .name("orbit-heartbeat".into())
            .spawn(move || inner.heartbeat_loop())
            .map_err(|e| Error::Config(format!("cannot start a thread: {}", e)))?;
        *w.hb_thread.lock().unwrap() = Some(hb);
        if w.opts.spread_over_nodes {
            let inner = self.inner.clone();
            let t = thread::Builder::new()
                .name("orbit-nodes".into())
                .spawn(move || inner.nodes_loop())
                .map_err(|e| Error::Config(format!("cannot start a thread: {}", e)))?;
            *w.nodes_thread.lock().unwrap() = Some(t);
        }
        Ok(())
    }

    /// Stops gracefully: no new polls, running tasks finish and report their results, the
    /// heartbeat stops, the session is unregistered. When `grace` passes first, the running
    /// handlers' tokens fire (`Reason::Shutdown`), undelivered results are given up, and the
    /// unregistration gives their attempts back to the runtime, which hands them out again at
    /// once. Safe to call more than once and from any thread; returns when the worker stopped.
    pub fn stop(&self, grace: Duration) -> Result<(), Error> {
        let w = &self.inner;
        {
            let mut once = w.stop_once.lock().unwrap();
            if *once {
                drop(once);
                let mut st = w.st.lock().unwrap();
                while st.state != State::Stopped {
                    st = w.changed.wait(st).unwrap();
                }
                return Ok(());
            }
            *once = true;
        }
        let started = {
            let mut st = w.st.lock().unwrap();
            let s = matches!(st.state, State::Running | State::Starting);
            st.state = State::Stopping;
            s
        };
        w.stop.cancel(Reason::Shutdown);
        if started {
            let n = w.running_tokens().len();
            if n > 0 {
                w.log(
                    Level::Info,
                    &format!("stopping: waiting for {} running task(s)", n),
                );
            }
            if !w.wait_drained(Instant::now() + grace) {
                let n = {
                    let mut st = w.st.lock().unwrap();
                    st.backlog.clear();
                    st.inflight.len()
                };
                w.log(Level::Warn, &format!("stopping: {} task(s) still running; abandoning them (the runtime hands their attempts out again)", n));
                w.task_parent.cancel(Reason::Shutdown);
                w.abandon.cancel(Reason::Shutdown);
                // Handlers that heed their token end now; one that ignores it is not waited for.
                w.wait_drained(Instant::now() + Duration::from_millis(200));
            }
            w.heartbeat.cancel(Reason::Shutdown);
            if let Some(h) = w.hb_thread.lock().unwrap().take() {
                let _ = h.join();
            }
            if let Some(h) = w.nodes_thread.lock().unwrap().take() {
                let _ = h.join();
            }
            w.unregister();
            w.log(
                Level::Info,
                &format!("worker stopped worker_id={}", w.opts.worker_id),
            );
        }
        w.st.lock().unwrap().state = State::Stopped;
        w.changed.notify_all();
        Ok(())
    }

    /// Starts the worker and serves until SIGTERM or SIGINT, then stops gracefully within
    /// `shutdown_grace` (Unix).
    #[cfg(unix)]
    pub fn run_until_signal(&self) -> Result<(), Error> {
        let signals = crate::signals::Termination::install()
            .map_err(|e| Error::Config(format!("cannot install signal handlers: {}", e)))?;
        let w = self.clone();
        let stopper = thread::spawn(move || {
            signals.wait();
            w.stop(w.inner.opts.shutdown_grace)
        });
        self.start()?;
        stopper.join().unwrap_or(Ok(()))
    }
}

fn deadline_of(ms: Option<f64>) -> Option<Instant> {
    let v = ms.filter(|v| *v > 0.0)?;
    if v > 1e11 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
            * 1000.0;
        Some(Instant::now() + Duration::from_secs_f64(((v - now) / 1000.0).max(0.0)))
    } else {
        Some(Instant::now() + Duration::from_secs_f64(v / 1000.0))
    }
}

fn empty() -> Value {
    Value::Object(Map::new())
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 3).collect();
        t.push_str("...");
        t
    }
}

impl Inner {
    fn log(&self, level: Level, message: &str) {
        if level == Level::Debug && !self.opts.debug {
            return;
        }
        (self.logger)(level, &format!("orbit {}", message))
    }

    fn describe(&self, e: &Error) -> String {
        match e {
            Error::Api(a) => format!(
                "ORBIT runtime at {} answered {} {}: {}",
                self.main.server, a.status, a.code, a.message
            ),
            e => e.to_string(),
        }
    }

    fn running_tokens(&self) -> Vec<String> {
        let st = self.st.lock().unwrap();
        let mut t: Vec<String> = st.inflight.keys().cloned().collect();
        t.sort();
        t
    }

    fn done_one(&self) {
        self.st.lock().unwrap().active -= 1;
        self.changed.notify_all();
    }

    /// Waits until every slot and background delivery ended; false when `until` came first.
    fn wait_drained(&self, until: Instant) -> bool {
        let mut st = self.st.lock().unwrap();
        while st.active > 0 {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            st = self.changed.wait_timeout(st, until - now).unwrap().0;
        }
        true
    }

    // ---- the session -----------------------------------------------------------------

    /// The current session, registering (one caller at a time) when there is none.
    fn ensure_session(&self, cancel: &CancelToken) -> Result<String, Error> {
        if let Some(s) = self.st.lock().unwrap().session.clone() {
            return Ok(s);
        }
        let _g = self.reg_lock.lock().unwrap();
        if let Some(s) = self.st.lock().unwrap().session.clone() {
            return Ok(s);
        }
        self.register(cancel)
    }

    fn register(&self, cancel: &CancelToken) -> Result<String, Error> {
        let tasks: Vec<RegisterTask> = self
            .opts
            .tasks
            .iter()
            .map(|t| RegisterTask {
                name: t.name(),
                contract: t.contract(),
                language: t.language(),
            })
            .collect();
        let body = json!({
            "worker_id": self.opts.worker_id,
            "runtime": self.opts.runtime,
            "concurrency": self.opts.concurrency,
            "tasks": tasks,
        });
        let mut r = Retrier::new(self.opts.backoff);
        loop {
            let res = self
                .main
                .call::<RegisterAnswer>(
                    "POST",
                    "/v1/workers/register",
                    Some(&body),
                    self.opts.request_timeout,
                    Some(cancel),
                )
                .and_then(|a| {
                    if a.session_id.is_empty() {
                        Err(Error::from(ApiError {
                            status: 200,
                            code: crate::error::codes::INVALID_RESPONSE.into(),
                            message: "register answered without a session_id".into(),
                            details: Map::new(),
                            method: "POST".into(),
                            path: "/v1/workers/register".into(),
                            body: String::new(),
                        }))
                    } else {
                        Ok(a.session_id)
                    }
                });
            let err = match res {
                Ok(session) => {
                    {
                        let mut st = self.st.lock().unwrap();
                        st.session = Some(session.clone());
                        st.reg_once = true;
                    }
                    self.log(
                        Level::Info,
                        &format!(
                            "worker registered worker_id={} runtime={} tasks={} session_id={}",
                            self.opts.worker_id,
                            self.opts.runtime,
                            self.opts.tasks.len(),
                            session
                        ),
                    );
                    return Ok(session);
                }
                Err(e) => e,
            };
            if cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
            let once = self.st.lock().unwrap().reg_once;
            // Before the first success, a refusal (401, 403, 422) is the caller's to see.
            if !err.is_retryable() && !once {
                return Err(err);
            }
            let level = if err.is_retryable() {
                Level::Warn
            } else {
                Level::Error
            };
            let d = r.next_delay();
            self.log(
                level,
                &format!(
                    "register failed: {}; retrying in {}",
                    self.describe(&err),
                    format_duration(d)
                ),
            );
            if cancel.wait_timeout(d) {
                return Err(Error::Cancelled);
            }
        }
    }

    /// Drops a session the runtime no longer knows and ends the polls held on it.
    fn forget_session(&self, session: &str, op: &str) {
        let polls = {
            let mut st = self.st.lock().unwrap();
            if st.session.as_deref() != Some(session) {
                return;
            }
            st.session = None;
            st.polls
                .iter()
                .flatten()
                .filter(|(s, _)| s == session)
                .map(|(_, t)| t.clone())
                .collect::<Vec<_>>()
        };
        self.log(
            Level::Warn,
            &format!(
                "{}: the runtime does not know session {} (UNKNOWN_SESSION); registering again",
                op, session
            ),
        );
        for t in polls {
            t.cancel(Reason::Cancel);
        }
    }

    fn unregister(&self) {
        let session = match self.st.lock().unwrap().session.clone() {
            Some(s) => s,
            None => return,
        };
        let mut r = Retrier::new(self.opts.backoff);
        for attempt in 1.. {
            let res = self.main.call::<Value>(
                "POST",
                "/v1/workers/unregister",
                Some(&json!({ "session_id": session })),
                self.opts.request_timeout,
                None,
            );
            match res {
                Ok(_) => break,
                Err(e) if e.is_unknown_session() => break,
                Err(e) if e.is_retryable() && attempt < 4 => {
                    let d = r.next_delay();
                    self.log(
                        Level::Warn,
                        &format!(
                            "unregister failed: {}; retrying in {}",
                            self.describe(&e),
                            format_duration(d)
                        ),
                    );
                    thread::sleep(d);
                }
                Err(e) => {
                    self.log(
                        Level::Warn,
                        &format!("unregister failed: {}; giving up", self.describe(&e)),
                    );
                    return;
                }
            }
        }
        self.st.lock().unwrap().session = None;
    }

    // ---- heartbeats --------------------------------------------------------------------

    fn heartbeat_loop(self: &Arc<Self>) {
        let mut r = Retrier::new(self.opts.backoff);
        let mut delay = self.opts.heartbeat_interval;
        loop {
            if self.heartbeat.wait_timeout(delay) {
                return;
            }
            delay = self.opts.heartbeat_interval;
            let session = match self.st.lock().unwrap().session.clone() {
                Some(s) => s,
                None => {
                    self.register_in_background();
                    continue;
                }
            };
            let tokens = self.running_tokens();
            let res = self.main.call::<HeartbeatAnswer>(
                "POST",
                "/v1/workers/heartbeat",
                Some(&json!({ "session_id": session, "tokens": tokens })),
                self.opts.request_timeout,
                Some(&self.heartbeat),
            );
            if self.heartbeat.is_cancelled() {
                return;
            }
            match res {
                Ok(a) => {
                    r.reset();
                    for token in a.cancel {
                        self.cancel_attempt(&token);
                    }
                }
                Err(e) if e.is_unknown_session() => {
                    self.forget_session(&session, "heartbeat");
                    self.register_in_background();
                }
                Err(e) => {
                    delay = r.next_delay();
                    let level = if e.is_retryable() {
                        Level::Warn
                    } else {
                        Level::Error
                    };
                    self.log(
                        level,
                        &format!(
                            "heartbeat failed: {}; retrying in {}",
                            self.describe(&e),
                            format_duration(delay)
                        ),
                    );
                }
            }
        }
    }

    /// Registers again in a thread of its own (unless stopping: nothing to keep alive then).
    fn register_in_background(self: &Arc<Self>) {
        if self.stop.is_cancelled() {
            return;
        }
        {
            let mut st = self.st.lock().unwrap();
            if st.hb_pending {
                return;
            }
            st.hb_pending = true;
        }
        let me = self.clone();
        thread::spawn(move || {
            let _ = me.ensure_session(&me.stop);
            me.st.lock().unwrap().hb_pending = false;
        });
    }

    fn cancel_attempt(&self, token: &str) {
        let (cancel, step) = {
            let st = self.st.lock().unwrap();
            match st.inflight.get(token) {
                Some(e) if !e.handler_done && !e.cancel.is_cancelled() => {
                    (e.cancel.clone(), e.step.clone())
                }
                _ => return,
            }
        };
        self.log(
            Level::Info,
            &format!(
                "task cancelled by the runtime token={} step={}",
                token, step
            ),
        );
        cancel.cancel(Reason::Cancel);
    }

    // ---- the router (src/nodes.rs) ---------------------------------------------------------

    /// One read of `/v1/health` of the configured address; a failed read keeps the last list.
    fn nodes_refresh(&self, cancel: &CancelToken) {
        if !self.opts.spread_over_nodes {
            return;
        }
        let res = self.main.call::<Value>(
            "GET",
            "/v1/health",
            None::<&Value>,
            self.opts.request_timeout.min(Duration::from_secs(10)),
            Some(cancel),
        );
        match res {
            Ok(health) => self.nodes.update(live_addresses(&health)),
            Err(e) => self.log(
                Level::Debug,
                &format!("cannot read the cluster's nodes: {}", self.describe(&e)),
            ),
        }
    }

    /// Reads the live nodes every `node_refresh` until the heartbeat stops.
    fn nodes_loop(&self) {
        while !self.heartbeat.wait_timeout(self.opts.node_refresh) {
            self.nodes_refresh(&self.heartbeat);
        }
    }

    /// Nodes left the live list: their slots' polls end (the slots move at once) and the
    /// results on their way to them are cut (and sent to the configured address at once).
    fn cut_left(&self, left: &BTreeSet<String>) {
        let cuts: Vec<CancelToken> = {
            let st = self.st.lock().unwrap();
            (0..st.targets.len())
                .filter(|&i| st.targets[i].as_ref().is_some_and(|t| left.contains(t)))
                .flat_map(|i| {
                    let poll = st.polls[i].as_ref().map(|(_, t)| t.clone());
                    poll.into_iter().chain(st.deliveries[i].clone())
                })
                .collect()
        };
        for t in cuts {
            t.cancel(Reason::Cancel);
        }
    }

    /// Points slot `i` at the node it should talk to now (a new connection when that changed);
    /// answers its target and its connection.
    fn route(&self, i: usize) -> (Option<String>, Arc<Transport>) {
        let mut target = self.nodes.target_for(i);
        let (current, conn) = {
            let st = self.st.lock().unwrap();
            (st.targets[i].clone(), st.conns[i].clone())
        };
        if target == current {
            return (current, conn);
        }
        let server = target.as_deref().unwrap_or(&self.main.server);
        let conn = match Transport::new(server, self.opts.token.clone()) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                // Not an address this SDK can use: the configured one, as for a silent node.
                if let Some(addr) = target.take() {
                    self.nodes.unreachable(&addr, &e.to_string());
                }
                Arc::new(
                    Transport::new(&self.main.server, self.opts.token.clone())
                        .expect("the configured address was checked by Worker::new"),
                )
            }
        };
        // The old connection closes when the last of its users (a delivery in the background)
        // lets it go.
        let mut st = self.st.lock().unwrap();
        st.targets[i] = target.clone();
        st.conns[i] = conn.clone();
        (target, conn)
    }

    // ---- slots -------------------------------------------------------------------------

    /// One concurrency slot: a long poll for one task on the slot's connection, the task run,
    /// its result reported on the same connection asking for the next task (eager dispatch),
    /// and so on while answers carry one.
    fn slot_loop(self: &Arc<Self>, i: usize) {
        let mut r = Retrier::new(self.opts.backoff);
        while !self.stop.is_cancelled() {
            let backlog = self.st.lock().unwrap().backlog.pop_front();
            let mut task = match backlog {
                Some(t) => Some(t),
                None => {
                    let (target, conn) = self.route(i);
                    match self.poll(i, target.as_deref(), &conn) {
                        Ok(t) => {
                            r.reset();
                            t
                        }
                        Err(e) => {
                            if self.stop.is_cancelled() {
                                return;
                            }
                            if let (Some(addr), Error::Connection(c)) = (&target, &e) {
                                // The node's address does not answer: the configured address
                                // meanwhile, at once.
                                self.nodes.unreachable(addr, &c.reason);
                                continue;
                            }
                            let d = r.next_delay();
                            let level = if e.is_retryable() {
                                Level::Warn
                            } else {
                                Level::Error
                            };
                            self.log(
                                level,
                                &format!(
                                    "poll failed: {}; retrying in {}",
                                    self.describe(&e),
                                    format_duration(d)
                                ),
                            );
                            if self.stop.wait_timeout(d) {
                                return;
                            }
                            continue;
                        }
                    }
                }
            };
            while let Some(t) = task {
                task = self.run_task(i, t);
            }
        }
    }

    /// The first task; the others are queued (a runtime that ignores max_tasks).
    fn first_of(&self, mut tasks: Vec<PolledTask>) -> Option<PolledTask> {
        if tasks.is_empty() {
            return None;
        }
        if tasks.len() > 1 {
            self.log(
                Level::Warn,
                &format!("the runtime answered {} tasks for max_tasks=1", tasks.len()),
            );
            let rest = tasks.split_off(1);
            self.st.lock().unwrap().backlog.extend(rest);
        }
        tasks.pop()
    }

    /// One long poll for one task; None when it ran out or its session was lost.
    fn poll(
        &self,
        i: usize,
        target: Option<&str>,
        conn: &Transport,
    ) -> Result<Option<PolledTask>, Error> {
        let session = self.ensure_session(&self.stop)?;
        let tok = self.stop.child(None);
        {
            let mut st = self.st.lock().unwrap();
            if st.session.as_deref() != Some(session.as_str()) {
                return Ok(None); // lost between ensure_session and here
            }
            st.polls[i] = Some((session.clone(), tok.clone()));
        }
        if let Some(t) = target {
            // The node left since the slot was routed (before the poll was there to be ended).
            if !self.nodes.addresses().iter().any(|a| a == t) {
                self.st.lock().unwrap().polls[i] = None;
                return Ok(None);
            }
        }
        let body = json!({
            "session_id": session,
            "max_tasks": 1,
            "wait_s": self.opts.poll_wait.as_secs(),
        });
        let res = conn.call::<TasksAnswer>(
            "POST",
            "/v1/workers/poll",
            Some(&body),
            self.opts.poll_wait + Duration::from_secs(15),
            Some(&tok),
        );
        self.st.lock().unwrap().polls[i] = None;
        match res {
            Ok(a) => Ok(self.first_of(a.tasks)),
            Err(e) if e.is_unknown_session() => {
                self.forget_session(&session, "poll");
                Ok(None)
            }
            Err(Error::Cancelled) if !self.stop.is_cancelled() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs one attempt and reports it; answers the next task the report's answer carried (to
    /// run on this slot). A report whose first try fails is retried in the background and the
    /// slot freed.
    fn run_task(self: &Arc<Self>, i: usize, task: PolledTask) -> Option<PolledTask> {
        if task.token.is_empty() {
            self.log(
                Level::Error,
                "poll answered a task without a token; ignoring it",
            );
            return None;
        }
        let cancel = self.task_parent.child(deadline_of(task.deadline_ms));
        {
            let mut st = self.st.lock().unwrap();
            if st.inflight.contains_key(&task.token) {
                drop(st);
                self.log(
                    Level::Debug,
                    &format!(
                        "task {} handed out again while it runs here; ignoring",
                        task.token
                    ),
                );
                return None;
            }
            st.inflight.insert(
                task.token.clone(),
                Inflight {
                    step: task.step.clone(),
                    cancel: cancel.clone(),
                    handler_done: false,
                },
            );
        }
        let outcome = self.execute(&task, &cancel);
        if let Some(e) = self.st.lock().unwrap().inflight.get_mut(&task.token) {
            e.handler_done = true;
        }
        let take = !self.stop.is_cancelled();
        // The first delivery goes on the slot's connection, to the server that handed the task
        // out; when that is a node's own address, `cut` ends it should the node leave the live
        // list meanwhile (a paused server would hold it until the request's timeout).
        let (target, conn, cut) = {
            let mut st = self.st.lock().unwrap();
            let target = st.targets[i].clone();
            let cut = target.as_ref().map(|_| self.abandon.child(None));
            st.deliveries[i] = cut.clone();
            (target, st.conns[i].clone(), cut)
        };
        if let (Some(t), Some(c)) = (&target, &cut) {
            // The node left while the task ran (before the cut was there to be found).
            if !self.nodes.addresses().contains(t) {
                c.cancel(Reason::Cancel);
            }
        }
        let res = self.send(
            &conn,
            &task,
            &outcome,
            take,
            cut.as_ref().unwrap_or(&self.abandon),
        );
        self.st.lock().unwrap().deliveries[i] = None;
        drop(cut);
        match res {
            Ok(tasks) => {
                self.finished(&task.token);
                self.first_of(tasks)
            }
            Err(err) => {
                // A node's own address that did not answer (it left or died), or a delivery cut
                // as it left: the configured address at once, no backoff.
                let direct = target.is_some()
                    && !self.abandon.is_cancelled()
                    && matches!(err, Error::Connection(_) | Error::Cancelled);
                self.st.lock().unwrap().active += 1;
                let me = self.clone();
                thread::spawn(move || {
                    me.deliver(&task, outcome, err, direct);
                    me.finished(&task.token);
                    me.done_one();
                });
                None
            }
        }
    }

    fn finished(&self, token: &str) {
        self.st.lock().unwrap().inflight.remove(token);
    }

    fn execute(&self, task: &PolledTask, cancel: &CancelToken) -> Outcome {
        self.log(
            Level::Info,
            &format!(
                "executing {}",
                json!({
                    "execution_id": task.execution_id, "step": task.step,
                    "attempt": task.attempt, "task": task.task, "redelivery": task.redelivery,
                })
            ),
        );
        let def = match self.tasks.get(&(task.task.clone(), task.contract.clone())) {
            Some(d) => d.clone(),
            None => {
                return Outcome::Failed(Failure {
                    code: "UNKNOWN_TASK".into(),
                    message: format!(
                        "worker {} does not serve task {} contract {}",
                        self.opts.worker_id, task.task, task.contract
                    ),
                    retryable: true,
                    details: empty(),
                })
            }
        };
        let attempt = Attempt {
            token: task.token.clone(),
            execution_id: task.execution_id.clone(),
            step: task.step.clone(),
            attempt: task.attempt,
            task: task.task.clone(),
            contract: task.contract.clone(),
            idempotency_key: task.idempotency_key.clone(),
            redelivery: task.redelivery,
            deadline: cancel.deadline(),
            cancel: cancel.clone(),
            logger: self.logger.clone(),
        };
        let res = catch_unwind(AssertUnwindSafe(|| def.run(task.input.clone(), &attempt)));
        let err = match res {
            Ok(Ok(v)) => return Outcome::Output(v),
            Ok(Err(e)) => e,
            Err(p) => {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                return Outcome::Failed(Failure {
                    code: "TASK_PANIC".into(),
                    message: format!("the task handler panicked: {}", clip(&what, 2000)),
                    retryable: true,
                    details: empty(),
                });
            }
        };
        if let Some(te) = err.downcast_ref::<TaskError>() {
            return Outcome::Failed(Failure {
                code: te.code.clone(),
                message: te.message.clone(),
                retryable: te.retryable,
                details: if te.details.is_null() {
                    empty()
                } else {
                    te.details.clone()
                },
            });
        }
        let (code, message) = match cancel.reason() {
            Some(Reason::Cancel) => ("CANCELLED", "task cancelled by the ORBIT runtime"),
            Some(Reason::Deadline) => ("DEADLINE_EXCEEDED", "the attempt's deadline passed"),
            Some(Reason::Shutdown) => (
                "WORKER_STOPPED",
                "the worker stopped before the task finished",
            ),
            None if err.downcast_ref::<Cancelled>().is_some() => {
                ("CANCELLED", "the task cancelled itself")
            }
            None => ("TASK_ERROR", ""),
        };
        Outcome::Failed(Failure {
            code: code.into(),
            message: if message.is_empty() {
                clip(&err.to_string(), 2000)
            } else {
                format!("{}: {}", message, err)
            },
            retryable: true,
            details: empty(),
        })
    }

    /// Reports a result once; with `take` it asks for the slot's next task in the same request.
    fn send(
        &self,
        tr: &Transport,
        task: &PolledTask,
        outcome: &Outcome,
        take: bool,
        cancel: &CancelToken,
    ) -> Result<Vec<PolledTask>, Error> {
        let mut body = Map::new();
        body.insert("token".into(), Value::String(task.token.clone()));
        let path = match outcome {
            Outcome::Output(v) => {
                body.insert("output".into(), v.clone());
                "/v1/tasks/complete"
            }
            Outcome::Failed(f) => {
                body.insert("error".into(), serde_json::to_value(f).unwrap_or_default());
                "/v1/tasks/fail"
            }
        };
        let session = self.st.lock().unwrap().session.clone();
        let take = take && session.is_some();
        if let (true, Some(s)) = (take, session) {
            body.insert("session_id".into(), Value::String(s));
            body.insert("max_tasks".into(), json!(1));
        }
        let a: TasksAnswer = tr.call(
            "POST",
            path,
            Some(&Value::Object(body)),
            self.opts.request_timeout,
            Some(cancel),
        )?;
        if a.accepted == Some(false) {
            self.log(
                Level::Info,
                &format!(
                    "result not accepted (the step already has one) token={} step={}",
                    task.token, task.step
                ),
            );
        } else if let Outcome::Failed(f) = outcome {
            self.log(
                Level::Info,
                &format!(
                    "task failed execution_id={} step={} attempt={} code={}",
                    task.execution_id, task.step, task.attempt, f.code
                ),
            );
        }
        Ok(if take { a.tasks } else { Vec::new() })
    }

    /// Retries a report whose first try failed with `err` until it is delivered, the runtime
    /// refuses it for good, or the worker gives up (a stop's grace passed), on the configured
    /// address. A result of an attempt dispatched before a failover or a restart so reaches the
    /// new server. With `direct` (the first try went to a node's own address, which did not
    /// answer or left the live list), the first retry goes at once, without a backoff: it reaches
    /// the execution's new owner before that owner redelivers the attempt.
    fn deliver(&self, task: &PolledTask, mut outcome: Outcome, mut err: Error, mut direct: bool) {
        let mut r = Retrier::new(self.opts.backoff);
        let mut substituted = false;
        loop {
            if self.abandon.is_cancelled() {
                self.log(
                    Level::Warn,
                    &format!(
                        "giving up reporting the result of {} (worker stopped)",
                        task.token
                    ),
                );
                return;
            }
            let refused = match &err {
                Error::Api(a) if matches!(a.status, 400 | 413 | 422) => Some(a.clone()),
                _ => None,
            };
            if direct {
                direct = false;
                self.log(
                    Level::Debug,
                    &format!(
                        "result of {} not delivered to its node ({}); sending it to {}",
                        task.token,
                        self.describe(&err),
                        self.main.server
                    ),
                );
            } else if err.is_retryable() {
                let d = r.next_delay();
                self.log(
                    Level::Warn,
                    &format!(
                        "report result failed: {}; retrying in {}",
                        self.describe(&err),
                        format_duration(d)
                    ),
                );
                if self.abandon.wait_timeout(d) {
                    continue;
                }
            } else if let (Some(a), false) = (refused, substituted) {
                // A result the runtime refuses would be dropped and its attempt redelivered for
                // ever: it is reported as a small failure instead, once.
                let (what, code) = match outcome {
                    Outcome::Output(_) => ("output", "OUTPUT_REJECTED"),
                    Outcome::Failed(_) => ("failure", "RESULT_REJECTED"),
                };
                let reason = format!(
                    "the runtime refused the {}: {}: {}",
                    what, a.code, a.message
                );
                self.log(
                    Level::Error,
                    &format!("{} ({}); reporting a failure instead", reason, task.token),
                );
                outcome = Outcome::Failed(Failure {
                    code: code.into(),
                    message: clip(&reason, 2000),
                    retryable: false,
                    details: empty(),
                });
                substituted = true;
            } else {
                if !matches!(err, Error::Cancelled) {
                    self.log(
                        Level::Error,
                        &format!(
                            "report result failed: {}; dropping the result of {}",
                            self.describe(&err),
                            task.token
                        ),
                    );
                }
                return;
            }
            match self.send(&self.main, task, &outcome, false, &self.abandon) {
                Ok(_) => return,
                Err(e) => err = e,
            }
        }
    }
}
