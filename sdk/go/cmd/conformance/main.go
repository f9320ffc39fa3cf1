// Command conformance is the Go SDK's conformance worker: the program the language-neutral
// conformance suite (tests/conformance/README.md) drives. It serves the suite's four tasks
// with the Go SDK and prints one JSON line per event on standard output.
//
//	go run ./cmd/conformance --server http://127.0.0.1:7233
//
// Environment: ORBIT_SERVER, ORBIT_TOKEN, CONFORMANCE_WORKER_ID, CONFORMANCE_TASKS (names,
// comma-separated; default all), CONFORMANCE_CONCURRENCY (default 2), CONFORMANCE_HEARTBEAT_MS
// (default 500), CONFORMANCE_POLL_WAIT_S (default 10), CONFORMANCE_STOP_GRACE_MS (default
// 30000). SIGTERM or SIGINT: stop gracefully, print {"event":"stopped"}, exit 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"orbit"
)

var outMu sync.Mutex

// emit prints one event line on standard output.
func emit(event string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["event"] = event
	line, _ := json.Marshal(fields)
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintln(os.Stdout, string(line))
}

func attemptFields(a *orbit.Attempt) map[string]any {
	return map[string]any{
		"task": a.Task, "execution_id": a.ExecutionID, "step": a.Step, "attempt": a.Attempt,
		"redelivery": a.Redelivery, "idempotency_key": a.IdempotencyKey, "token": a.Token,
	}
}

// cancelled reports the attempt's cancellation and answers the context's error, which the
// SDK reports as CANCELLED or DEADLINE_EXCEEDED.
func cancelled(ctx context.Context, a *orbit.Attempt) error {
	emit("cancelled", attemptFields(a))
	return ctx.Err()
}

type echoIn struct {
	Value any `json:"value"`
}

type echoOut struct {
	Value          any    `json:"value"`
	Attempt        int    `json:"attempt"`
	Redelivery     bool   `json:"redelivery"`
	IdempotencyKey string `json:"idempotency_key"`
	Runtime        string `json:"runtime"`
}

type failIn struct {
	Code             string `json:"code"`
	Message          string `json:"message"`
	Retryable        bool   `json:"retryable"`
	SucceedOnAttempt int    `json:"succeed_on_attempt"`
}

func (f failIn) Validate() error {
	if f.Code == "" {
		return errors.New("code is required")
	}
	return nil
}

type attemptOut struct {
	Attempt int `json:"attempt"`
}

type sleepIn struct {
	Ms int `json:"ms"`
}

type sleepOut struct {
	SleptMs int `json:"slept_ms"`
}

type holdOut struct {
	Redelivered bool `json:"redelivered"`
}

func tasks() []orbit.TaskDefinition {
	return []orbit.TaskDefinition{
		orbit.NewTask("conformance.echo", "1", func(ctx context.Context, in echoIn, a *orbit.Attempt) (echoOut, error) {
			emit("executing", attemptFields(a))
			return echoOut{Value: in.Value, Attempt: a.Attempt, Redelivery: a.Redelivery, IdempotencyKey: a.IdempotencyKey, Runtime: "go"}, nil
		}),
		orbit.NewTask("conformance.fail", "1", func(ctx context.Context, in failIn, a *orbit.Attempt) (attemptOut, error) {
			emit("executing", attemptFields(a))
			if in.SucceedOnAttempt > 0 && a.Attempt >= in.SucceedOnAttempt {
				return attemptOut{Attempt: a.Attempt}, nil
			}
			return attemptOut{}, &orbit.TaskError{Code: in.Code, Message: in.Message, Retryable: in.Retryable, Details: map[string]any{"attempt": a.Attempt}}
		}),
		orbit.NewTask("conformance.sleep", "1", func(ctx context.Context, in sleepIn, a *orbit.Attempt) (sleepOut, error) {
			emit("executing", attemptFields(a))
			t := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return sleepOut{SleptMs: in.Ms}, nil
			case <-ctx.Done():
				return sleepOut{}, cancelled(ctx, a)
			}
		}),
		orbit.NewTask("conformance.hold", "1", func(ctx context.Context, in map[string]any, a *orbit.Attempt) (holdOut, error) {
			emit("executing", attemptFields(a))
			if a.Redelivery {
				return holdOut{Redelivered: true}, nil
			}
			<-ctx.Done()
			return holdOut{}, cancelled(ctx, a)
		}),
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func main() {
	server := flag.String("server", os.Getenv("ORBIT_SERVER"), "the ORBIT runtime's URL")
	flag.Parse()
	if *server == "" {
		*server = "http://127.0.0.1:7233"
	}
	workerID := os.Getenv("CONFORMANCE_WORKER_ID")
	if workerID == "" {
		workerID = "conformance-go"
	}
	var served []orbit.TaskDefinition
	want := map[string]bool{}
	for _, name := range strings.Split(os.Getenv("CONFORMANCE_TASKS"), ",") {
		if name = strings.TrimSpace(name); name != "" {
			want[name] = true
		}
	}
	for _, t := range tasks() {
		if len(want) == 0 || want[t.TaskName()] {
			served = append(served, t)
		}
	}
	w, err := orbit.NewWorker(orbit.WorkerOptions{
		Server:            *server,
		Token:             os.Getenv("ORBIT_TOKEN"),
		WorkerID:          workerID,
		Tasks:             served,
		Concurrency:       envInt("CONFORMANCE_CONCURRENCY", 2),
		HeartbeatInterval: time.Duration(envInt("CONFORMANCE_HEARTBEAT_MS", 500)) * time.Millisecond,
		PollWait:          time.Duration(envInt("CONFORMANCE_POLL_WAIT_S", 10)) * time.Second,
		ShutdownGrace:     time.Duration(envInt("CONFORMANCE_STOP_GRACE_MS", 30000)) * time.Millisecond,
		Logger:            log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	emit("ready", map[string]any{"sdk": "go", "worker_id": workerID, "runtime": "go", "tasks": len(served)})
	<-ctx.Done()
	grace, cancel := context.WithTimeout(context.Background(), time.Duration(envInt("CONFORMANCE_STOP_GRACE_MS", 30000))*time.Millisecond)
	defer cancel()
	if err := w.Stop(grace); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	emit("stopped", nil)
}
