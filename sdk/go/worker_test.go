package orbit

import (
	"context"
	"errors"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"
)

type echoIn struct {
	Name string `json:"name"`
}

func (e echoIn) Validate() error {
	if e.Name == "" {
		return errors.New("name is required")
	}
	return nil
}

type echoOut struct {
	Hello   string `json:"hello"`
	Attempt int    `json:"attempt"`
}

var echoTask = NewTask("t.echo", "1", func(ctx context.Context, in echoIn, a *Attempt) (echoOut, error) {
	if in.Name == "decline" {
		return echoOut{}, Fail("DECLINED", "no")
	}
	if in.Name == "boom" {
		return echoOut{}, errors.New("kaput")
	}
	if in.Name == "panic" {
		panic("oh no")
	}
	return echoOut{Hello: in.Name, Attempt: a.Attempt}, nil
})

// blockTask waits until its context ends, or until release is closed.
func blockTask(started chan<- string, release <-chan struct{}) *Task[map[string]any, map[string]any] {
	return NewTask("t.block", "1", func(ctx context.Context, in map[string]any, a *Attempt) (map[string]any, error) {
		started <- a.Token
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-release:
			return map[string]any{"released": true}, nil
		}
	})
}

// syncLog keeps the worker's log lines for assertions.
type syncLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *syncLog) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(log.New(io.Discard, "", 0).Prefix()+sprintf(format, v...)))
}

func (l *syncLog) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			return true
		}
	}
	return false
}

