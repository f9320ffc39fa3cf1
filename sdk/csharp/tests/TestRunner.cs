// The C# SDK's own tests, without NUnit: every public static method named Test* of a class
// in the Orbit.Tests namespace that returns a Task is one test, run one after the other with
// a time limit. `mono Orbit.Sdk.Tests.exe [name-substring …]`; exit code 0 when all pass.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Reflection;
using System.Threading.Tasks;

namespace Orbit.Tests
{
    public sealed class AssertionFailed : Exception
    {
        public AssertionFailed(string message) : base(message) { }
    }

    public static class Check
    {
        public static void True(bool condition, string message)
        {
            if (!condition) throw new AssertionFailed(message);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            if (!EqualityComparer<T>.Default.Equals(expected, actual))
                throw new AssertionFailed(string.Format("{0}: expected {1}, got {2}", what, expected, actual));
        }

        public static TException Throws<TException>(Func<Task> action, string what) where TException : Exception
        {
            try
            {
                action().GetAwaiter().GetResult();
            }
            catch (TException e)
            {
                return e;
            }
            catch (Exception e)
            {
                throw new AssertionFailed(string.Format("{0}: expected {1}, got {2}: {3}", what, typeof(TException).Name, e.GetType().Name, e.Message));
            }
            throw new AssertionFailed(string.Format("{0}: expected {1}, nothing was thrown", what, typeof(TException).Name));
        }
    }

    public static class TestRunner
    {
        static readonly TimeSpan Limit = TimeSpan.FromSeconds(20);

        public static int Main(string[] args)
        {
            Environment.Exit(Run(args));
            return 0;
        }

        static int Run(string[] args)
        {
            var tests = typeof(TestRunner).Assembly.GetTypes()
                .Where(t => t.Namespace == "Orbit.Tests")
                .OrderBy(t => t.Name, StringComparer.Ordinal)
                .SelectMany(t => t.GetMethods(BindingFlags.Public | BindingFlags.Static))
                .Where(m => m.Name.StartsWith("Test") && m.ReturnType == typeof(Task) && m.GetParameters().Length == 0)
                .Where(m => args.Length == 0 || args.Any(a => (m.DeclaringType.Name + "." + m.Name).Contains(a)))
                .ToList();
            int passed = 0, failed = 0;
            var all = Stopwatch.StartNew();
            foreach (var m in tests)
            {
                var name = m.DeclaringType.Name + "." + m.Name;
                var sw = Stopwatch.StartNew();
                string error = null;
                try
                {
                    var task = (Task)m.Invoke(null, null);
                    if (!task.Wait(Limit)) error = "timed out after " + Limit.TotalSeconds + " s";
                }
                catch (Exception e)
                {
                    var inner = e;
                    while ((inner is TargetInvocationException || inner is AggregateException) && inner.InnerException != null) inner = inner.InnerException;
                    error = inner is AssertionFailed ? inner.Message : inner.ToString();
                }
                if (error == null)
                {
                    passed++;
                    Console.WriteLine("ok   {0} ({1} ms)", name, sw.ElapsedMilliseconds);
                }
                else
                {
                    failed++;
                    Console.WriteLine("FAIL {0} ({1} ms): {2}", name, sw.ElapsedMilliseconds, error);
                }
            }
            Console.WriteLine("{0} passed, {1} failed ({2} ms)", passed, failed, all.ElapsedMilliseconds);
            return failed == 0 && passed > 0 ? 0 : 1;
        }
    }
}
