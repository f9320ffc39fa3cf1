using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json.Linq;

namespace Orbit.Tests
{
    /// <summary>
    /// A worker spreading its slots over two fake servers of one shared cluster (sessions
    /// shared): polls and results on each server's own address, registration and heartbeats on
    /// the configured one, an address that does not answer left out, and a server that leaves
    /// the live list has its slots' polls ended and the result on its way to it sent to the
    /// configured address.
    /// </summary>
    public static class WorkerSpreadTests
    {
        static readonly ITaskDefinition Echo = TaskDefinition.Create<JObject, JObject>("t.echo", "1", (input, a) => input);

        sealed class Log
        {
            readonly List<string> lines = new List<string>();
            public void Add(string line) { lock (lines) lines.Add(line); }
            public bool Has(string s) { lock (lines) return lines.Any(l => l.Contains(s)); }
            public int Count(string s) { lock (lines) return lines.Count(l => l.Contains(s)); }
            public override string ToString() { lock (lines) return string.Join("\n", lines); }
        }

        /// <summary>Makes one answer /v1/health as a shared cluster whose live nodes are addrs() (read at each request).</summary>
        static void ServeHealth(FakeServer f, Func<string[]> addrs)
        {
            f.Other = (method, path, body) =>
            {
                if (path != "/v1/health") return null;
                var nodes = new JArray();
                foreach (var a in addrs()) nodes.Add(new JObject { { "node_id", a }, { "addr", a }, { "live", true } });
                return Tuple.Create(200, (JToken)new JObject { { "status", "ok" }, { "role", "shared" }, { "nodes", nodes } });
            };
        }

        static Worker NewWorker(string server, int concurrency, Log log, bool spread = true, TimeSpan? requestTimeout = null, params ITaskDefinition[] tasks)
        {
            return new Worker(new WorkerOptions
            {
                Server = server,
                WorkerId = "w-spread",
                Tasks = tasks.Length > 0 ? tasks : new[] { Echo },
                Concurrency = concurrency,
                PollWait = TimeSpan.FromSeconds(1),
                HeartbeatInterval = TimeSpan.FromMilliseconds(30),
                RequestTimeout = requestTimeout ?? TimeSpan.Zero,
                NodeRefresh = TimeSpan.FromMilliseconds(20),
                SpreadOverNodes = spread,
                Logger = log.Add,
                Backoff = new Backoff { Initial = TimeSpan.FromMilliseconds(10), Max = TimeSpan.FromMilliseconds(50) },
            });
        }

        static int Count(FakeServer f, string path)
        {
            lock (f.Gate) return f.Requests.Count(p => p == path);
        }

        public static async Task TestSlotsPollEveryLiveServerAndResultsStayOnTheirServer()
        {
            using (var a = new FakeServer())
            using (var b = new FakeServer(a))
            {
                var sorted = new[] { a.Url, b.Url }.OrderBy(u => u, StringComparer.Ordinal).ToArray();
                ServeHealth(a, () => sorted);
                var log = new Log();
                var w = NewWorker(a.Url, 4, log);
                await w.StartAsync();
                try
                {
                    Check.Equal(string.Join(" ", sorted), string.Join(" ", w.NodeAddresses), "NodeAddresses after StartAsync");
                    Check.True(log.Has("INFO orbit slots spread over 2 node(s): " + string.Join(", ", sorted)), log.ToString());
                    // Two slots on each server (a's ActivePolls and b's share one lock).
                    await a.WaitUntil("two polls on each server", () => a.ActivePolls + b.ActivePolls == 4 && b.Polls.Count > 0 && a.Polls.Count > 0);
                    var onB = new[] { b.Enqueue("t.echo", new { n = 1 }), b.Enqueue("t.echo", new { n = 2 }), b.Enqueue("t.echo", new { n = 3 }) };
                    var onA = new[] { a.Enqueue("t.echo", new { n = 4 }), a.Enqueue("t.echo", new { n = 5 }) };
                    await a.WaitUntil("five results", () => a.Results.Count + b.Results.Count == 5);
                    foreach (var t in onB)
                    {
                        var r = b.ResultFor(t);
                        Check.True(r != null, t + " was not reported to the server that handed it out");
                        Check.True(r["session_id"] != null && (int)r["max_tasks"] == 1, "the result does not ask for the next task: " + r);
                    }
                    foreach (var t in onA) Check.True(a.ResultFor(t) != null, t + " was not reported to the server that handed it out");
                    await a.WaitUntil("a heartbeat on the configured address", () => a.Requests.Contains("/v1/workers/heartbeat"));
                }
                finally
                {
                    await w.StopAsync(TimeSpan.FromSeconds(2));
                }
                // Registration, heartbeats and the unregistration stay on the configured address.
                Check.Equal(1, Count(a, "/v1/workers/register"), "registrations on the configured address");
                Check.Equal(1, Count(a, "/v1/workers/unregister"), "unregistrations on the configured address");
                foreach (var p in new[] { "/v1/workers/register", "/v1/workers/heartbeat", "/v1/workers/unregister", "/v1/health" })
                    Check.Equal(0, Count(b, p), p + " on the other server");
            }
        }

