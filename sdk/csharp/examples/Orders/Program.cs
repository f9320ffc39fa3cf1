// The C# side of the OrderProcessing example (examples/order-processing): all six tasks and both
// compensations, as the worker orders-csharp, with the C# SDK.
//
//   mono build/Orbit.Examples.Orders.exe --server http://127.0.0.1:7233 [--concurrency 8]
//
// Environment: ORBIT_SERVER, ORBIT_TOKEN, ORDER_WORKER_ID (default orders-csharp),
// ORDER_CONCURRENCY, and for tests ORDER_CHARGE_DELAY_MS (a slow payment provider) and
// ORDER_TRACE=1 (one JSON line per attempt on stdout). SIGTERM or Ctrl+C: finish running tasks
// (at most 30 s) and report them.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;
using Orbit;

namespace Orbit.Examples.Orders
{
    // ---- contracts: the input is decoded and checked (Validate) before the handler runs
    // (INVALID_INPUT, not retried), the output checked after it returns.

    public sealed class Item
    {
        [JsonProperty("sku")] public string Sku { get; set; }
        [JsonProperty("qty")] public int Qty { get; set; }
        [JsonProperty("price")] public double Price { get; set; }
    }

    public sealed class Order : IValidatable
    {
        [JsonProperty("order_id")] public string OrderId { get; set; }
        [JsonProperty("customer")] public string Customer { get; set; }
        [JsonProperty("items")] public List<Item> Items { get; set; }

        public void Validate()
        {
            if (string.IsNullOrEmpty(OrderId) || string.IsNullOrEmpty(Customer))
                throw new ArgumentException("order_id and customer are required");
            foreach (var i in Items ?? new List<Item>())
            {
                if (i.Qty < 1) throw new ArgumentException(string.Format("item {0}: qty must be at least 1", i.Sku));
                if (i.Price < 0) throw new ArgumentException(string.Format("item {0}: price must not be negative", i.Sku));
            }
        }
    }

    public sealed class Validated
    {
        [JsonProperty("order_id")] public string OrderId { get; set; }
        [JsonProperty("total")] public double Total { get; set; }
    }

    public sealed class Reservation
    {
        [JsonProperty("order_id")] public string OrderId { get; set; }
        [JsonProperty("items")] public List<Item> Items { get; set; }
    }

    public sealed class Reserved
    {
        [JsonProperty("reservation_id")] public string ReservationId { get; set; }
    }

    public sealed class Release
    {
        [JsonProperty("reservation_id")] public string ReservationId { get; set; }
    }

    public sealed class Released
    {
        [JsonProperty("released")] public bool IsReleased { get; set; }
    }

    public sealed class Charge
    {
        [JsonProperty("order_id")] public string OrderId { get; set; }
        [JsonProperty("amount")] public double Amount { get; set; }
        [JsonProperty("customer")] public string Customer { get; set; }
    }

    public sealed class Charged
    {
        [JsonProperty("charge_id")] public string ChargeId { get; set; }
        [JsonProperty("amount")] public double Amount { get; set; }
    }

    public sealed class Refund
    {
        [JsonProperty("charge_id")] public string ChargeId { get; set; }
        [JsonProperty("amount")] public double Amount { get; set; }
    }

    public sealed class Refunded
    {
        [JsonProperty("refunded")] public double Amount { get; set; }
    }

    public sealed class Shipment
    {
        [JsonProperty("order_id")] public string OrderId { get; set; }
        [JsonProperty("reservation_id")] public string ReservationId { get; set; }
    }

    public sealed class Shipped
    {
        [JsonProperty("tracking")] public string Tracking { get; set; }
    }

    public sealed class Confirmation
    {
        [JsonProperty("customer")] public string Customer { get; set; }
        [JsonProperty("tracking")] public string Tracking { get; set; }
    }

    public sealed class Sent
    {
        [JsonProperty("sent")] public bool IsSent { get; set; }
    }

    public sealed class Points
    {
        [JsonProperty("customer")] public string Customer { get; set; }
        [JsonProperty("points")] public double Amount { get; set; }
    }

    public sealed class Loyalty
    {
        [JsonProperty("points")] public double Points { get; set; }
    }

    public static class Program
    {
        static readonly bool Trace = Environment.GetEnvironmentVariable("ORDER_TRACE") == "1";
        static readonly object OutLock = new object();

        /// <summary>With ORDER_TRACE=1, every attempt is one JSON line on stdout.</summary>
        static TaskDefinition<TIn, TOut> Traced<TIn, TOut>(string name, Func<TIn, Attempt, CancellationToken, Task<TOut>> handler)
        {
            return TaskDefinition.Create<TIn, TOut>(name, "1", (input, a, ct) =>
            {
                if (Trace)
                {
                    var line = new JObject
                    {
                        { "event", "executing" }, { "task", name }, { "execution_id", a.ExecutionId }, { "step", a.Step },
                        { "attempt", a.Number }, { "redelivery", a.Redelivery }, { "idempotency_key", a.IdempotencyKey },
                    }.ToString(Formatting.None);
                    lock (OutLock)
                    {
                        Console.Out.WriteLine(line);
                        Console.Out.Flush();
                    }
                }
                return handler(input, a, ct);
            });
        }

