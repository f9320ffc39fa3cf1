//! # ORBIT Rust SDK
//!
//! A worker and a client for the ORBIT durable workflow runtime, on the standard library
//! (HTTP/1.1 over `std::net::TcpStream`, threads) and serde. Speaks the worker protocol of
//! SPEC §4 and is held to the cross-language conformance suite
//! (`tests/conformance/README.md`). See README.md.
//!
//! - [`Task`]: a typed task contract (serde input and output types, a handler).
//! - [`Worker`]: registers, polls one task per slot, heartbeats, retries, stops gracefully.
//! - [`Client`]: start, wait, signal, query, cancel, history, pending.
//! - [`Error`]: [`ApiError`] (with the API's code), [`ConnectionError`], and the others.

mod backoff;
mod cancel;
pub mod client;
mod error;
mod http;
mod nodes;
#[cfg(unix)]
pub mod signals;
mod task;
mod worker;

pub use backoff::{stderr_logger, timestamp, Backoff, Level, Logger};
pub use cancel::{CancelToken, Reason};
pub use client::{
    Client, ClientOptions, ErrorInfo, Execution, HistoryEvent, HistoryPage, StartOptions, Workflow,
};
pub use error::{codes, ApiError, Cancelled, ConnectionError, Error, TaskError};
pub use http::format_duration;
pub use task::{Attempt, BoxError, HandlerResult, Task, TaskDefinition};
pub use worker::{State, Worker, WorkerOptions};
