using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Net.Http;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json.Linq;

namespace Orbit
{
    /// <summary>Options of a <see cref="Worker"/>. Server, WorkerId and Tasks are required.</summary>
    public sealed class WorkerOptions
    {
        /// <summary>The runtime's base URL (or the load balancer's in front of a cluster).</summary>
        public string Server { get; set; }
        /// <summary>The bearer token (a worker's own token when the server has a workers file).</summary>
        public string Token { get; set; }
        /// <summary>This worker's identity (worker_id of registration and of the workers file).</summary>
        public string WorkerId { get; set; }
        /// <summary>Reported at registration (default "csharp"); tasks pinned to a language go to workers of that runtime.</summary>
        public string Runtime { get; set; }
        public IList<ITaskDefinition> Tasks { get; set; }
        /// <summary>How many attempts run at once (default 8): one slot each, each polling for one task at a time on an HTTP connection pool of its own.</summary>
        public int Concurrency { get; set; }
        /// <summary>The long-poll wait (default 30 s, at most 60 s).</summary>
        public TimeSpan PollWait { get; set; }
        /// <summary>The time between heartbeats (default 2 s).</summary>
        public TimeSpan HeartbeatInterval { get; set; }
        /// <summary>Bounds every request but the long poll (default 30 s).</summary>
        public TimeSpan RequestTimeout { get; set; }
        /// <summary>Spaces the retries of connection errors and 5xx answers.</summary>
        public Backoff Backoff { get; set; }
        /// <summary>How long <see cref="Worker.RunAsync"/> lets running tasks finish once its token is cancelled (default 30 s).</summary>
        public TimeSpan ShutdownGrace { get; set; }
        /// <summary>Receives log lines such as "WARN orbit poll failed: …" (default: standard error with a timestamp).</summary>
        public Action<string> Logger { get; set; }
        /// <summary>Adds debug lines.</summary>
        public bool Debug { get; set; }
        /// <summary>Makes the HTTP handler of each slot and of the session's own requests (default: a new connection pool each).</summary>
        public Func<HttpMessageHandler> HttpHandlerFactory { get; set; }
        /// <summary>
        /// In a cluster in shared mode, spread the slots over every live server at the address it
        /// advertises in <c>/v1/health</c> (default true; see docs/clusters.md, "Workers connect
        /// to every server"). Registration and heartbeats stay on <see cref="Server"/>.
        /// </summary>
        public bool SpreadOverNodes { get; set; } = true;
        /// <summary>How often the live servers are read again from <c>/v1/health</c> (default 5 s).</summary>
        public TimeSpan NodeRefresh { get; set; }
    }

    /// <summary>
    /// Serves tasks to an ORBIT runtime: it registers, long-polls in Concurrency slots
    /// (max_tasks 1 each, the next task asked for in each result's report), runs each attempt
    /// with a <see cref="CancellationToken"/> cancelled when the runtime cancels it (heartbeats
    /// carry cancellations) or its deadline passes, reports each result until it is delivered,
    /// retries every connection error and 5xx with backoff and jitter, registers again after 404
    /// UNKNOWN_SESSION, and stops gracefully.
    /// <code>
    /// var worker = new Worker(new WorkerOptions { Server = "http://127.0.0.1:7233", WorkerId = "orders-csharp", Tasks = { charge } });
    /// await worker.RunAsync(shutdownToken); // until the token is cancelled, then a graceful stop
    /// </code>
    /// </summary>
    public sealed partial class Worker
    {
        sealed class Inflight
        {
            public JObject Task;
            public CancellationTokenSource Cts;
            public string Reason; // why its token was cancelled: cancel, deadline, shutdown
            public bool HandlerDone;
        }

        sealed class Slot
        {
            public int Index;
            /// <summary>The node this slot talks to (its advertised address), or null: the configured address.</summary>
            public string Target;
            /// <summary>The slot's own connection pool, to Target or the configured address.</summary>
            public Transport Tr;
            public string PollSession;
            public CancellationTokenSource PollCts;
            /// <summary>Ends the first delivery of a result to the slot's node when that node leaves.</summary>
            public CancellationTokenSource DeliveryCts;
        }

        readonly WorkerOptions opts;
        readonly Dictionary<string, ITaskDefinition> tasks = new Dictionary<string, ITaskDefinition>();
        readonly Transport main;
        readonly List<Slot> slots = new List<Slot>();
        readonly Action<string> logger;
        readonly Nodes nodes;

