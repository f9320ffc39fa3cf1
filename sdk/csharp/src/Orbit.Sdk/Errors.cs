using System;
using Newtonsoft.Json.Linq;

namespace Orbit
{
    /// <summary>Error codes of the ORBIT API (<c>{"error":{"code",…}}</c>) that callers commonly check.</summary>
    public static class ErrorCodes
    {
        public const string UnknownSession = "UNKNOWN_SESSION";
        public const string NotLeader = "NOT_LEADER";
        public const string UnknownExecution = "UNKNOWN_EXECUTION";
        public const string UnknownWorkflow = "UNKNOWN_WORKFLOW";
        public const string UnknownSignal = "UNKNOWN_SIGNAL";
        public const string ExecutionFinished = "EXECUTION_FINISHED";
        public const string SignalPayloadInvalid = "SIGNAL_PAYLOAD_INVALID";
        public const string StorageError = "STORAGE_ERROR";
        public const string InvalidResponse = "INVALID_RESPONSE";
    }

    /// <summary>The base of every error the SDK throws.</summary>
    public class OrbitException : Exception
    {
        public OrbitException(string message, Exception inner = null) : base(message, inner) { }

        /// <summary>
        /// Whether repeating the request may help: a connection error or any 5xx answer
        /// (503 NOT_LEADER included). What the worker retries with backoff.
        /// </summary>
        public static bool IsRetryable(Exception e)
        {
            if (e is OrbitConnectionException) return true;
            var api = e as OrbitApiException;
            return api != null && api.Retryable;
        }

        /// <summary>Whether e is a 404 UNKNOWN_SESSION answer.</summary>
        public static bool IsUnknownSession(Exception e)
        {
            var api = e as OrbitApiException;
            return api != null && api.Status == 404 && api.Code == ErrorCodes.UnknownSession;
        }

        /// <summary>Whether e is an API answer with the given code.</summary>
        public static bool HasCode(Exception e, string code)
        {
            var api = e as OrbitApiException;
            return api != null && api.Code == code;
        }
    }

    /// <summary>
    /// A non-2xx answer of the ORBIT runtime. <see cref="Code"/> and the message come from the
    /// body's error object; <see cref="Details"/> holds its other members (for example
    /// <c>leader_addr</c> of a 503 NOT_LEADER).
    /// </summary>
    public class OrbitApiException : OrbitException
    {
        public int Status { get; private set; }
        public string Code { get; private set; }
        public string ApiMessage { get; private set; }
        public JObject Details { get; private set; }
        /// <summary>The raw answer.</summary>
        public string Body { get; private set; }
        public string Method { get; private set; }
        public string Path { get; private set; }

        public OrbitApiException(int status, string code, string message, JObject details, string body, string method, string path)
            : base(string.Format("ORBIT {0} {1} answered {2} {3}: {4}", method, path, status, code, message))
        {
            Status = status;
            Code = code;
            ApiMessage = message;
            Details = details ?? new JObject();
            Body = body;
            Method = method;
            Path = path;
        }

        /// <summary>Every 5xx, 503 NOT_LEADER included.</summary>
        public bool Retryable { get { return Status >= 500; } }

        /// <summary>The leader's address named by a 503 NOT_LEADER answer, or null.</summary>
        public string LeaderAddr
        {
            get
            {
                var v = Details["leader_addr"];
                return v != null && v.Type == JTokenType.String ? (string)v : null;
            }
        }
    }

    /// <summary>
    /// The runtime could not be reached: the connection was refused or dropped, the answer could
    /// not be read, or the request timed out.
    /// </summary>
    public class OrbitConnectionException : OrbitException
    {
        public string Server { get; private set; }
        public string Reason { get; private set; }

        public OrbitConnectionException(string server, string reason, Exception inner = null)
            : base(string.Format("cannot reach ORBIT runtime at {0}: {1}", server, reason), inner)
        {
            Server = server;
            Reason = reason;
        }
    }

    /// <summary>
    /// Thrown by a task handler to fail the attempt with a chosen code:
    /// <c>throw TaskError.Fail("CARD_DECLINED", "declined")</c> (not retried) or
    /// <c>TaskError.Retry("UPSTREAM_DOWN", "…")</c>. Any other exception fails the attempt as
    /// TASK_ERROR, retryable.
    /// </summary>
    public class TaskError : Exception
    {
        public string Code { get; private set; }
        public bool Retryable { get; private set; }
        /// <summary>Structured data reported with the failure (serialized as JSON).</summary>
        public object Details { get; set; }

        public TaskError(string code, string message, bool retryable = true, object details = null) : base(message)
        {
            Code = code;
            Retryable = retryable;
            Details = details;
        }

        /// <summary>A TaskError the runtime does not retry.</summary>
        public static TaskError Fail(string code, string message, object details = null)
        {
            return new TaskError(code, message, false, details);
        }

        /// <summary>A TaskError the runtime may retry (subject to the step's retry policy).</summary>
        public static TaskError Retry(string code, string message, object details = null)
        {
            return new TaskError(code, message, true, details);
        }
    }

    /// <summary>
    /// What <see cref="Client.ResultAsync{T}"/> throws when the execution did not complete (it
    /// failed, was cancelled or timed out, or was still running when the wait ran out).
    /// </summary>
    public class ExecutionFailedException : OrbitException
    {
        public Execution Execution { get; private set; }

        public ExecutionFailedException(Execution x) : base(Describe(x)) { Execution = x; }

        static string Describe(Execution x)
        {
            if (x.Status == ExecutionStatus.Running) return string.Format("execution {0} is still running", x.ExecutionId);
            if (x.Error != null && !string.IsNullOrEmpty(x.Error.Message))
                return string.Format("execution {0} ended {1}: {2} {3}", x.ExecutionId, x.Status, x.Error.Code, x.Error.Message);
            return string.Format("execution {0} ended {1}", x.ExecutionId, x.Status);
        }
    }

    /// <summary>
    /// A value does not fit a task contract: it could not be decoded into the contract's type,
    /// or its <see cref="IValidatable.Validate"/> refused it.
    /// </summary>
    public class ContractValidationException : OrbitException
    {
        public string What { get; private set; }

        public ContractValidationException(string what, Exception inner)
            : base("invalid " + what + ": " + inner.Message, inner)
        {
            What = what;
        }
    }
}
