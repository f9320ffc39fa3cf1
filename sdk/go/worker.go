package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

// Logger receives the worker's log lines ("INFO orbit worker registered …"); *log.Logger is one.
type Logger interface {
	Printf(format string, v ...any)
}

// WorkerOptions configure a Worker. Server, WorkerID and Tasks are required.
type WorkerOptions struct {
	// Server is the runtime's base URL (or the load balancer's in front of a cluster).
	Server string
	// Token is the bearer token (a worker's own token when the server has a workers file).
	Token string
	// WorkerID is this worker's identity (worker_id of registration and of the workers file).
	WorkerID string
	// Runtime is reported at registration (default "go"); tasks pinned to a language go to
	// workers of that runtime.
	Runtime string
	Tasks   []TaskDefinition
	// Concurrency is how many attempts run at once (default 8): one slot each, and each slot
	// polls for one task at a time on an HTTP connection pool of its own.
	Concurrency int
	// PollWait is the long-poll wait (default 30 s, at most 60 s).
	PollWait time.Duration
	// HeartbeatInterval is the time between heartbeats (default 2 s).
	HeartbeatInterval time.Duration
	// RequestTimeout bounds every request but the long poll (default 30 s).
	RequestTimeout time.Duration
	// Backoff spaces the retries of connection errors and 5xx answers.
	Backoff Backoff
	// ShutdownGrace is how long Run lets running tasks finish and report once its context
	// ends (default 30 s); see Stop.
	ShutdownGrace time.Duration
	// Logger receives log lines (default: standard error with timestamps).
	Logger Logger
	// Debug adds debug lines.
	Debug bool
	// HTTPClient makes the HTTP client of each slot and of the session's own requests
	// (default: a new connection pool each).
	HTTPClient func() *http.Client
	// DisableNodeSpread keeps every slot on Server. By default, in a cluster in shared mode,
	// the worker reads GET /v1/health of Server and spreads its slots over the live servers at
	// the addresses they advertise (--advertise-addr): each slot polls one server, which hands
	// out the tasks of the executions it owns first, and its results go back to that owner on
	// the same connection. A server whose address does not answer is left out for 10 s (its
	// slots use Server meanwhile); a server that leaves the cluster has its slots moved at once.
	// With a single server, a standby cluster, or servers without addresses, every slot uses
	// Server, as with DisableNodeSpread. Registration and heartbeats always use Server.
	DisableNodeSpread bool
	// NodeRefresh is how often the live servers are read again when spreading (default 5 s).
	NodeRefresh time.Duration
}

// polledTask is one attempt as POST /v1/workers/poll hands it out.
type polledTask struct {
	Token          string          `json:"token"`
	ExecutionID    string          `json:"execution_id"`
	Step           string          `json:"step"`
	Attempt        int             `json:"attempt"`
	Task           string          `json:"task"`
	Contract       string          `json:"contract"`
	Input          json.RawMessage `json:"input"`
	IdempotencyKey string          `json:"idempotency_key"`
	Redelivery     bool            `json:"redelivery"`
	DeadlineMs     *float64        `json:"deadline_ms"`
}

// taskFailure is the error object of POST /v1/tasks/fail.
type taskFailure struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Details   any    `json:"details"`
}

type inflight struct {
	task        *polledTask
	cancel      context.CancelFunc
	reason      string // why its context was cancelled: cancel, deadline, shutdown
	handlerDone bool
}

type slot struct {
	index int
	home  *transport // the slot's own connection pool to the configured address
	// The pool the slot talks to now and the node it reaches: home and "", or a pool of its
	// own to a node's advertised address (written by the slot's loop under Worker.mu).
	tr          *transport
	target      string
	pollSession string
	pollCancel  context.CancelFunc
	// Cuts the first delivery of a result to the slot's node when that node leaves.
	deliveryCancel context.CancelFunc
}