        readonly object gate = new object();
        string state = "new";
        string session;
        readonly Dictionary<string, Inflight> inflight = new Dictionary<string, Inflight>();
        readonly Queue<JObject> backlog = new Queue<JObject>();
        readonly SemaphoreSlim regLock = new SemaphoreSlim(1, 1);
        bool regOnce;
        bool hbPending;

        readonly CancellationTokenSource stopCts = new CancellationTokenSource();     // ends polls and the slots' backoff sleeps
        readonly CancellationTokenSource taskCts = new CancellationTokenSource();     // parent of every handler's token; cancelled when a stop gives up
        readonly CancellationTokenSource abandonCts = new CancellationTokenSource();  // result deliveries give up when cancelled
        readonly CancellationTokenSource hbCts = new CancellationTokenSource();

        Task[] slotTasks = new Task[0];
        readonly List<Task> background = new List<Task>();
        Task heartbeat = System.Threading.Tasks.Task.FromResult(true);
        readonly TaskCompletionSource<bool> done = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        int stopping;

        /// <summary>Checks the options and makes a worker; <see cref="StartAsync"/> or <see cref="RunAsync"/> sets it going.</summary>
        public Worker(WorkerOptions options)
        {
            if (options == null) throw new ArgumentNullException("options");
            if (string.IsNullOrEmpty(options.WorkerId)) throw new ArgumentException("Orbit.Worker: WorkerId is required");
            if (options.Tasks == null || options.Tasks.Count == 0) throw new ArgumentException("Orbit.Worker: Tasks must list at least one task");
            opts = new WorkerOptions
            {
                Server = options.Server,
                Token = options.Token,
                WorkerId = options.WorkerId,
                Runtime = string.IsNullOrEmpty(options.Runtime) ? "csharp" : options.Runtime,
                Tasks = options.Tasks.ToList(),
                Concurrency = options.Concurrency > 0 ? options.Concurrency : 8,
                PollWait = options.PollWait > TimeSpan.Zero ? options.PollWait : TimeSpan.FromSeconds(30),
                HeartbeatInterval = options.HeartbeatInterval > TimeSpan.Zero ? options.HeartbeatInterval : TimeSpan.FromSeconds(2),
                RequestTimeout = options.RequestTimeout > TimeSpan.Zero ? options.RequestTimeout : TimeSpan.FromSeconds(30),
                Backoff = options.Backoff ?? new Backoff(),
                ShutdownGrace = options.ShutdownGrace > TimeSpan.Zero ? options.ShutdownGrace : TimeSpan.FromSeconds(30),
                Logger = options.Logger,
                Debug = options.Debug,
                HttpHandlerFactory = options.HttpHandlerFactory ?? Transport.NewHandler,
                SpreadOverNodes = options.SpreadOverNodes,
                NodeRefresh = options.NodeRefresh > TimeSpan.Zero ? options.NodeRefresh : TimeSpan.FromSeconds(5),
            };
            if (opts.PollWait > TimeSpan.FromSeconds(60)) opts.PollWait = TimeSpan.FromSeconds(60);
            logger = opts.Logger ?? DefaultLogger;
            main = new Transport(opts.Server, opts.Token, opts.HttpHandlerFactory());
            for (var i = 0; i < opts.Concurrency; i++)
                slots.Add(new Slot { Index = i, Tr = new Transport(opts.Server, opts.Token, opts.HttpHandlerFactory()) });
            nodes = new Nodes(ReadHealthAsync, Log, main.Server, opts.SpreadOverNodes, opts.NodeRefresh, NodesLeft);
            foreach (var t in opts.Tasks)
            {
                if (t == null || string.IsNullOrEmpty(t.Name) || string.IsNullOrEmpty(t.Contract))
                    throw new ArgumentException("Orbit.Worker: every task needs a name and a contract version");
                var k = Key(t.Name, t.Contract);
                if (tasks.ContainsKey(k))
                    throw new ArgumentException(string.Format("Orbit.Worker: task {0} contract {1} is listed twice", t.Name, t.Contract));
                tasks[k] = t;
            }
        }

        static string Key(string name, string contract) { return name + "\0" + contract; }

        /// <summary>Writes a line on standard error with a timestamp.</summary>
        public static void DefaultLogger(string line)
        {
            Console.Error.WriteLine(DateTime.Now.ToString("yyyy/MM/dd HH:mm:ss.ffffff", CultureInfo.InvariantCulture) + " " + line);
        }

