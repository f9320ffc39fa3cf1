package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Attempt is what a handler learns about the attempt it runs.
type Attempt struct {
	// Token is the attempt's task token (`<execution id>/<uuid>`).
	Token       string
	ExecutionID string
	// Step is the step id in the workflow definition.
	Step string
	// Attempt is the attempt number, from 1.
	Attempt  int
	Task     string
	Contract string
	// IdempotencyKey is the same for every attempt and redelivery of one step execution:
	// deduplicate side effects on it.
	IdempotencyKey string
	// Redelivery is true when the attempt was handed out again after its worker went silent.
	Redelivery bool
	// Deadline is when the runtime stops waiting for this attempt (zero: it did not say).
	// The handler's context ends then too.
	Deadline time.Time
	// Logger is the worker's.
	Logger Logger
}

// Validator is implemented by contract types that check themselves after decoding (input) or
// before reporting (output). A refused input fails the attempt as INVALID_INPUT, a refused
// output as INVALID_OUTPUT; neither is retried.
type Validator interface {
	Validate() error
}

// TaskDefinition is a task a Worker serves; *Task[In, Out] is the implementation.
type TaskDefinition interface {
	TaskName() string
	TaskContract() string
	// TaskLanguage pins the task to workers of one language ("" for none).
	TaskLanguage() string
	run(ctx context.Context, a *Attempt, input json.RawMessage) (any, error)
}

// Handler runs one attempt: ctx ends when the runtime cancels the attempt, its deadline
// passes, or the worker gives up on it at shutdown.
type Handler[In, Out any] func(ctx context.Context, in In, a *Attempt) (Out, error)

// Task is a typed task contract: its name, contract version, and a handler from In to Out.
// In and Out are usually structs with JSON tags; the input is decoded into In (and checked
// with its Validate method, if it has one) before the handler runs.
//
//	type ChargeIn struct { OrderID string `json:"order_id"`; Amount float64 `json:"amount"` }
//	type ChargeOut struct { ChargeID string `json:"charge_id"` }
//
//	var charge = orbit.NewTask("payments.charge", "1",
//		func(ctx context.Context, in ChargeIn, a *orbit.Attempt) (ChargeOut, error) {
//			return ChargeOut{ChargeID: "ch-" + a.IdempotencyKey}, nil
//		})
type Task[In, Out any] struct {
	Name     string
	Contract string
	Language string
	Handler  Handler[In, Out]
}

// NewTask defines a typed task.
func NewTask[In, Out any](name, contract string, handler Handler[In, Out]) *Task[In, Out] {
	return &Task[In, Out]{Name: name, Contract: contract, Handler: handler}
}

// Pinned returns the task pinned to workers of one language (`go`, `python`, `any`, …).
func (t *Task[In, Out]) Pinned(language string) *Task[In, Out] {
	c := *t
	c.Language = language
	return &c
}

func (t *Task[In, Out]) TaskName() string     { return t.Name }
func (t *Task[In, Out]) TaskContract() string { return t.Contract }
func (t *Task[In, Out]) TaskLanguage() string { return t.Language }

// ParseInput decodes and checks a value as this task's input.
func (t *Task[In, Out]) ParseInput(raw json.RawMessage) (In, error) {
	return decodeContract[In](raw, t.Name+" input")
}

// ParseOutput decodes and checks a value as this task's output.
func (t *Task[In, Out]) ParseOutput(raw json.RawMessage) (Out, error) {
	return decodeContract[Out](raw, t.Name+" output")
}

func (t *Task[In, Out]) run(ctx context.Context, a *Attempt, raw json.RawMessage) (any, error) {
	in, err := t.ParseInput(raw)
	if err != nil {
		return nil, &TaskError{Code: "INVALID_INPUT", Message: err.Error(), Retryable: false}
	}
	out, err := t.Handler(ctx, in, a)
	if err != nil {
		return nil, err
	}
	if err := validate(&out); err != nil {
		return nil, &TaskError{Code: "INVALID_OUTPUT", Message: (&ValidationError{What: t.Name + " output", Err: err}).Error(), Retryable: false}
	}
	return out, nil
}

// decodeContract decodes raw into T and runs T's Validate, if it has one.
func decodeContract[T any](raw json.RawMessage, what string) (T, error) {
	var v T
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, &ValidationError{What: what, Err: err}
	}
	if err := validate(&v); err != nil {
		return v, &ValidationError{What: what, Err: err}
	}
	return v, nil
}

// validate runs Validate with a value or a pointer receiver.
func validate[T any](v *T) error {
	if val, ok := any(*v).(Validator); ok {
		return val.Validate()
	}
	if val, ok := any(v).(Validator); ok {
		return val.Validate()
	}
	return nil
}

// handlerFailure turns a handler's error into the error object of POST /v1/tasks/fail.
func handlerFailure(err error) taskFailure {
	var te *TaskError
	if errors.As(err, &te) {
		return taskFailure{Code: te.Code, Message: te.Message, Retryable: te.Retryable, Details: detailsOrEmpty(te.Details)}
	}
	return taskFailure{Code: "TASK_ERROR", Message: err.Error(), Retryable: true, Details: map[string]any{"type": typeName(err)}}
}

func detailsOrEmpty(d any) any {
	if d == nil {
		return map[string]any{}
	}
	return d
}

func typeName(err error) string { return fmt.Sprintf("%T", err) }
