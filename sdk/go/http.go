package orbit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// transport sends JSON requests with a bearer token to one ORBIT runtime, turning
// `{"error":{…}}` answers into *APIError and network failures into *ConnectionError.
type transport struct {
	server string
	token  string
	client *http.Client
}

func newTransport(server, token string, client *http.Client) (*transport, error) {
	server = strings.TrimRight(server, "/")
	if server == "" {
		return nil, errors.New("orbit: the server address is required")
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("orbit: the server address %q is not an http(s) URL", server)
	}
	if client == nil {
		client = &http.Client{Transport: newHTTPTransport()}
	}
	return &transport{server: server, token: token, client: client}, nil
}

// newHTTPTransport is a connection pool of its own: a worker gives one to each slot, so a
// slot's poll, result and next task travel on one connection (behind a balancer that spreads
// connections over the servers of a shared cluster, they reach the same server).
func newHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2
	t.Proxy = nil
	return t
}

// do sends one request; timeout (0: none) bounds it. A cancelled ctx answers ctx.Err().
func (t *transport) do(ctx context.Context, method, path string, query url.Values, body, out any, timeout time.Duration) error {
	full := t.server + path
	if len(query) > 0 {
		full += "?" + query.Encode()
	}
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	reqCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(reqCtx, method, full, reader)
	if err != nil {
		return err
	}
	req.Header.Set("accept", "application/json")
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	if t.token != "" {
		req.Header.Set("authorization", "Bearer "+t.token)
	}
	res, err := t.client.Do(req)
	if err != nil {
		return t.networkError(ctx, reqCtx, timeout, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return t.networkError(ctx, reqCtx, timeout, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return apiError(res, data, method, path)
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &APIError{
			Status: res.StatusCode, Code: CodeInvalidResponse, Body: data, Method: method, Path: path,
			Message: fmt.Sprintf("the ORBIT runtime answered %s %s with a body that is not the JSON expected: %v", method, path, err),
		}
	}
	return nil
}

func (t *transport) networkError(ctx, reqCtx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if reqCtx.Err() == context.DeadlineExceeded {
		return &ConnectionError{Server: t.server, Reason: "timed out after " + formatDuration(timeout), Err: err}
	}
	reason := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		reason = ue.Err.Error()
	}
	return &ConnectionError{Server: t.server, Reason: reason, Err: err}
}

func apiError(res *http.Response, data []byte, method, path string) *APIError {
	e := &APIError{Status: res.StatusCode, Body: data, Method: method, Path: path, Details: map[string]any{}}
	var parsed struct {
		Error map[string]any `json:"error"`
	}
	if json.Unmarshal(data, &parsed) == nil && parsed.Error != nil {
		for k, v := range parsed.Error {
			switch k {
			case "code":
				e.Code, _ = v.(string)
			case "message":
				e.Message, _ = v.(string)
			default:
				e.Details[k] = v
			}
		}
	}
	if e.Code == "" {
		e.Code = fmt.Sprintf("HTTP_%d", res.StatusCode)
	}
	if e.Message == "" {
		text := strings.TrimSpace(string(data))
		if len(text) > 200 {
			text = text[:200]
		}
		if text == "" {
			text = res.Status
		}
		e.Message = text
	}
	return e
}

// formatDuration writes a delay as the SDKs' log lines do: 0.2s, 1.6s, 5s.
func formatDuration(d time.Duration) string {
	s := d.Seconds()
	if s < 10 {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", s), ".0") + "s"
	}
	return fmt.Sprintf("%.0fs", s)
}

// Backoff is exponential backoff with jitter: by default 200 ms, 400 ms, 800 ms … up to 5 s,
// each plus up to 20 %.
type Backoff struct {
	Initial time.Duration // first delay (default 200 ms)
	Max     time.Duration // largest delay (default 5 s)
	Factor  float64       // growth (default 2)
	Jitter  float64       // random extra share of each delay, 0–1 (default 0.2)
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 200 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	if b.Factor < 1 {
		b.Factor = 2
	}
	if b.Jitter < 0 || b.Jitter > 1 || b.Jitter == 0 {
		b.Jitter = 0.2
	}
	return b
}

// Delay is the wait before retry number attempt (from 0).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	base := float64(b.Initial) * math.Pow(b.Factor, float64(attempt))
	if base > float64(b.Max) {
		base = float64(b.Max)
	}
	d := time.Duration(base * (1 + randFloat()*b.Jitter))
	if d > b.Max {
		d = b.Max
	}
	return d
}

// retrier counts consecutive failures of one loop.
type retrier struct {
	b       Backoff
	attempt int
}

func (r *retrier) next() time.Duration {
	d := r.b.Delay(r.attempt)
	r.attempt++
	return d
}

func (r *retrier) reset() { r.attempt = 0 }

var (
	randMu  sync.Mutex
	randSrc = rand.New(rand.NewSource(time.Now().UnixNano()))
)

func randFloat() float64 {
	randMu.Lock()
	defer randMu.Unlock()
	return randSrc.Float64()
}

// sleepCtx waits d, or less when ctx ends (answering false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