// Worker serves tasks to an ORBIT runtime: it registers, long-polls in Concurrency slots
// (max_tasks 1 each, the next task asked for in each result's report), runs each attempt with
// a context that ends when the runtime cancels it (heartbeats carry cancellations) or its
// deadline passes, reports each result until it is delivered, retries every connection error
// and 5xx with backoff and jitter, registers again after 404 UNKNOWN_SESSION, and stops
// gracefully.
//
//	w, err := orbit.NewWorker(orbit.WorkerOptions{
//		Server: "http://127.0.0.1:7233", WorkerID: "orders-go",
//		Tasks:  []orbit.TaskDefinition{charge, refund},
//	})
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err = w.Run(ctx) // until SIGTERM: stop polling, finish running tasks, report them
type Worker struct {
	opts      WorkerOptions
	tasks     map[string]TaskDefinition
	main      *transport
	slots     []*slot
	nodes     *nodes
	newClient func() *http.Client
	logger    Logger

	mu        sync.Mutex
	state     string
	session   string
	inflight  map[string]*inflight
	backlog   []*polledTask
	regMu     sync.Mutex // one registration at a time
	regOnce   bool       // a registration succeeded once
	hbPending bool       // the heartbeat loop has a registration under way

	stopCtx       context.Context // ends polls and the slots' backoff sleeps
	stopCancel    context.CancelFunc
	taskCtx       context.Context // parent of every handler's context; ends when a stop gives up
	taskCancel    context.CancelFunc
	abandonCtx    context.Context // result deliveries give up when it ends
	abandonCancel context.CancelFunc
	hbCtx         context.Context
	hbCancel      context.CancelFunc

	slotsWG sync.WaitGroup
	bgWG    sync.WaitGroup // deliveries retried in the background
	nodesWG sync.WaitGroup // the loop reading the live nodes
	hbDone  chan struct{}
	done    chan struct{}

	stopOnce sync.Once
	stopErr  error
}

// NewWorker checks the options and makes a worker; Start or Run sets it going.
func NewWorker(opts WorkerOptions) (*Worker, error) {
	if opts.WorkerID == "" {
		return nil, errors.New("orbit.NewWorker: WorkerID is required")
	}
	if len(opts.Tasks) == 0 {
		return nil, errors.New("orbit.NewWorker: Tasks must list at least one task")
	}
	if opts.Runtime == "" {
		opts.Runtime = "go"
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.PollWait <= 0 {
		opts.PollWait = 30 * time.Second
	}
	if opts.PollWait > 60*time.Second {
		opts.PollWait = 60 * time.Second
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 2 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 30 * time.Second
	}
	if opts.NodeRefresh <= 0 {
		opts.NodeRefresh = 5 * time.Second
	}
	opts.Backoff = opts.Backoff.withDefaults()
	newClient := opts.HTTPClient
	if newClient == nil {
		newClient = func() *http.Client { return &http.Client{Transport: newHTTPTransport()} }
	}
	w := &Worker{
		opts:      opts,
		tasks:     map[string]TaskDefinition{},
		newClient: newClient,
		logger:    opts.Logger,
		state:     "new",
		inflight:  map[string]*inflight{},
		hbDone:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	if w.logger == nil {
		w.logger = log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	}
	var err error
	if w.main, err = newTransport(opts.Server, opts.Token, newClient()); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Concurrency; i++ {
		tr, _ := newTransport(opts.Server, opts.Token, newClient())
		w.slots = append(w.slots, &slot{index: i, home: tr, tr: tr})
	}
	w.nodes = newNodes(w.main.server, w.logf, w.nodesLeft)
	for _, t := range opts.Tasks {
		if t.TaskName() == "" || t.TaskContract() == "" {
			return nil, errors.New("orbit.NewWorker: every task needs a name and a contract version")
		}
		k := taskKey(t.TaskName(), t.TaskContract())
		if _, dup := w.tasks[k]; dup {
			return nil, fmt.Errorf("orbit.NewWorker: task %s contract %s is listed twice", t.TaskName(), t.TaskContract())
		}
		w.tasks[k] = t
	}
	w.stopCtx, w.stopCancel = context.WithCancel(context.Background())
	w.taskCtx, w.taskCancel = context.WithCancel(context.Background())
	w.abandonCtx, w.abandonCancel = context.WithCancel(context.Background())
	w.hbCtx, w.hbCancel = context.WithCancel(context.Background())
	return w, nil
}

func taskKey(name, contract string) string { return name + "\x00" + contract }

// Server is the runtime's URL.
func (w *Worker) Server() string { return w.main.server }

// SessionID is the current session, or "" while the worker is not registered.
func (w *Worker) SessionID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.session
}

// State is new, starting, running, stopping or stopped.
func (w *Worker) State() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// RunningTokens are the tokens of the attempts being run or reported.
func (w *Worker) RunningTokens() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	tokens := make([]string, 0, len(w.inflight))
	for t := range w.inflight {
		tokens = append(tokens, t)
	}
	sort.Strings(tokens)
	return tokens
}

