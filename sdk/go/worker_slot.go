package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// slotLoop is one concurrency slot: a long poll for one task on the slot's connection, the
// task run, its result reported on the same connection asking for the next task (eager
// dispatch), and so on while answers carry one.
func (w *Worker) slotLoop(s *slot) {
	defer w.slotsWG.Done()
	r := retrier{b: w.opts.Backoff}
	for w.stopCtx.Err() == nil {
		task := w.takeBacklog()
		if task == nil {
			w.route(s)
			var err error
			task, err = w.poll(s)
			if err != nil {
				if w.stopCtx.Err() != nil {
					return
				}
				var ce *ConnectionError
				if s.target != "" && errors.As(err, &ce) {
					// The node's address does not answer: the configured address meanwhile,
					// at once.
					w.nodes.markUnreachable(s.target, ce.Reason)
					continue
				}
				d := r.next()
				level := "WARN"
				if !IsRetryable(err) {
					level = "ERROR"
				}
				w.logf(level, "poll failed: %s; retrying in %s", w.describe(err), formatDuration(d))
				if !sleepCtx(w.stopCtx, d) {
					return
				}
				continue
			}
			r.reset()
		}
		for task != nil {
			task = w.runTask(s, task)
		}
	}
}

func (w *Worker) takeBacklog() *polledTask {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.backlog) == 0 {
		return nil
	}
	t := w.backlog[0]
	w.backlog = w.backlog[1:]
	return t
}

// firstOf answers the first task and queues the others (a runtime that ignores max_tasks).
func (w *Worker) firstOf(tasks []*polledTask) *polledTask {
	if len(tasks) == 0 {
		return nil
	}
	if len(tasks) > 1 {
		w.logf("WARN", "the runtime answered %d tasks for max_tasks=1", len(tasks))
		w.mu.Lock()
		w.backlog = append(w.backlog, tasks[1:]...)
		w.mu.Unlock()
	}
	return tasks[0]
}

// poll is one long poll for one task; nil when it ran out or its session was lost.
func (w *Worker) poll(s *slot) (*polledTask, error) {
	session, err := w.ensureSession(w.stopCtx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(w.stopCtx)
	defer cancel()
	w.mu.Lock()
	if w.session != session { // lost between ensureSession and here
		w.mu.Unlock()
		return nil, nil
	}
	s.pollSession, s.pollCancel = session, cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		s.pollSession, s.pollCancel = "", nil
		w.mu.Unlock()
	}()
	var res struct {
		Tasks []*polledTask `json:"tasks"`
	}
	body := map[string]any{"session_id": session, "max_tasks": 1, "wait_s": int(w.opts.PollWait / time.Second)}
	err = s.tr.do(ctx, "POST", "/v1/workers/poll", nil, body, &res, w.opts.PollWait+15*time.Second)
	if err != nil {
		if IsUnknownSession(err) {
			w.forgetSession(session, "poll")
			return nil, nil
		}
		if ctx.Err() != nil && w.stopCtx.Err() == nil {
			return nil, nil // the session was found unknown elsewhere
		}
		return nil, err
	}
	return w.firstOf(res.Tasks), nil
}

type outcome struct {
	output  json.RawMessage
	failure *taskFailure
}

// runTask runs one attempt and reports it; it answers the next task the report's answer
// carried (to run on this slot), or nil. A report whose first try fails is retried in the
// background and the slot freed.
func (w *Worker) runTask(s *slot, task *polledTask) *polledTask {
	if task == nil || task.Token == "" {
		w.logf("ERROR", "poll answered a task without a token; ignoring it")
		return nil
	}
	w.mu.Lock()
	if _, dup := w.inflight[task.Token]; dup {
		w.mu.Unlock()
		w.logf("DEBUG", "task %s handed out again while it runs here; ignoring", task.Token)
		return nil
	}
	ctx, cancel := context.WithCancel(w.taskCtx)
	deadline := deadlineOf(task.DeadlineMs)
	if !deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, deadline)
		inner := cancel
		cancel = func() { cancelDeadline(); inner() }
	}
	e := &inflight{task: task, cancel: cancel}
	w.inflight[task.Token] = e
	w.mu.Unlock()

	o := w.execute(ctx, e, deadline)
	cancel()
	w.mu.Lock()
	e.handlerDone = true
	w.mu.Unlock()

	take := w.stopCtx.Err() == nil
	tasks, rerouted, err := w.sendFirst(s, task, o, take)
	if err == nil {
		w.finished(task.Token)
		return w.firstOf(tasks)
	}
	// Retries go to the configured address: at once when the slot's node did not answer or
	// left (the configured address reaches a live server, which hands the result to the
	// execution's new owner before that owner redelivers the attempt).
	via := s.home
	if s.target != "" {
		via = w.main
	}
	w.bgWG.Add(1)
	go func() {
		defer w.bgWG.Done()
		defer w.finished(task.Token)
		w.deliver(via, task, o, err, rerouted)
	}()
	return nil
}

