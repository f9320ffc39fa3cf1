// The C# SDK's conformance worker: the program the language-neutral conformance suite
// (tests/conformance/README.md) drives. It serves the suite's four tasks with the C# SDK and
// prints one JSON line per event on standard output.
//
//   mono build/Orbit.Conformance.exe --server http://127.0.0.1:7233
//
// Environment: ORBIT_SERVER, ORBIT_TOKEN, CONFORMANCE_WORKER_ID, CONFORMANCE_TASKS (names,
// comma-separated; default all), CONFORMANCE_CONCURRENCY (default 2), CONFORMANCE_HEARTBEAT_MS
// (default 500), CONFORMANCE_POLL_WAIT_S (default 10), CONFORMANCE_STOP_GRACE_MS (default
// 30000). SIGTERM or SIGINT: stop gracefully, print {"event":"stopped"}, exit 0.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;
using Orbit;

namespace Orbit.Conformance
{
    public sealed class EchoIn
    {
        [JsonProperty("value")] public JToken Value { get; set; }
    }

    public sealed class EchoOut
    {
        [JsonProperty("value")] public JToken Value { get; set; }
        [JsonProperty("attempt")] public int Attempt { get; set; }
        [JsonProperty("redelivery")] public bool Redelivery { get; set; }
        [JsonProperty("idempotency_key")] public string IdempotencyKey { get; set; }
        [JsonProperty("runtime")] public string Runtime { get; set; }
    }

    public sealed class FailIn : IValidatable
    {
        [JsonProperty("code")] public string Code { get; set; }
        [JsonProperty("message")] public string Message { get; set; }
        [JsonProperty("retryable")] public bool Retryable { get; set; }
        [JsonProperty("succeed_on_attempt")] public int SucceedOnAttempt { get; set; }

        public void Validate()
        {
            if (string.IsNullOrEmpty(Code)) throw new ArgumentException("code is required");
        }
    }

    public sealed class AttemptOut
    {
        [JsonProperty("attempt")] public int Attempt { get; set; }
    }

    public sealed class SleepIn
    {
        [JsonProperty("ms")] public int Ms { get; set; }
    }

    public sealed class SleepOut
    {
        [JsonProperty("slept_ms")] public int SleptMs { get; set; }
    }

    public sealed class HoldOut
    {
        [JsonProperty("redelivered")] public bool Redelivered { get; set; }
    }

    public static class Program
    {
        static readonly object OutLock = new object();

        /// <summary>Prints one event line on standard output.</summary>
        static void Emit(string name, JObject fields = null)
        {
            fields = fields ?? new JObject();
            fields["event"] = name;
            var line = fields.ToString(Formatting.None);
            lock (OutLock)
            {
                Console.Out.WriteLine(line);
                Console.Out.Flush();
            }
        }

        static JObject AttemptFields(Attempt a)
        {
            return new JObject
            {
                { "task", a.Task }, { "execution_id", a.ExecutionId }, { "step", a.Step }, { "attempt", a.Number },
                { "redelivery", a.Redelivery }, { "idempotency_key", a.IdempotencyKey }, { "token", a.Token },
            };
        }

        /// <summary>
        /// Waits until the attempt's token is cancelled, reports it, and throws the
        /// OperationCanceledException the SDK reports as CANCELLED, DEADLINE_EXCEEDED or WORKER_STOPPED.
        /// </summary>
        static async Task WaitCancelled(Attempt a, CancellationToken ct, int ms)
        {
            try
            {
                await Task.Delay(ms, ct);
            }
            catch (OperationCanceledException)
            {
                Emit("cancelled", AttemptFields(a));
                throw;
            }
        }