// Done is closed when the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Start registers (retrying connection errors and 5xx until it succeeds or ctx ends) and sets
// the slots and the heartbeat going. It answers the runtime's refusal (401, 403, 422) as an
// *APIError.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.state != "new" {
		st := w.state
		w.mu.Unlock()
		return fmt.Errorf("orbit: Worker.Start: the worker is %s", st)
	}
	w.state = "starting"
	w.mu.Unlock()

	regCtx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-w.stopCtx.Done():
			cancel()
		case <-regCtx.Done():
		}
	}()
	_, err := w.ensureSession(regCtx)
	if err == nil {
		// In a shared cluster, the live nodes to spread the slots over (one health read).
		w.refreshNodes(regCtx)
	}
	cancel()
	w.mu.Lock()
	if w.state == "stopping" {
		// Stop was called meanwhile: its shutdown finishes the job.
		w.mu.Unlock()
		close(w.hbDone)
		return nil
	}
	if err != nil {
		w.state = "stopped"
		w.mu.Unlock()
		w.stopOnce.Do(func() { w.stopCancel(); close(w.hbDone); close(w.done) })
		return err
	}
	w.state = "running"
	w.slotsWG.Add(len(w.slots))
	spread := !w.opts.DisableNodeSpread
	if spread {
		w.nodesWG.Add(1)
	}
	w.mu.Unlock()
	for _, s := range w.slots {
		go w.slotLoop(s)
	}
	go w.heartbeatLoop()
	if spread {
		go w.nodesLoop()
	}
	return nil
}

// Run starts the worker and serves until ctx ends, then stops gracefully within
// ShutdownGrace (see Stop).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-w.done:
		return w.stopErr
	}
	grace, cancel := context.WithTimeout(context.Background(), w.opts.ShutdownGrace)
	defer cancel()
	return w.Stop(grace)
}

// Stop shuts the worker down gracefully: it stops polling, lets running tasks finish and
// report their results, stops heartbeating and unregisters. When ctx ends first, the running
// tasks' contexts are cancelled, undelivered results are given up, and the unregistration
// gives their attempts back to the runtime, which hands them out again at once. Safe to call
// more than once; every call returns when the worker has stopped.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { go w.shutdown(ctx) })
	<-w.done
	return w.stopErr
}

func (w *Worker) shutdown(ctx context.Context) {
	w.mu.Lock()
	started := w.state == "running" || w.state == "starting"
	w.state = "stopping"
	w.mu.Unlock()
	w.stopCancel()
	if !started {
		w.mu.Lock()
		w.state = "stopped"
		w.mu.Unlock()
		close(w.hbDone)
		close(w.done)
		return
	}
	drained := make(chan struct{})
	go func() {
		w.slotsWG.Wait()
		w.bgWG.Wait()
		close(drained)
	}()
	if n := len(w.RunningTokens()); n > 0 {
		w.logf("INFO", "stopping: waiting for %d running task(s)", n)
	}
	select {
	case <-drained:
	case <-ctx.Done():
		w.mu.Lock()
		n := len(w.inflight)
		for _, e := range w.inflight {
			if e.reason == "" {
				e.reason = "shutdown"
			}
		}
		w.backlog = nil
		w.mu.Unlock()
		w.logf("WARN", "stopping: %d task(s) still running; abandoning them (the runtime hands their attempts out again)", n)
		w.taskCancel()
		w.abandonCancel()
		// Handlers that heed their context end now; one that ignores it is not waited for.
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
	}
	w.hbCancel()
	<-w.hbDone
	w.nodesWG.Wait()
	w.unregister()
	w.closeNodeConnections()
	w.mu.Lock()
	w.state = "stopped"
	w.mu.Unlock()
	w.logf("INFO", "worker stopped worker_id=%s", w.opts.WorkerID)
	close(w.done)
}

func (w *Worker) logf(level, format string, v ...any) {
	if level == "DEBUG" && !w.opts.Debug {
		return
	}
	w.logger.Printf(level+" orbit "+format, v...)
}

func (w *Worker) describe(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("ORBIT runtime at %s answered %d %s: %s", w.main.server, ae.Status, ae.Code, ae.Message)
	}
	return err.Error()
}

// ---- the session ---------------------------------------------------------------------

// ensureSession answers the current session, registering (one caller at a time) when there
// is none.
func (w *Worker) ensureSession(ctx context.Context) (string, error) {
	if s := w.SessionID(); s != "" {
		return s, nil
	}
	w.regMu.Lock()
	defer w.regMu.Unlock()
	if s := w.SessionID(); s != "" {
		return s, nil
	}
	return w.register(ctx)
}

type registerTask struct {
	Name     string `json:"name"`
	Contract string `json:"contract"`
	Language string `json:"language,omitempty"`
}