        /// <summary>The runtime's URL.</summary>
        public string Server { get { return main.Server; } }

        /// <summary>
        /// The live servers of a shared cluster the slots are spread over, as last read (empty:
        /// every slot uses <see cref="Server"/>).
        /// </summary>
        public IList<string> NodeAddresses { get { return nodes.Addresses; } }

        /// <summary>The current session, or null while the worker is not registered.</summary>
        public string SessionId { get { lock (gate) return session; } }

        /// <summary>new, starting, running, stopping or stopped.</summary>
        public string State { get { lock (gate) return state; } }

        /// <summary>The tokens of the attempts being run or reported.</summary>
        public IList<string> RunningTokens
        {
            get { lock (gate) return inflight.Keys.OrderBy(t => t, StringComparer.Ordinal).ToList(); }
        }

        /// <summary>Completes when the worker has stopped.</summary>
        public Task Completion { get { return done.Task; } }

        /// <summary>
        /// Registers (retrying connection errors and 5xx until it succeeds or the token is
        /// cancelled) and sets the slots and the heartbeat going. The runtime's refusal (401,
        /// 403, 422) is thrown as an <see cref="OrbitApiException"/>.
        /// </summary>
        public async Task StartAsync(CancellationToken cancellationToken = default(CancellationToken))
        {
            lock (gate)
            {
                if (state != "new") throw new InvalidOperationException("Orbit.Worker.StartAsync: the worker is " + state);
                state = "starting";
            }
            Log("INFO", "worker starting worker_id={0} runtime={1} tasks={2} concurrency={3} server={4}", opts.WorkerId, opts.Runtime, opts.Tasks.Count, opts.Concurrency, main.Server);
            Exception error = null;
            await WarmUpAsync().ConfigureAwait(false);
            using (var reg = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken, stopCts.Token))
            {
                try
                {
                    await EnsureSessionAsync(reg.Token).ConfigureAwait(false);
                }
                catch (Exception e)
                {
                    error = e;
                }
            }
            if (error == null)
            {
                // In a shared cluster, the live servers to spread the slots over (one health
                // read, then one every NodeRefresh until the worker stops).
                try
                {
                    await nodes.StartAsync(hbCts.Token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    // stopping
                }
            }
            lock (gate)
            {
                if (state == "stopping") return; // StopAsync was called meanwhile: its shutdown finishes the job
                if (error != null)
                {
                    state = "stopped";
                    CloseSlots();
                    Interlocked.Exchange(ref stopping, 1);
                    stopCts.Cancel();
                    done.TrySetResult(true);
                }
                else
                {
                    state = "running";
                    slotTasks = slots.Select(s => System.Threading.Tasks.Task.Run(() => SlotLoopAsync(s))).ToArray();
                    heartbeat = System.Threading.Tasks.Task.Run(() => HeartbeatLoopAsync());
                }
            }
            if (error is OperationCanceledException) throw error;
            if (error != null) throw error;
        }

        static int warmedUp;

        /// <summary>
        /// Runs the failure path once before the first request (an error body parsed, an API
        /// error thrown and described, a timer): under Mono's JIT on a loaded machine the first
        /// failure otherwise pays 100-300 ms of compilation, and the first retry's pause is no
        /// longer what <see cref="Backoff"/> says.
        /// </summary>
        async Task WarmUpAsync()
        {
            if (Interlocked.Exchange(ref warmedUp, 1) != 0) return;
            try
            {
                var body = JToken.Parse("{\"error\":{\"code\":\"NOT_LEADER\",\"message\":\"warm-up\"}}");
                throw new OrbitApiException(503, (string)body["error"]["code"], "warm-up", null, body.ToString(), "POST", "/");
            }
            catch (OrbitApiException e)
            {
                if (!OrbitException.IsRetryable(e) || Describe(e) == null || Backoff.Format(opts.Backoff.Delay(0)) == null) Log("DEBUG", "warm-up");
            }
            await System.Threading.Tasks.Task.Delay(1).ConfigureAwait(false);
        }

