using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json.Linq;

namespace Orbit
{
    public sealed partial class Worker
    {
        sealed class Outcome
        {
            public JToken Output;
            public JObject Failure;
        }

        static JObject Failure(string code, string message, bool retryable, JToken details = null)
        {
            return new JObject
            {
                { "code", code },
                { "message", message ?? "" },
                { "retryable", retryable },
                { "details", details ?? new JObject() },
            };
        }

        /// <summary>
        /// One concurrency slot: a long poll for one task on the slot's connection pool, the task
        /// run, its result reported on the same pool asking for the next task (eager dispatch),
        /// and so on while answers carry one. Before each poll the slot is routed to its node
        /// (<see cref="Nodes"/>): in a shared cluster, the poll, the result and the next task all
        /// reach the server that owns the execution.
        /// </summary>
        async Task SlotLoopAsync(Slot s)
        {
            var r = new Retrier(opts.Backoff);
            var stop = stopCts.Token;
            while (!stop.IsCancellationRequested)
            {
                var task = TakeBacklog();
                if (task == null)
                {
                    Exception err = null;
                    Route(s);
                    try
                    {
                        task = await PollAsync(s).ConfigureAwait(false);
                    }
                    catch (OperationCanceledException)
                    {
                        if (stop.IsCancellationRequested) return;
                        continue;
                    }
                    catch (Exception e)
                    {
                        err = e;
                    }
                    if (err != null)
                    {
                        if (stop.IsCancellationRequested) return;
                        if (s.Target != null && err is OrbitConnectionException)
                        {
                            // The node's own address does not answer: the configured address
                            // meanwhile, at once.
                            nodes.Unreachable(s.Target, ((OrbitConnectionException)err).Reason);
                            continue;
                        }
                        var d = r.Next();
                        Log(OrbitException.IsRetryable(err) ? "WARN" : "ERROR", "poll failed: {0}; retrying in {1}", Describe(err), Backoff.Format(d));
                        try
                        {
                            await System.Threading.Tasks.Task.Delay(d, stop).ConfigureAwait(false);
                        }
                        catch (OperationCanceledException)
                        {
                            return;
                        }
                        continue;
                    }
                    r.Reset();
                }
                while (task != null) task = await RunTaskAsync(s, task).ConfigureAwait(false);
            }
        }

        JObject TakeBacklog()
        {
            lock (gate) return backlog.Count > 0 ? backlog.Dequeue() : null;
        }

        /// <summary>The first task of an answer; the others are queued (a runtime that ignores max_tasks).</summary>
        JObject FirstOf(JToken answer)
        {
            var list = answer != null && answer.Type == JTokenType.Object ? answer["tasks"] as JArray : null;
            if (list == null || list.Count == 0) return null;
            if (list.Count > 1)
            {
                Log("WARN", "the runtime answered {0} tasks for max_tasks=1", list.Count);
                lock (gate)
                    for (var i = 1; i < list.Count; i++)
                        if (list[i] is JObject) backlog.Enqueue((JObject)list[i]);
            }
            return list[0] as JObject;
        }

        /// <summary>One long poll for one task; null when it ran out or its session was lost.</summary>
        async Task<JObject> PollAsync(Slot s)
        {
            var stop = stopCts.Token;
            var sess = await EnsureSessionAsync(stop).ConfigureAwait(false);
            using (var cts = CancellationTokenSource.CreateLinkedTokenSource(stop))
            {
                lock (gate)
                {
                    if (session != sess) return null; // lost between EnsureSessionAsync and here
                    s.PollSession = sess;
                    s.PollCts = cts;
                }
                try
                {
                    // Its node left the live list since the slot was routed (before PollCts was
                    // there for NodesLeft to cancel): the slot is routed again.
                    if (s.Target != null && !nodes.IsLive(s.Target)) return null;
                    var body = new JObject
                    {
                        { "session_id", sess },
                        { "max_tasks", 1 },
                        { "wait_s", (int)opts.PollWait.TotalSeconds },
                    };
                    var res = await s.Tr.SendAsync("POST", "/v1/workers/poll", null, body, cts.Token, opts.PollWait + TimeSpan.FromSeconds(15)).ConfigureAwait(false);
                    return FirstOf(res);
                }
                catch (OperationCanceledException)
                {
                    if (!stop.IsCancellationRequested) return null; // the session was found unknown elsewhere
                    throw;
                }
                catch (Exception e)
                {
                    if (OrbitException.IsUnknownSession(e))
                    {
                        ForgetSession(sess, "poll");
                        return null;
                    }
                    throw;
                }
                finally
                {
                    lock (gate)
                    {
                        s.PollSession = null;
                        s.PollCts = null;
                    }
                }
            }
        }