        public static async Task TestAnAddressThatDoesNotAnswerIsLeftOutAndItsSlotsUseTheConfiguredAddress()
        {
            var probe = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
            probe.Start();
            var dead = "http://127.0.0.1:" + ((System.Net.IPEndPoint)probe.LocalEndpoint).Port;
            probe.Stop();
            using (var a = new FakeServer())
            {
                ServeHealth(a, () => new[] { a.Url, dead });
                var log = new Log();
                var w = NewWorker(a.Url, 2, log);
                await w.StartAsync();
                try
                {
                    await a.WaitUntil("both slots polling the configured address", () => a.ActivePolls == 2);
                    var tokens = Enumerable.Range(0, 4).Select(i => a.Enqueue("t.echo", new { n = i })).ToArray();
                    await a.WaitUntil("four results", () => tokens.All(t => a.Results.Any(r => (string)r["token"] == t)));
                    Check.Equal(1, log.Count("WARN orbit node " + dead + " did not answer ("), "warnings:\n" + log);
                    Check.True(log.Has("its slots use " + a.Url + " for 10 s"), log.ToString());
                    Check.True(!log.Has("poll failed"), "the failed poll was retried with a backoff:\n" + log);
                    Check.Equal(2, w.NodeAddresses.Count, "NodeAddresses");
                }
                finally
                {
                    await w.StopAsync(TimeSpan.FromSeconds(2));
                }
            }
        }

