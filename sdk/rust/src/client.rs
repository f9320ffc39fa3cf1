//! The client of the ORBIT HTTP API (`orbit-api/1`): start, wait, signal, query, cancel,
//! history, pending. Its errors are [`Error::Api`] (with the API's code) and
//! [`Error::Connection`]; only GETs are repeated, on connection errors.

use crate::backoff::{Backoff, Retrier};
use crate::cancel::CancelToken;
use crate::error::Error;
use crate::http::{esc, Transport};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// An execution's or a step's error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// One run of a workflow definition, as the API reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    #[serde(default)]
    pub execution_id: String,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub root_id: String,
    #[serde(default)]
    pub workflow: String,
    #[serde(default)]
    pub version: String,
    /// running, completed, failed, cancelled, timed_out, continued
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    #[serde(default)]
    pub created_ms: i64,
    #[serde(default)]
    pub closed_ms: Option<i64>,
}

impl Execution {
    /// Whether the status is final.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "cancelled" | "timed_out" | "continued"
        )
    }
}

/// One event of an execution's history; `fields` holds every other member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    #[serde(default)]
    pub seq: i64,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub time_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// One page of history.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HistoryPage {
    #[serde(default)]
    pub events: Vec<HistoryEvent>,
    #[serde(default)]
    pub next_after_seq: Option<i64>,
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    pub workflow: String,
    /// Default: the latest deployed.
    pub version: Option<String>,
    pub input: Option<Value>,
    /// Makes the start idempotent: starting an existing id answers it.
    pub execution_id: Option<String>,
}

/// The options of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub token: Option<String>,
    /// Bounds every request but waits (default 30 s).
    pub request_timeout: Duration,
    /// How often a GET is repeated on a connection error (default 3).
    pub get_retries: u32,
    pub backoff: Backoff,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            token: None,
            request_timeout: Duration::from_secs(30),
            get_retries: 3,
            backoff: Backoff::default(),
        }
    }
}

/// Talks to the ORBIT HTTP API.
///
/// ```no_run
/// use orbit::{Client, ClientOptions, StartOptions};
/// use std::time::Duration;
/// let c = Client::new("http://127.0.0.1:7233", ClientOptions::default())?;
/// c.start(StartOptions {
///     workflow: "OrderProcessing".into(),
///     execution_id: Some("o-1".into()),
///     input: Some(serde_json::json!({"order_id": "o-1"})),
///     ..StartOptions::default()
/// })?;
/// let x = c.wait("o-1", Some(Duration::from_secs(60)))?;
/// println!("{}", x.status);
/// # Ok::<(), orbit::Error>(())
/// ```
pub struct Client {
    tr: Transport,
    opts: ClientOptions,
}

impl Client {
    /// A client of the runtime at `server` (`http://host:port`).
    pub fn new(server: &str, opts: ClientOptions) -> Result<Client, Error> {
        Ok(Client {
            tr: Transport::new(server, opts.token.clone())?,
            opts,
        })
    }

    /// The runtime's URL.
    pub fn server(&self) -> &str {
        &self.tr.server
    }

    fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T, Error> {
        self.tr
            .call("POST", path, Some(body), self.opts.request_timeout, None)
    }

    fn get<T: DeserializeOwned>(&self, path: &str, timeout: Duration) -> Result<T, Error> {
        let mut r = Retrier::new(self.opts.backoff);
        let mut attempt = 0;
        loop {
            match self
                .tr
                .call::<T>("GET", path, None::<&Value>, timeout, None::<&CancelToken>)
            {
                Err(Error::Connection(_)) if attempt < self.opts.get_retries => {
                    attempt += 1;
                    std::thread::sleep(r.next_delay());
                }
                res => return res,
            }
        }
    }

    /// Deploys a workflow definition (an IR document).
    pub fn deploy(&self, document: &Value) -> Result<Value, Error> {
        self.post("/v1/workflows", document)
    }

    /// Starts an execution; with an `execution_id` that exists, answers the existing one.
    pub fn start(&self, o: StartOptions) -> Result<Execution, Error> {
        let mut body = Map::new();
        body.insert("workflow".into(), Value::String(o.workflow));
        if let Some(v) = o.version {
            body.insert("version".into(), Value::String(v));
        }
        if let Some(i) = o.input {
            body.insert("input".into(), i);
        }
        if let Some(id) = o.execution_id {
            body.insert("execution_id".into(), Value::String(id));
        }
        self.post("/v1/executions", &Value::Object(body))
    }

    /// Reads an execution.
    pub fn get_execution(&self, execution_id: &str) -> Result<Execution, Error> {
        self.get(
            &format!("/v1/executions/{}", esc(execution_id)),
            self.opts.request_timeout,
        )
    }

