package orbit

// The worker's router (nodes.go) without a server, then the worker spreading its slots over
// the addresses of an in-memory fake runtime that answers at two addresses (two servers of a
// shared cluster on one state). The end-to-end behaviour against real shared servers is
// tests/cluster_shared_spread_go_test.ts.

import (
	"context"
	"encoding/json"
	"net"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func decodeJSON(t *testing.T, text string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLiveAddressesAreTheLiveSharedNodesHTTPAddressesSortedOnceEach(t *testing.T) {
	nodes := `[
		{"node_id": "1", "addr": "http://b:7233/", "live": true},
		{"node_id": "2", "addr": "http://a:7233", "live": true},
		{"node_id": "3", "addr": "http://c:7233", "live": false},
		{"node_id": "4", "addr": null, "live": true},
		{"node_id": "5", "addr": "not a url", "live": true},
		{"node_id": "6", "addr": "ftp://d:21", "live": true},
		{"node_id": "7", "addr": "https://a:7233", "live": true},
		{"node_id": "8", "addr": "http://a:7233", "live": true},
		{"node_id": "9", "addr": "http://e:7233", "live": "true"},
		{"node_id": "10", "addr": 7233, "live": true},
		"node"
	]`
	got := liveAddresses(decodeJSON(t, `{"role": "shared", "nodes": `+nodes+`}`))
	want := []string{"http://a:7233", "http://b:7233", "https://a:7233"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Anything but a shared cluster: every slot stays on the configured address.
	for _, role := range []string{`"single"`, `"leader"`, `"standby"`, `null`} {
		if got := liveAddresses(decodeJSON(t, `{"role": `+role+`, "nodes": `+nodes+`}`)); len(got) != 0 {
			t.Fatalf("role %s: %v", role, got)
		}
	}
	for _, h := range []string{`{"role": "shared"}`, `{"role": "shared", "nodes": {}}`, `null`, `"ok"`, `[]`} {
		if got := liveAddresses(decodeJSON(t, h)); got == nil || len(got) != 0 {
			t.Fatalf("%s: %v", h, got)
		}
	}
}

type routerTest struct {
	n    *nodes
	logs *syncLog
	left []map[string]bool
	now  time.Time
}

func newRouter(offset int) *routerTest {
	r := &routerTest{logs: &syncLog{}, now: time.Unix(1000, 0)}
	logf := func(level, format string, v ...any) { r.logs.Printf(level+" orbit "+format, v...) }
	r.n = newNodes("http://lb:7233", logf, func(left map[string]bool) { r.left = append(r.left, left) })
	r.n.offset = offset
	r.n.now = func() time.Time { return r.now }
	return r
}

func TestNodesSpreadTheSlotsEvenlyAndNoneKnownIsTheConfiguredAddress(t *testing.T) {
	r := newRouter(5)
	if got := r.n.targetFor(0); got != "" {
		t.Fatalf("no nodes known, slot 0 on %q", got)
	}
	r.n.update([]string{"http://a", "http://b", "http://c"})
	count := map[string]int{}
	for i := 0; i < 8; i++ {
		count[r.n.targetFor(i)]++
	}
	counts := []int{}
	for addr, c := range count {
		if addr == "" {
			t.Fatalf("a slot on the configured address: %v", count)
		}
		counts = append(counts, c)
	}
	sort.Ints(counts)
	if !reflect.DeepEqual(counts, []int{2, 3, 3}) {
		t.Fatalf("8 slots over 3 nodes: %v", count)
	}
	// Two slots on two nodes: one each, whatever the offset.
	for _, offset := range []int{0, 1, 7, 1023} {
		two := newRouter(offset)
		two.n.update([]string{"http://a", "http://b"})
		if a, b := two.n.targetFor(0), two.n.targetFor(1); a == b || a == "" || b == "" {
			t.Fatalf("offset %d: slots on %q and %q", offset, a, b)
		}
	}
	// The offset is random per worker, within [0, 1024).
	offsets := map[int]bool{}
	for i := 0; i < 20; i++ {
		o := newNodes("http://lb", nil, nil).offset
		if o < 0 || o >= 1024 {
			t.Fatalf("offset %d", o)
		}
		offsets[o] = true
	}
	if len(offsets) < 2 {
		t.Fatalf("20 workers, offsets %v", offsets)
	}
}

func TestNodesLeaveOutANodeThatDidNotAnswerForAWhileThenTryItAgain(t *testing.T) {
	r := newRouter(0)
	r.n.update([]string{"http://a", "http://b"})
	if got := r.n.targetFor(1); got != "http://b" {
		t.Fatalf("slot 1 on %q", got)
	}
	r.n.markUnreachable("http://b", "connection refused")
	r.n.markUnreachable("http://b", "connection refused") // logged once
	if got := r.n.targetFor(1); got != "" {
		t.Fatalf("slot 1 of an unreachable node on %q", got)
	}
	if got := r.n.targetFor(0); got != "http://a" {
		t.Fatalf("slot 0 on %q", got)
	}
	r.now = r.now.Add(nodeUnreachableFor - time.Millisecond)
	if got := r.n.targetFor(1); got != "" {
		t.Fatalf("slot 1 back on %q before the window passed", got)
	}
	r.now = r.now.Add(time.Millisecond)
	if got := r.n.targetFor(1); got != "http://b" {
		t.Fatalf("slot 1 on %q after the window", got)
	}
	warned := 0
	for _, l := range r.logs.lines {
		if strings.Contains(l, "WARN orbit node http://b did not answer (connection refused); its slots use http://lb:7233 for 10 s") {
			warned++
		}
	}
	if warned != 1 {
		t.Fatalf("warned %d times: %v", warned, r.logs.lines)
	}
}

func TestNodesTellTheSlotsOfANodeThatLeftAtOnce(t *testing.T) {
	r := newRouter(0)
	r.n.update([]string{"http://a", "http://b", "http://c"})
	r.n.update([]string{"http://a", "http://b", "http://c"}) // unchanged: nothing
	r.n.update([]string{"http://a", "http://c", "http://d"})
	if !reflect.DeepEqual(r.left, []map[string]bool{{"http://b": true}}) {
		t.Fatalf("left %v", r.left)
	}
	r.n.update([]string{})
	if len(r.left) != 2 || !reflect.DeepEqual(r.left[1], map[string]bool{"http://a": true, "http://c": true, "http://d": true}) {
		t.Fatalf("left %v", r.left)
	}
	if got := r.n.targetFor(0); got != "" {
		t.Fatalf("slot 0 on %q with no nodes", got)
	}
	if !r.logs.has("INFO orbit slots spread over 3 node(s): http://a, http://c, http://d") ||
		!r.logs.has("INFO orbit slots use the configured address") {
		t.Fatalf("log %v", r.logs.lines)
	}
	spread := 0
	for _, l := range r.logs.lines {
		if strings.Contains(l, "slots spread over") {
			spread++
		}
	}
	if spread != 2 {
		t.Fatalf("an unchanged list was logged: %v", r.logs.lines)
	}
}

// ---- the worker against a fake runtime at two addresses --------------------------------

// newSpreadWorker is a test worker that reads the live nodes every 20 ms; offset (when not
// negative) fixes which node slot 0 talks to.
func newSpreadWorker(t *testing.T, f *fakeServer, concurrency, offset int, tune func(*WorkerOptions), tasks ...TaskDefinition) (*Worker, *syncLog) {
	t.Helper()
	logs := &syncLog{}
	opts := WorkerOptions{
		Server: f.srv.URL, WorkerID: "w-spread", Tasks: tasks, Concurrency: concurrency,
		PollWait: time.Second, HeartbeatInterval: 30 * time.Millisecond, Logger: logs,
		Backoff:     Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		NodeRefresh: 20 * time.Millisecond, Debug: true,
	}
	if tune != nil {
		tune(&opts)
	}
	w, err := NewWorker(opts)
	if err != nil {
		t.Fatal(err)
	}
	if offset >= 0 {
		w.nodes.offset = offset
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w, logs
}

// offsetTo answers the offset that puts slot 0 on addr of the sorted addrs.
func offsetTo(addr string, addrs ...string) int {
	sorted := append([]string{}, addrs...)
	sort.Strings(sorted)
	for i, a := range sorted {
		if a == addr {
			return i
		}
	}
	return -1
}

func TestWorkerSpreadsItsSlotsOverTheLiveNodesAndReportsToTheServerThatHandedOut(t *testing.T) {
	f := newFakeServer(t)
	second, _ := f.listen()
	f.sharedHealth(f.srv.URL+"/", second)
	w, logs := newSpreadWorker(t, f, 4, -1, nil, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{f.srv.URL, second}
	sort.Strings(want)
	if got := w.NodeAddresses(); !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeAddresses %v, want %v", got, want)
	}
	if !logs.has("INFO orbit slots spread over 2 node(s): " + strings.Join(want, ", ")) {
		t.Fatalf("no spread line: %v", logs.lines)
	}
	// Two slots on each address.
	f.waitUntil("two polls on each address", func() bool {
		return f.hostPolls[hostOf(f.srv.URL)] == 2 && f.hostPolls[hostOf(second)] == 2
	})
	tokens := []string{}
	for i := 0; i < 6; i++ {
		tokens = append(tokens, f.enqueue("t.echo", map[string]any{"name": "n"}))
	}
	f.waitUntil("six results", func() bool { return len(f.results) == 6 })
	f.mu.Lock()
	defer f.mu.Unlock()
	hosts := map[string]bool{}
	for _, p := range f.polls {
		hosts[p["host"].(string)] = true
	}
	if !hosts[hostOf(f.srv.URL)] || !hosts[hostOf(second)] {
		t.Fatalf("polls reached %v", hosts)
	}
	for _, r := range f.results {
		if r["session_id"] == nil || r["max_tasks"] != float64(1) {
			t.Fatalf("a result does not ask for the next task: %v", r)
		}
	}
	// Registration and heartbeats stay on the configured address: the second one knows no
	// session but the one registered through the first.
	if len(f.sessions) != 1 || logs.has("did not answer") || logs.has("failed") {
		t.Fatalf("sessions %v, log %v", f.sessions, logs.lines)
	}
}

func TestWorkerWithNodeSpreadDisabledKeepsEverySlotOnItsAddress(t *testing.T) {
	f := newFakeServer(t)
	second, _ := f.listen()
	f.sharedHealth(f.srv.URL, second)
	w, logs := newSpreadWorker(t, f, 4, -1, func(o *WorkerOptions) { o.DisableNodeSpread = true }, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitUntil("four polls", func() bool { return f.activePolls == 4 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hostPolls[hostOf(second)] != 0 || len(w.NodeAddresses()) != 0 || logs.has("slots spread") {
		t.Fatalf("polls %v, nodes %v", f.hostPolls, w.NodeAddresses())
	}
	for _, p := range f.requests {
		if p == "/v1/health" {
			t.Fatal("the health was read")
		}
	}
}

func TestWorkerLeavesOutANodeWhoseAddressDoesNotAnswer(t *testing.T) {
	f := newFakeServer(t)
	// A port nothing listens on: taken, then closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	f.sharedHealth(f.srv.URL, dead)
	w, logs := newSpreadWorker(t, f, 2, -1, nil, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitUntil("both slots polling the configured address", func() bool { return f.hostPolls[hostOf(f.srv.URL)] == 2 })
	tok := f.enqueue("t.echo", map[string]any{"name": "x"})
	tok2 := f.enqueue("t.echo", map[string]any{"name": "y"})
	f.waitUntil("the results", func() bool { return resultFor(f, tok) != nil && resultFor(f, tok2) != nil })
	if !logs.has("WARN orbit node "+dead+" did not answer (") ||
		!logs.has("its slots use "+f.srv.URL+" for 10 s") {
		t.Fatalf("no warning: %v", logs.lines)
	}
	// Retried at once, no backoff.
	if logs.has("poll failed") {
		t.Fatalf("a poll backed off: %v", logs.lines)
	}
	if got := len(w.NodeAddresses()); got != 2 {
		t.Fatalf("%d nodes", got)
	}
}

func TestWorkerEndsThePollOfANodeThatLeftAtOnce(t *testing.T) {
	f := newFakeServer(t)
	f.pollHold = 30 * time.Second // past the test's waits: only an ended poll returns early
	second, _ := f.listen()
	f.sharedHealth(f.srv.URL, second)
	w, logs := newSpreadWorker(t, f, 1, offsetTo(second, f.srv.URL, second), nil, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitUntil("the slot polling the second address", func() bool { return f.hostPolls[hostOf(second)] == 1 })
	f.sharedHealth(f.srv.URL)
	f.waitUntil("the slot polling the first address", func() bool {
		return f.hostPolls[hostOf(second)] == 0 && f.hostPolls[hostOf(f.srv.URL)] == 1
	})
	if !logs.has("slots spread over 1 node(s): " + f.srv.URL) {
		t.Fatalf("log %v", logs.lines)
	}
	if logs.has("poll failed") {
		t.Fatalf("the ended poll backed off: %v", logs.lines)
	}
	tok := f.enqueue("t.echo", map[string]any{"name": "x"})
	f.waitUntil("the result", func() bool { return resultFor(f, tok) != nil })
}

func TestWorkerSendsAResultHeldByANodeThatLeftToTheConfiguredAddressAtOnce(t *testing.T) {
	f := newFakeServer(t)
	second, _ := f.listen()
	f.holdResults[hostOf(second)] = true
	f.sharedHealth(f.srv.URL, second)
	// Far past the test's waits: only the cut ends the held request.
	w, logs := newSpreadWorker(t, f, 1, offsetTo(second, f.srv.URL, second),
		func(o *WorkerOptions) { o.RequestTimeout = time.Minute }, echoTask)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitUntil("the slot polling the second address", func() bool { return f.hostPolls[hostOf(second)] == 1 })
	tok := f.enqueue("t.echo", map[string]any{"name": "x"})
	f.waitUntil("the result held by the second address", func() bool { return f.held == 1 })
	f.sharedHealth(f.srv.URL)
	f.waitUntil("the result", func() bool { return resultFor(f, tok) != nil })
	f.mu.Lock()
	r := resultFor(f, tok)
	f.mu.Unlock()
	if r["host"] != hostOf(f.srv.URL) || r["path"] != "/v1/tasks/complete" {
		t.Fatalf("result %v", r)
	}
	if logs.has("report result failed") {
		t.Fatalf("the result was retried with a backoff: %v", logs.lines)
	}
}

func TestWorkerSendsAResultWhoseNodeDoesNotAnswerToTheConfiguredAddressAtOnce(t *testing.T) {
	f := newFakeServer(t)
	second, stopSecond := f.listen()
	f.sharedHealth(f.srv.URL, second)
	started := make(chan string, 1)
	release := make(chan struct{})
	w, logs := newSpreadWorker(t, f, 1, offsetTo(second, f.srv.URL, second), nil, blockTask(started, release))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitUntil("the slot polling the second address", func() bool { return f.hostPolls[hostOf(second)] == 1 })
	tok := f.enqueue("t.block", map[string]any{})
	<-started
	stopSecond() // the second server dies while the task runs (still listed as live)
	close(release)
	f.waitUntil("the result", func() bool { return resultFor(f, tok) != nil })
	f.mu.Lock()
	r := resultFor(f, tok)
	f.mu.Unlock()
	if r["host"] != hostOf(f.srv.URL) {
		t.Fatalf("result %v", r)
	}
	if logs.has("report result failed") {
		t.Fatalf("the result was retried with a backoff: %v", logs.lines)
	}
	// The slot's next poll finds the node gone and uses the configured address meanwhile.
	f.waitUntil("the slot polling the first address", func() bool { return f.hostPolls[hostOf(f.srv.URL)] == 1 })
	if !logs.has("node " + second + " did not answer") {
		t.Fatalf("log %v", logs.lines)
	}
}

// The router's state is read by NodeAddresses while it is updated (go test -race).
func TestNodeAddressesIsSafeWhileTheListChanges(t *testing.T) {
	r := newRouter(0)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			r.n.update([]string{"http://a", strings.Repeat("x", i%3)})
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			_ = r.n.addresses()
			_ = r.n.targetFor(i)
		}
	}()
	wg.Wait()
}
