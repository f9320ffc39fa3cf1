//! Typed task contracts: a [`Task`] is a task's name, contract version and a handler from a
//! serde input type to a serde output type.

use crate::backoff::{Level, Logger};
use crate::cancel::CancelToken;
use crate::error::{Cancelled, Error, TaskError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Any error a handler returns; a [`TaskError`] keeps its code, anything else is `TASK_ERROR`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a handler answers.
pub type HandlerResult<T> = Result<T, BoxError>;

/// What a handler learns about the attempt it runs.
pub struct Attempt {
    /// The attempt's task token (`<execution id>/<uuid>`).
    pub token: String,
    pub execution_id: String,
    /// The step id in the workflow definition.
    pub step: String,
    /// The attempt number, from 1.
    pub attempt: u32,
    pub task: String,
    pub contract: String,
    /// The same for every attempt and redelivery of one step execution: deduplicate side
    /// effects on it.
    pub idempotency_key: String,
    /// True when the attempt was handed out again after its worker went silent.
    pub redelivery: bool,
    /// When the runtime stops waiting for this attempt (None: it did not say); the attempt's
    /// cancellation token fires then too.
    pub deadline: Option<Instant>,
    pub(crate) cancel: CancelToken,
    pub(crate) logger: Logger,
}

impl Attempt {
    /// Fires when the runtime cancels the attempt, its deadline passes, or the worker gives up
    /// on it at shutdown.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Waits `d`; answers `Err(Cancelled)` as soon as the attempt is cancelled.
    pub fn sleep(&self, d: Duration) -> Result<(), Cancelled> {
        if self.cancel.wait_timeout(d) {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }

    /// The error a handler returns when it gives up because it was cancelled; the worker reports
    /// the attempt as `CANCELLED`, `DEADLINE_EXCEEDED` or `WORKER_STOPPED`.
    pub fn cancelled_error(&self) -> BoxError {
        Box::new(Cancelled)
    }

    /// A line in the worker's log.
    pub fn log(&self, level: Level, message: &str) {
        (self.logger)(level, message)
    }
}

/// A task a worker serves; [`Task`] is the implementation.
pub trait TaskDefinition: Send + Sync {
    fn name(&self) -> &str;
    fn contract(&self) -> &str;
    /// Pins the task to workers of one language (None for none).
    fn language(&self) -> Option<&str>;
    /// Decodes the input, runs the handler, encodes the output.
    fn run(&self, input: Value, attempt: &Attempt) -> Result<Value, BoxError>;
}

type Handler<In, Out> = dyn Fn(In, &Attempt) -> HandlerResult<Out> + Send + Sync;
type Check<T> = dyn Fn(&T) -> Result<(), String> + Send + Sync;

/// A typed task contract: a name, a contract version, and a handler from `In` to `Out` (serde
/// types, usually structs with `#[derive(Serialize, Deserialize)]`). The input is decoded into
/// `In` (and checked with [`Task::check_input`], if given) before the handler runs: a refusal
/// fails the attempt as `INVALID_INPUT`, not retried; an output refused by
/// [`Task::check_output`] as `INVALID_OUTPUT`.
///
/// ```
/// use orbit::{Task, TaskError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize)]
/// struct Charge { order_id: String, amount: f64 }
/// #[derive(Serialize)]
/// struct Charged { charge_id: String }
///
/// let charge = Task::new("payments.charge", "1", |c: Charge, a: &orbit::Attempt| {
///     if c.amount > 1000.0 {
///         return Err(TaskError::fail("LIMIT", "over the limit").into());
///     }
///     Ok(Charged { charge_id: format!("ch-{}-{}", c.order_id, a.idempotency_key) })
/// })
/// .check_input(|c| if c.amount > 0.0 { Ok(()) } else { Err("amount must be positive".into()) });
/// ```
pub struct Task<In, Out> {
    name: String,
    contract: String,
    language: Option<String>,
    handler: Arc<Handler<In, Out>>,
    check_in: Option<Arc<Check<In>>>,
    check_out: Option<Arc<Check<Out>>>,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In, Out> Clone for Task<In, Out> {
    fn clone(&self) -> Self {
        Task {
            name: self.name.clone(),
            contract: self.contract.clone(),
            language: self.language.clone(),
            handler: self.handler.clone(),
            check_in: self.check_in.clone(),
            check_out: self.check_out.clone(),
            _types: PhantomData,
        }
    }
}

impl<In, Out> Task<In, Out>
where
    In: DeserializeOwned + 'static,
    Out: Serialize + 'static,
{
    /// A typed task.
    pub fn new(
        name: impl Into<String>,
        contract: impl Into<String>,
        handler: impl Fn(In, &Attempt) -> HandlerResult<Out> + Send + Sync + 'static,
    ) -> Self {
        Task {
            name: name.into(),
            contract: contract.into(),
            language: None,
            handler: Arc::new(handler),
            check_in: None,
            check_out: None,
            _types: PhantomData,
        }
    }

    /// The task pinned to workers of one language (`rust`, `python`, `any`, …).
    pub fn pinned(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    /// Checks a decoded input before the handler runs.
    pub fn check_input(
        mut self,
        f: impl Fn(&In) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.check_in = Some(Arc::new(f));
        self
    }

    /// Checks an output before it is reported.
    pub fn check_output(
        mut self,
        f: impl Fn(&Out) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.check_out = Some(Arc::new(f));
        self
    }

    /// Decodes and checks a value as this task's input.
    pub fn parse_input(&self, v: Value) -> Result<In, Error> {
        let x: In = serde_json::from_value(v)
            .map_err(|e| Error::Validation(format!("{} input: {}", self.name, e)))?;
        if let Some(c) = &self.check_in {
            c(&x).map_err(|e| Error::Validation(format!("{} input: {}", self.name, e)))?;
        }
        Ok(x)
    }

    /// The task as a worker takes it.
    pub fn boxed(self) -> Arc<dyn TaskDefinition>
    where
        In: Send,
        Out: Send,
    {
        Arc::new(self)
    }
}

impl<In, Out> Task<In, Out>
where
    In: DeserializeOwned + 'static,
    Out: Serialize + DeserializeOwned + 'static,
{
    /// Decodes and checks a value as this task's output.
    pub fn parse_output(&self, v: Value) -> Result<Out, Error> {
        let x: Out = serde_json::from_value(v)
            .map_err(|e| Error::Validation(format!("{} output: {}", self.name, e)))?;
        if let Some(c) = &self.check_out {
            c(&x).map_err(|e| Error::Validation(format!("{} output: {}", self.name, e)))?;
        }
        Ok(x)
    }
}

impl<In, Out> TaskDefinition for Task<In, Out>
where
    In: DeserializeOwned + 'static,
    Out: Serialize + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn contract(&self) -> &str {
        &self.contract
    }
    fn language(&self) -> Option<&str> {
        self.language.as_deref()
    }
    fn run(&self, input: Value, attempt: &Attempt) -> Result<Value, BoxError> {
        let x = self
            .parse_input(input)
            .map_err(|e| TaskError::fail("INVALID_INPUT", e.to_string()))?;
        let out = (self.handler)(x, attempt)?;
        if let Some(c) = &self.check_out {
            c(&out).map_err(|e| {
                TaskError::fail(
                    "INVALID_OUTPUT",
                    format!("invalid {} output: {}", self.name, e),
                )
            })?;
        }
        serde_json::to_value(&out).map_err(|e| {
            TaskError::fail("RESULT_NOT_JSON", format!("the output is not JSON: {}", e)).into()
        })
    }
}
