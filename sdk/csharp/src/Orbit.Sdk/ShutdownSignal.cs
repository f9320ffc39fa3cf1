using System;
using System.Reflection;
using System.Threading;

namespace Orbit
{
    /// <summary>
    /// SIGTERM and SIGINT (Ctrl+C) as a <see cref="CancellationToken"/>, for a worker's
    /// <see cref="Worker.RunAsync"/>. Under Mono it listens with Mono.Posix's UnixSignal (loaded
    /// when present, so the SDK itself needs no reference to it); elsewhere with
    /// <see cref="Console.CancelKeyPress"/> and <see cref="AppDomain.ProcessExit"/> (which .NET
    /// raises on SIGTERM).
    /// </summary>
    public static class ShutdownSignal
    {
        static readonly object Gate = new object();
        static CancellationTokenSource cts;

        /// <summary>The name of the signal received ("SIGTERM", "SIGINT"), or null.</summary>
        public static string Received { get; private set; }

        /// <summary>Cancelled on the first SIGTERM or SIGINT.</summary>
        public static CancellationToken Token
        {
            get
            {
                lock (Gate)
                {
                    if (cts == null)
                    {
                        cts = new CancellationTokenSource();
                        Listen();
                    }
                    return cts.Token;
                }
            }
        }

        static void Fire(string name)
        {
            if (Received == null) Received = name;
            try { cts.Cancel(); } catch (Exception) { /* a handler threw; the token is cancelled */ }
        }

        static void Listen()
        {
            if (Type.GetType("Mono.Runtime") != null && ListenMono()) return;
            Console.CancelKeyPress += (sender, e) =>
            {
                e.Cancel = true;
                Fire("SIGINT");
            };
            AppDomain.CurrentDomain.ProcessExit += (sender, e) => Fire("SIGTERM");
        }

        static bool ListenMono()
        {
            try
            {
                var asm = Assembly.Load("Mono.Posix, Version=4.0.0.0, Culture=neutral, PublicKeyToken=0738eb9f132ed756");
                var signum = asm.GetType("Mono.Unix.Native.Signum", true);
                var unixSignal = asm.GetType("Mono.Unix.UnixSignal", true);
                var names = new[] { "SIGTERM", "SIGINT" };
                var signals = Array.CreateInstance(unixSignal, names.Length);
                for (var i = 0; i < names.Length; i++)
                    signals.SetValue(Activator.CreateInstance(unixSignal, Enum.Parse(signum, names[i])), i);
                var waitAny = unixSignal.GetMethod("WaitAny", new[] { signals.GetType(), typeof(int) });
                if (waitAny == null) return false;
                var thread = new Thread(() =>
                {
                    // The first signal starts the stop; later ones are caught and ignored.
                    while (true)
                    {
                        var i = (int)waitAny.Invoke(null, new object[] { signals, -1 });
                        if (i >= 0 && i < names.Length)
                        {
                            Fire(names[i]);
                            return;
                        }
                    }
                }) { IsBackground = true, Name = "orbit-signals" };
                thread.Start();
                return true;
            }
            catch (Exception)
            {
                return false;
            }
        }
    }
}