// sendFirst reports a result once on the slot's connection (to the server that handed the
// task out). On a node's own address, that request is cut when the node leaves the live list
// (a paused server would hold it until the request's timeout); rerouted tells that it was cut
// or did not connect.
func (w *Worker) sendFirst(s *slot, task *polledTask, o outcome, take bool) (tasks []*polledTask, rerouted bool, err error) {
	if s.target == "" {
		tasks, err = w.send(w.abandonCtx, s.tr, task, o, take)
		return tasks, false, err
	}
	// Cancelled at the end of this request, so nothing outlives it (the context leaves its
	// parent's children when cancelled).
	ctx, cut := context.WithCancel(w.abandonCtx)
	w.mu.Lock()
	s.deliveryCancel = cut
	w.mu.Unlock()
	tasks, err = w.send(ctx, s.tr, task, o, take)
	w.mu.Lock()
	s.deliveryCancel = nil
	w.mu.Unlock()
	wasCut := ctx.Err() != nil && w.abandonCtx.Err() == nil
	cut()
	if err == nil {
		return tasks, false, nil
	}
	var ce *ConnectionError
	rerouted = wasCut || errors.As(err, &ce)
	if rerouted {
		w.logf("DEBUG", "the result of %s goes to %s: node %s left or did not answer (%s)",
			task.Token, w.main.server, s.target, err)
	}
	return nil, rerouted, err
}

func (w *Worker) finished(token string) {
	w.mu.Lock()
	delete(w.inflight, token)
	w.mu.Unlock()
}

// deadlineOf reads deadline_ms: epoch milliseconds, or a small value as a duration from now.
func deadlineOf(v *float64) time.Time {
	if v == nil || *v <= 0 {
		return time.Time{}
	}
	if *v > 1e11 {
		return time.UnixMilli(int64(*v))
	}
	return time.Now().Add(time.Duration(*v) * time.Millisecond)
}

func (w *Worker) execute(ctx context.Context, e *inflight, deadline time.Time) (o outcome) {
	task := e.task
	info, _ := json.Marshal(map[string]any{
		"execution_id": task.ExecutionID, "step": task.Step, "attempt": task.Attempt,
		"task": task.Task, "redelivery": task.Redelivery,
	})
	w.logf("INFO", "executing %s", info)
	def := w.tasks[taskKey(task.Task, task.Contract)]
	if def == nil {
		return outcome{failure: &taskFailure{
			Code: "UNKNOWN_TASK", Retryable: true, Details: map[string]any{},
			Message: fmt.Sprintf("worker %s does not serve task %s contract %s", w.opts.WorkerID, task.Task, task.Contract),
		}}
	}
	a := &Attempt{
		Token: task.Token, ExecutionID: task.ExecutionID, Step: task.Step, Attempt: task.Attempt,
		Task: task.Task, Contract: task.Contract, IdempotencyKey: task.IdempotencyKey,
		Redelivery: task.Redelivery, Deadline: deadline, Logger: w.logger,
	}
	out, err := runHandler(ctx, def, a, task.Input)
	if err != nil {
		var te *TaskError
		if errors.As(err, &te) {
			f := handlerFailure(err)
			return outcome{failure: &f}
		}
		w.mu.Lock()
		reason := e.reason
		if reason == "" && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason = "deadline"
		}
		w.mu.Unlock()
		switch reason {
		case "cancel":
			return outcome{failure: &taskFailure{Code: "CANCELLED", Message: "task cancelled by the ORBIT runtime: " + err.Error(), Retryable: true, Details: map[string]any{}}}
		case "deadline":
			return outcome{failure: &taskFailure{Code: "DEADLINE_EXCEEDED", Message: "the attempt's deadline passed: " + err.Error(), Retryable: true, Details: map[string]any{}}}
		case "shutdown":
			return outcome{failure: &taskFailure{Code: "WORKER_STOPPED", Message: "the worker stopped before the task finished: " + err.Error(), Retryable: true, Details: map[string]any{}}}
		}
		f := handlerFailure(err)
		return outcome{failure: &f}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return outcome{failure: &taskFailure{Code: "RESULT_NOT_JSON", Message: "the output is not JSON: " + err.Error(), Retryable: false, Details: map[string]any{}}}
	}
	return outcome{output: raw}
}

