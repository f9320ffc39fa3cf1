package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Execution statuses.
const (
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusTimedOut  = "timed_out"
	StatusContinued = "continued"
)

// IsTerminal reports whether an execution status is final.
func IsTerminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusTimedOut, StatusContinued:
		return true
	}
	return false
}

// ErrorInfo is an execution's or a step's error.
type ErrorInfo struct {
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	Retryable *bool           `json:"retryable,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
}

// Execution is one run of a workflow definition, as the API reads it.
type Execution struct {
	ExecutionID string          `json:"execution_id"`
	RunID       string          `json:"run_id"`
	RootID      string          `json:"root_id"`
	Workflow    string          `json:"workflow"`
	Version     string          `json:"version"`
	Status      string          `json:"status"`
	Input       json.RawMessage `json:"input,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	Error       *ErrorInfo      `json:"error,omitempty"`
	CreatedMs   int64           `json:"created_ms"`
	ClosedMs    *int64          `json:"closed_ms,omitempty"`
}

// HistoryEvent is one event of an execution's history. Fields holds every member, the ones
// named here included.
type HistoryEvent struct {
	Seq     int64
	Type    string
	TimeMs  int64
	Step    string
	Attempt int
	Fields  map[string]json.RawMessage
}

// UnmarshalJSON keeps every member of the event.
func (e *HistoryEvent) UnmarshalJSON(data []byte) error {
	var known struct {
		Seq     int64  `json:"seq"`
		Type    string `json:"type"`
		TimeMs  int64  `json:"time_ms"`
		Step    string `json:"step"`
		Attempt int    `json:"attempt"`
	}
	if err := json.Unmarshal(data, &known); err != nil {
		return err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	*e = HistoryEvent{known.Seq, known.Type, known.TimeMs, known.Step, known.Attempt, fields}
	return nil
}

// MarshalJSON writes the event back as the API sent it.
func (e HistoryEvent) MarshalJSON() ([]byte, error) { return json.Marshal(e.Fields) }

// HistoryPage is one page of history.
type HistoryPage struct {
	Events       []HistoryEvent `json:"events"`
	NextAfterSeq *int64         `json:"next_after_seq,omitempty"`
}

// SignalResult answers a signal: its seq in the history.
type SignalResult struct {
	Seq int64 `json:"seq"`
}

// StartOptions name what to start.
type StartOptions struct {
	Workflow string
	// Version (default: the latest deployed).
	Version string
	Input   any
	// ExecutionID makes the start idempotent: starting an existing id answers it.
	ExecutionID string
}

// ClientOptions configure a Client.
type ClientOptions struct {
	Token string
	// HTTPClient (default: a connection pool of its own).
	HTTPClient *http.Client
	// RequestTimeout bounds every request but waits (default 30 s).
	RequestTimeout time.Duration
	// GetRetries is how often a GET is repeated on a connection error (default 3).
	GetRetries *int
	Backoff    Backoff
}

// Client talks to the ORBIT HTTP API (orbit-api/1). Its errors are *APIError (with the API's
// code) and *ConnectionError; only GETs are repeated, on connection errors.
type Client struct {
	tr         *transport
	timeout    time.Duration
	getRetries int
	backoff    Backoff
}

// NewClient makes a client of the runtime at server.
func NewClient(server string, opts ClientOptions) (*Client, error) {
	tr, err := newTransport(server, opts.Token, opts.HTTPClient)
	if err != nil {
		return nil, err
	}
	c := &Client{tr: tr, timeout: opts.RequestTimeout, getRetries: 3, backoff: opts.Backoff.withDefaults()}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	if opts.GetRetries != nil {
		c.getRetries = *opts.GetRetries
	}
	return c, nil
}

// Server is the runtime's URL.
func (c *Client) Server() string { return c.tr.server }

func (c *Client) post(ctx context.Context, path string, body, out any) error {
	return c.tr.do(ctx, "POST", path, nil, body, out, c.timeout)
}

func (c *Client) get(ctx context.Context, path string, query url.Values, out any, timeout time.Duration) error {
	r := retrier{b: c.backoff}
	for attempt := 0; ; attempt++ {
		err := c.tr.do(ctx, "GET", path, query, nil, out, timeout)
		var ce *ConnectionError
		if err == nil || !errors.As(err, &ce) || attempt >= c.getRetries {
			return err
		}
		if !sleepCtx(ctx, r.next()) {
			return ctx.Err()
		}
	}
}

func esc(s string) string { return url.PathEscape(s) }

// Deploy deploys a workflow definition (a document: a map, a struct, or json.RawMessage).
func (c *Client) Deploy(ctx context.Context, document any) (map[string]any, error) {
	var out map[string]any
	return out, c.post(ctx, "/v1/workflows", document, &out)
}

// Start starts an execution; with an ExecutionID that exists, answers the existing one.
func (c *Client) Start(ctx context.Context, o StartOptions) (*Execution, error) {
	body := map[string]any{"workflow": o.Workflow}
	if o.Version != "" {
		body["version"] = o.Version
	}
	if o.Input != nil {
		body["input"] = o.Input
	}
	if o.ExecutionID != "" {
		body["execution_id"] = o.ExecutionID
	}
	var x Execution
	return &x, c.post(ctx, "/v1/executions", body, &x)
}

// Get reads an execution.
func (c *Client) Get(ctx context.Context, executionID string) (*Execution, error) {
	var x Execution
	return &x, c.get(ctx, "/v1/executions/"+esc(executionID), nil, &x, c.timeout)
}

// Wait waits until the execution is terminal or timeout has passed (0: no limit), and answers
// it as last read: check Status. Long waits are cut into server waits of at most 300 s.
func (c *Client) Wait(ctx context.Context, executionID string, timeout time.Duration) (*Execution, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		waitS := 300
		if !deadline.IsZero() {
			left := time.Until(deadline)
			waitS = int((left + time.Second - 1) / time.Second)
			if waitS > 300 {
				waitS = 300
			}
			if waitS < 0 {
				waitS = 0
			}
		}
		began := time.Now()
		var x Execution
		q := url.Values{"timeout_s": {strconv.Itoa(waitS)}}
		if err := c.get(ctx, "/v1/executions/"+esc(executionID)+"/wait", q, &x, time.Duration(waitS)*time.Second+c.timeout); err != nil {
			return nil, err
		}
		if IsTerminal(x.Status) || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return &x, nil
		}
		// The runtime answered early without a final status: do not spin.
		if time.Since(began) < time.Second && !sleepCtx(ctx, time.Second) {
			return nil, ctx.Err()
		}
	}
}

