using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace Orbit.Tests
{
    public sealed class OrderIn
    {
        [JsonProperty("order_id")] public string OrderId { get; set; }
    }

    public sealed class OrderOut
    {
        [JsonProperty("tracking")] public string Tracking { get; set; }
    }

    /// <summary>The client against the fake runtime's other routes.</summary>
    public static class ClientTests
    {
        static Tuple<int, JToken> Answer(int status, object body)
        {
            return Tuple.Create(status, body as JToken ?? JToken.FromObject(body));
        }

        public static async Task TestStartsAndReadsATypedResult()
        {
            using (var f = new FakeServer())
            {
                JObject started = null;
                f.Other = (method, path, body) =>
                {
                    if (method == "POST" && path == "/v1/executions")
                    {
                        started = (JObject)body;
                        return Answer(201, new { execution_id = "o-1", workflow = "Orders", status = "running" });
                    }
                    if (path == "/v1/executions/o-1/wait")
                        return Answer(200, new { execution_id = "o-1", workflow = "Orders", status = "completed", output = new { tracking = "trk-1" } });
                    return null;
                };
                var c = new Client(f.Url, new ClientOptions { Token = "secret" });
                var orders = new Workflow<OrderIn, OrderOut>("Orders", "1.0.0");
                var x = await orders.StartAsync(c, "o-1", new OrderIn { OrderId = "o-1" });
                Check.Equal("o-1", x.ExecutionId, "execution id");
                Check.Equal("running", x.Status, "status");
                Check.Equal("Orders", (string)started["workflow"], "workflow");
                Check.Equal("1.0.0", (string)started["version"], "version");
                Check.Equal("o-1", (string)started["input"]["order_id"], "input");
                Check.Equal("Bearer secret", f.LastAuthorization, "authorization");
                var res = await orders.ResultAsync(c, "o-1", TimeSpan.FromSeconds(5));
                Check.Equal("trk-1", res.Tracking, "typed output");
                Check.True(f.LastQuery.Contains("timeout_s=5"), "wait query " + f.LastQuery);
            }
        }

        public static async Task TestAFailedExecutionIsAnExecutionFailedException()
        {
            using (var f = new FakeServer())
            {
                f.Other = (method, path, body) => path == "/v1/executions/o-2/wait"
                    ? Answer(200, new { execution_id = "o-2", status = "failed", error = new { code = "CARD_DECLINED", message = "declined" } })
                    : null;
                var c = new Client(f.Url);
                var e = Check.Throws<ExecutionFailedException>(() => c.ResultAsync<OrderOut>("o-2", TimeSpan.FromSeconds(1)), "ResultAsync");
                Check.Equal("CARD_DECLINED", e.Execution.Error.Code, "error code");
                Check.True(e.Message.Contains("ended failed: CARD_DECLINED declined"), e.Message);
                await Task.FromResult(0);
            }
        }

        public static async Task TestErrorsCarryTheApiCodeAndDetails()
        {
            using (var f = new FakeServer())
            {
                f.Other = (method, path, body) =>
                {
                    if (path == "/v1/executions/nope/signals/go")
                        return Answer(404, new { error = new { code = "UNKNOWN_EXECUTION", message = "no execution nope" } });
                    if (path == "/v1/executions/x/cancel")
                        return Answer(503, new { error = new { code = "NOT_LEADER", message = "standby", leader_addr = "http://leader:7233" } });
                    if (path == "/v1/health") return Tuple.Create(502, (JToken)null);
                    return null;
                };
                var c = new Client(f.Url);
                var e = Check.Throws<OrbitApiException>(() => c.SignalAsync("nope", "go", new { a = 1 }), "SignalAsync");
                Check.Equal(404, e.Status, "status");
                Check.Equal(ErrorCodes.UnknownExecution, e.Code, "code");
                Check.True(OrbitException.HasCode(e, ErrorCodes.UnknownExecution), "HasCode");
                Check.True(!OrbitException.IsRetryable(e), "a 404 is not retryable");
                var nl = Check.Throws<OrbitApiException>(() => c.CancelAsync("x", "why"), "CancelAsync");
                Check.Equal("http://leader:7233", nl.LeaderAddr, "leader_addr");
                Check.True(OrbitException.IsRetryable(nl), "a 503 is retryable");
                var bad = Check.Throws<OrbitApiException>(() => c.HealthAsync(), "HealthAsync");
                Check.Equal("HTTP_502", bad.Code, "the code of an answer without an error object");
                await Task.FromResult(0);
            }
        }

        public static async Task TestReadsHistoryPagesQueriesAndPending()
        {
            using (var f = new FakeServer())
            {
                var queries = new List<string>();
                f.Other = (method, path, body) =>
                {
                    switch (path)
                    {
                        case "/v1/executions/h/history":
                            lock (queries) queries.Add(f.LastQuery);
                            if (!f.LastQuery.Contains("after_seq=2"))
                                return Answer(200, JObject.Parse(@"{""events"":[{""seq"":1,""type"":""ExecutionStarted""},{""seq"":2,""type"":""StepScheduled"",""step"":""a"",""attempt"":1}],""next_after_seq"":2}"));
                            return Answer(200, JObject.Parse(@"{""events"":[{""seq"":3,""type"":""StepSucceeded"",""step"":""a"",""output"":{""x"":1}}]}"));
                        case "/v1/executions/h/queries/status":
                            return Answer(200, new { result = new { stage = "shipping" } });
                        case "/v1/executions/h/pending":
                            return Answer(200, new { execution_id = "h", pending = new object[0] });
                    }
                    return null;
                };
                var c = new Client(f.Url);
                var events = await c.HistoryEventsAsync("h");
                Check.Equal("ExecutionStarted,StepScheduled,StepSucceeded", string.Join(",", events.Select(e => e.Type)), "event types");
                Check.Equal("a", events[2].Step, "step");
                Check.Equal(1, (int)events[2].Fields["output"]["x"], "every member kept");
                var status = await c.QueryAsync<JObject>("h", "status");
                Check.Equal("shipping", (string)status["stage"], "query result");
                var pending = await c.PendingAsync("h");
                Check.Equal("h", (string)pending["execution_id"], "pending");
            }
        }

        public static async Task TestAnUnreachableServerIsAConnectionError()
        {
            var probe = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
            probe.Start();
            var port = ((System.Net.IPEndPoint)probe.LocalEndpoint).Port;
            probe.Stop();
            var c = new Client("http://127.0.0.1:" + port, new ClientOptions { GetRetries = 1, Backoff = new Backoff { Initial = TimeSpan.FromMilliseconds(5) } });
            var e = Check.Throws<OrbitConnectionException>(() => c.GetAsync("x"), "GetAsync");
            Check.True(e.Message.StartsWith("cannot reach ORBIT runtime at http://127.0.0.1:" + port + ": "), e.Message);
            Check.True(OrbitException.IsRetryable(e), "a connection error is retryable");
            await Task.FromResult(0);
        }

        public static Task TestTaskContractsDecodeAndValidate()
        {
            var echo = TaskDefinition.Create<EchoIn, EchoOut>("t.echo", "1", (input, a) => new EchoOut { Hello = input.Name });
            Check.Equal("x", echo.ParseInput(JObject.Parse(@"{""name"":""x""}")).Name, "decoded");
            var e = Check.Throws<ContractValidationException>(() => Task.FromResult(echo.ParseInput(JObject.Parse(@"{""name"":""""}"))), "an empty name");
            Check.True(e.Message.Contains("invalid t.echo input: name is required"), e.Message);
            Check.Throws<ContractValidationException>(() => Task.FromResult(echo.ParseInput(JToken.Parse(@"[1,2]"))), "an array");
            Check.Equal("go", echo.Pinned("go").Language, "pinned");
            Check.Equal(null, echo.Language, "not pinned");
            return Task.FromResult(0);
        }
    }
}