type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string { return fmt.Sprintf("the task handler panicked: %v", p.value) }

func runHandler(ctx context.Context, def TaskDefinition, a *Attempt, input json.RawMessage) (out any, err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &panicError{value: v, stack: string(debug.Stack())}
			err = &TaskError{Code: "TASK_PANIC", Message: pe.Error(), Retryable: true, Details: map[string]any{"stack": clip(pe.stack, 4000)}}
		}
	}()
	return def.run(ctx, a, input)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// send reports a result once; with take it asks for the slot's next task in the same request.
func (w *Worker) send(ctx context.Context, tr *transport, task *polledTask, o outcome, take bool) ([]*polledTask, error) {
	body := map[string]any{"token": task.Token}
	path := "/v1/tasks/complete"
	if o.failure != nil {
		path = "/v1/tasks/fail"
		body["error"] = o.failure
	} else {
		body["output"] = o.output
	}
	session := w.SessionID()
	if take && session != "" {
		body["session_id"] = session
		body["max_tasks"] = 1
	}
	var res struct {
		Accepted *bool         `json:"accepted"`
		Tasks    []*polledTask `json:"tasks"`
	}
	if err := tr.do(ctx, "POST", path, nil, body, &res, w.opts.RequestTimeout); err != nil {
		return nil, err
	}
	if res.Accepted != nil && !*res.Accepted {
		w.logf("INFO", "result not accepted (the step already has one) token=%s step=%s", task.Token, task.Step)
	} else if o.failure != nil {
		w.logf("INFO", "task failed execution_id=%s step=%s attempt=%d code=%s", task.ExecutionID, task.Step, task.Attempt, o.failure.Code)
	}
	if !take {
		return nil, nil
	}
	return res.Tasks, nil
}

// deliver retries a report whose first try failed with err on tr until it is delivered, the
// runtime refuses it for good, or the worker gives up (a stop's grace passed); at once, without
// a backoff, first when now.
func (w *Worker) deliver(tr *transport, task *polledTask, o outcome, err error, now bool) {
	if now && w.abandonCtx.Err() == nil {
		if _, err = w.send(w.abandonCtx, tr, task, o, false); err == nil {
			return
		}
	}
	r := retrier{b: w.opts.Backoff}
	substituted := false
	for {
		if w.abandonCtx.Err() != nil {
			w.logf("WARN", "giving up reporting the result of %s (worker stopped)", task.Token)
			return
		}
		var ae *APIError
		refused := errors.As(err, &ae) && (ae.Status == 400 || ae.Status == 413 || ae.Status == 422)
		switch {
		case IsRetryable(err):
			d := r.next()
			w.logf("WARN", "report result failed: %s; retrying in %s", w.describe(err), formatDuration(d))
			if !sleepCtx(w.abandonCtx, d) {
				continue
			}
		case refused && !substituted:
			// A result the runtime refuses would be dropped and its attempt redelivered for
			// ever: it is reported as a small failure instead, once.
			what := "output"
			code := "OUTPUT_REJECTED"
			if o.failure != nil {
				what, code = "failure", "RESULT_REJECTED"
			}
			reason := fmt.Sprintf("the runtime refused the %s: %s: %s", what, ae.Code, ae.Message)
			w.logf("ERROR", "%s (%s); reporting a failure instead", reason, task.Token)
			o = outcome{failure: &taskFailure{Code: code, Message: clip(reason, 2000), Retryable: false, Details: map[string]any{}}}
			substituted = true
		default:
			w.logf("ERROR", "report result failed: %s; dropping the result of %s", w.describe(err), task.Token)
			return
		}
		if _, err = w.send(w.abandonCtx, tr, task, o, false); err == nil {
			return
		}
	}
}
