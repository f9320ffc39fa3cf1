using System;
using System.Globalization;
using System.Net;
using System.Net.Http;
using System.Net.Http.Headers;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace Orbit
{
    /// <summary>
    /// Exponential backoff with jitter: by default 200 ms, 400 ms, 800 ms … up to 5 s, each plus
    /// up to 20 %.
    /// </summary>
    public sealed class Backoff
    {
        /// <summary>First delay (default 200 ms).</summary>
        public TimeSpan Initial { get; set; }
        /// <summary>Largest delay (default 5 s).</summary>
        public TimeSpan Max { get; set; }
        /// <summary>Growth (default 2).</summary>
        public double Factor { get; set; }
        /// <summary>Random extra share of each delay, 0–1 (default 0.2).</summary>
        public double Jitter { get; set; }

        static readonly Random Rng = new Random();

        public Backoff()
        {
            Initial = TimeSpan.FromMilliseconds(200);
            Max = TimeSpan.FromSeconds(5);
            Factor = 2;
            Jitter = 0.2;
        }

        /// <summary>The wait before retry number <paramref name="attempt"/> (from 0).</summary>
        public TimeSpan Delay(int attempt)
        {
            var initial = Initial > TimeSpan.Zero ? Initial : TimeSpan.FromMilliseconds(200);
            var max = Max > TimeSpan.Zero ? Max : TimeSpan.FromSeconds(5);
            var factor = Factor >= 1 ? Factor : 2;
            var jitter = Jitter > 0 && Jitter <= 1 ? Jitter : 0.2;
            var baseMs = Math.Min(initial.TotalMilliseconds * Math.Pow(factor, attempt), max.TotalMilliseconds);
            double r;
            lock (Rng) r = Rng.NextDouble();
            return TimeSpan.FromMilliseconds(Math.Min(baseMs * (1 + r * jitter), max.TotalMilliseconds));
        }

        /// <summary>Writes a delay as the SDKs' log lines do: 0.2s, 1.6s, 5s.</summary>
        public static string Format(TimeSpan d)
        {
            var s = d.TotalSeconds;
            if (s < 10)
            {
                var t = s.ToString("0.0", CultureInfo.InvariantCulture);
                return (t.EndsWith(".0") ? t.Substring(0, t.Length - 2) : t) + "s";
            }
            return s.ToString("0", CultureInfo.InvariantCulture) + "s";
        }
    }

    /// <summary>Counts the consecutive failures of one loop.</summary>
    internal sealed class Retrier
    {
        readonly Backoff backoff;
        int attempt;

        public Retrier(Backoff b) { backoff = b; }

        public TimeSpan Next() { return backoff.Delay(attempt++); }

        public void Reset() { attempt = 0; }
    }

    /// <summary>
    /// Sends JSON requests with a bearer token to one ORBIT runtime, turning
    /// <c>{"error":{…}}</c> answers into <see cref="OrbitApiException"/> and network failures into
    /// <see cref="OrbitConnectionException"/>.
    /// </summary>
    internal sealed class Transport : IDisposable
    {
        public readonly string Server;
        readonly string token;
        readonly HttpClient http;

        static Transport()
        {
            // Where HttpClientHandler rides on HttpWebRequest (older Mono, .NET Framework): no
            // 100-continue round trip, no Nagle delay on small bodies, and more than two
            // connections per server (a long poll per slot, heartbeats and results at once).
            // Mono 6.8 and .NET use SocketsHttpHandler: a connection pool per handler.
            ServicePointManager.Expect100Continue = false;
            ServicePointManager.UseNagleAlgorithm = false;
            if (ServicePointManager.DefaultConnectionLimit < 256) ServicePointManager.DefaultConnectionLimit = 256;
        }

        public Transport(string server, string token, HttpMessageHandler handler)
        {
            Server = CheckServer(server);
            this.token = string.IsNullOrEmpty(token) ? null : token;
            http = new HttpClient(handler ?? NewHandler(), true) { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
        }

        /// <summary>Closes the connection pool (a request on it afterwards fails as a connection error).</summary>
        public void Dispose()
        {
            http.Dispose();
        }

        /// <summary>A connection pool of its own (a worker gives one to each slot).</summary>
        public static HttpMessageHandler NewHandler()
        {
            return new HttpClientHandler { UseProxy = false, AllowAutoRedirect = false, UseCookies = false };
        }

        public static string CheckServer(string server)
        {
            server = (server ?? "").TrimEnd('/');
            if (server == "") throw new ArgumentException("orbit: the server address is required");
            Uri u;
            if (!Uri.TryCreate(server, UriKind.Absolute, out u) || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "")
                throw new ArgumentException(string.Format("orbit: the server address \"{0}\" is not an http(s) URL", server));
            return server;
        }

        /// <summary>
        /// Sends one request; <paramref name="timeout"/> (zero: none) bounds it. A cancelled
        /// <paramref name="ct"/> throws <see cref="OperationCanceledException"/>.
        /// </summary>
        public async Task<JToken> SendAsync(string method, string path, string query, JToken body, CancellationToken ct, TimeSpan timeout)
        {
            var url = Server + path + (string.IsNullOrEmpty(query) ? "" : "?" + query);
            using (var cts = CancellationTokenSource.CreateLinkedTokenSource(ct))
            {
                if (timeout > TimeSpan.Zero) cts.CancelAfter(timeout);
                int status;
                string text;
                string reasonPhrase;
                try
                {
                    using (var req = new HttpRequestMessage(new HttpMethod(method), url))
                    {
                        req.Headers.Accept.ParseAdd("application/json");
                        req.Headers.ExpectContinue = false;
                        if (token != null) req.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
                        if (body != null)
                        {
                            req.Content = new ByteArrayContent(Encoding.UTF8.GetBytes(body.ToString(Formatting.None)));
                            req.Content.Headers.ContentType = new MediaTypeHeaderValue("application/json");
                        }
                        using (var res = await http.SendAsync(req, HttpCompletionOption.ResponseContentRead, cts.Token).ConfigureAwait(false))
                        {
                            status = (int)res.StatusCode;
                            reasonPhrase = res.ReasonPhrase;
                            var bytes = await res.Content.ReadAsByteArrayAsync().ConfigureAwait(false);
                            text = Encoding.UTF8.GetString(bytes);
                        }
                    }
                }
                catch (Exception e) when (!(e is OrbitException))
                {
                    if (ct.IsCancellationRequested) throw new OperationCanceledException(ct);
                    if (cts.IsCancellationRequested)
                        throw new OrbitConnectionException(Server, "timed out after " + Backoff.Format(timeout), e);
                    throw new OrbitConnectionException(Server, Reason(e), e);
                }
                if (status < 200 || status > 299) throw ApiError(status, reasonPhrase, text, method, path);
                if (string.IsNullOrWhiteSpace(text)) return null;
                try
                {
                    return JToken.Parse(text);
                }
                catch (JsonException e)
                {
                    throw new OrbitApiException(status, ErrorCodes.InvalidResponse,
                        string.Format("the ORBIT runtime answered {0} {1} with a body that is not the JSON expected: {2}", method, path, e.Message),
                        null, text, method, path);
                }
            }
        }

        /// <summary>The innermost message: "Connection refused" rather than "An error occurred while sending the request".</summary>
        static string Reason(Exception e)
        {
            var inner = e;
            while (inner.InnerException != null) inner = inner.InnerException;
            return inner.Message;
        }

        static OrbitApiException ApiError(int status, string reasonPhrase, string text, string method, string path)
        {
            string code = null, message = null;
            var details = new JObject();
            try
            {
                var parsed = JToken.Parse(text) as JObject;
                var err = parsed != null ? parsed["error"] as JObject : null;
                if (err != null)
                {
                    foreach (var p in err.Properties())
                    {
                        if (p.Name == "code" && p.Value.Type == JTokenType.String) code = (string)p.Value;
                        else if (p.Name == "message" && p.Value.Type == JTokenType.String) message = (string)p.Value;
                        else if (p.Name != "code" && p.Name != "message") details[p.Name] = p.Value;
                    }
                }
            }
            catch (JsonException) { /* not JSON: a proxy's page */ }
            if (string.IsNullOrEmpty(code)) code = "HTTP_" + status;
            if (string.IsNullOrEmpty(message))
            {
                var t = (text ?? "").Trim();
                if (t.Length > 200) t = t.Substring(0, 200);
                message = t != "" ? t : status + " " + reasonPhrase;
            }
            return new OrbitApiException(status, code, message, details, text, method, path);
        }
    }
}