        public static List<ITaskDefinition> Tasks()
        {
            return new List<ITaskDefinition>
            {
                TaskDefinition.Create<EchoIn, EchoOut>("conformance.echo", "1", (input, a) =>
                {
                    Emit("executing", AttemptFields(a));
                    return new EchoOut
                    {
                        Value = input == null ? null : input.Value, Attempt = a.Number, Redelivery = a.Redelivery,
                        IdempotencyKey = a.IdempotencyKey, Runtime = "csharp",
                    };
                }),
                TaskDefinition.Create<FailIn, AttemptOut>("conformance.fail", "1", (input, a) =>
                {
                    Emit("executing", AttemptFields(a));
                    if (input.SucceedOnAttempt > 0 && a.Number >= input.SucceedOnAttempt) return new AttemptOut { Attempt = a.Number };
                    throw new TaskError(input.Code, input.Message, input.Retryable, new JObject { { "attempt", a.Number } });
                }),
                TaskDefinition.Create<SleepIn, SleepOut>("conformance.sleep", "1", async (input, a, ct) =>
                {
                    Emit("executing", AttemptFields(a));
                    await WaitCancelled(a, ct, input.Ms);
                    return new SleepOut { SleptMs = input.Ms };
                }),
                TaskDefinition.Create<JObject, HoldOut>("conformance.hold", "1", async (input, a, ct) =>
                {
                    Emit("executing", AttemptFields(a));
                    if (a.Redelivery) return new HoldOut { Redelivered = true };
                    await WaitCancelled(a, ct, Timeout.Infinite);
                    return new HoldOut();
                }),
            };
        }

        static int EnvInt(string name, int def)
        {
            int v;
            return int.TryParse(Environment.GetEnvironmentVariable(name), out v) && v > 0 ? v : def;
        }

        public static int Main(string[] args)
        {
            // Environment.Exit: Mono would otherwise wait for its thread pool's idle threads.
            Environment.Exit(Run(args));
            return 0;
        }

        static int Run(string[] args)
        {
            var server = Environment.GetEnvironmentVariable("ORBIT_SERVER");
            for (var i = 0; i < args.Length; i++)
            {
                if (args[i] == "--server" && i + 1 < args.Length) server = args[++i];
                else if (args[i].StartsWith("--server=")) server = args[i].Substring("--server=".Length);
                else
                {
                    Console.Error.WriteLine("usage: Orbit.Conformance.exe [--server URL]");
                    return 2;
                }
            }
            if (string.IsNullOrEmpty(server)) server = "http://127.0.0.1:7233";
            var workerId = Environment.GetEnvironmentVariable("CONFORMANCE_WORKER_ID");
            if (string.IsNullOrEmpty(workerId)) workerId = "conformance-csharp";
            var want = new HashSet<string>((Environment.GetEnvironmentVariable("CONFORMANCE_TASKS") ?? "")
                .Split(',').Select(s => s.Trim()).Where(s => s != ""));
            var served = Tasks().Where(t => want.Count == 0 || want.Contains(t.Name)).ToList();
            var grace = TimeSpan.FromMilliseconds(EnvInt("CONFORMANCE_STOP_GRACE_MS", 30000));
            var shutdown = ShutdownSignal.Token;
            Worker worker;
            try
            {
                worker = new Worker(new WorkerOptions
                {
                    Server = server,
                    Token = Environment.GetEnvironmentVariable("ORBIT_TOKEN"),
                    WorkerId = workerId,
                    Tasks = served,
                    Concurrency = EnvInt("CONFORMANCE_CONCURRENCY", 2),
                    HeartbeatInterval = TimeSpan.FromMilliseconds(EnvInt("CONFORMANCE_HEARTBEAT_MS", 500)),
                    PollWait = TimeSpan.FromSeconds(EnvInt("CONFORMANCE_POLL_WAIT_S", 10)),
                    ShutdownGrace = grace,
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
                Emit("stopped");
                return 0;
            }
            catch (Exception e)
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 1;
            }
            Emit("ready", new JObject { { "sdk", "csharp" }, { "worker_id", workerId }, { "runtime", "csharp" }, { "tasks", served.Count } });
            shutdown.WaitHandle.WaitOne();
            worker.StopAsync(grace).GetAwaiter().GetResult();
            Emit("stopped");
            return 0;
        }
    }
}
