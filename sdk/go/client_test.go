package orbit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type order struct {
	OrderID string `json:"order_id"`
}

type orderResult struct {
	Total float64 `json:"total"`
}

func apiStub(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, body map[string]any)) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("authorization") != "Bearer tok" {
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"error":{"code":"UNAUTHORIZED","message":"no token"}}`))
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		handler(w, r, body)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, ClientOptions{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientStartsAndReadsATypedResult(t *testing.T) {
	waits := 0
	c := apiStub(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/executions":
			if body["workflow"] != "Orders" || body["execution_id"] != "o-1" || body["input"].(map[string]any)["order_id"] != "o-1" {
				t.Errorf("start body %v", body)
			}
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"execution_id":"o-1","status":"running","workflow":"Orders","version":"1.0.0"}`))
		case r.URL.Path == "/v1/executions/o-1/wait":
			waits++
			if r.URL.Query().Get("timeout_s") == "" {
				t.Errorf("wait without timeout_s")
			}
			_, _ = w.Write([]byte(`{"execution_id":"o-1","status":"completed","output":{"total":19}}`))
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
	})
	orders := Workflow[order, orderResult]{Name: "Orders", Version: "1.0.0"}
	x, err := orders.Start(context.Background(), c, "o-1", order{OrderID: "o-1"})
	if err != nil || x.Status != StatusRunning {
		t.Fatalf("%v %v", x, err)
	}
	res, err := orders.Result(context.Background(), c, "o-1", time.Minute)
	if err != nil || res.Total != 19 || waits != 1 {
		t.Fatalf("%v %v %d", res, err, waits)
	}
}

func TestClientAnswersAFailedExecutionAsAnExecutionError(t *testing.T) {
	c := apiStub(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		_, _ = w.Write([]byte(`{"execution_id":"o-2","status":"failed","error":{"code":"CARD_DECLINED","message":"declined"}}`))
	})
	err := c.Result(context.Background(), "o-2", time.Second, nil)
	var xe *ExecutionError
	if !errors.As(err, &xe) || xe.Execution.Error.Code != "CARD_DECLINED" || !strings.Contains(err.Error(), "ended failed") {
		t.Fatalf("got %v", err)
	}
}

func TestClientErrorsCarryTheAPICodeAndDetails(t *testing.T) {
	c := apiStub(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		switch r.URL.Path {
		case "/v1/executions/nope/signals/go":
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":"UNKNOWN_EXECUTION","message":"no execution nope"}}`))
		default:
			w.Header().Set("retry-after", "1")
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":{"code":"NOT_LEADER","message":"standby","leader_addr":"http://a:1"}}`))
		}
	})
	_, err := c.Signal(context.Background(), "nope", "go", map[string]any{"x": 1})
	if !HasCode(err, CodeUnknownExecution) || IsRetryable(err) {
		t.Fatalf("got %v", err)
	}
	_, err = c.Cancel(context.Background(), "x", "why")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != CodeNotLeader || apiErr.LeaderAddr() != "http://a:1" || !IsRetryable(err) {
		t.Fatalf("got %#v", err)
	}
}

func TestClientReadsHistoryPagesQueriesAndPending(t *testing.T) {
	c := apiStub(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		switch r.URL.Path {
		case "/v1/executions/h/history":
			if r.URL.Query().Get("after_seq") == "" {
				_, _ = w.Write([]byte(`{"events":[{"seq":1,"type":"WorkflowCreated","time_ms":5}],"next_after_seq":1}`))
			} else {
				_, _ = w.Write([]byte(`{"events":[{"seq":2,"type":"StepScheduled","time_ms":6,"step":"a","attempt":1,"task":"t"}]}`))
			}
		case "/v1/executions/h/queries/status":
			_, _ = w.Write([]byte(`{"result":{"n":3}}`))
		case "/v1/executions/h/pending":
			_, _ = w.Write([]byte(`{"execution_id":"h","items":[{"step":"a","reason":"no_worker"}]}`))
		}
	})
	events, err := c.HistoryEvents(context.Background(), "h")
	if err != nil || len(events) != 2 || events[1].Step != "a" || events[1].Attempt != 1 || string(events[1].Fields["task"]) != `"t"` {
		t.Fatalf("%v %v", events, err)
	}
	var q struct{ N int }
	if err := c.Query(context.Background(), "h", "status", &q); err != nil || q.N != 3 {
		t.Fatalf("%v %v", q, err)
	}
	p, err := c.Pending(context.Background(), "h")
	if err != nil || p["execution_id"] != "h" {
		t.Fatalf("%v %v", p, err)
	}
}

func TestClientReportsAnUnreachableServerAsAConnectionError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	none := 0
	c, _ := NewClient(url, ClientOptions{GetRetries: &none})
	_, err := c.Get(context.Background(), "x")
	var ce *ConnectionError
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "cannot reach ORBIT runtime at "+url+": ") || !IsRetryable(err) {
		t.Fatalf("got %v", err)
	}
}

func TestTaskContractsDecodeAndValidate(t *testing.T) {
	if _, err := echoTask.ParseInput(json.RawMessage(`{"name":""}`)); err == nil {
		t.Fatal("an invalid input accepted")
	}
	var ve *ValidationError
	if _, err := echoTask.ParseInput(json.RawMessage(`{"name":3}`)); !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	in, err := echoTask.ParseInput(json.RawMessage(`{"name":"n","extra":true}`))
	if err != nil || in.Name != "n" {
		t.Fatalf("%v %v", in, err)
	}
}