// Result waits for the execution and decodes its output into out (nil: not decoded). It
// answers an *ExecutionError when the execution did not complete.
func (c *Client) Result(ctx context.Context, executionID string, timeout time.Duration, out any) error {
	x, err := c.Wait(ctx, executionID, timeout)
	if err != nil {
		return err
	}
	if x.Status != StatusCompleted {
		return &ExecutionError{Execution: x}
	}
	if out == nil || len(x.Output) == 0 {
		return nil
	}
	if err := json.Unmarshal(x.Output, out); err != nil {
		return &ValidationError{What: x.Workflow + " output", Err: err}
	}
	return nil
}

// History reads one page of history: the events after afterSeq (0: from the start), at most
// limit of them (0: the server's default).
func (c *Client) History(ctx context.Context, executionID string, afterSeq int64, limit int) (*HistoryPage, error) {
	q := url.Values{}
	if afterSeq > 0 {
		q.Set("after_seq", strconv.FormatInt(afterSeq, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page HistoryPage
	return &page, c.get(ctx, "/v1/executions/"+esc(executionID)+"/history", q, &page, c.timeout)
}

// HistoryEvents reads the whole history, page after page.
func (c *Client) HistoryEvents(ctx context.Context, executionID string) ([]HistoryEvent, error) {
	var all []HistoryEvent
	var after int64
	for {
		page, err := c.History(ctx, executionID, after, 0)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if page.NextAfterSeq == nil || len(page.Events) == 0 || *page.NextAfterSeq == after {
			return all, nil
		}
		after = *page.NextAfterSeq
	}
}

// Pending answers why a running execution waits: every open item with its reason.
func (c *Client) Pending(ctx context.Context, executionID string) (map[string]any, error) {
	var out map[string]any
	return out, c.get(ctx, "/v1/executions/"+esc(executionID)+"/pending", nil, &out, c.timeout)
}

// Signal sends a signal (payload nil: none).
func (c *Client) Signal(ctx context.Context, executionID, name string, payload any) (*SignalResult, error) {
	body := map[string]any{}
	if payload != nil {
		body["payload"] = payload
	}
	var out SignalResult
	return &out, c.post(ctx, "/v1/executions/"+esc(executionID)+"/signals/"+esc(name), body, &out)
}

// Query evaluates a declared query on the execution's current state and decodes its result
// into out.
func (c *Client) Query(ctx context.Context, executionID, name string, out any) error {
	var res struct {
		Result json.RawMessage `json:"result"`
	}
	if err := c.get(ctx, "/v1/executions/"+esc(executionID)+"/queries/"+esc(name), nil, &res, c.timeout); err != nil {
		return err
	}
	if out == nil || len(res.Result) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result, out)
}

// Cancel cancels an execution (its compensations run) and answers it.
func (c *Client) Cancel(ctx context.Context, executionID, reason string) (*Execution, error) {
	body := map[string]any{}
	if reason != "" {
		body["reason"] = reason
	}
	var x Execution
	return &x, c.post(ctx, "/v1/executions/"+esc(executionID)+"/cancel", body, &x)
}

// Workers lists the registered worker sessions.
func (c *Client) Workers(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	return out, c.get(ctx, "/v1/workers", nil, &out, c.timeout)
}

// Health reads GET /v1/health.
func (c *Client) Health(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	return out, c.get(ctx, "/v1/health", nil, &out, c.timeout)
}

// Workflow is a typed reference to a deployed workflow: its input and output types.
//
//	var orders = orbit.Workflow[Order, OrderResult]{Name: "OrderProcessing", Version: "1.0.0"}
//	x, err := orders.Start(ctx, client, "order-1", Order{…})
//	res, err := orders.Result(ctx, client, x.ExecutionID, time.Minute)
type Workflow[In, Out any] struct {
	Name    string
	Version string
}

// Start starts an execution with a typed input (executionID "": generated).
func (wf Workflow[In, Out]) Start(ctx context.Context, c *Client, executionID string, in In) (*Execution, error) {
	return c.Start(ctx, StartOptions{Workflow: wf.Name, Version: wf.Version, Input: in, ExecutionID: executionID})
}

// Result waits for the execution and decodes its output as Out.
func (wf Workflow[In, Out]) Result(ctx context.Context, c *Client, executionID string, timeout time.Duration) (Out, error) {
	var out Out
	err := c.Result(ctx, executionID, timeout, &out)
	return out, err
}
