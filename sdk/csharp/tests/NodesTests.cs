using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json.Linq;

namespace Orbit.Tests
{
    /// <summary>
    /// The worker's router (src/Orbit.Sdk/Nodes.cs) without a server: which addresses of a health
    /// answer it spreads slots over, how evenly, and how a node that does not answer or leaves is
    /// handled. WorkerSpreadTests runs a worker over two fake servers;
    /// tests/cluster_shared_spread_csharp_test.ts runs one against two real shared servers.
    /// </summary>
    public static class NodesTests
    {
        static JObject Node(JToken addr, bool live = true)
        {
            return new JObject { { "node_id", addr.ToString() }, { "addr", addr }, { "live", live } };
        }

        static JObject Health(string role, params JObject[] nodes)
        {
            var h = new JObject { { "status", "ok" }, { "nodes", new JArray(nodes) } };
            if (role != null) h["role"] = role;
            return h;
        }

        sealed class Router
        {
            public Nodes Nodes;
            public readonly List<string> Lines = new List<string>();
            public readonly List<ISet<string>> Left = new List<ISet<string>>();
            public TimeSpan Now = TimeSpan.FromSeconds(1);
            public Func<JToken> Health = () => null;
            public int Reads;

            public string Text { get { lock (Lines) return string.Join("\n", Lines); } }
        }

        static Router NewRouter(int offset = 0, bool enabled = true, int refreshMs = 1000)
        {
            var r = new Router();
            r.Nodes = new Nodes(
                ct =>
                {
                    Interlocked.Increment(ref r.Reads);
                    return Task.FromResult(r.Health());
                },
                (level, format, args) =>
                {
                    lock (r.Lines) r.Lines.Add(level + " " + (args.Length == 0 ? format : string.Format(format, args)));
                },
                "http://lb:7233", enabled, TimeSpan.FromMilliseconds(refreshMs),
                left => { lock (r.Left) r.Left.Add(left); },
                () => r.Now, offset);
            return r;
        }

        static void Same(IEnumerable<string> expected, IEnumerable<string> actual, string what)
        {
            Check.Equal(string.Join(" ", expected), string.Join(" ", actual), what);
        }

        public static Task TestLiveAddressesAreTheLiveSharedNodesHttpAddressesSortedOnceEach()
        {
            var nodes = new[]
            {
                Node("http://b:7233/"),
                Node("http://a:7233"),
                Node("http://c:7233", false),
                Node(JValue.CreateNull()),
                Node(7233),
                Node("not a url"),
                Node("ftp://d:21"),
                Node("https://a:7233"),
                Node("http://a:7233"),
                new JObject { { "addr", "http://e:7233" }, { "live", "true" } }, // live must be true itself
            };
            Same(new[] { "http://a:7233", "http://b:7233", "https://a:7233" }, Nodes.LiveAddresses(Health("shared", nodes)), "shared");
            // Anything but a shared cluster: every slot stays on the configured address.
            foreach (var role in new[] { "single", "leader", "standby", null })
                Check.Equal(0, Nodes.LiveAddresses(Health(role, nodes)).Count, "role " + (role ?? "(none)"));
            Check.Equal(0, Nodes.LiveAddresses(new JObject { { "role", "shared" } }).Count, "no nodes");
            Check.Equal(0, Nodes.LiveAddresses(new JObject { { "role", "shared" }, { "nodes", "x" } }).Count, "nodes not a list");
            Check.Equal(0, Nodes.LiveAddresses(null).Count, "null");
            Check.Equal(0, Nodes.LiveAddresses(new JValue("ok")).Count, "a string");
            return Task.FromResult(0);
        }