        /// <summary>
        /// Starts the worker and serves until <paramref name="cancellationToken"/> is cancelled,
        /// then stops gracefully within ShutdownGrace (see <see cref="StopAsync(CancellationToken)"/>).
        /// </summary>
        public async Task RunAsync(CancellationToken cancellationToken)
        {
            try
            {
                await StartAsync(cancellationToken).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                if (cancellationToken.IsCancellationRequested) return;
                throw;
            }
            var cancelled = new TaskCompletionSource<bool>();
            using (cancellationToken.Register(() => cancelled.TrySetResult(true)))
            {
                await System.Threading.Tasks.Task.WhenAny(cancelled.Task, done.Task).ConfigureAwait(false);
            }
            await StopAsync(opts.ShutdownGrace).ConfigureAwait(false);
        }

        /// <summary>A graceful stop that gives up on running tasks after <paramref name="grace"/>.</summary>
        public async Task StopAsync(TimeSpan grace)
        {
            using (var cts = new CancellationTokenSource(grace))
            {
                await StopAsync(cts.Token).ConfigureAwait(false);
            }
        }

        /// <summary>
        /// Shuts the worker down gracefully: it stops polling, lets running tasks finish and report
        /// their results, stops heartbeating and unregisters. When <paramref name="cancellationToken"/>
        /// is cancelled first, the running handlers' tokens are cancelled, undelivered results are
        /// given up, and the unregistration gives their attempts back to the runtime, which hands
        /// them out again at once. Safe to call more than once; every call returns when the worker
        /// has stopped.
        /// </summary>
        public Task StopAsync(CancellationToken cancellationToken)
        {
            if (Interlocked.Exchange(ref stopping, 1) == 0)
            {
                System.Threading.Tasks.Task.Run(() => ShutdownAsync(cancellationToken));
            }
            return done.Task;
        }

        async Task ShutdownAsync(CancellationToken ct)
        {
            bool started;
            lock (gate)
            {
                started = state == "running" || state == "starting";
                state = "stopping";
            }
            stopCts.Cancel();
            if (!started)
            {
                lock (gate)
                {
                    state = "stopped";
                    CloseSlots();
                }
                done.TrySetResult(true);
                return;
            }
            var drained = DrainAsync();
            var n = RunningTokens.Count;
            if (n > 0) Log("INFO", "stopping: waiting for {0} running task(s)", n);
            var gaveUp = new TaskCompletionSource<bool>();
            using (ct.Register(() => gaveUp.TrySetResult(true)))
            {
                await System.Threading.Tasks.Task.WhenAny(drained, gaveUp.Task).ConfigureAwait(false);
            }
            if (!drained.IsCompleted)
            {
                lock (gate)
                {
                    n = inflight.Count;
                    foreach (var e in inflight.Values) if (e.Reason == null) e.Reason = "shutdown";
                    backlog.Clear();
                }
                Log("WARN", "stopping: {0} task(s) still running; abandoning them (the runtime hands their attempts out again)", n);
                taskCts.Cancel();
                abandonCts.Cancel();
                // Handlers that heed their token end now; one that ignores it is not waited for.
                await System.Threading.Tasks.Task.WhenAny(drained, System.Threading.Tasks.Task.Delay(200)).ConfigureAwait(false);
            }
            hbCts.Cancel();
            try { await heartbeat.ConfigureAwait(false); } catch (Exception) { /* ended */ }
            try { await nodes.StopAsync().ConfigureAwait(false); } catch (Exception) { /* ended */ }
            await UnregisterAsync().ConfigureAwait(false);
            lock (gate)
            {
                state = "stopped";
                CloseSlots();
            }
            Log("INFO", "worker stopped worker_id={0}", opts.WorkerId);
            done.TrySetResult(true);
        }

        /// <summary>
        /// Closes the slots' own connection pools, under the gate (a handler that ignored its
        /// token and reports later finds its pool closed: a connection error, its result given up).
        /// </summary>
        void CloseSlots()
        {
            foreach (var s in slots) s.Tr.Dispose();
        }

        async Task DrainAsync()
        {
            try { await System.Threading.Tasks.Task.WhenAll(slotTasks).ConfigureAwait(false); } catch (Exception) { /* logged */ }
            Task[] bg;
            lock (gate) bg = background.ToArray();
            try { await System.Threading.Tasks.Task.WhenAll(bg).ConfigureAwait(false); } catch (Exception) { /* logged */ }
        }

        internal void Log(string level, string format, params object[] args)
        {
            if (level == "DEBUG" && !opts.Debug) return;
            var text = args.Length == 0 ? format : string.Format(CultureInfo.InvariantCulture, format, args);
            try { logger(level + " orbit " + text); } catch (Exception) { /* a logger's failure is no worker's */ }
        }

