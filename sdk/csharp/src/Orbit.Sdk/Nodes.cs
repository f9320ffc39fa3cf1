using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json.Linq;

// The SDK's own tests (Orbit.Sdk.Tests.exe) reach the router without a server.
[assembly: InternalsVisibleTo("Orbit.Sdk.Tests")]

namespace Orbit
{
    /// <summary>
    /// The worker's router: in a cluster in shared mode, which server each slot talks to.
    ///
    /// Every server of a shared cluster accepts every request, and one whose poll hands out a
    /// task prefers the executions it owns; the result then goes back on the same connection, to
    /// the owner. The router reads <c>/v1/health</c> of the configured address, learns the live
    /// servers and their advertised addresses (<c>nodes[].addr</c>), and spreads the slots over
    /// them: slot <c>i</c> talks to node <c>(i + offset) % n</c>, the offset random per worker so
    /// that workers with few slots do not all start on the same node. A node whose address does
    /// not answer is set aside for <see cref="UnreachableFor"/> (10 s) and its slots use the
    /// configured address meanwhile; a node that leaves the live list has its slots told at once
    /// (their polls end, their results on the way to it go to the configured address). Anything
    /// else (a single server, a standby cluster, a health answer without addresses) keeps every
    /// slot on the configured address. The TypeScript SDK's <c>worker/nodes.ts</c> and the Python
    /// SDK's <c>_worker/nodes.py</c> do the same.
    /// </summary>
    internal sealed class Nodes
    {
        /// <summary>How long a node whose address failed is left out before its slots try it again.</summary>
        public static readonly TimeSpan UnreachableFor = TimeSpan.FromSeconds(10);

        static readonly Stopwatch Clock = Stopwatch.StartNew();

        readonly Func<CancellationToken, Task<JToken>> readHealth;
        readonly Action<string, string, object[]> log;
        readonly string server;
        readonly bool enabled;
        readonly TimeSpan refresh;
        readonly Action<ISet<string>> onLeft;
        readonly Func<TimeSpan> now;
        readonly int offset;

        readonly object gate = new object();
        List<string> addrs = new List<string>();
        readonly Dictionary<string, TimeSpan> unreachable = new Dictionary<string, TimeSpan>(StringComparer.Ordinal);
        CancellationTokenSource loopCts;
        Task loop;

        /// <param name="readHealth">Reads <c>GET /v1/health</c> of the configured address.</param>
        /// <param name="log">The worker's log (level, format, arguments).</param>
        /// <param name="server">The configured address (named in the log lines).</param>
        /// <param name="enabled">Whether the slots are spread at all (false: no health read).</param>
        /// <param name="refresh">How often the live nodes are read again.</param>
        /// <param name="onLeft">Called with the addresses that left the live list.</param>
        /// <param name="now">A monotonic clock (tests); default a stopwatch.</param>
        /// <param name="offset">The slots' offset (tests); default random.</param>
        public Nodes(Func<CancellationToken, Task<JToken>> readHealth, Action<string, string, object[]> log, string server,
            bool enabled, TimeSpan refresh, Action<ISet<string>> onLeft, Func<TimeSpan> now = null, int? offset = null)
        {
            this.readHealth = readHealth;
            this.log = log;
            this.server = server;
            this.enabled = enabled;
            this.refresh = refresh;
            this.onLeft = onLeft;
            this.now = now ?? (() => Clock.Elapsed);
            // Not System.Random: workers made in the same tick would share its seed.
            this.offset = offset ?? (Guid.NewGuid().GetHashCode() & 1023);
        }

        /// <summary>The live nodes' addresses as last read (empty when not spreading).</summary>
        public IList<string> Addresses
        {
            get { lock (gate) return addrs.ToList(); }
        }

        /// <summary>Whether addr is in the live list now.</summary>
        public bool IsLive(string addr)
        {
            lock (gate) return addrs.Contains(addr);
        }