        public static Task TestSlotsSpreadEvenlyOverTheLiveNodesAndNoneKnownIsTheConfiguredAddress()
        {
            var r = NewRouter(offset: 5);
            Check.Equal(null, r.Nodes.TargetFor(0), "no nodes known");
            r.Nodes.Update(new[] { "http://a", "http://b", "http://c" });
            var count = new Dictionary<string, int>();
            for (var i = 0; i < 8; i++)
            {
                var t = r.Nodes.TargetFor(i);
                Check.True(t != null, "slot " + i + " on the configured address");
                count[t] = count.ContainsKey(t) ? count[t] + 1 : 1;
            }
            Same(new[] { "2", "3", "3" }, count.Values.OrderBy(n => n).Select(n => n.ToString()), "slots per node");
            // Two slots on two nodes: one each, whatever the offset.
            foreach (var offset in new[] { 0, 1, 7, 1023 })
            {
                var two = NewRouter(offset: offset);
                two.Nodes.Update(new[] { "http://a", "http://b" });
                Check.True(two.Nodes.TargetFor(0) != two.Nodes.TargetFor(1), "offset " + offset + ": both slots on one node");
            }
            // The offset is random per worker: not every router starts on the same node.
            var firsts = new HashSet<string>();
            for (var i = 0; i < 64; i++)
            {
                var n = new Nodes(ct => Task.FromResult<JToken>(null), (l, f, a) => { }, "http://lb", true, TimeSpan.FromSeconds(1), left => { });
                n.Update(new[] { "http://a", "http://b", "http://c", "http://d" });
                firsts.Add(n.TargetFor(0));
            }
            Check.True(firsts.Count > 1, "64 routers all put slot 0 on " + string.Join(",", firsts));
            return Task.FromResult(0);
        }

        public static Task TestANodeThatDidNotAnswerIsLeftOutForAWhileThenTriedAgain()
        {
            var r = NewRouter();
            r.Nodes.Update(new[] { "http://a", "http://b" });
            Check.Equal("http://b", r.Nodes.TargetFor(1), "slot 1");
            r.Nodes.Unreachable("http://b", "Connection refused");
            r.Nodes.Unreachable("http://b", "Connection refused"); // logged once
            Check.Equal(null, r.Nodes.TargetFor(1), "slot 1 while b is left out");
            Check.Equal("http://a", r.Nodes.TargetFor(0), "slot 0");
            r.Now += Nodes.UnreachableFor - TimeSpan.FromMilliseconds(1);
            Check.Equal(null, r.Nodes.TargetFor(1), "slot 1 just before the window ends");
            r.Now += TimeSpan.FromMilliseconds(1);
            Check.Equal("http://b", r.Nodes.TargetFor(1), "slot 1 after the window");
            Check.Equal(1, r.Lines.Count(l => l.Contains("node http://b did not answer")), "warnings:\n" + r.Text);
            Check.True(r.Text.Contains("WARN node http://b did not answer (Connection refused); its slots use http://lb:7233 for 10 s"), r.Text);
            // Left out again after its window: logged again.
            r.Nodes.Unreachable("http://b", "timed out after 30s");
            Check.Equal(null, r.Nodes.TargetFor(1), "slot 1 left out again");
            Check.Equal(2, r.Lines.Count(l => l.Contains("node http://b did not answer")), "warnings:\n" + r.Text);
            return Task.FromResult(0);
        }

        public static Task TestTheSlotsOfANodeThatLeftTheLiveListAreToldAtOnce()
        {
            var r = NewRouter();
            r.Nodes.Update(new[] { "http://a", "http://b", "http://c" });
            r.Nodes.Update(new[] { "http://a", "http://b", "http://c" }); // unchanged: nothing
            Check.Equal(0, r.Left.Count, "calls after an unchanged list");
            Check.Equal(1, r.Lines.Count(l => l.StartsWith("INFO slots spread over")), "spread lines:\n" + r.Text);
            r.Nodes.Update(new[] { "http://a", "http://c", "http://d" });
            Check.Equal(1, r.Left.Count, "calls");
            Same(new[] { "http://b" }, r.Left[0].OrderBy(a => a, StringComparer.Ordinal), "left");
            Check.True(r.Text.Contains("INFO slots spread over 3 node(s): http://a, http://c, http://d"), r.Text);
            r.Nodes.Update(new string[0]);
            Same(new[] { "http://a", "http://c", "http://d" }, r.Left[1].OrderBy(a => a, StringComparer.Ordinal), "left");
            Check.Equal(null, r.Nodes.TargetFor(0), "slot 0 with no nodes");
            Check.Equal(0, r.Nodes.Addresses.Count, "addresses");
            Check.True(r.Text.Contains("INFO slots use the configured address"), r.Text);
            return Task.FromResult(0);
        }

