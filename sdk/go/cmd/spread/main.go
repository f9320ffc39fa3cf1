// Command spread is a small Go worker for the shared-cluster tests
// (tests/cluster_shared_spread_go_test.ts): it serves the task t.spread (contract 1), which
// answers its input, and writes the worker's log lines and one "ran <execution id> <step>"
// line per attempt on standard output. In a shared cluster it spreads its slots over the live
// servers (WorkerOptions.DisableNodeSpread, docs/clusters.md "Workers connect to every server").
//
//	go run ./cmd/spread --server http://127.0.0.1:7233 [--concurrency 4] [--node-refresh-ms 200]
//
// SIGTERM or SIGINT: stop gracefully and exit 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"orbit"
)

func main() {
	server := flag.String("server", os.Getenv("ORBIT_SERVER"), "the runtime's address")
	workerID := flag.String("worker-id", "spread-go", "the worker id")
	concurrency := flag.Int("concurrency", 4, "concurrency slots")
	pollWaitS := flag.Int("poll-wait-s", 5, "long-poll wait in seconds")
	heartbeatMs := flag.Int("heartbeat-ms", 500, "heartbeat interval in milliseconds")
	refreshMs := flag.Int("node-refresh-ms", 5000, "how often the live servers are read again")
	noSpread := flag.Bool("no-spread", false, "keep every slot on --server")
	flag.Parse()
	if *server == "" {
		fmt.Fprintln(os.Stderr, "spread: --server (or ORBIT_SERVER) is required")
		os.Exit(2)
	}
	logger := log.New(os.Stdout, "", 0)
	task := orbit.NewTask("t.spread", "1", func(ctx context.Context, in any, a *orbit.Attempt) (any, error) {
		logger.Printf("ran %s %s", a.ExecutionID, a.Step)
		return in, nil
	})
	w, err := orbit.NewWorker(orbit.WorkerOptions{
		Server:            *server,
		Token:             os.Getenv("ORBIT_TOKEN"),
		WorkerID:          *workerID,
		Tasks:             []orbit.TaskDefinition{task},
		Concurrency:       *concurrency,
		PollWait:          time.Duration(*pollWaitS) * time.Second,
		HeartbeatInterval: time.Duration(*heartbeatMs) * time.Millisecond,
		NodeRefresh:       time.Duration(*refreshMs) * time.Millisecond,
		DisableNodeSpread: *noSpread,
		Backoff:           orbit.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		Logger:            logger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "spread:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "spread:", err)
		os.Exit(1)
	}
}