func (w *Worker) register(ctx context.Context) (string, error) {
	body := map[string]any{
		"worker_id":   w.opts.WorkerID,
		"runtime":     w.opts.Runtime,
		"concurrency": w.opts.Concurrency,
	}
	tasks := make([]registerTask, 0, len(w.opts.Tasks))
	for _, t := range w.opts.Tasks {
		tasks = append(tasks, registerTask{t.TaskName(), t.TaskContract(), t.TaskLanguage()})
	}
	body["tasks"] = tasks
	r := retrier{b: w.opts.Backoff}
	for {
		var res struct {
			SessionID string `json:"session_id"`
		}
		err := w.main.do(ctx, "POST", "/v1/workers/register", nil, body, &res, w.opts.RequestTimeout)
		if err == nil && res.SessionID == "" {
			err = &APIError{Status: 200, Code: CodeInvalidResponse, Message: "register answered without a session_id", Method: "POST", Path: "/v1/workers/register"}
		}
		if err == nil {
			w.mu.Lock()
			w.session = res.SessionID
			w.regOnce = true
			w.mu.Unlock()
			w.logf("INFO", "worker registered worker_id=%s runtime=%s tasks=%d session_id=%s",
				w.opts.WorkerID, w.opts.Runtime, len(w.opts.Tasks), res.SessionID)
			return res.SessionID, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		w.mu.Lock()
		once := w.regOnce
		w.mu.Unlock()
		// Before the first success, a refusal (401, 403, 422) is the caller's to see.
		if !IsRetryable(err) && !once {
			return "", err
		}
		level := "WARN"
		if !IsRetryable(err) {
			level = "ERROR"
		}
		d := r.next()
		w.logf(level, "register failed: %s; retrying in %s", w.describe(err), formatDuration(d))
		if !sleepCtx(ctx, d) {
			return "", ctx.Err()
		}
	}
}

// forgetSession drops a session the runtime no longer knows and ends the polls held on it.
func (w *Worker) forgetSession(session, op string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.session != session {
		return
	}
	w.session = ""
	w.logf("WARN", "%s: the runtime does not know session %s (UNKNOWN_SESSION); registering again", op, session)
	for _, s := range w.slots {
		if s.pollSession == session && s.pollCancel != nil {
			s.pollCancel()
		}
	}
}

func (w *Worker) unregister() {
	session := w.SessionID()
	if session == "" {
		return
	}
	r := retrier{b: w.opts.Backoff}
	for attempt := 1; ; attempt++ {
		err := w.main.do(context.Background(), "POST", "/v1/workers/unregister", nil,
			map[string]any{"session_id": session}, nil, w.opts.RequestTimeout)
		if err == nil || IsUnknownSession(err) {
			w.mu.Lock()
			w.session = ""
			w.mu.Unlock()
			return
		}
		if IsRetryable(err) && attempt < 4 {
			d := r.next()
			w.logf("WARN", "unregister failed: %s; retrying in %s", w.describe(err), formatDuration(d))
			time.Sleep(d)
			continue
		}
		w.logf("WARN", "unregister failed: %s; giving up", w.describe(err))
		return
	}
}

// ---- heartbeats ----------------------------------------------------------------------

func (w *Worker) heartbeatLoop() {
	defer close(w.hbDone)
	r := retrier{b: w.opts.Backoff}
	delay := w.opts.HeartbeatInterval
	for {
		if !sleepCtx(w.hbCtx, delay) {
			return
		}
		delay = w.opts.HeartbeatInterval
		session := w.SessionID()
		if session == "" {
			w.registerInBackground()
			continue
		}
		tokens := w.RunningTokens()
		var res struct {
			Cancel []string `json:"cancel"`
		}
		err := w.main.do(w.hbCtx, "POST", "/v1/workers/heartbeat", nil,
			map[string]any{"session_id": session, "tokens": tokens}, &res, w.opts.RequestTimeout)
		if w.hbCtx.Err() != nil {
			return
		}
		if err == nil {
			r.reset()
			for _, token := range res.Cancel {
				w.cancelAttempt(token, "cancel")
			}
			continue
		}
		if IsUnknownSession(err) {
			w.forgetSession(session, "heartbeat")
			w.registerInBackground()
			continue
		}
		delay = r.next()
		level := "WARN"
		if !IsRetryable(err) {
			level = "ERROR"
		}
		w.logf(level, "heartbeat failed: %s; retrying in %s", w.describe(err), formatDuration(delay))
	}
}

// registerInBackground registers again (unless stopping, when there is nothing to keep alive).
func (w *Worker) registerInBackground() {
	if w.stopCtx.Err() != nil {
		return
	}
	w.mu.Lock()
	if w.hbPending {
		w.mu.Unlock()
		return
	}
	w.hbPending = true
	w.mu.Unlock()
	go func() {
		_, _ = w.ensureSession(w.stopCtx)
		w.mu.Lock()
		w.hbPending = false
		w.mu.Unlock()
	}()
}

func (w *Worker) cancelAttempt(token, reason string) {
	w.mu.Lock()
	e := w.inflight[token]
	if e == nil || e.handlerDone || e.reason != "" {
		w.mu.Unlock()
		return
	}
	e.reason = reason
	w.mu.Unlock()
	w.logf("INFO", "task cancelled by the runtime token=%s step=%s", token, e.task.Step)
	e.cancel()
}