        /// <summary>The live nodes' advertised <c>http</c>/<c>https</c> addresses of a health answer, sorted, once each.</summary>
        public static List<string> LiveAddresses(JToken health)
        {
            var h = health as JObject;
            var none = new List<string>();
            if (h == null) return none;
            var role = h["role"];
            if (role == null || role.Type != JTokenType.String || (string)role != "shared") return none;
            var nodes = h["nodes"] as JArray;
            if (nodes == null) return none;
            var set = new HashSet<string>(StringComparer.Ordinal);
            foreach (var n in nodes.OfType<JObject>())
            {
                var live = n["live"];
                var addr = n["addr"];
                if (live == null || live.Type != JTokenType.Boolean || !(bool)live) continue;
                if (addr == null || addr.Type != JTokenType.String) continue;
                var s = (string)addr;
                Uri u;
                if (!Uri.TryCreate(s, UriKind.Absolute, out u) || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") continue;
                set.Add(s.TrimEnd('/'));
            }
            var list = set.ToList();
            list.Sort(StringComparer.Ordinal);
            return list;
        }

        /// <summary>Reads the live nodes now, then every refresh interval until <paramref name="ct"/> is cancelled or <see cref="StopAsync"/>.</summary>
        public async Task StartAsync(CancellationToken ct)
        {
            if (!enabled) return;
            await RefreshAsync(ct).ConfigureAwait(false);
            lock (gate)
            {
                if (loopCts != null) return;
                loopCts = CancellationTokenSource.CreateLinkedTokenSource(ct);
                var token = loopCts.Token;
                loop = Task.Run(() => LoopAsync(token));
            }
        }

        async Task LoopAsync(CancellationToken ct)
        {
            while (!ct.IsCancellationRequested)
            {
                try
                {
                    await Task.Delay(refresh, ct).ConfigureAwait(false);
                    await RefreshAsync(ct).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
                catch (Exception e)
                {
                    log("WARN", "reading the cluster's nodes failed: {0}", new object[] { e.Message }); // never let the loop die
                }
            }
        }

        /// <summary>Stops reading the live nodes; completes when the reading loop has ended.</summary>
        public Task StopAsync()
        {
            CancellationTokenSource cts;
            Task t;
            lock (gate)
            {
                cts = loopCts;
                t = loop;
            }
            if (cts == null) return Task.FromResult(true);
            try { cts.Cancel(); } catch (ObjectDisposedException) { /* stopped */ }
            return t.ContinueWith(_ => cts.Dispose(), TaskScheduler.Default);
        }

        /// <summary>One read of <c>/v1/health</c>; a failed read keeps the last list.</summary>
        public async Task RefreshAsync(CancellationToken ct)
        {
            if (!enabled) return;
            JToken health;
            try
            {
                health = await readHealth(ct).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                throw;
            }
            catch (Exception e)
            {
                log("DEBUG", "cannot read the cluster's nodes: {0}", new object[] { e.Message });
                return;
            }
            Update(LiveAddresses(health));
        }

        /// <summary>Takes a new live list; the slots of nodes that left it are told at once.</summary>
        public void Update(IList<string> next)
        {
            HashSet<string> left;
            lock (gate)
            {
                var before = addrs;
                if (before.SequenceEqual(next, StringComparer.Ordinal)) return;
                addrs = next.ToList();
                left = new HashSet<string>(before.Where(a => !next.Contains(a)), StringComparer.Ordinal);
                foreach (var a in left) unreachable.Remove(a);
            }
            if (next.Count > 0) log("INFO", "slots spread over {0} node(s): {1}", new object[] { next.Count, string.Join(", ", next) });
            else log("INFO", "slots use the configured address", new object[0]);
            if (left.Count > 0) onLeft(left);
        }

        /// <summary>The address slot <paramref name="index"/> talks to, or null for the configured address.</summary>
        public string TargetFor(int index)
        {
            lock (gate)
            {
                var n = addrs.Count;
                if (n == 0) return null;
                var addr = addrs[(int)(((long)index + offset) % n)];
                TimeSpan until;
                if (!unreachable.TryGetValue(addr, out until)) return addr;
                if (now() < until) return null;
                unreachable.Remove(addr);
                return addr;
            }
        }

        /// <summary>A request to <paramref name="addr"/> failed to connect: its slots use the configured address for a while.</summary>
        public void Unreachable(string addr, string why)
        {
            lock (gate)
            {
                if (unreachable.ContainsKey(addr)) return;
                unreachable[addr] = now() + UnreachableFor;
            }
            log("WARN", "node {0} did not answer ({1}); its slots use {2} for {3} s",
                new object[] { addr, why, server, (int)UnreachableFor.TotalSeconds });
        }
    }
}