        static string Str(JObject task, string name)
        {
            var v = task[name];
            return v != null && v.Type != JTokenType.Null ? v.ToString() : null;
        }

        /// <summary>
        /// Runs one attempt and reports it; answers the next task the report's answer carried (to
        /// run on this slot), or null. A report whose first try fails is retried in the background
        /// and the slot freed.
        /// </summary>
        async Task<JObject> RunTaskAsync(Slot s, JObject task)
        {
            var token = Str(task, "token");
            if (string.IsNullOrEmpty(token))
            {
                Log("ERROR", "poll answered a task without a token; ignoring it");
                return null;
            }
            var deadline = DeadlineOf(task["deadline_ms"]);
            Inflight e;
            lock (gate)
            {
                if (inflight.ContainsKey(token))
                {
                    Log("DEBUG", "task {0} handed out again while it runs here; ignoring", token);
                    return null;
                }
                e = new Inflight { Task = task, Cts = CancellationTokenSource.CreateLinkedTokenSource(taskCts.Token) };
                inflight[token] = e;
            }
            if (deadline.HasValue)
            {
                var left = deadline.Value - DateTimeOffset.UtcNow;
                if (left <= TimeSpan.Zero) e.Cts.Cancel();
                else if (left.TotalMilliseconds < int.MaxValue) e.Cts.CancelAfter(left); // beyond ~24 days: no timer
            }
            Outcome o;
            try
            {
                o = await ExecuteAsync(e, deadline).ConfigureAwait(false);
            }
            finally
            {
                lock (gate) e.HandlerDone = true;
                e.Cts.Dispose();
            }
            var take = !stopCts.IsCancellationRequested;
            Exception err;
            // The first delivery goes on the slot's connection, to the server that handed the
            // task out. When that is a node's own address, it is cut should the node leave the
            // live list meanwhile (a paused server would hold it until the request's timeout).
            var direct = s.Target != null;
            using (var cut = direct ? CancellationTokenSource.CreateLinkedTokenSource(abandonCts.Token) : null)
            {
                if (direct)
                {
                    lock (gate) s.DeliveryCts = cut;
                    if (!nodes.IsLive(s.Target)) cut.Cancel(); // it left before the delivery began
                }
                var ct = direct ? cut.Token : abandonCts.Token;
                try
                {
                    ct.ThrowIfCancellationRequested(); // not sent at all to a node that left
                    var answer = await SendResultAsync(s.Tr, task, o, take, ct).ConfigureAwait(false);
                    Finished(token);
                    return take ? FirstOf(answer) : null;
                }
                catch (Exception ex)
                {
                    err = ex;
                }
                finally
                {
                    if (direct) lock (gate) s.DeliveryCts = null;
                }
            }
            var refusedConnection = err as OrbitConnectionException;
            if (direct && refusedConnection != null) nodes.Unreachable(s.Target, refusedConnection.Reason);
            lock (gate)
            {
                background.RemoveAll(t => t.IsCompleted);
                background.Add(System.Threading.Tasks.Task.Run(async () =>
                {
                    try { await DeliverAsync(task, o, err, direct).ConfigureAwait(false); }
                    finally { Finished(token); }
                }));
            }
            return null;
        }

        void Finished(string token)
        {
            lock (gate) inflight.Remove(token);
        }