        string Describe(Exception e)
        {
            var api = e as OrbitApiException;
            if (api != null) return string.Format("ORBIT runtime at {0} answered {1} {2}: {3}", main.Server, api.Status, api.Code, api.ApiMessage);
            return e.Message;
        }

        // ---- the session --------------------------------------------------------------

        /// <summary>The current session, registering (one caller at a time) when there is none.</summary>
        async Task<string> EnsureSessionAsync(CancellationToken ct)
        {
            var s = SessionId;
            if (s != null) return s;
            await regLock.WaitAsync(ct).ConfigureAwait(false);
            try
            {
                s = SessionId;
                if (s != null) return s;
                return await RegisterAsync(ct).ConfigureAwait(false);
            }
            finally
            {
                regLock.Release();
            }
        }

        async Task<string> RegisterAsync(CancellationToken ct)
        {
            var taskList = new JArray();
            foreach (var t in opts.Tasks)
            {
                var o = new JObject { { "name", t.Name }, { "contract", t.Contract } };
                if (!string.IsNullOrEmpty(t.Language)) o["language"] = t.Language;
                taskList.Add(o);
            }
            var body = new JObject
            {
                { "worker_id", opts.WorkerId },
                { "runtime", opts.Runtime },
                { "concurrency", opts.Concurrency },
                { "tasks", taskList },
            };
            var r = new Retrier(opts.Backoff);
            while (true)
            {
                Exception err;
                try
                {
                    var res = await main.SendAsync("POST", "/v1/workers/register", null, body, ct, opts.RequestTimeout).ConfigureAwait(false);
                    var id = res != null && res.Type == JTokenType.Object ? (string)res["session_id"] : null;
                    if (string.IsNullOrEmpty(id))
                        throw new OrbitApiException(200, ErrorCodes.InvalidResponse, "register answered without a session_id", null, res == null ? "" : res.ToString(), "POST", "/v1/workers/register");
                    lock (gate)
                    {
                        session = id;
                        regOnce = true;
                    }
                    Log("INFO", "worker registered worker_id={0} runtime={1} tasks={2} session_id={3}", opts.WorkerId, opts.Runtime, opts.Tasks.Count, id);
                    return id;
                }
                catch (OperationCanceledException)
                {
                    throw;
                }
                catch (Exception e)
                {
                    err = e;
                }
                ct.ThrowIfCancellationRequested();
                bool once;
                lock (gate) once = regOnce;
                // Before the first success, a refusal (401, 403, 422) is the caller's to see.
                var retryable = OrbitException.IsRetryable(err);
                if (!retryable && !once) throw err;
                var d = r.Next();
                Log(retryable ? "WARN" : "ERROR", "register failed: {0}; retrying in {1}", Describe(err), Backoff.Format(d));
                await System.Threading.Tasks.Task.Delay(d, ct).ConfigureAwait(false);
            }
        }

        /// <summary>Drops a session the runtime no longer knows and ends the polls held on it.</summary>
        void ForgetSession(string old, string op)
        {
            var ended = new List<CancellationTokenSource>();
            lock (gate)
            {
                if (session != old) return;
                session = null;
                foreach (var s in slots)
                    if (s.PollSession == old && s.PollCts != null) ended.Add(s.PollCts);
            }
            Log("WARN", "{0}: the runtime does not know session {1} (UNKNOWN_SESSION); registering again", op, old);
            foreach (var c in ended)
            {
                try { c.Cancel(); } catch (ObjectDisposedException) { /* the poll ended */ }
            }
        }

        async Task UnregisterAsync()
        {
            var s = SessionId;
            if (s == null) return;
            var r = new Retrier(opts.Backoff);
            for (var attempt = 1; ; attempt++)
            {
                Exception err;
                try
                {
                    await main.SendAsync("POST", "/v1/workers/unregister", null, new JObject { { "session_id", s } }, CancellationToken.None, opts.RequestTimeout).ConfigureAwait(false);
                    err = null;
                }
                catch (Exception e)
                {
                    err = e;
                }
                if (err == null || OrbitException.IsUnknownSession(err))
                {
                    lock (gate) session = null;
                    return;
                }
                if (OrbitException.IsRetryable(err) && attempt < 4)
                {
                    var d = r.Next();
                    Log("WARN", "unregister failed: {0}; retrying in {1}", Describe(err), Backoff.Format(d));
                    await System.Threading.Tasks.Task.Delay(d).ConfigureAwait(false);
                    continue;
                }
                Log("WARN", "unregister failed: {0}; giving up", Describe(err));
                return;
            }
        }

