using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace Orbit.Tests
{
    public sealed class EchoIn : IValidatable
    {
        [JsonProperty("name")] public string Name { get; set; }

        public void Validate()
        {
            if (string.IsNullOrEmpty(Name)) throw new ArgumentException("name is required");
        }
    }

    public sealed class EchoOut
    {
        [JsonProperty("hello")] public string Hello { get; set; }
        [JsonProperty("attempt")] public int Attempt { get; set; }
    }

    public sealed class BadOut : IValidatable
    {
        public void Validate() { throw new ArgumentException("never valid"); }
    }

    /// <summary>A worker against the in-memory fake runtime.</summary>
    public static class WorkerTests
    {
        static readonly ITaskDefinition Echo = TaskDefinition.Create<EchoIn, EchoOut>("t.echo", "1", (input, a) =>
        {
            if (input.Name == "decline") throw TaskError.Fail("DECLINED", "no");
            if (input.Name == "boom") throw new InvalidOperationException("kaput");
            return new EchoOut { Hello = input.Name, Attempt = a.Number };
        });

        static readonly ITaskDefinition BadOutput = TaskDefinition.Create<JObject, BadOut>("t.bad", "1", (input, a) => new BadOut());

        /// <summary>Waits until its token is cancelled, or until release completes.</summary>
        static ITaskDefinition Block(TaskCompletionSource<string> started, Task release)
        {
            return TaskDefinition.Create<JObject, JObject>("t.block", "1", async (input, a, ct) =>
            {
                started.TrySetResult(a.Token);
                var cancelled = new TaskCompletionSource<bool>();
                using (ct.Register(() => cancelled.TrySetResult(true)))
                {
                    await Task.WhenAny(release, cancelled.Task);
                }
                ct.ThrowIfCancellationRequested();
                return new JObject { { "released", true } };
            });
        }

        sealed class Log
        {
            readonly List<string> lines = new List<string>();
            public void Add(string line) { lock (lines) lines.Add(line); }
            public bool Has(string s) { lock (lines) return lines.Any(l => l.Contains(s)); }
            public override string ToString() { lock (lines) return string.Join("\n", lines); }
        }

        static Worker NewWorker(FakeServer f, int concurrency, Log log, params ITaskDefinition[] tasks)
        {
            return new Worker(new WorkerOptions
            {
                Server = f.Url,
                WorkerId = "w-test",
                Tasks = tasks,
                Concurrency = concurrency,
                PollWait = TimeSpan.FromSeconds(1),
                HeartbeatInterval = TimeSpan.FromMilliseconds(30),
                Logger = log.Add,
                Backoff = new Backoff { Initial = TimeSpan.FromMilliseconds(10), Max = TimeSpan.FromMilliseconds(50) },
            });
        }

        static async Task Stop(Worker w)
        {
            await w.StopAsync(TimeSpan.FromSeconds(2));
        }

        public static async Task TestCompletesTasksAndAsksForTheNextInEachResult()
        {
            using (var f = new FakeServer())
            {
                var w = NewWorker(f, 3, new Log(), Echo);
                await w.StartAsync();
                try
                {
                    var tokens = new[] { f.Enqueue("t.echo", new { name = "a" }), f.Enqueue("t.echo", new { name = "b" }) };
                    await f.WaitUntil("two results", () => f.Results.Count == 2);
                    foreach (var tok in tokens)
                    {
                        var r = f.ResultFor(tok);
                        Check.Equal("/v1/tasks/complete", (string)r["path"], "the report's route");
                        Check.True(r["session_id"] != null && (int)r["max_tasks"] == 1, "the result does not ask for the next task: " + r);
                    }
                    lock (f.Gate)
                        foreach (var p in f.Polls) Check.Equal(1, (int)p["max_tasks"], "a poll's max_tasks");
                    var output = f.ResultFor(tokens[0])["output"];
                    Check.Equal("a", (string)output["hello"], "output.hello");
                    Check.Equal(1, (int)output["attempt"], "output.attempt");
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestHoldsOnePollPerSlot()
        {
            using (var f = new FakeServer())
            {
                var w = NewWorker(f, 4, new Log(), Echo);
                await w.StartAsync();
                try
                {
                    await f.WaitUntil("four polls at once", () => f.ActivePolls == 4);
                    lock (f.Gate) Check.True(f.Polls.All(p => (int)p["max_tasks"] == 1), "a poll asked for more than one task");
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestReportsFailuresWithTheirCodes()
        {
            using (var f = new FakeServer())
            {
                var w = NewWorker(f, 2, new Log(), Echo, BadOutput);
                await w.StartAsync();
                try
                {
                    var want = new Dictionary<string, Tuple<string, bool>>
                    {
                        { f.Enqueue("t.echo", new { name = "decline" }), Tuple.Create("DECLINED", false) },
                        { f.Enqueue("t.echo", new { name = "boom" }), Tuple.Create("TASK_ERROR", true) },
                        { f.Enqueue("t.echo", new { name = "" }), Tuple.Create("INVALID_INPUT", false) },
                        { f.Enqueue("t.bad", new { }), Tuple.Create("INVALID_OUTPUT", false) },
                        { f.Enqueue("t.other", new { }), Tuple.Create("UNKNOWN_TASK", true) },
                    };
                    await f.WaitUntil("five results", () => f.Results.Count == 5);
                    foreach (var kv in want)
                    {
                        var r = f.ResultFor(kv.Key);
                        Check.Equal("/v1/tasks/fail", (string)r["path"], kv.Key + " route");
                        Check.Equal(kv.Value.Item1, (string)r["error"]["code"], kv.Key + " code");
                        Check.Equal(kv.Value.Item2, (bool)r["error"]["retryable"], kv.Key + " retryable");
                        Check.True(r["error"]["details"] is JObject, kv.Key + " details is an object");
                    }
                    var boom = want.First(kv => kv.Value.Item1 == "TASK_ERROR").Key;
                    Check.Equal("System.InvalidOperationException", (string)f.ResultFor(boom)["error"]["details"]["type"], "TASK_ERROR details.type");
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestRetriesNotLeaderAndServerErrorsWithBackoff()
        {
            using (var f = new FakeServer())
            {
                f.InjectFailures("/v1/workers/register", 503, 503, 500);
                f.InjectFailures("/v1/tasks/complete", 502);
                var log = new Log();
                var w = NewWorker(f, 1, log, Echo);
                await w.StartAsync();
                try
                {
                    var tok = f.Enqueue("t.echo", new { name = "x" });
                    await f.WaitUntil("the result, delivered on a retry", () => f.Results.Any(r => (string)r["token"] == tok));
                    Check.True(log.Has("register failed: ORBIT runtime at " + f.Url + " answered 503 NOT_LEADER"), "no retry logged:\n" + log);
                    Check.True(log.Has("report result failed:"), "no report retry logged:\n" + log);
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestAnOutputTheRuntimeRefusesIsReportedAsAFailureOnce()
        {
            using (var f = new FakeServer())
            {
                f.InjectFailures("/v1/tasks/complete", 422);
                var log = new Log();
                var w = NewWorker(f, 1, log, Echo);
                await w.StartAsync();
                try
                {
                    var tok = f.Enqueue("t.echo", new { name = "big" });
                    await f.WaitUntil("the substituted failure", () => f.Results.Any(r => (string)r["token"] == tok));
                    var r0 = f.ResultFor(tok);
                    Check.Equal("/v1/tasks/fail", (string)r0["path"], "route");
                    Check.Equal("OUTPUT_REJECTED", (string)r0["error"]["code"], "code");
                    Check.Equal(false, (bool)r0["error"]["retryable"], "retryable");
                    Check.True(r0["max_tasks"] == null, "a retried report asks for no task: " + r0);
                    Check.True(log.Has("reporting a failure instead"), "not logged:\n" + log);
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestRetriesARefusedConnectionUntilTheServerListens()
        {
            var log = new Log();
            var probe = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
            probe.Start();
            var port = ((System.Net.IPEndPoint)probe.LocalEndpoint).Port;
            probe.Stop();
            var w = new Worker(new WorkerOptions
            {
                Server = "http://127.0.0.1:" + port, WorkerId = "w", Tasks = new[] { Echo }, Logger = log.Add,
                Backoff = new Backoff { Initial = TimeSpan.FromMilliseconds(10), Max = TimeSpan.FromMilliseconds(20) },
            });
            using (var cts = new CancellationTokenSource())
            {
                var start = w.StartAsync(cts.Token);
                var end = DateTime.UtcNow.AddSeconds(10);
                while (!log.Has("register failed: cannot reach ORBIT runtime at http://127.0.0.1:" + port) && DateTime.UtcNow < end) await Task.Delay(5);
                Check.True(log.Has("retrying in 0s"), "no connection error logged:\n" + log);
                Check.True(!start.IsCompleted, "StartAsync gave up on a refused connection");
                cts.Cancel();
                Check.Throws<OperationCanceledException>(() => start, "StartAsync after its token was cancelled");
            }
        }

        public static async Task TestRegistersAgainAfterUnknownSession()
        {
            using (var f = new FakeServer())
            {
                var log = new Log();
                var w = NewWorker(f, 2, log, Echo);
                await w.StartAsync();
                try
                {
                    var first = w.SessionId;
                    f.DropSessions();
                    await f.WaitUntil("a new session", () => f.Sessions.Count == 1);
                    var tok = f.Enqueue("t.echo", new { name = "again" });
                    await f.WaitUntil("the result", () => f.Results.Any(r => (string)r["token"] == tok));
                    Check.True(w.SessionId != first, "the session did not change");
                    Check.True(log.Has("(UNKNOWN_SESSION); registering again"), "not logged:\n" + log);
                    lock (f.Gate) Check.Equal(2, f.Requests.Count(p => p == "/v1/workers/register"), "registrations");
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestCancelsAHandlerWhenAHeartbeatSaysSo()
        {
            using (var f = new FakeServer())
            {
                var started = new TaskCompletionSource<string>();
                var w = NewWorker(f, 1, new Log(), Block(started, new TaskCompletionSource<bool>().Task));
                await w.StartAsync();
                try
                {
                    var tok = f.Enqueue("t.block", new { });
                    await started.Task;
                    lock (f.Gate) f.Cancels.Add(tok);
                    await f.WaitUntil("the cancelled attempt's failure", () => f.Results.Any(r => (string)r["token"] == tok));
                    var e = f.ResultFor(tok)["error"];
                    Check.Equal("CANCELLED", (string)e["code"], "code");
                    Check.Equal(true, (bool)e["retryable"], "retryable");
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestADeadlineCancelsTheHandler()
        {
            using (var f = new FakeServer())
            {
                var started = new TaskCompletionSource<string>();
                var w = NewWorker(f, 1, new Log(), Block(started, new TaskCompletionSource<bool>().Task));
                await w.StartAsync();
                try
                {
                    var tok = f.Enqueue("t.block", new { }, DateTimeOffset.UtcNow.AddMilliseconds(150).ToUnixTimeMilliseconds());
                    await f.WaitUntil("the timed-out attempt's failure", () => f.Results.Any(r => (string)r["token"] == tok));
                    Check.Equal("DEADLINE_EXCEEDED", (string)f.ResultFor(tok)["error"]["code"], "code");
                }
                finally
                {
                    await Stop(w);
                }
            }
        }

        public static async Task TestGracefulStopFinishesTheRunningTaskThenUnregisters()
        {
            using (var f = new FakeServer())
            {
                var started = new TaskCompletionSource<string>();
                var release = new TaskCompletionSource<bool>();
                var w = NewWorker(f, 2, new Log(), Block(started, release.Task));
                await w.StartAsync();
                // Both slots polling before the first task: a poll still on its way when the
                // worker stops would otherwise reach the server later and take the second task.
                await f.WaitUntil("both slots to poll", () => f.ActivePolls == 2);
                var tok = f.Enqueue("t.block", new { });
                await started.Task;
                var stopped = w.StopAsync(CancellationToken.None);
                await f.WaitUntil("the worker to stop polling", () => w.State == "stopping" && f.ActivePolls == 0);
                f.Enqueue("t.block", new { }); // not taken: the worker polls no more
                release.SetResult(true);
                await stopped;
                var r = f.ResultFor(tok);
                Check.True(r != null && (string)r["path"] == "/v1/tasks/complete" && r["max_tasks"] == null, "result " + r);
                lock (f.Gate)
                {
                    Check.Equal(1, f.Queue.Count, "tasks left in the queue");
                    Check.Equal(1, f.Unregistrations, "unregistrations");
                }
                Check.Equal("stopped", w.State, "state");
            }
        }

        public static async Task TestStopGivesUpOnATaskAfterItsGrace()
        {
            using (var f = new FakeServer())
            {
                var started = new TaskCompletionSource<string>();
                var w = NewWorker(f, 1, new Log(), Block(started, new TaskCompletionSource<bool>().Task));
                await w.StartAsync();
                var tok = f.Enqueue("t.block", new { });
                await started.Task;
                await w.StopAsync(TimeSpan.FromMilliseconds(50));
                lock (f.Gate) Check.Equal(1, f.Unregistrations, "unregistrations");
                var r = f.ResultFor(tok);
                Check.True(r == null || (string)r["error"]["code"] == "WORKER_STOPPED", "result " + r);
            }
        }

        public static async Task TestStartThrowsARefusedRegistration()
        {
            using (var f = new FakeServer())
            {
                f.InjectFailures("/v1/workers/register", 401);
                var w = NewWorker(f, 1, new Log(), Echo);
                var e = Check.Throws<OrbitApiException>(() => w.StartAsync(), "StartAsync");
                Check.Equal(401, e.Status, "status");
                Check.Equal("UNAUTHORIZED", e.Code, "code");
                Check.Equal("stopped", w.State, "state");
                await w.Completion;
            }
        }

        public static Task TestConstructorRefusesBadOptions()
        {
            Func<WorkerOptions, bool> refused = o =>
            {
                try
                {
                    new Worker(o);
                    return false;
                }
                catch (ArgumentException)
                {
                    return true;
                }
            };
            Check.True(refused(new WorkerOptions { Server = "http://x", Tasks = new[] { Echo } }), "no worker id accepted");
            Check.True(refused(new WorkerOptions { Server = "x", WorkerId = "w", Tasks = new[] { Echo } }), "a server that is no URL accepted");
            Check.True(refused(new WorkerOptions { Server = "http://x", WorkerId = "w", Tasks = new[] { Echo, Echo } }), "a task listed twice accepted");
            Check.True(refused(new WorkerOptions { Server = "http://x", WorkerId = "w", Tasks = new ITaskDefinition[0] }), "no tasks accepted");
            return Task.FromResult(0);
        }

        public static Task TestBackoffGrowsToItsMaximumWithJitter()
        {
            var b = new Backoff();
            var prev = TimeSpan.Zero;
            for (var i = 0; i < 8; i++)
            {
                var d = b.Delay(i);
                Check.True(d >= prev || d >= TimeSpan.FromSeconds(5), string.Format("delay {0} shrank: {1} < {2}", i, d, prev));
                Check.True(d <= TimeSpan.FromSeconds(5), string.Format("delay {0} above the maximum: {1}", i, d));
                prev = d;
            }
            var first = b.Delay(0);
            Check.True(first >= TimeSpan.FromMilliseconds(200) && first <= TimeSpan.FromMilliseconds(240), "first delay " + first);
            Check.Equal("0.2s", Backoff.Format(TimeSpan.FromMilliseconds(200)), "format");
            Check.Equal("5s", Backoff.Format(TimeSpan.FromSeconds(5)), "format");
            return Task.FromResult(0);
        }
    }
}
