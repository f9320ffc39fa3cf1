package orbit

import (
	"errors"
	"fmt"
)

// Error codes of the ORBIT API (`{"error":{"code",…}}`) that callers commonly check.
const (
	CodeUnknownSession   = "UNKNOWN_SESSION"
	CodeNotLeader        = "NOT_LEADER"
	CodeUnknownExecution = "UNKNOWN_EXECUTION"
	CodeUnknownWorkflow  = "UNKNOWN_WORKFLOW"
	CodeUnknownSignal    = "UNKNOWN_SIGNAL"
	CodeExecutionDone    = "EXECUTION_FINISHED"
	CodeSignalInvalid    = "SIGNAL_PAYLOAD_INVALID"
	CodeStorageError     = "STORAGE_ERROR"
	CodeInvalidResponse  = "INVALID_RESPONSE"
)

// APIError is a non-2xx answer of the ORBIT runtime. Code and Message come from the body's
// error object; Details holds its other members (for example leader_addr of a 503 NOT_LEADER).
//
//	var apiErr *orbit.APIError
//	if errors.As(err, &apiErr) && apiErr.Code == orbit.CodeUnknownExecution { … }
type APIError struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
	// Body is the raw answer.
	Body   []byte
	Method string
	Path   string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("ORBIT %s %s answered %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// Retryable reports whether repeating the request may help (every 5xx, 503 NOT_LEADER included).
func (e *APIError) Retryable() bool { return e.Status >= 500 }

// LeaderAddr is the leader's address named by a 503 NOT_LEADER answer, or "".
func (e *APIError) LeaderAddr() string {
	if s, ok := e.Details["leader_addr"].(string); ok {
		return s
	}
	return ""
}

// ConnectionError means the runtime could not be reached: the connection was refused or
// dropped, the answer could not be read, or the request timed out.
type ConnectionError struct {
	Server string
	Reason string
	Err    error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("cannot reach ORBIT runtime at %s: %s", e.Server, e.Reason)
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// TaskError is returned by a task handler to fail the attempt with a chosen code:
//
//	return Out{}, &orbit.TaskError{Code: "CARD_DECLINED", Message: "declined", Retryable: false}
//
// or orbit.Fail("CARD_DECLINED", "declined") / orbit.Retry("UPSTREAM_DOWN", "…").
// Any other error fails the attempt as TASK_ERROR, retryable.
type TaskError struct {
	Code      string
	Message   string
	Retryable bool
	Details   any
}

func (e *TaskError) Error() string { return e.Code + ": " + e.Message }

// Fail is a TaskError the runtime does not retry.
func Fail(code, message string) *TaskError {
	return &TaskError{Code: code, Message: message, Retryable: false}
}

// Retry is a TaskError the runtime may retry (subject to the step's retry policy).
func Retry(code, message string) *TaskError {
	return &TaskError{Code: code, Message: message, Retryable: true}
}

// ExecutionError is what Client.Result answers when the execution did not complete (it failed,
// was cancelled or timed out, or was still running when the wait ran out).
type ExecutionError struct {
	Execution *Execution
}

func (e *ExecutionError) Error() string {
	x := e.Execution
	if x.Status == StatusRunning {
		return fmt.Sprintf("execution %s is still running", x.ExecutionID)
	}
	if x.Error != nil && x.Error.Message != "" {
		return fmt.Sprintf("execution %s ended %s: %s %s", x.ExecutionID, x.Status, x.Error.Code, x.Error.Message)
	}
	return fmt.Sprintf("execution %s ended %s", x.ExecutionID, x.Status)
}

// ValidationError means a value does not fit a task contract (it could not be decoded into
// the contract's type, or its Validate method refused it).
type ValidationError struct {
	What string
	Err  error
}

func (e *ValidationError) Error() string { return "invalid " + e.What + ": " + e.Err.Error() }
func (e *ValidationError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is a connection error or a 5xx answer: what the worker
// retries with backoff.
func IsRetryable(err error) bool {
	var ce *ConnectionError
	if errors.As(err, &ce) {
		return true
	}
	var ae *APIError
	return errors.As(err, &ae) && ae.Retryable()
}

// HasCode reports whether err is an APIError with the given code.
func HasCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// IsUnknownSession reports whether err is a 404 UNKNOWN_SESSION answer.
func IsUnknownSession(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == 404 && ae.Code == CodeUnknownSession
}