        // ---- the cluster's nodes -------------------------------------------------------

        Task<JToken> ReadHealthAsync(CancellationToken ct)
        {
            var timeout = opts.RequestTimeout < TimeSpan.FromSeconds(10) ? opts.RequestTimeout : TimeSpan.FromSeconds(10);
            return main.SendAsync("GET", "/v1/health", null, null, ct, timeout);
        }

        /// <summary>Ends the polls and cuts the first deliveries of the slots whose nodes left the live list.</summary>
        void NodesLeft(ISet<string> left)
        {
            var ended = new List<CancellationTokenSource>();
            lock (gate)
            {
                foreach (var s in slots)
                {
                    if (s.Target == null || !left.Contains(s.Target)) continue;
                    if (s.PollCts != null) ended.Add(s.PollCts);
                    if (s.DeliveryCts != null) ended.Add(s.DeliveryCts);
                }
            }
            foreach (var c in ended)
            {
                try { c.Cancel(); } catch (ObjectDisposedException) { /* ended meanwhile */ }
            }
        }

        /// <summary>Points the slot at the node it should talk to now (a connection pool of its own for that address when it changed).</summary>
        void Route(Slot s)
        {
            var target = nodes.TargetFor(s.Index);
            Transport old;
            lock (gate)
            {
                if (target == s.Target) return;
                old = s.Tr;
                s.Tr = new Transport(target ?? main.Server, opts.Token, opts.HttpHandlerFactory());
                s.Target = target;
            }
            old.Dispose();
        }

        // ---- heartbeats ---------------------------------------------------------------

        async Task HeartbeatLoopAsync()
        {
            var r = new Retrier(opts.Backoff);
            var delay = opts.HeartbeatInterval;
            var ct = hbCts.Token;
            while (true)
            {
                try
                {
                    await System.Threading.Tasks.Task.Delay(delay, ct).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
                delay = opts.HeartbeatInterval;
                var s = SessionId;
                if (s == null)
                {
                    RegisterInBackground();
                    continue;
                }
                var body = new JObject { { "session_id", s }, { "tokens", new JArray(RunningTokens.ToArray()) } };
                Exception err = null;
                JToken res = null;
                try
                {
                    res = await main.SendAsync("POST", "/v1/workers/heartbeat", null, body, ct, opts.RequestTimeout).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
                catch (Exception e)
                {
                    err = e;
                }
                if (ct.IsCancellationRequested) return;
                if (err == null)
                {
                    r.Reset();
                    var cancel = res != null && res.Type == JTokenType.Object ? res["cancel"] as JArray : null;
                    if (cancel != null)
                        foreach (var tok in cancel)
                            if (tok.Type == JTokenType.String) CancelAttempt((string)tok, "cancel");
                    continue;
                }
                if (OrbitException.IsUnknownSession(err))
                {
                    ForgetSession(s, "heartbeat");
                    RegisterInBackground();
                    continue;
                }
                delay = r.Next();
                Log(OrbitException.IsRetryable(err) ? "WARN" : "ERROR", "heartbeat failed: {0}; retrying in {1}", Describe(err), Backoff.Format(delay));
            }
        }

        /// <summary>Registers again (unless stopping, when there is nothing to keep alive).</summary>
        void RegisterInBackground()
        {
            if (stopCts.IsCancellationRequested) return;
            lock (gate)
            {
                if (hbPending) return;
                hbPending = true;
            }
            System.Threading.Tasks.Task.Run(async () =>
            {
                try { await EnsureSessionAsync(stopCts.Token).ConfigureAwait(false); }
                catch (Exception) { /* stopping, or logged */ }
                finally { lock (gate) hbPending = false; }
            });
        }

        void CancelAttempt(string token, string reason)
        {
            Inflight e;
            lock (gate)
            {
                if (!inflight.TryGetValue(token, out e) || e.HandlerDone || e.Reason != null) return;
                e.Reason = reason;
            }
            Log("INFO", "task cancelled by the runtime token={0} step={1}", token, (string)e.Task["step"]);
            try { e.Cts.Cancel(); } catch (ObjectDisposedException) { /* done meanwhile */ }
        }
    }
}