        /// <summary>Reads deadline_ms: epoch milliseconds, or a small value as a duration from now.</summary>
        static DateTimeOffset? DeadlineOf(JToken v)
        {
            if (v == null || (v.Type != JTokenType.Integer && v.Type != JTokenType.Float)) return null;
            var ms = (double)v;
            if (ms <= 0) return null;
            if (ms > 1e11) return DateTimeOffset.FromUnixTimeMilliseconds((long)ms);
            return DateTimeOffset.UtcNow.AddMilliseconds(ms);
        }

        async Task<Outcome> ExecuteAsync(Inflight e, DateTimeOffset? deadline)
        {
            var task = e.Task;
            var info = new JObject
            {
                { "execution_id", task["execution_id"] }, { "step", task["step"] }, { "attempt", task["attempt"] },
                { "task", task["task"] }, { "redelivery", task["redelivery"] },
            };
            Log("INFO", "executing {0}", info.ToString(Newtonsoft.Json.Formatting.None));
            ITaskDefinition def;
            tasks.TryGetValue(Key(Str(task, "task") ?? "", Str(task, "contract") ?? ""), out def);
            if (def == null)
            {
                return new Outcome
                {
                    Failure = Failure("UNKNOWN_TASK", string.Format("worker {0} does not serve task {1} contract {2}", opts.WorkerId, Str(task, "task"), Str(task, "contract")), true),
                };
            }
            var attemptNo = task["attempt"];
            var redelivery = task["redelivery"];
            var a = new Attempt
            {
                Token = Str(task, "token"),
                ExecutionId = Str(task, "execution_id"),
                Step = Str(task, "step"),
                Number = attemptNo != null && attemptNo.Type == JTokenType.Integer ? (int)attemptNo : 0,
                Task = Str(task, "task"),
                Contract = Str(task, "contract"),
                IdempotencyKey = Str(task, "idempotency_key"),
                Redelivery = redelivery != null && redelivery.Type == JTokenType.Boolean && (bool)redelivery,
                Deadline = deadline,
                Log = logger,
            };
            var ct = e.Cts.Token;
            try
            {
                var output = await System.Threading.Tasks.Task.Run(() => def.RunAsync(task["input"], a, ct)).ConfigureAwait(false);
                return new Outcome { Output = output ?? JValue.CreateNull() };
            }
            catch (TaskError te)
            {
                return new Outcome { Failure = HandlerFailure(te) };
            }
            catch (Exception ex)
            {
                string reason;
                lock (gate) reason = e.Reason;
                // A runtime cancel and a stop name their reason before they cancel: what is left is the deadline.
                if (reason == null && deadline.HasValue && ct.IsCancellationRequested) reason = "deadline";
                switch (reason)
                {
                    case "cancel":
                        return new Outcome { Failure = Failure("CANCELLED", "task cancelled by the ORBIT runtime: " + ex.Message, true) };
                    case "deadline":
                        return new Outcome { Failure = Failure("DEADLINE_EXCEEDED", "the attempt's deadline passed: " + ex.Message, true) };
                    case "shutdown":
                        return new Outcome { Failure = Failure("WORKER_STOPPED", "the worker stopped before the task finished: " + ex.Message, true) };
                }
                return new Outcome { Failure = HandlerFailure(ex) };
            }
        }

        /// <summary>Turns a handler's exception into the error object of POST /v1/tasks/fail.</summary>
        static JObject HandlerFailure(Exception e)
        {
            var te = e as TaskError;
            if (te != null)
            {
                JToken details;
                try
                {
                    details = te.Details == null ? new JObject() : JToken.FromObject(te.Details, Contracts.Serializer);
                }
                catch (Exception)
                {
                    details = new JObject { { "unserializable", te.Details.ToString() } };
                }
                return Failure(te.Code, te.Message, te.Retryable, details);
            }
            var stack = e.StackTrace ?? "";
            if (stack.Length > 4000) stack = stack.Substring(0, 3997) + "...";
            return Failure("TASK_ERROR", e.Message, true, new JObject { { "type", e.GetType().FullName }, { "stack", stack } });
        }