        static TaskDefinition<TIn, TOut> Traced<TIn, TOut>(string name, Func<TIn, Attempt, TOut> handler)
        {
            return Traced<TIn, TOut>(name, (input, a, ct) => Task.FromResult(handler(input, a)));
        }

        public static List<ITaskDefinition> Tasks(TimeSpan chargeDelay)
        {
            return new List<ITaskDefinition>
            {
                Traced<Order, Validated>("orders.validate", (o, a) =>
                {
                    if (o.Items == null || o.Items.Count == 0) throw TaskError.Fail("INVALID_ORDER", "an order needs items");
                    var total = o.Items.Sum(i => i.Qty * i.Price);
                    return new Validated { OrderId = o.OrderId, Total = Math.Round(total * 100) / 100 };
                }),
                Traced<Reservation, Reserved>("inventory.reserve", (r, a) => new Reserved { ReservationId = "res-" + r.OrderId }),
                Traced<Release, Released>("inventory.release", (r, a) => new Released { IsReleased = true }),
                Traced<Charge, Charged>("payments.charge", async (c, a, ct) =>
                {
                    // Ends early (OperationCanceledException) when the runtime cancels the attempt.
                    if (chargeDelay > TimeSpan.Zero) await Task.Delay(chargeDelay, ct);
                    if (c.Customer == "declined") throw TaskError.Fail("CARD_DECLINED", "the card was declined");
                    // The idempotency key is what a real payment provider would deduplicate on.
                    return new Charged { ChargeId = "ch-" + a.IdempotencyKey, Amount = c.Amount };
                }),
                Traced<Refund, Refunded>("payments.refund", (r, a) => new Refunded { Amount = r.Amount }),
                Traced<Shipment, Shipped>("shipping.create", (s, a) => new Shipped { Tracking = "trk-" + s.OrderId }),
                Traced<Confirmation, Sent>("email.confirm", (c, a) => new Sent { IsSent = true }),
                Traced<Points, Loyalty>("loyalty.update", (p, a) => new Loyalty { Points = p.Amount }),
            };
        }

        static string EnvOr(string name, string def)
        {
            var v = Environment.GetEnvironmentVariable(name);
            return string.IsNullOrEmpty(v) ? def : v;
        }

        public static int Main(string[] args)
        {
            // Environment.Exit: Mono would otherwise wait for its thread pool's idle threads.
            Environment.Exit(Run(args));
            return 0;
        }

        static int Run(string[] args)
        {
            var server = EnvOr("ORBIT_SERVER", "http://127.0.0.1:7233");
            int concurrency;
            if (!int.TryParse(Environment.GetEnvironmentVariable("ORDER_CONCURRENCY"), out concurrency) || concurrency < 1) concurrency = 8;
            for (var i = 0; i < args.Length; i++)
            {
                int n;
                if (args[i] == "--server" && i + 1 < args.Length) server = args[++i];
                else if (args[i] == "--concurrency" && i + 1 < args.Length && int.TryParse(args[i + 1], out n) && n > 0)
                {
                    concurrency = n;
                    i++;
                }
                else
                {
                    Console.Error.WriteLine("usage: Orbit.Examples.Orders.exe [--server URL] [--concurrency N]");
                    return 2;
                }
            }
            int delayMs;
            int.TryParse(Environment.GetEnvironmentVariable("ORDER_CHARGE_DELAY_MS"), out delayMs);
            var served = Tasks(TimeSpan.FromMilliseconds(Math.Max(0, delayMs)));
            var shutdown = ShutdownSignal.Token;
            Worker worker;
            try
            {
                worker = new Worker(new WorkerOptions
                {
                    Server = server,
                    Token = Environment.GetEnvironmentVariable("ORBIT_TOKEN"),
                    WorkerId = EnvOr("ORDER_WORKER_ID", "orders-csharp"),
                    Tasks = served,
                    Concurrency = concurrency,
                    ShutdownGrace = TimeSpan.FromSeconds(30),
                });
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 2;
            }
            try
            {
                worker.StartAsync(shutdown).GetAwaiter().GetResult();
            }
            catch (OperationCanceledException)
            {
                return 0;
            }
            catch (Exception e) // a refused registration (401, 403 TASK_NOT_ALLOWED…)
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 1;
            }
            Console.Error.WriteLine("order worker (csharp) serving {0} tasks on {1} (concurrency {2})", served.Count, server, concurrency);
            shutdown.WaitHandle.WaitOne();
            worker.StopAsync(TimeSpan.FromSeconds(30)).GetAwaiter().GetResult();
            return 0;
        }
    }
}
