//! Error types: every non-2xx answer is an [`ApiError`] carrying the API's code, every failure to
//! reach the runtime a [`ConnectionError`]; [`Error`] is their sum.

use serde_json::{Map, Value};
use std::fmt;

/// Error codes of the ORBIT API (`{"error":{"code",…}}`) that callers commonly check.
pub mod codes {
    pub const UNKNOWN_SESSION: &str = "UNKNOWN_SESSION";
    pub const NOT_LEADER: &str = "NOT_LEADER";
    pub const UNKNOWN_EXECUTION: &str = "UNKNOWN_EXECUTION";
    pub const UNKNOWN_WORKFLOW: &str = "UNKNOWN_WORKFLOW";
    pub const UNKNOWN_SIGNAL: &str = "UNKNOWN_SIGNAL";
    pub const EXECUTION_FINISHED: &str = "EXECUTION_FINISHED";
    pub const SIGNAL_PAYLOAD_INVALID: &str = "SIGNAL_PAYLOAD_INVALID";
    pub const STORAGE_ERROR: &str = "STORAGE_ERROR";
    pub const INVALID_RESPONSE: &str = "INVALID_RESPONSE";
}

/// A non-2xx answer of the ORBIT runtime. `code` and `message` come from the body's error
/// object; `details` holds its other members (for example `leader_addr` of a 503 NOT_LEADER).
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub details: Map<String, Value>,
    pub method: String,
    pub path: String,
    /// The raw answer.
    pub body: String,
}

impl ApiError {
    /// Whether repeating the request may help: every 5xx, 503 NOT_LEADER included.
    pub fn retryable(&self) -> bool {
        self.status >= 500
    }

    /// The leader's address named by a 503 NOT_LEADER answer.
    pub fn leader_addr(&self) -> Option<&str> {
        self.details.get("leader_addr").and_then(Value::as_str)
    }

    pub(crate) fn from_answer(status: u16, body: &[u8], method: &str, path: &str) -> ApiError {
        let text = String::from_utf8_lossy(body).into_owned();
        let mut e = ApiError {
            status,
            code: String::new(),
            message: String::new(),
            details: Map::new(),
            method: method.to_string(),
            path: path.to_string(),
            body: text.clone(),
        };
        if let Ok(Value::Object(mut top)) = serde_json::from_slice::<Value>(body) {
            if let Some(Value::Object(err)) = top.remove("error") {
                for (k, v) in err {
                    match (k.as_str(), v) {
                        ("code", Value::String(s)) => e.code = s,
                        ("message", Value::String(s)) => e.message = s,
                        (_, v) => {
                            e.details.insert(k, v);
                        }
                    }
                }
            }
        }
        if e.code.is_empty() {
            e.code = format!("HTTP_{}", status);
        }
        if e.message.is_empty() {
            let t = text.trim();
            e.message = if t.is_empty() {
                format!("HTTP {}", status)
            } else {
                t.chars().take(200).collect()
            };
        }
        e
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ORBIT {} {} answered {} {}: {}",
            self.method, self.path, self.status, self.code, self.message
        )
    }
}

impl std::error::Error for ApiError {}

/// The runtime could not be reached: the connection was refused or dropped, the answer could
/// not be read, or the request timed out.
#[derive(Debug, Clone)]
pub struct ConnectionError {
    pub server: String,
    pub reason: String,
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reach ORBIT runtime at {}: {}",
            self.server, self.reason
        )
    }
}

impl std::error::Error for ConnectionError {}

/// What the SDK's calls answer.
#[derive(Debug)]
pub enum Error {
    /// A non-2xx answer, with the API's code.
    Api(Box<ApiError>),
    /// The runtime could not be reached.
    Connection(ConnectionError),
    /// `Client::result` found the execution failed, cancelled, timed out or still running.
    Execution(Box<crate::client::Execution>),
    /// A value does not fit a contract (it could not be decoded into the contract's type, or
    /// its check refused it).
    Validation(String),
    /// Bad options (a server address that is not an `http://` URL, no tasks, …).
    Config(String),
    /// The call was given up: the worker is stopping.
    Cancelled,
}

impl Error {
    /// True for a connection error or a 5xx answer: what the worker retries with backoff.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Connection(_) => true,
            Error::Api(e) => e.retryable(),
            _ => false,
        }
    }

    /// True for a 404 UNKNOWN_SESSION answer.
    pub fn is_unknown_session(&self) -> bool {
        matches!(self, Error::Api(e) if e.status == 404 && e.code == codes::UNKNOWN_SESSION)
    }

    /// The API's error code, for an [`ApiError`].
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api(e) => Some(&e.code),
            _ => None,
        }
    }

    /// True when this is an API error with `code`.
    pub fn has_code(&self, code: &str) -> bool {
        self.code() == Some(code)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api(e) => e.fmt(f),
            Error::Connection(e) => e.fmt(f),
            Error::Execution(x) => match (&x.error, x.status.as_str()) {
                (_, "running") => write!(f, "execution {} is still running", x.execution_id),
                (Some(err), st) => write!(
                    f,
                    "execution {} ended {}: {} {}",
                    x.execution_id, st, err.code, err.message
                ),
                (None, st) => write!(f, "execution {} ended {}", x.execution_id, st),
            },
            Error::Validation(m) => write!(f, "invalid {}", m),
            Error::Config(m) => write!(f, "orbit: {}", m),
            Error::Cancelled => write!(f, "orbit: cancelled (the worker is stopping)"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api(Box::new(e))
    }
}

impl From<ConnectionError> for Error {
    fn from(e: ConnectionError) -> Self {
        Error::Connection(e)
    }
}

/// Returned by a task handler to fail the attempt with a chosen code:
/// `Err(TaskError::fail("CARD_DECLINED", "the card was declined").into())`. Any other error a
/// handler returns fails the attempt as `TASK_ERROR`, retryable.
#[derive(Debug, Clone)]
pub struct TaskError {
    pub code: String,
    pub message: String,
    pub retryable: bool,
    pub details: Value,
}

impl TaskError {
    /// A failure the runtime does not retry.
    pub fn fail(code: impl Into<String>, message: impl Into<String>) -> TaskError {
        TaskError {
            code: code.into(),
            message: message.into(),
            retryable: false,
            details: Value::Object(Map::new()),
        }
    }

    /// A failure the runtime may retry (subject to the step's retry policy).
    pub fn retry(code: impl Into<String>, message: impl Into<String>) -> TaskError {
        TaskError {
            retryable: true,
            ..TaskError::fail(code, message)
        }
    }

    /// The same failure with structured details.
    pub fn with_details(mut self, details: Value) -> TaskError {
        self.details = details;
        self
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for TaskError {}

/// What a handler returns when it sees its attempt cancelled (`Attempt::cancelled_error`); the
/// worker reports it as `CANCELLED`, `DEADLINE_EXCEEDED` or `WORKER_STOPPED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the attempt was cancelled")
    }
}

impl std::error::Error for Cancelled {}