        public static async Task TestTheSlotsOfAServerThatLeftMoveAtOnceAndTheResultOnItsWayGoesToTheConfiguredAddress()
        {
            using (var a = new FakeServer())
            using (var b = new FakeServer(a))
            {
                // b's polls last far past the test: only their end by the worker moves its slots.
                lock (a.Gate) b.PollHold = TimeSpan.FromMinutes(5);
                var live = new[] { a.Url, b.Url }.OrderBy(u => u, StringComparer.Ordinal).ToArray();
                ServeHealth(a, () => Volatile.Read(ref live));
                var started = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
                var release = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
                var block = TaskDefinition.Create<JObject, JObject>("t.block", "1", async (input, at, ct) =>
                {
                    started.TrySetResult(at.Token);
                    await release.Task;
                    return new JObject { { "released", true } };
                });
                var log = new Log();
                // The result's request to b would wait a minute: only the cut ends it in time.
                var w = NewWorker(a.Url, 4, log, true, TimeSpan.FromMinutes(1), block);
                await w.StartAsync();
                try
                {
                    await a.WaitUntil("two polls on each server", () => a.ActivePolls == 2 && b.ActivePolls == 2);
                    var tok = b.Enqueue("t.block", new { });
                    await started.Task;
                    lock (a.Gate) b.HoldResults = true; // b receives the result and does not answer
                    release.SetResult(true);
                    await a.WaitUntil("the result on its way to b", () => b.Requests.Contains("/v1/tasks/complete"));
                    await a.WaitUntil("one poll on b while its other slot reports", () => b.ActivePolls == 1);
                    // b leaves the live list: its poll ends, its slot moves to a, and the result
                    // goes to a at once.
                    Volatile.Write(ref live, new[] { a.Url });
                    await a.WaitUntil("the result, delivered to the configured address", () => a.ResultFor(tok) != null);
                    var r = a.ResultFor(tok);
                    Check.True(r["max_tasks"] == null, "the retry asked for a task: " + r);
                    Check.True(b.ResultFor(tok) == null, "b answered the result");
                    await a.WaitUntil("every slot polling a", () => a.ActivePolls == 4);
                    Check.True(log.Has("INFO orbit slots spread over 1 node(s): " + a.Url), log.ToString());
                    Check.True(!log.Has("report result failed"), "the result waited for a backoff:\n" + log);
                    // The slot moved to a takes a's tasks (and reports them there).
                    var next = a.Enqueue("t.block", new { });
                    await a.WaitUntil("the next result", () => a.ResultFor(next) != null);
                }
                finally
                {
                    release.TrySetResult(true);
                    lock (a.Gate) b.HoldResults = false;
                    await w.StopAsync(TimeSpan.FromSeconds(2));
                }
            }
        }

        public static async Task TestAResultOfAServerThatLeftWhileItsTaskRanGoesToTheConfiguredAddress()
        {
            using (var a = new FakeServer())
            using (var b = new FakeServer(a))
            {
                var live = new[] { a.Url, b.Url }.OrderBy(u => u, StringComparer.Ordinal).ToArray();
                ServeHealth(a, () => Volatile.Read(ref live));
                var started = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
                var release = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
                var block = TaskDefinition.Create<JObject, JObject>("t.block", "1", async (input, at, ct) =>
                {
                    started.TrySetResult(at.Token);
                    await release.Task;
                    return new JObject { { "released", true } };
                });
                var log = new Log();
                var w = NewWorker(a.Url, 2, log, true, null, block);
                await w.StartAsync();
                try
                {
                    await a.WaitUntil("a poll on each server", () => a.ActivePolls == 1 && b.ActivePolls == 1);
                    var tok = b.Enqueue("t.block", new { });
                    await started.Task;
                    Volatile.Write(ref live, new[] { a.Url });
                    await NodesTests.WaitFor("the worker to read one live node", () => w.NodeAddresses.Count == 1);
                    release.SetResult(true);
                    await a.WaitUntil("the result, delivered to the configured address", () => a.ResultFor(tok) != null);
                    lock (a.Gate) Check.True(!b.Requests.Contains("/v1/tasks/complete"), "the result went to the server that left");
                }
                finally
                {
                    release.TrySetResult(true);
                    await w.StopAsync(TimeSpan.FromSeconds(2));
                }
            }
        }

        public static async Task TestTurnedOffTheWorkerReadsNoHealthAndKeepsEverySlotOnTheConfiguredAddress()
        {
            using (var a = new FakeServer())
            using (var b = new FakeServer(a))
            {
                ServeHealth(a, () => new[] { a.Url, b.Url });
                var log = new Log();
                var w = NewWorker(a.Url, 4, log, false);
                await w.StartAsync();
                try
                {
                    await a.WaitUntil("four polls on the configured address", () => a.ActivePolls == 4);
                    Check.Equal(0, w.NodeAddresses.Count, "NodeAddresses");
                    Check.Equal(0, Count(a, "/v1/health"), "health reads");
                    Check.Equal(0, b.Polls.Count, "polls on the other server");
                }
                finally
                {
                    await w.StopAsync(TimeSpan.FromSeconds(2));
                }
            }
        }
    }
}
