// A worker for a shared-mode cluster, given one server's address: its slots spread over every
// live server at the address each advertises (WorkerOptions.SpreadOverNodes, on by default;
// docs/clusters.md, "Workers connect to every server"). It serves t.spread (contract 1), which
// returns its input, prints "ran <execution_id> <step>" for every attempt and writes the
// worker's log lines on stdout. tests/cluster_shared_spread_csharp_test.ts runs it against two
// real shared servers.
//
//   mono build/Orbit.Examples.Spread.exe --server http://127.0.0.1:7233 [--concurrency 4] [--node-refresh-ms 5000]
//
// SIGTERM or Ctrl+C: finish running tasks (at most 10 s), report them and unregister.
using System;
using System.Threading;
using Newtonsoft.Json.Linq;
using Orbit;

namespace Orbit.Examples.Spread
{
    public static class Program
    {
        static readonly object Out = new object();

        static void Line(string text)
        {
            lock (Out)
            {
                Console.Out.WriteLine(text);
                Console.Out.Flush();
            }
        }

        public static int Main(string[] args)
        {
            // Environment.Exit: Mono would otherwise wait for its thread pool's idle threads.
            Environment.Exit(Run(args));
            return 0;
        }

        static int Run(string[] args)
        {
            var server = Environment.GetEnvironmentVariable("ORBIT_SERVER") ?? "http://127.0.0.1:7233";
            var concurrency = 4;
            var refreshMs = 5000;
            for (var i = 0; i < args.Length; i++)
            {
                int n;
                if (args[i] == "--server" && i + 1 < args.Length) server = args[++i];
                else if (args[i] == "--concurrency" && i + 1 < args.Length && int.TryParse(args[i + 1], out n) && n > 0)
                {
                    concurrency = n;
                    i++;
                }
                else if (args[i] == "--node-refresh-ms" && i + 1 < args.Length && int.TryParse(args[i + 1], out n) && n > 0)
                {
                    refreshMs = n;
                    i++;
                }
                else
                {
                    Console.Error.WriteLine("usage: Orbit.Examples.Spread.exe [--server URL] [--concurrency N] [--node-refresh-ms MS]");
                    return 2;
                }
            }
            var spread = TaskDefinition.Create<JToken, JToken>("t.spread", "1", (input, attempt) =>
            {
                Line(string.Format("ran {0} {1}", attempt.ExecutionId, attempt.Step));
                return input;
            });
            Worker worker;
            try
            {
                worker = new Worker(new WorkerOptions
                {
                    Server = server,
                    Token = Environment.GetEnvironmentVariable("ORBIT_TOKEN"),
                    WorkerId = "spread-csharp",
                    Tasks = new ITaskDefinition[] { spread },
                    Concurrency = concurrency,
                    PollWait = TimeSpan.FromSeconds(5),
                    NodeRefresh = TimeSpan.FromMilliseconds(refreshMs),
                    Logger = Line,
                });
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 2;
            }
            var shutdown = ShutdownSignal.Token;
            try
            {
                worker.StartAsync(shutdown).GetAwaiter().GetResult();
            }
            catch (OperationCanceledException)
            {
                return 0;
            }
            catch (Exception e) // a refused registration
            {
                Console.Error.WriteLine("error: " + e.Message);
                return 1;
            }
            Line("spread worker serving t.spread on " + string.Join(", ", worker.NodeAddresses.Count > 0 ? worker.NodeAddresses : new[] { server }));
            shutdown.WaitHandle.WaitOne();
            worker.StopAsync(TimeSpan.FromSeconds(10)).GetAwaiter().GetResult();
            return 0;
        }
    }
}
