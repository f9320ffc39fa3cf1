// Command orders is the Go side of the OrderProcessing example (examples/order-processing):
// all six tasks and both compensations, as the worker orders-go, with the Go SDK.
//
//	go run ./examples/orders --server http://127.0.0.1:7233 [--concurrency 8]
//
// Environment: ORBIT_SERVER, ORBIT_TOKEN, ORDER_WORKER_ID (default orders-go),
// ORDER_CONCURRENCY, and for tests ORDER_CHARGE_DELAY_MS (a slow payment provider) and
// ORDER_TRACE=1 (one JSON line per attempt on stdout). SIGTERM or Ctrl+C: finish running tasks
// (at most 30 s) and report them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"orbit"
)

// ---- contracts: the input is decoded and checked (Validate) before the handler runs
// (INVALID_INPUT, not retried), the output checked after it returns.

type Item struct {
	SKU   string  `json:"sku"`
	Qty   int     `json:"qty"`
	Price float64 `json:"price"`
}

type Order struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Items    []Item `json:"items"`
}

func (o Order) Validate() error {
	if o.OrderID == "" || o.Customer == "" {
		return errors.New("order_id and customer are required")
	}
	for _, i := range o.Items {
		if i.Qty < 1 {
			return fmt.Errorf("item %s: qty must be at least 1", i.SKU)
		}
		if i.Price < 0 {
			return fmt.Errorf("item %s: price must not be negative", i.SKU)
		}
	}
	return nil
}

type Validated struct {
	OrderID string  `json:"order_id"`
	Total   float64 `json:"total"`
}

type Reservation struct {
	OrderID string `json:"order_id"`
	Items   []Item `json:"items"`
}

type Reserved struct {
	ReservationID string `json:"reservation_id"`
}

type Release struct {
	ReservationID string `json:"reservation_id"`
}

type Released struct {
	Released bool `json:"released"`
}

type Charge struct {
	OrderID  string  `json:"order_id"`
	Amount   float64 `json:"amount"`
	Customer string  `json:"customer"`
}

type Charged struct {
	ChargeID string  `json:"charge_id"`
	Amount   float64 `json:"amount"`
}

type Refund struct {
	ChargeID string  `json:"charge_id"`
	Amount   float64 `json:"amount"`
}

type Refunded struct {
	Refunded float64 `json:"refunded"`
}

type Shipment struct {
	OrderID       string `json:"order_id"`
	ReservationID string `json:"reservation_id"`
}

type Shipped struct {
	Tracking string `json:"tracking"`
}

type Confirmation struct {
	Customer string `json:"customer"`
	Tracking string `json:"tracking"`
}

type Sent struct {
	Sent bool `json:"sent"`
}

type Points struct {
	Customer string  `json:"customer"`
	Points   float64 `json:"points"`
}

type Loyalty struct {
	Points float64 `json:"points"`
}

var trace = os.Getenv("ORDER_TRACE") == "1"

// traced wraps a handler so that, with ORDER_TRACE=1, every attempt is one JSON line.
func traced[In, Out any](task string, fn orbit.Handler[In, Out]) orbit.Handler[In, Out] {
	return func(ctx context.Context, in In, a *orbit.Attempt) (Out, error) {
		if trace {
			line, _ := json.Marshal(map[string]any{
				"event": "executing", "task": task, "execution_id": a.ExecutionID, "step": a.Step,
				"attempt": a.Attempt, "redelivery": a.Redelivery, "idempotency_key": a.IdempotencyKey,
			})
			fmt.Println(string(line))
		}
		return fn(ctx, in, a)
	}
}

func tasks(chargeDelay time.Duration) []orbit.TaskDefinition {
	return []orbit.TaskDefinition{
		orbit.NewTask("orders.validate", "1", traced("orders.validate",
			func(ctx context.Context, o Order, a *orbit.Attempt) (Validated, error) {
				if len(o.Items) == 0 {
					return Validated{}, orbit.Fail("INVALID_ORDER", "an order needs items")
				}
				total := 0.0
				for _, i := range o.Items {
					total += float64(i.Qty) * i.Price
				}
				return Validated{OrderID: o.OrderID, Total: math.Round(total*100) / 100}, nil
			})),
		orbit.NewTask("inventory.reserve", "1", traced("inventory.reserve",
			func(ctx context.Context, r Reservation, a *orbit.Attempt) (Reserved, error) {
				return Reserved{ReservationID: "res-" + r.OrderID}, nil
			})),
		orbit.NewTask("inventory.release", "1", traced("inventory.release",
			func(ctx context.Context, r Release, a *orbit.Attempt) (Released, error) {
				return Released{Released: true}, nil
			})),
		orbit.NewTask("payments.charge", "1", traced("payments.charge",
			func(ctx context.Context, c Charge, a *orbit.Attempt) (Charged, error) {
				if chargeDelay > 0 {
					select { // ends early when the runtime cancels the attempt
					case <-time.After(chargeDelay):
					case <-ctx.Done():
						return Charged{}, ctx.Err()
					}
				}
				if c.Customer == "declined" {
					return Charged{}, orbit.Fail("CARD_DECLINED", "the card was declined")
				}
				// The idempotency key is what a real payment provider would deduplicate on.
				return Charged{ChargeID: "ch-" + a.IdempotencyKey, Amount: c.Amount}, nil
			})),
		orbit.NewTask("payments.refund", "1", traced("payments.refund",
			func(ctx context.Context, r Refund, a *orbit.Attempt) (Refunded, error) {
				return Refunded{Refunded: r.Amount}, nil
			})),
		orbit.NewTask("shipping.create", "1", traced("shipping.create",
			func(ctx context.Context, s Shipment, a *orbit.Attempt) (Shipped, error) {
				return Shipped{Tracking: "trk-" + s.OrderID}, nil
			})),
		orbit.NewTask("email.confirm", "1", traced("email.confirm",
			func(ctx context.Context, c Confirmation, a *orbit.Attempt) (Sent, error) {
				return Sent{Sent: true}, nil
			})),
		orbit.NewTask("loyalty.update", "1", traced("loyalty.update",
			func(ctx context.Context, p Points, a *orbit.Attempt) (Loyalty, error) {
				return Loyalty{Points: p.Points}, nil
			})),
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	server := flag.String("server", envOr("ORBIT_SERVER", "http://127.0.0.1:7233"), "the ORBIT runtime's URL (ORBIT_SERVER)")
	concurrency := flag.Int("concurrency", 8, "attempts run at once (ORDER_CONCURRENCY)")
	flag.Parse()
	if v, err := strconv.Atoi(os.Getenv("ORDER_CONCURRENCY")); err == nil && v > 0 && !isSet("concurrency") {
		*concurrency = v
	}
	delayMs, _ := strconv.Atoi(os.Getenv("ORDER_CHARGE_DELAY_MS"))
	served := tasks(time.Duration(delayMs) * time.Millisecond)
	w, err := orbit.NewWorker(orbit.WorkerOptions{
		Server:        *server,
		Token:         os.Getenv("ORBIT_TOKEN"),
		WorkerID:      envOr("ORDER_WORKER_ID", "orders-go"),
		Tasks:         served,
		Concurrency:   *concurrency,
		ShutdownGrace: 30 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Start(ctx); err != nil { // a refused registration (401, 403 TASK_NOT_ALLOWED…)
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "order worker (go) serving %d tasks on %s (concurrency %d)\n", len(served), *server, *concurrency)
	<-ctx.Done()
	grace, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(grace); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
