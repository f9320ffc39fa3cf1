package orbit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer is a small in-memory ORBIT runtime for the worker's tests: a task queue, long
// polls, results, heartbeats with cancellations, and faults to inject.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	cond        *sync.Cond
	sessions    map[string]bool
	nextID      int
	queue       []map[string]any
	results     []map[string]any // bodies of complete and fail, in order
	cancels     []string         // tokens for the next heartbeat
	requests    []string         // paths, in order
	polls       []map[string]any // poll bodies
	fail        map[string][]int // path -> statuses to answer before serving it
	heartbeat   int
	activePolls int
	unregs      int
	// Shared cluster: the answer of /v1/health (404 when nil), the hosts of active polls,
	// results held (until their request ends) when they reach one of holdResults' hosts, and
	// how long a poll waits for a task (default 2 s).
	health      any
	hostPolls   map[string]int
	holdResults map[string]bool
	held        int
	pollHold    time.Duration
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{t: t, sessions: map[string]bool{}, fail: map[string][]int{},
		hostPolls: map[string]int{}, holdResults: map[string]bool{}, pollHold: 2 * time.Second}
	f.cond = sync.NewCond(&f.mu)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// listen serves the same fake runtime at one more address (another server of a shared
// cluster, on the same state); stop ends it (idempotent).
func (f *fakeServer) listen() (addr string, stop func()) {
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			f.mu.Lock()
			f.cond.Broadcast()
			f.mu.Unlock()
			srv.CloseClientConnections()
			srv.Close()
		})
	}
	f.t.Cleanup(stop)
	return srv.URL, stop
}

// sharedHealth sets /v1/health to a shared cluster of the live nodes at addrs.
func (f *fakeServer) sharedHealth(addrs ...string) {
	nodes := []any{}
	for i, a := range addrs {
		nodes = append(nodes, map[string]any{"node_id": fmt.Sprintf("node-%d", i+1), "addr": a, "live": true})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health = map[string]any{"status": "ok", "role": "shared", "nodes": nodes}
}

// hostOf is the host of a fake server's URL, as the requests reaching it name it.
func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

func (f *fakeServer) enqueue(task string, input any) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	token := fmt.Sprintf("x-%d/t%d", f.nextID, f.nextID)
	raw, _ := json.Marshal(input)
	f.queue = append(f.queue, map[string]any{
		"token": token, "execution_id": fmt.Sprintf("x-%d", f.nextID), "step": "s", "attempt": 1,
		"task": task, "contract": "1", "input": json.RawMessage(raw), "idempotency_key": "k-" + token,
		"redelivery": false, "deadline_ms": nil,
	})
	f.cond.Broadcast()
	return token
}

func (f *fakeServer) injectFailures(path string, statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[path] = append(f.fail[path], statuses...)
}

func (f *fakeServer) dropSessions() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions = map[string]bool{}
	f.cond.Broadcast()
}

func (f *fakeServer) writeErr(w http.ResponseWriter, status int, code string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"fake %s","leader_addr":"http://leader"}}`, code, code)
}

// waitUntil polls cond (under the lock) until it holds; a condition, not a sleep.
func (f *fakeServer) waitUntil(what string, cond func() bool) {
	f.t.Helper()
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		f.mu.Lock()
		ok := cond()
		f.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatalf("timed out waiting for %s", what)
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.requests = append(f.requests, r.URL.Path)
	if st := f.fail[r.URL.Path]; len(st) > 0 {
		f.fail[r.URL.Path] = st[1:]
		f.mu.Unlock()
		code := "STORAGE_ERROR"
		switch st[0] {
		case 503:
			code = "NOT_LEADER"
		case 404:
			code = "UNKNOWN_SESSION"
		case 401:
			code = "UNAUTHORIZED"
		}
		f.writeErr(w, st[0], code)
		return
	}
	session, _ := body["session_id"].(string)
	if body != nil {
		body["host"] = r.Host
	}
	switch r.URL.Path {
	case "/v1/health":
		h := f.health
		f.mu.Unlock()
		if h == nil {
			f.writeErr(w, 404, "NOT_FOUND")
			return
		}
		writeJSON(w, h)
	case "/v1/workers/register":
		f.nextID++
		id := fmt.Sprintf("sess-%d", f.nextID)
		f.sessions[id] = true
		f.mu.Unlock()
		writeJSON(w, map[string]any{"session_id": id})
	case "/v1/workers/poll":
		f.polls = append(f.polls, body)
		f.activePolls++
		f.hostPolls[r.Host]++
		defer func() { f.mu.Lock(); f.activePolls--; f.hostPolls[r.Host]--; f.mu.Unlock() }()
		end := time.Now().Add(f.pollHold)
		for len(f.queue) == 0 && f.sessions[session] && time.Now().Before(end) && r.Context().Err() == nil {
			go func() { time.Sleep(20 * time.Millisecond); f.cond.Broadcast() }()
			f.cond.Wait()
		}
		if !f.sessions[session] {
			f.mu.Unlock()
			f.writeErr(w, 404, "UNKNOWN_SESSION")
			return
		}
		tasks := []any{}
		if len(f.queue) > 0 && r.Context().Err() == nil {
			tasks = append(tasks, f.queue[0])
			f.queue = f.queue[1:]
		}
		f.mu.Unlock()
		writeJSON(w, map[string]any{"tasks": tasks})
	case "/v1/workers/heartbeat":
		f.heartbeat++
		if !f.sessions[session] {
			f.mu.Unlock()
			f.writeErr(w, 404, "UNKNOWN_SESSION")
			return
		}
		c := f.cancels
		f.cancels = nil
		f.mu.Unlock()
		if c == nil {
			c = []string{}
		}
		writeJSON(w, map[string]any{"cancel": c})
	case "/v1/workers/unregister":
		f.unregs++
		delete(f.sessions, session)
		f.mu.Unlock()
		writeJSON(w, map[string]any{})
	case "/v1/tasks/complete", "/v1/tasks/fail":
		if f.holdResults[r.Host] {
			// A paused server: the result waits until its request ends.
			f.held++
			for r.Context().Err() == nil {
				go func() { time.Sleep(20 * time.Millisecond); f.cond.Broadcast() }()
				f.cond.Wait()
			}
			f.mu.Unlock()
			return
		}
		body["path"] = r.URL.Path
		f.results = append(f.results, body)
		tasks := []any{}
		if body["max_tasks"] != nil && len(f.queue) > 0 {
			tasks = append(tasks, f.queue[0])
			f.queue = f.queue[1:]
		}
		f.cond.Broadcast()
		f.mu.Unlock()
		writeJSON(w, map[string]any{"accepted": true, "tasks": tasks})
	default:
		f.mu.Unlock()
		f.writeErr(w, 404, "NOT_FOUND")
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("content-type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