func newTestWorker(t *testing.T, f *fakeServer, concurrency int, tasks ...TaskDefinition) (*Worker, *syncLog) {
	t.Helper()
	logs := &syncLog{}
	w, err := NewWorker(WorkerOptions{
		Server: f.srv.URL, WorkerID: "w-test", Tasks: tasks, Concurrency: concurrency,
		PollWait: time.Second, HeartbeatInterval: 30 * time.Millisecond, Logger: logs,
		Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w, logs
}

func resultFor(f *fakeServer, token string) map[string]any {
	for _, r := range f.results {
		if r["token"] == token {
			return r
		}
	}
	return nil
}

func TestWorkerCompletesTasksAndAsksForTheNextInEachResult(t *testing.T) {
	f := newFakeServer(t)
	w, _ := newTestWorker(t, f, 3, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tokens := []string{f.enqueue("t.echo", map[string]any{"name": "a"}), f.enqueue("t.echo", map[string]any{"name": "b"})}
	f.waitUntil("two results", func() bool { return len(f.results) == 2 })
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tok := range tokens {
		r := resultFor(f, tok)
		if r == nil || r["path"] != "/v1/tasks/complete" {
			t.Fatalf("no completion for %s: %v", tok, f.results)
		}
		if r["session_id"] == nil || r["max_tasks"] != float64(1) {
			t.Fatalf("the result does not ask for the next task: %v", r)
		}
	}
	for _, p := range f.polls {
		if p["max_tasks"] != float64(1) {
			t.Fatalf("a poll asked for %v tasks", p["max_tasks"])
		}
	}
	out := resultFor(f, tokens[0])["output"].(map[string]any)
	if out["hello"] != "a" || out["attempt"] != float64(1) {
		t.Fatalf("output %v", out)
	}
}

func TestWorkerHoldsOnePollPerSlot(t *testing.T) {
	f := newFakeServer(t)
	w, _ := newTestWorker(t, f, 4, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitUntil("four polls", func() bool { return len(f.polls) >= 4 })
}

func TestWorkerReportsFailuresWithTheirCodes(t *testing.T) {
	f := newFakeServer(t)
	w, _ := newTestWorker(t, f, 2, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	declined := f.enqueue("t.echo", map[string]any{"name": "decline"})
	boom := f.enqueue("t.echo", map[string]any{"name": "boom"})
	invalid := f.enqueue("t.echo", map[string]any{"name": ""})
	panicked := f.enqueue("t.echo", map[string]any{"name": "panic"})
	unknown := f.enqueue("t.other", map[string]any{})
	f.waitUntil("five results", func() bool { return len(f.results) == 5 })
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[string][2]any{
		declined: {"DECLINED", false}, boom: {"TASK_ERROR", true}, invalid: {"INVALID_INPUT", false},
		panicked: {"TASK_PANIC", true}, unknown: {"UNKNOWN_TASK", true},
	}
	for tok, w := range want {
		r := resultFor(f, tok)
		e, _ := r["error"].(map[string]any)
		if r["path"] != "/v1/tasks/fail" || e["code"] != w[0] || e["retryable"] != w[1] {
			t.Fatalf("%s: want %v, got %v", tok, w, r)
		}
	}
}

func TestWorkerRetriesNotLeaderAndServerErrorsWithBackoff(t *testing.T) {
	f := newFakeServer(t)
	f.injectFailures("/v1/workers/register", 503, 503, 500)
	f.injectFailures("/v1/tasks/complete", 502)
	w, logs := newTestWorker(t, f, 1, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := f.enqueue("t.echo", map[string]any{"name": "x"})
	f.waitUntil("the result, delivered on a retry", func() bool { return resultFor(f, tok) != nil })
	if !logs.has("register failed: ORBIT runtime at " + f.srv.URL + " answered 503 NOT_LEADER") {
		t.Fatalf("no retry logged: %v", logs.lines)
	}
	if !logs.has("report result failed:") {
		t.Fatalf("no report retry logged: %v", logs.lines)
	}
}

func TestWorkerRegistersAgainAfterUnknownSession(t *testing.T) {
	f := newFakeServer(t)
	w, logs := newTestWorker(t, f, 2, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := w.SessionID()
	f.dropSessions()
	f.waitUntil("a new session", func() bool { return len(f.sessions) == 1 })
	tok := f.enqueue("t.echo", map[string]any{"name": "again"})
	f.waitUntil("the result", func() bool { return resultFor(f, tok) != nil })
	if w.SessionID() == first || !logs.has("(UNKNOWN_SESSION); registering again") {
		t.Fatalf("not registered again: %s %v", w.SessionID(), logs.lines)
	}
}

func TestWorkerCancelsAHandlerWhenAHeartbeatSaysSo(t *testing.T) {
	f := newFakeServer(t)
	started := make(chan string, 1)
	w, _ := newTestWorker(t, f, 1, blockTask(started, make(chan struct{})))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := f.enqueue("t.block", map[string]any{})
	<-started
	f.mu.Lock()
	f.cancels = []string{tok}
	f.mu.Unlock()
	f.waitUntil("the cancelled attempt's failure", func() bool { return resultFor(f, tok) != nil })
	f.mu.Lock()
	defer f.mu.Unlock()
	e := resultFor(f, tok)["error"].(map[string]any)
	if e["code"] != "CANCELLED" || e["retryable"] != true {
		t.Fatalf("got %v", e)
	}
}

func TestGracefulStopFinishesTheRunningTaskThenUnregisters(t *testing.T) {
	f := newFakeServer(t)
	started := make(chan string, 1)
	release := make(chan struct{})
	w, _ := newTestWorker(t, f, 2, blockTask(started, release))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Both slots polling before the first task: a poll still on its way when the worker
	// stops would otherwise reach the server later and could take the second task.
	f.waitUntil("both slots to poll", func() bool { return f.activePolls == 2 })
	tok := f.enqueue("t.block", map[string]any{})
	<-started
	stopped := make(chan error)
	go func() { stopped <- w.Stop(context.Background()) }()
	f.waitUntil("the worker to stop polling", func() bool { return w.stopCtx.Err() != nil && f.activePolls == 0 })
	f.enqueue("t.block", map[string]any{}) // not taken: the worker polls no more
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := resultFor(f, tok)
	if r == nil || r["path"] != "/v1/tasks/complete" || r["max_tasks"] != nil {
		t.Fatalf("result %v", r)
	}
	if len(f.queue) != 1 || f.unregs != 1 {
		t.Fatalf("queue %d, unregistrations %d", len(f.queue), f.unregs)
	}
}

func TestStopGivesUpOnATaskAfterItsGrace(t *testing.T) {
	f := newFakeServer(t)
	started := make(chan string, 1)
	w, _ := newTestWorker(t, f, 1, blockTask(started, make(chan struct{})))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.enqueue("t.block", map[string]any{})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unregs != 1 {
		t.Fatalf("unregistrations %d", f.unregs)
	}
}

func TestStartAnswersARefusedRegistration(t *testing.T) {
	f := newFakeServer(t)
	f.injectFailures("/v1/workers/register", 401)
	w, _ := newTestWorker(t, f, 1, echoTask)
	err := w.Start(context.Background())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Code != "UNAUTHORIZED" {
		t.Fatalf("got %v", err)
	}
}

func TestNewWorkerRefusesBadOptions(t *testing.T) {
	if _, err := NewWorker(WorkerOptions{Server: "http://x", Tasks: []TaskDefinition{echoTask}}); err == nil {
		t.Fatal("no worker id accepted")
	}
	if _, err := NewWorker(WorkerOptions{Server: "x", WorkerID: "w", Tasks: []TaskDefinition{echoTask}}); err == nil {
		t.Fatal("a server that is no URL accepted")
	}
	if _, err := NewWorker(WorkerOptions{Server: "http://x", WorkerID: "w", Tasks: []TaskDefinition{echoTask, echoTask}}); err == nil {
		t.Fatal("a task listed twice accepted")
	}
}

func TestBackoffGrowsToItsMaximumWithJitter(t *testing.T) {
	b := Backoff{}
	prev := time.Duration(0)
	for i := 0; i < 8; i++ {
		d := b.Delay(i)
		if d < prev && d < 5*time.Second {
			t.Fatalf("delay %d shrank: %v < %v", i, d, prev)
		}
		if d > 5*time.Second {
			t.Fatalf("delay %d above the maximum: %v", i, d)
		}
		prev = d
	}
	if d := b.Delay(0); d < 200*time.Millisecond || d > 240*time.Millisecond {
		t.Fatalf("first delay %v", d)
	}
}
