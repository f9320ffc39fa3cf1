package orbit

// The worker's router: in a cluster in shared mode, which server each slot talks to.
//
// Every server of a shared cluster accepts every request, and one whose poll hands out a task
// prefers the executions it owns; the result then goes back on the same connection, to the
// owner. The worker reads /v1/health of the configured address, learns the live servers and
// their advertised addresses (nodes[].addr), and spreads the slots over them: slot i talks to
// node (i + offset) % n, the offset random per worker so that workers with few slots do not all
// start on the same node. A node whose address does not answer is set aside for
// nodeUnreachableFor and its slots use the configured address meanwhile; a node that leaves the
// live list has its slots' polls ended so that they move at once, and the results on their way
// to it sent to the configured address instead. Anything else (a single server, a standby
// cluster, a health answer without addresses) keeps every slot on the configured address. The
// TypeScript SDK's worker/nodes.ts and the Python SDK's _worker/nodes.py do the same.

import (
	"context"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// nodeUnreachableFor is how long a node whose address failed is left out before its slots try
// it again.
const nodeUnreachableFor = 10 * time.Second

// liveAddresses answers the live nodes' advertised addresses (http or https URLs) of a decoded
// /v1/health answer, without a trailing slash, once each, sorted; none unless role is shared.
func liveAddresses(health any) []string {
	h, ok := health.(map[string]any)
	if !ok || h["role"] != "shared" {
		return []string{}
	}
	nodes, _ := h["nodes"].([]any)
	seen := map[string]bool{}
	out := []string{}
	for _, n := range nodes {
		node, ok := n.(map[string]any)
		if !ok || node["live"] != true {
			continue
		}
		addr, ok := node["addr"].(string)
		if !ok {
			continue
		}
		u, err := url.Parse(addr)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			continue
		}
		addr = strings.TrimRight(addr, "/")
		if !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// nodes is the router's state: the live addresses, the worker's offset, and the nodes left out
// for a while.
type nodes struct {
	server string // the configured address (for the log lines)
	logf   func(level, format string, v ...any)
	onLeft func(left map[string]bool) // called, outside the lock, with the addresses that left
	now    func() time.Time
	offset int

	mu          sync.Mutex
	addrs       []string
	unreachable map[string]time.Time // address -> until when it is left out
}

func newNodes(server string, logf func(level, format string, v ...any), onLeft func(map[string]bool)) *nodes {
	return &nodes{
		server: server, logf: logf, onLeft: onLeft, now: time.Now,
		offset: int(randFloat() * 1024), unreachable: map[string]time.Time{},
	}
}

// addresses answers the live nodes' addresses as last read (empty when not spreading).
func (n *nodes) addresses() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string{}, n.addrs...)
}

// update takes a new live list; the slots of nodes that left it are told at once.
func (n *nodes) update(addrs []string) {
	n.mu.Lock()
	before := n.addrs
	if strings.Join(before, " ") == strings.Join(addrs, " ") {
		n.mu.Unlock()
		return
	}
	n.addrs = append([]string{}, addrs...)
	n.mu.Unlock()
	if len(addrs) > 0 {
		n.logf("INFO", "slots spread over %d node(s): %s", len(addrs), strings.Join(addrs, ", "))
	} else {
		n.logf("INFO", "slots use the configured address")
	}
	now := map[string]bool{}
	for _, a := range addrs {
		now[a] = true
	}
	left := map[string]bool{}
	for _, a := range before {
		if !now[a] {
			left[a] = true
		}
	}
	if len(left) > 0 && n.onLeft != nil {
		n.onLeft(left)
	}
}

// targetFor answers the address slot index talks to, or "" for the configured address.
func (n *nodes) targetFor(index int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.addrs) == 0 {
		return ""
	}
	addr := n.addrs[(index+n.offset)%len(n.addrs)]
	until, out := n.unreachable[addr]
	if !out {
		return addr
	}
	if n.now().Before(until) {
		return ""
	}
	delete(n.unreachable, addr)
	return addr
}

// markUnreachable records that a request to addr failed to connect: its slots use the
// configured address for nodeUnreachableFor.
func (n *nodes) markUnreachable(addr, why string) {
	n.mu.Lock()
	if _, out := n.unreachable[addr]; out {
		n.mu.Unlock()
		return
	}
	n.unreachable[addr] = n.now().Add(nodeUnreachableFor)
	n.mu.Unlock()
	n.logf("WARN", "node %s did not answer (%s); its slots use %s for %d s", addr, why, n.server,
		int(nodeUnreachableFor/time.Second))
}

// ---- the worker's side -----------------------------------------------------------------

// NodeAddresses answers the live nodes of a shared cluster the slots are spread over, sorted;
// empty when every slot uses the configured address (a single server, a standby cluster, no
// advertised addresses, or DisableNodeSpread).
func (w *Worker) NodeAddresses() []string { return w.nodes.addresses() }

// refreshNodes reads /v1/health of the configured address once; a failed read keeps the last
// list.
func (w *Worker) refreshNodes(ctx context.Context) {
	if w.opts.DisableNodeSpread {
		return
	}
	timeout := w.opts.RequestTimeout
	if timeout > 10*time.Second {
		timeout = 10 * time.Second
	}
	var health any
	if err := w.main.do(ctx, "GET", "/v1/health", nil, nil, &health, timeout); err != nil {
		w.logf("DEBUG", "cannot read the cluster's nodes: %s", w.describe(err))
		return
	}
	w.nodes.update(liveAddresses(health))
}

// nodesLoop reads the live nodes again every NodeRefresh until the heartbeats stop.
func (w *Worker) nodesLoop() {
	defer w.nodesWG.Done()
	for sleepCtx(w.hbCtx, w.opts.NodeRefresh) {
		w.refreshNodes(w.hbCtx)
	}
}

// nodesLeft ends the polls and cuts the first result deliveries of the slots on nodes that
// left the live list.
func (w *Worker) nodesLeft(left map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.slots {
		if s.target == "" || !left[s.target] {
			continue
		}
		if s.pollCancel != nil {
			s.pollCancel()
		}
		if s.deliveryCancel != nil {
			s.deliveryCancel()
		}
	}
}

// route points the slot at the node it should talk to now: its own connection pool to that
// node, or its pool to the configured address (a node's pool it leaves is closed).
func (w *Worker) route(s *slot) {
	target := w.nodes.targetFor(s.index)
	if target == s.target {
		return
	}
	tr := s.home
	if target != "" {
		var err error
		if tr, err = newTransport(target, w.opts.Token, w.newClient()); err != nil {
			tr, target = s.home, "" // not reached: liveAddresses keeps http(s) URLs only
		}
	}
	w.mu.Lock()
	old := s.tr
	s.tr, s.target = tr, target
	w.mu.Unlock()
	if old != s.home && old != tr {
		old.client.CloseIdleConnections()
	}
}

// closeNodeConnections closes the slots' pools to nodes (the worker stopped).
func (w *Worker) closeNodeConnections() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.slots {
		if s.tr != s.home {
			s.tr.client.CloseIdleConnections()
		}
	}
}