        /// <summary>Reports a result once; with take it asks for the slot's next task in the same request.</summary>
        async Task<JToken> SendResultAsync(Transport tr, JObject task, Outcome o, bool take, CancellationToken ct)
        {
            var token = Str(task, "token");
            var body = new JObject { { "token", token } };
            var path = "/v1/tasks/complete";
            if (o.Failure != null)
            {
                path = "/v1/tasks/fail";
                body["error"] = o.Failure;
            }
            else
            {
                body["output"] = o.Output;
            }
            var sess = SessionId;
            if (take && sess != null)
            {
                body["session_id"] = sess;
                body["max_tasks"] = 1;
            }
            var res = await tr.SendAsync("POST", path, null, body, ct, opts.RequestTimeout).ConfigureAwait(false);
            var accepted = res != null && res.Type == JTokenType.Object ? res["accepted"] : null;
            if (accepted != null && accepted.Type == JTokenType.Boolean && !(bool)accepted)
                Log("INFO", "result not accepted (the step already has one) token={0} step={1}", token, Str(task, "step"));
            else if (o.Failure != null)
                Log("INFO", "task failed execution_id={0} step={1} attempt={2} code={3}", Str(task, "execution_id"), Str(task, "step"), Str(task, "attempt"), (string)o.Failure["code"]);
            return res;
        }

        /// <summary>
        /// Retries a report whose first try failed with err until it is delivered, the runtime
        /// refuses it for good, or the worker gives up (a stop's grace passed). Retries go to the
        /// configured address; at once when the first try went to a node's own address
        /// (<paramref name="direct"/>) and did not connect or was cut (the node left or died: the
        /// configured address reaches a live server, which hands the result to the execution's
        /// new owner before that owner redelivers the attempt).
        /// </summary>
        async Task DeliverAsync(JObject task, Outcome o, Exception err, bool direct)
        {
            var tr = main;
            var immediate = direct && (err is OrbitConnectionException || err is OperationCanceledException);
            var r = new Retrier(opts.Backoff);
            var substituted = false;
            var token = Str(task, "token");
            while (true)
            {
                if (abandonCts.IsCancellationRequested)
                {
                    Log("WARN", "giving up reporting the result of {0} (worker stopped)", token);
                    return;
                }
                var api = err as OrbitApiException;
                var refused = api != null && (api.Status == 400 || api.Status == 413 || api.Status == 422);
                if (immediate)
                {
                    immediate = false;
                    Log("DEBUG", "report result to a node failed: {0}; sending it to {1}", Describe(err), main.Server);
                }
                else if (OrbitException.IsRetryable(err) || err is OperationCanceledException)
                {
                    var d = r.Next();
                    Log("WARN", "report result failed: {0}; retrying in {1}", Describe(err), Backoff.Format(d));
                    try
                    {
                        await System.Threading.Tasks.Task.Delay(d, abandonCts.Token).ConfigureAwait(false);
                    }
                    catch (OperationCanceledException)
                    {
                        continue;
                    }
                }
                else if (refused && !substituted)
                {
                    // A result the runtime refuses would be dropped and its attempt redelivered for
                    // ever: it is reported as a small failure instead, once.
                    var what = o.Failure != null ? "failure" : "output";
                    var code = o.Failure != null ? "RESULT_REJECTED" : "OUTPUT_REJECTED";
                    var reason = string.Format("the runtime refused the {0}: {1}: {2}", what, api.Code, api.ApiMessage);
                    Log("ERROR", "{0} ({1}); reporting a failure instead", reason, token);
                    if (reason.Length > 2000) reason = reason.Substring(0, 1997) + "...";
                    o = new Outcome { Failure = Failure(code, reason, false) };
                    substituted = true;
                }
                else
                {
                    Log("ERROR", "report result failed: {0}; dropping the result of {1}", Describe(err), token);
                    return;
                }
                try
                {
                    await SendResultAsync(tr, task, o, false, abandonCts.Token).ConfigureAwait(false);
                    return;
                }
                catch (Exception ex)
                {
                    err = ex;
                }
            }
        }
    }
}