    /// Waits until the execution is terminal or `timeout` has passed (None: no limit) and
    /// answers it as last read: check `status`. Long waits are cut into server waits of at most
    /// 300 s.
    pub fn wait(&self, execution_id: &str, timeout: Option<Duration>) -> Result<Execution, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let wait_s = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    left.as_millis().div_ceil(1000).min(300) as u64
                }
                None => 300,
            };
            let began = Instant::now();
            let x: Execution = self.get(
                &format!(
                    "/v1/executions/{}/wait?timeout_s={}",
                    esc(execution_id),
                    wait_s
                ),
                Duration::from_secs(wait_s) + self.opts.request_timeout,
            )?;
            if x.is_terminal() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(x);
            }
            // The runtime answered early without a final status: do not spin.
            if began.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }

    /// Waits for the execution and decodes its output; [`Error::Execution`] when it did not
    /// complete.
    pub fn result<T: DeserializeOwned>(
        &self,
        execution_id: &str,
        timeout: Option<Duration>,
    ) -> Result<T, Error> {
        let x = self.wait(execution_id, timeout)?;
        if x.status != "completed" {
            return Err(Error::Execution(Box::new(x)));
        }
        serde_json::from_value(x.output.unwrap_or(Value::Null))
            .map_err(|e| Error::Validation(format!("{} output: {}", x.workflow, e)))
    }

    /// One page of history: the events after `after_seq` (0: from the start), at most `limit`
    /// (0: the server's default).
    pub fn history(
        &self,
        execution_id: &str,
        after_seq: i64,
        limit: usize,
    ) -> Result<HistoryPage, Error> {
        let mut q = Vec::new();
        if after_seq > 0 {
            q.push(format!("after_seq={}", after_seq));
        }
        if limit > 0 {
            q.push(format!("limit={}", limit));
        }
        let mut path = format!("/v1/executions/{}/history", esc(execution_id));
        if !q.is_empty() {
            path = format!("{}?{}", path, q.join("&"));
        }
        self.get(&path, self.opts.request_timeout)
    }

    /// The whole history, page after page.
    pub fn history_events(&self, execution_id: &str) -> Result<Vec<HistoryEvent>, Error> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self.history(execution_id, after, 0)?;
            let n = page.events.len();
            all.extend(page.events);
            match page.next_after_seq {
                Some(next) if n > 0 && next != after => after = next,
                _ => return Ok(all),
            }
        }
    }

    /// Why a running execution waits: every open item with its reason.
    pub fn pending(&self, execution_id: &str) -> Result<Value, Error> {
        self.get(
            &format!("/v1/executions/{}/pending", esc(execution_id)),
            self.opts.request_timeout,
        )
    }

    /// Sends a signal (payload None: none); answers `{"seq", …}`.
    pub fn signal(
        &self,
        execution_id: &str,
        name: &str,
        payload: Option<Value>,
    ) -> Result<Value, Error> {
        let body = match payload {
            Some(p) => json!({ "payload": p }),
            None => json!({}),
        };
        self.post(
            &format!("/v1/executions/{}/signals/{}", esc(execution_id), esc(name)),
            &body,
        )
    }

    /// Evaluates a declared query on the execution's current state and decodes its result.
    pub fn query<T: DeserializeOwned>(&self, execution_id: &str, name: &str) -> Result<T, Error> {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            result: Value,
        }
        let a: Answer = self.get(
            &format!("/v1/executions/{}/queries/{}", esc(execution_id), esc(name)),
            self.opts.request_timeout,
        )?;
        serde_json::from_value(a.result)
            .map_err(|e| Error::Validation(format!("query {} result: {}", name, e)))
    }

    /// Cancels an execution (its compensations run) and answers it.
    pub fn cancel(&self, execution_id: &str, reason: Option<&str>) -> Result<Execution, Error> {
        let body = match reason {
            Some(r) => json!({ "reason": r }),
            None => json!({}),
        };
        self.post(
            &format!("/v1/executions/{}/cancel", esc(execution_id)),
            &body,
        )
    }

    /// The registered worker sessions.
    pub fn workers(&self) -> Result<Value, Error> {
        self.get("/v1/workers", self.opts.request_timeout)
    }

    /// `GET /v1/health`.
    pub fn health(&self) -> Result<Value, Error> {
        self.get("/v1/health", self.opts.request_timeout)
    }
}

/// A typed reference to a deployed workflow: its input and output types.
///
/// ```no_run
/// # use orbit::{Client, ClientOptions, Workflow};
/// # #[derive(serde::Serialize)] struct Order { order_id: String }
/// # #[derive(serde::Deserialize)] struct OrderResult { tracking: String }
/// # let client = Client::new("http://127.0.0.1:7233", ClientOptions::default())?;
/// let orders: Workflow<Order, OrderResult> = Workflow::new("OrderProcessing", Some("1.0.0"));
/// orders.start(&client, Some("o-2"), &Order { order_id: "o-2".into() })?;
/// let res = orders.result(&client, "o-2", Some(std::time::Duration::from_secs(60)))?;
/// # Ok::<(), orbit::Error>(())
/// ```
pub struct Workflow<In, Out> {
    pub name: String,
    pub version: Option<String>,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In: Serialize, Out: DeserializeOwned> Workflow<In, Out> {
    pub fn new(name: &str, version: Option<&str>) -> Self {
        Workflow {
            name: name.into(),
            version: version.map(str::to_string),
            _types: PhantomData,
        }
    }

    /// Starts an execution with a typed input (`execution_id` None: generated).
    pub fn start(
        &self,
        client: &Client,
        execution_id: Option<&str>,
        input: &In,
    ) -> Result<Execution, Error> {
        let input = serde_json::to_value(input)
            .map_err(|e| Error::Validation(format!("{} input: {}", self.name, e)))?;
        client.start(StartOptions {
            workflow: self.name.clone(),
            version: self.version.clone(),
            input: Some(input),
            execution_id: execution_id.map(str::to_string),
        })
    }

    /// Waits for the execution and decodes its output as `Out`.
    pub fn result(
        &self,
        client: &Client,
        execution_id: &str,
        timeout: Option<Duration>,
    ) -> Result<Out, Error> {
        client.result(execution_id, timeout)
    }
}