        public static async Task TestReadsTheHealthAtStartThenEveryRefreshAndKeepsTheListWhenAReadFails()
        {
            var r = NewRouter(refreshMs: 20);
            var health = Health("shared", Node("http://b:1/"), Node("http://a:1"));
            r.Health = () => health;
            using (var cts = new CancellationTokenSource())
            {
                await r.Nodes.StartAsync(cts.Token);
                try
                {
                    // Read once before StartAsync completes: the slots start on their nodes.
                    Same(new[] { "http://a:1", "http://b:1" }, r.Nodes.Addresses, "after the start");
                    Check.True(r.Nodes.IsLive("http://b:1") && !r.Nodes.IsLive("http://c:1"), "IsLive");
                    // A failed read keeps the last list.
                    r.Health = () => { throw new OrbitConnectionException("http://lb:7233", "Connection refused"); };
                    var reads = Volatile.Read(ref r.Reads);
                    await WaitFor("two more reads", () => Volatile.Read(ref r.Reads) >= reads + 2);
                    Same(new[] { "http://a:1", "http://b:1" }, r.Nodes.Addresses, "after failed reads");
                    // A read of another list takes it.
                    var next = Health("shared", Node("http://a:1"), Node("http://b:1", false));
                    r.Health = () => next;
                    // The refresh loop swaps the list, logs, then tells the slots of b: wait for both.
                    await WaitFor("the new list and its left call", () =>
                    {
                        lock (r.Left) return r.Nodes.Addresses.Count == 1 && r.Left.Count >= 1;
                    });
                    Same(new[] { "http://a:1" }, r.Nodes.Addresses, "after b left");
                    lock (r.Left)
                    {
                        Check.Equal(1, r.Left.Count, "left calls");
                        Same(new[] { "http://b:1" }, r.Left[0], "left");
                    }
                }
                finally
                {
                    await r.Nodes.StopAsync();
                }
                var stopped = Volatile.Read(ref r.Reads);
                r.Health = () => Health("single");
                await Task.Delay(100); // a negative check: no read in five refresh intervals
                Check.Equal(stopped, Volatile.Read(ref r.Reads), "reads after StopAsync");
            }
        }

        public static async Task TestTurnedOffItReadsNoHealth()
        {
            var r = NewRouter(enabled: false, refreshMs: 10);
            r.Health = () => Health("shared", Node("http://a:1"), Node("http://b:1"));
            await r.Nodes.StartAsync(CancellationToken.None);
            await r.Nodes.RefreshAsync(CancellationToken.None);
            Check.Equal(0, Volatile.Read(ref r.Reads), "health reads");
            Check.Equal(0, r.Nodes.Addresses.Count, "addresses");
            Check.Equal(null, r.Nodes.TargetFor(0), "slot 0");
            await r.Nodes.StopAsync();
        }

        internal static async Task WaitFor(string what, Func<bool> cond, int timeoutMs = 10000)
        {
            var end = DateTime.UtcNow.AddMilliseconds(timeoutMs);
            while (!cond())
            {
                if (DateTime.UtcNow > end) throw new AssertionFailed("timed out waiting for " + what);
                await Task.Delay(5);
            }
        }
    }
}
