using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace Orbit.Tests
{
    /// <summary>
    /// A small in-memory ORBIT runtime for the worker's tests (HttpListener): a task queue, long
    /// polls, results, heartbeats with cancellations, and faults to inject.
    /// </summary>
    public sealed class FakeServer : IDisposable
    {
        readonly HttpListener listener = new HttpListener();
        public readonly string Url;
        public readonly object Gate;
        public readonly HashSet<string> Sessions;
        public readonly List<JObject> Queue = new List<JObject>();
        public readonly List<JObject> Results = new List<JObject>();
        public readonly List<JObject> Polls = new List<JObject>();
        public readonly List<string> Requests = new List<string>();
        public List<string> Cancels = new List<string>();
        readonly Dictionary<string, Queue<int>> fail = new Dictionary<string, Queue<int>>();
        /// <summary>Answers of other routes (the client's tests): path → (status, body).</summary>
        public Func<string, string, JObject, Tuple<int, JToken>> Other;
        public string LastQuery;
        public string LastAuthorization;
        readonly int[] ids; // the next id, shared with the servers of the same cluster
        public int ActivePolls;
        public int Unregistrations;
        public int Heartbeats;
        /// <summary>How long a poll waits for a task (set under Gate).</summary>
        public TimeSpan PollHold = TimeSpan.FromSeconds(2);
        /// <summary>While true, results are received (listed in Requests) but not answered: a paused server (set under Gate).</summary>
        public bool HoldResults;

        public FakeServer() : this(null) { }

        /// <summary>A server of the same cluster as <paramref name="peer"/>: its sessions (and its Gate) are shared.</summary>
        public FakeServer(FakeServer peer)
        {
            Gate = peer != null ? peer.Gate : new object();
            Sessions = peer != null ? peer.Sessions : new HashSet<string>();
            ids = peer != null ? peer.ids : new int[1];
            var probe = new TcpListener(IPAddress.Loopback, 0);
            probe.Start();
            var port = ((IPEndPoint)probe.LocalEndpoint).Port;
            probe.Stop();
            Url = "http://127.0.0.1:" + port;
            listener.Prefixes.Add(Url + "/");
            listener.Start();
            Task.Run(() => AcceptLoop());
        }

        public void Dispose()
        {
            try { listener.Stop(); } catch (Exception) { /* stopped */ }
            try { listener.Close(); } catch (Exception) { /* closed */ }
        }

        async Task AcceptLoop()
        {
            while (listener.IsListening)
            {
                HttpListenerContext ctx;
                try
                {
                    ctx = await listener.GetContextAsync().ConfigureAwait(false);
                }
                catch (Exception)
                {
                    return;
                }
                Spawn(ctx);
            }
        }

        void Spawn(HttpListenerContext ctx)
        {
            Task.Run(() => Serve(ctx));
        }

        public string Enqueue(string task, object input, double? deadlineMs = null)
        {
            lock (Gate)
            {
                var nextId = ++ids[0];
                var token = string.Format("x-{0}/t{0}", nextId);
                Queue.Add(new JObject
                {
                    { "token", token }, { "execution_id", "x-" + nextId }, { "step", "s" }, { "attempt", 1 },
                    { "task", task }, { "contract", "1" }, { "input", JToken.FromObject(input) },
                    { "idempotency_key", "k-" + token }, { "redelivery", false },
                    { "deadline_ms", deadlineMs.HasValue ? (JToken)deadlineMs.Value : JValue.CreateNull() },
                });
                return token;
            }
        }

        public void InjectFailures(string path, params int[] statuses)
        {
            lock (Gate)
            {
                if (!fail.ContainsKey(path)) fail[path] = new Queue<int>();
                foreach (var s in statuses) fail[path].Enqueue(s);
            }
        }

        public void DropSessions()
        {
            lock (Gate) Sessions.Clear();
        }

        public JObject ResultFor(string token)
        {
            lock (Gate) return Results.FirstOrDefault(r => (string)r["token"] == token);
        }

        /// <summary>Waits until cond holds (checked under the lock): a condition, not a sleep.</summary>
        public async Task WaitUntil(string what, Func<bool> cond, int timeoutMs = 10000)
        {
            var end = DateTime.UtcNow.AddMilliseconds(timeoutMs);
            while (DateTime.UtcNow < end)
            {
                lock (Gate)
                {
                    if (cond()) return;
                }
                await Task.Delay(5).ConfigureAwait(false);
            }
            throw new AssertionFailed("timed out waiting for " + what);
        }

        static void Write(HttpListenerContext ctx, int status, JToken body)
        {
            try
            {
                var bytes = Encoding.UTF8.GetBytes(body == null ? "" : body.ToString(Formatting.None));
                ctx.Response.StatusCode = status;
                ctx.Response.ContentType = "application/json";
                ctx.Response.ContentLength64 = bytes.Length;
                ctx.Response.OutputStream.Write(bytes, 0, bytes.Length);
                ctx.Response.OutputStream.Close();
            }
            catch (Exception)
            {
                // the client hung up
            }
        }

        static JObject Err(string code)
        {
            return new JObject { { "error", new JObject { { "code", code }, { "message", "fake " + code }, { "leader_addr", "http://leader" } } } };
        }

        async Task Serve(HttpListenerContext ctx)
        {
            var path = ctx.Request.Url.AbsolutePath;
            string text;
            using (var reader = new StreamReader(ctx.Request.InputStream, Encoding.UTF8)) text = reader.ReadToEnd();
            JObject body = null;
            try { body = string.IsNullOrWhiteSpace(text) ? new JObject() : JObject.Parse(text); } catch (JsonException) { body = new JObject(); }
            int injected = 0;
            lock (Gate)
            {
                Requests.Add(path);
                LastQuery = ctx.Request.Url.Query;
                LastAuthorization = ctx.Request.Headers["Authorization"];
                Queue<int> q;
                if (fail.TryGetValue(path, out q) && q.Count > 0) injected = q.Dequeue();
            }
            if (injected != 0)
            {
                var code = injected == 503 ? "NOT_LEADER" : injected == 404 ? "UNKNOWN_SESSION" : injected == 401 ? "UNAUTHORIZED" : "STORAGE_ERROR";
                Write(ctx, injected, Err(code));
                return;
            }
            var session = (string)body["session_id"];
            switch (path)
            {
                case "/v1/workers/register":
                    {
                        string id;
                        lock (Gate)
                        {
                            id = "sess-" + ++ids[0];
                            Sessions.Add(id);
                        }
                        Write(ctx, 200, new JObject { { "session_id", id } });
                        return;
                    }
                case "/v1/workers/poll":
                    {
                        lock (Gate)
                        {
                            Polls.Add(body);
                            ActivePolls++;
                        }
                        try
                        {
                            DateTime end;
                            lock (Gate) end = DateTime.UtcNow + PollHold;
                            while (listener.IsListening)
                            {
                                lock (Gate)
                                {
                                    if (!Sessions.Contains(session))
                                    {
                                        Write(ctx, 404, Err("UNKNOWN_SESSION"));
                                        return;
                                    }
                                    if (Queue.Count > 0 || DateTime.UtcNow > end)
                                    {
                                        var tasks = new JArray();
                                        if (Queue.Count > 0)
                                        {
                                            tasks.Add(Queue[0]);
                                            Queue.RemoveAt(0);
                                        }
                                        Write(ctx, 200, new JObject { { "tasks", tasks } });
                                        return;
                                    }
                                }
                                await Task.Delay(10).ConfigureAwait(false);
                            }
                            return; // stopped
                        }
                        finally
                        {
                            lock (Gate) ActivePolls--;
                        }
                    }
                case "/v1/workers/heartbeat":
                    {
                        JArray cancel;
                        lock (Gate)
                        {
                            Heartbeats++;
                            if (!Sessions.Contains(session))
                            {
                                Write(ctx, 404, Err("UNKNOWN_SESSION"));
                                return;
                            }
                            cancel = new JArray(Cancels.ToArray());
                            Cancels.Clear();
                        }
                        Write(ctx, 200, new JObject { { "cancel", cancel } });
                        return;
                    }
                case "/v1/workers/unregister":
                    lock (Gate)
                    {
                        Unregistrations++;
                        if (session != null) Sessions.Remove(session);
                    }
                    Write(ctx, 200, new JObject());
                    return;
                case "/v1/tasks/complete":
                case "/v1/tasks/fail":
                    {
                        while (true)
                        {
                            lock (Gate)
                            {
                                if (!HoldResults) break;
                            }
                            if (!listener.IsListening) return;
                            await Task.Delay(10).ConfigureAwait(false);
                        }
                        var tasks = new JArray();
                        lock (Gate)
                        {
                            body["path"] = path;
                            Results.Add(body);
                            if (body["max_tasks"] != null && Queue.Count > 0)
                            {
                                tasks.Add(Queue[0]);
                                Queue.RemoveAt(0);
                            }
                        }
                        Write(ctx, 200, new JObject { { "accepted", true }, { "tasks", tasks } });
                        return;
                    }
            }
            if (Other != null)
            {
                var answer = Other(ctx.Request.HttpMethod, path, body);
                if (answer != null)
                {
                    Write(ctx, answer.Item1, answer.Item2);
                    return;
                }
            }
            Write(ctx, 404, Err("NOT_FOUND"));
        }
    }
}
