using System;
using System.Collections.Generic;
using System.Globalization;
using System.Net.Http;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace Orbit
{
    /// <summary>Execution statuses.</summary>
    public static class ExecutionStatus
    {
        public const string Running = "running";
        public const string Completed = "completed";
        public const string Failed = "failed";
        public const string Cancelled = "cancelled";
        public const string TimedOut = "timed_out";
        public const string Continued = "continued";

        /// <summary>Whether a status is final.</summary>
        public static bool IsTerminal(string status)
        {
            return status == Completed || status == Failed || status == Cancelled || status == TimedOut || status == Continued;
        }
    }

    /// <summary>An execution's or a step's error.</summary>
    public sealed class ErrorInfo
    {
        [JsonProperty("code")] public string Code { get; set; }
        [JsonProperty("message")] public string Message { get; set; }
        [JsonProperty("retryable", NullValueHandling = NullValueHandling.Ignore)] public bool? Retryable { get; set; }
        [JsonProperty("details", NullValueHandling = NullValueHandling.Ignore)] public JToken Details { get; set; }
    }

    /// <summary>One run of a workflow definition, as the API reads it.</summary>
    public sealed class Execution
    {
        [JsonProperty("execution_id")] public string ExecutionId { get; set; }
        [JsonProperty("run_id")] public string RunId { get; set; }
        [JsonProperty("root_id")] public string RootId { get; set; }
        [JsonProperty("workflow")] public string Workflow { get; set; }
        [JsonProperty("version")] public string Version { get; set; }
        [JsonProperty("status")] public string Status { get; set; }
        [JsonProperty("input")] public JToken Input { get; set; }
        [JsonProperty("output")] public JToken Output { get; set; }
        [JsonProperty("error")] public ErrorInfo Error { get; set; }
        [JsonProperty("created_ms")] public long CreatedMs { get; set; }
        [JsonProperty("closed_ms")] public long? ClosedMs { get; set; }
    }

    /// <summary>One event of an execution's history; <see cref="Fields"/> holds every member, the ones named here included.</summary>
    public sealed class HistoryEvent
    {
        public long Seq { get; private set; }
        public string Type { get; private set; }
        public long TimeMs { get; private set; }
        public string Step { get; private set; }
        public int Attempt { get; private set; }
        public JObject Fields { get; private set; }

        public static HistoryEvent FromJson(JObject o)
        {
            Func<string, JToken> get = k => { var v = o[k]; return v != null && v.Type != JTokenType.Null ? v : null; };
            return new HistoryEvent
            {
                Seq = get("seq") != null ? (long)get("seq") : 0,
                Type = get("type") != null ? (string)get("type") : null,
                TimeMs = get("time_ms") != null ? (long)get("time_ms") : 0,
                Step = get("step") != null ? (string)get("step") : null,
                Attempt = get("attempt") != null ? (int)get("attempt") : 0,
                Fields = o,
            };
        }
    }

    /// <summary>One page of history.</summary>
    public sealed class HistoryPage
    {
        public IList<HistoryEvent> Events { get; set; }
        public long? NextAfterSeq { get; set; }
    }

    /// <summary>What to start.</summary>
    public sealed class StartOptions
    {
        public string Workflow { get; set; }
        /// <summary>Default: the latest deployed.</summary>
        public string Version { get; set; }
        public object Input { get; set; }
        /// <summary>Makes the start idempotent: starting an existing id answers it.</summary>
        public string ExecutionId { get; set; }
    }

    /// <summary>Options of a <see cref="Client"/>.</summary>
    public sealed class ClientOptions
    {
        public string Token { get; set; }
        /// <summary>Default: a connection pool of its own.</summary>
        public HttpMessageHandler HttpHandler { get; set; }
        /// <summary>Bounds every request but waits (default 30 s).</summary>
        public TimeSpan RequestTimeout { get; set; }
        /// <summary>How often a GET is repeated on a connection error (default 3).</summary>
        public int? GetRetries { get; set; }
        public Backoff Backoff { get; set; }
    }

    /// <summary>
    /// Talks to the ORBIT HTTP API (orbit-api/1). Its errors are <see cref="OrbitApiException"/>
    /// (with the API's code) and <see cref="OrbitConnectionException"/>; only GETs are repeated,
    /// on connection errors.
    /// </summary>
    public sealed class Client
    {
        readonly Transport tr;
        readonly TimeSpan timeout;
        readonly int getRetries;
        readonly Backoff backoff;

        public Client(string server, ClientOptions options = null)
        {
            options = options ?? new ClientOptions();
            tr = new Transport(server, options.Token, options.HttpHandler);
            timeout = options.RequestTimeout > TimeSpan.Zero ? options.RequestTimeout : TimeSpan.FromSeconds(30);
            getRetries = options.GetRetries ?? 3;
            backoff = options.Backoff ?? new Backoff();
        }

        /// <summary>The runtime's URL.</summary>
        public string Server { get { return tr.Server; } }

        static JToken ToJson(object value)
        {
            if (value == null) return null;
            var t = value as JToken;
            return t ?? JToken.FromObject(value, Contracts.Serializer);
        }

        static T As<T>(JToken t)
        {
            return t == null || t.Type == JTokenType.Null ? default(T) : t.ToObject<T>(Contracts.Serializer);
        }

        Task<JToken> PostAsync(string path, JToken body, CancellationToken ct)
        {
            return tr.SendAsync("POST", path, null, body ?? new JObject(), ct, timeout);
        }

        async Task<JToken> GetJsonAsync(string path, string query, CancellationToken ct, TimeSpan? requestTimeout = null)
        {
            var r = new Retrier(backoff);
            for (var attempt = 0; ; attempt++)
            {
                try
                {
                    return await tr.SendAsync("GET", path, query, null, ct, requestTimeout ?? timeout).ConfigureAwait(false);
                }
                catch (OrbitConnectionException)
                {
                    if (attempt >= getRetries) throw;
                }
                await Task.Delay(r.Next(), ct).ConfigureAwait(false);
            }
        }

        static string Esc(string s) { return Uri.EscapeDataString(s); }

        /// <summary>Deploys a workflow definition (a document: a JObject or any serializable object).</summary>
        public async Task<JObject> DeployAsync(object document, CancellationToken ct = default(CancellationToken))
        {
            return (await PostAsync("/v1/workflows", ToJson(document), ct).ConfigureAwait(false)) as JObject;
        }

        /// <summary>Starts an execution; with an ExecutionId that exists, answers the existing one.</summary>
        public async Task<Execution> StartAsync(StartOptions o, CancellationToken ct = default(CancellationToken))
        {
            var body = new JObject { { "workflow", o.Workflow } };
            if (!string.IsNullOrEmpty(o.Version)) body["version"] = o.Version;
            if (o.Input != null) body["input"] = ToJson(o.Input);
            if (!string.IsNullOrEmpty(o.ExecutionId)) body["execution_id"] = o.ExecutionId;
            return As<Execution>(await PostAsync("/v1/executions", body, ct).ConfigureAwait(false));
        }

        /// <summary>Reads an execution.</summary>
        public async Task<Execution> GetAsync(string executionId, CancellationToken ct = default(CancellationToken))
        {
            return As<Execution>(await GetJsonAsync("/v1/executions/" + Esc(executionId), null, ct).ConfigureAwait(false));
        }

        /// <summary>
        /// Waits until the execution is terminal or <paramref name="timeout"/> has passed (null: no
        /// limit) and answers it as last read: check Status. Long waits are cut into server waits
        /// of at most 300 s.
        /// </summary>
        public async Task<Execution> WaitAsync(string executionId, TimeSpan? timeout = null, CancellationToken ct = default(CancellationToken))
        {
            DateTime? deadline = timeout.HasValue ? DateTime.UtcNow + timeout.Value : (DateTime?)null;
            while (true)
            {
                var waitS = 300;
                if (deadline.HasValue)
                {
                    var left = deadline.Value - DateTime.UtcNow;
                    waitS = Math.Max(0, Math.Min(300, (int)Math.Ceiling(left.TotalSeconds)));
                }
                var began = DateTime.UtcNow;
                var x = As<Execution>(await GetJsonAsync("/v1/executions/" + Esc(executionId) + "/wait",
                    "timeout_s=" + waitS.ToString(CultureInfo.InvariantCulture), ct, TimeSpan.FromSeconds(waitS) + this.timeout).ConfigureAwait(false));
                if (ExecutionStatus.IsTerminal(x.Status) || (deadline.HasValue && DateTime.UtcNow >= deadline.Value)) return x;
                // The runtime answered early without a final status: do not spin.
                if (DateTime.UtcNow - began < TimeSpan.FromSeconds(1)) await Task.Delay(1000, ct).ConfigureAwait(false);
            }
        }

        /// <summary>
        /// Waits for the execution and decodes its output as T. Throws
        /// <see cref="ExecutionFailedException"/> when the execution did not complete.
        /// </summary>
        public async Task<T> ResultAsync<T>(string executionId, TimeSpan? timeout = null, CancellationToken ct = default(CancellationToken))
        {
            var x = await WaitAsync(executionId, timeout, ct).ConfigureAwait(false);
            if (x.Status != ExecutionStatus.Completed) throw new ExecutionFailedException(x);
            try
            {
                return As<T>(x.Output);
            }
            catch (Exception e)
            {
                throw new ContractValidationException(x.Workflow + " output", e);
            }
        }

        /// <summary>One page of history: the events after <paramref name="afterSeq"/> (0: from the start), at most <paramref name="limit"/> (0: the server's default).</summary>
        public async Task<HistoryPage> HistoryAsync(string executionId, long afterSeq = 0, int limit = 0, CancellationToken ct = default(CancellationToken))
        {
            var q = new List<string>();
            if (afterSeq > 0) q.Add("after_seq=" + afterSeq.ToString(CultureInfo.InvariantCulture));
            if (limit > 0) q.Add("limit=" + limit.ToString(CultureInfo.InvariantCulture));
            var res = await GetJsonAsync("/v1/executions/" + Esc(executionId) + "/history", string.Join("&", q), ct).ConfigureAwait(false) as JObject;
            var page = new HistoryPage { Events = new List<HistoryEvent>() };
            if (res == null) return page;
            var events = res["events"] as JArray;
            if (events != null)
                foreach (var e in events)
                    if (e is JObject) page.Events.Add(HistoryEvent.FromJson((JObject)e));
            var next = res["next_after_seq"];
            if (next != null && next.Type == JTokenType.Integer) page.NextAfterSeq = (long)next;
            return page;
        }

        /// <summary>The whole history, page after page.</summary>
        public async Task<IList<HistoryEvent>> HistoryEventsAsync(string executionId, CancellationToken ct = default(CancellationToken))
        {
            var all = new List<HistoryEvent>();
            long after = 0;
            while (true)
            {
                var page = await HistoryAsync(executionId, after, 0, ct).ConfigureAwait(false);
                all.AddRange(page.Events);
                if (!page.NextAfterSeq.HasValue || page.Events.Count == 0 || page.NextAfterSeq.Value == after) return all;
                after = page.NextAfterSeq.Value;
            }
        }

        /// <summary>Why a running execution waits: every open item with its reason.</summary>
        public async Task<JObject> PendingAsync(string executionId, CancellationToken ct = default(CancellationToken))
        {
            return (await GetJsonAsync("/v1/executions/" + Esc(executionId) + "/pending", null, ct).ConfigureAwait(false)) as JObject;
        }

        /// <summary>Sends a signal (payload null: none); answers its seq in the history.</summary>
        public async Task<long> SignalAsync(string executionId, string name, object payload = null, CancellationToken ct = default(CancellationToken))
        {
            var body = new JObject();
            if (payload != null) body["payload"] = ToJson(payload);
            var res = await PostAsync("/v1/executions/" + Esc(executionId) + "/signals/" + Esc(name), body, ct).ConfigureAwait(false);
            var seq = res != null && res.Type == JTokenType.Object ? res["seq"] : null;
            return seq != null && seq.Type == JTokenType.Integer ? (long)seq : 0;
        }

        /// <summary>Evaluates a declared query on the execution's current state and decodes its result as T.</summary>
        public async Task<T> QueryAsync<T>(string executionId, string name, CancellationToken ct = default(CancellationToken))
        {
            var res = await GetJsonAsync("/v1/executions/" + Esc(executionId) + "/queries/" + Esc(name), null, ct).ConfigureAwait(false);
            return As<T>(res != null && res.Type == JTokenType.Object ? res["result"] : null);
        }

        /// <summary>Cancels an execution (its compensations run) and answers it.</summary>
        public async Task<Execution> CancelAsync(string executionId, string reason = null, CancellationToken ct = default(CancellationToken))
        {
            var body = new JObject();
            if (!string.IsNullOrEmpty(reason)) body["reason"] = reason;
            return As<Execution>(await PostAsync("/v1/executions/" + Esc(executionId) + "/cancel", body, ct).ConfigureAwait(false));
        }

        /// <summary>The registered worker sessions.</summary>
        public Task<JToken> WorkersAsync(CancellationToken ct = default(CancellationToken))
        {
            return GetJsonAsync("/v1/workers", null, ct);
        }

        /// <summary>GET /v1/health.</summary>
        public async Task<JObject> HealthAsync(CancellationToken ct = default(CancellationToken))
        {
            return (await GetJsonAsync("/v1/health", null, ct).ConfigureAwait(false)) as JObject;
        }
    }

    /// <summary>
    /// A typed reference to a deployed workflow: its input and output types.
    /// <code>
    /// var orders = new Workflow&lt;Order, OrderResult&gt;("OrderProcessing", "1.0.0");
    /// await orders.StartAsync(client, "order-1", order);
    /// var result = await orders.ResultAsync(client, "order-1", TimeSpan.FromMinutes(1));
    /// </code>
    /// </summary>
    public sealed class Workflow<TIn, TOut>
    {
        public string Name { get; private set; }
        public string Version { get; private set; }

        public Workflow(string name, string version = null)
        {
            Name = name;
            Version = version;
        }

        /// <summary>Starts an execution with a typed input (executionId null: generated).</summary>
        public Task<Execution> StartAsync(Client client, string executionId, TIn input, CancellationToken ct = default(CancellationToken))
        {
            return client.StartAsync(new StartOptions { Workflow = Name, Version = Version, Input = input, ExecutionId = executionId }, ct);
        }

        /// <summary>Waits for the execution and decodes its output as TOut.</summary>
        public Task<TOut> ResultAsync(Client client, string executionId, TimeSpan? timeout = null, CancellationToken ct = default(CancellationToken))
        {
            return client.ResultAsync<TOut>(executionId, timeout, ct);
        }
    }
}
