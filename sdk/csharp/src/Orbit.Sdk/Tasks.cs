using System;
using System.Threading;
using System.Threading.Tasks;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace Orbit
{
    /// <summary>What a handler learns about the attempt it runs.</summary>
    public sealed class Attempt
    {
        /// <summary>The attempt's task token (<c>&lt;execution id&gt;/&lt;uuid&gt;</c>).</summary>
        public string Token { get; internal set; }
        public string ExecutionId { get; internal set; }
        /// <summary>The step id in the workflow definition.</summary>
        public string Step { get; internal set; }
        /// <summary>The attempt number, from 1.</summary>
        public int Number { get; internal set; }
        public string Task { get; internal set; }
        public string Contract { get; internal set; }
        /// <summary>
        /// The same for every attempt and redelivery of one step execution: deduplicate side
        /// effects on it.
        /// </summary>
        public string IdempotencyKey { get; internal set; }
        /// <summary>True when the attempt was handed out again after its worker went silent.</summary>
        public bool Redelivery { get; internal set; }
        /// <summary>When the runtime stops waiting for this attempt (null: it did not say); the handler's token is cancelled then too.</summary>
        public DateTimeOffset? Deadline { get; internal set; }
        /// <summary>The worker's log.</summary>
        public Action<string> Log { get; internal set; }
    }

    /// <summary>
    /// Implemented by contract types that check themselves after decoding (input) or before
    /// reporting (output): throw to refuse. A refused input fails the attempt as INVALID_INPUT,
    /// a refused output as INVALID_OUTPUT; neither is retried.
    /// </summary>
    public interface IValidatable
    {
        void Validate();
    }

    /// <summary>A task a <see cref="Worker"/> serves; <see cref="TaskDefinition{TIn,TOut}"/> is the implementation.</summary>
    public interface ITaskDefinition
    {
        string Name { get; }
        string Contract { get; }
        /// <summary>Pins the task to workers of one language (null for none).</summary>
        string Language { get; }
        Task<JToken> RunAsync(JToken input, Attempt attempt, CancellationToken cancellationToken);
    }

    /// <summary>
    /// A typed task contract: its name, contract version and an async handler from
    /// <typeparamref name="TIn"/> to <typeparamref name="TOut"/>, usually classes with
    /// Newtonsoft <c>[JsonProperty]</c> attributes. The input is decoded into TIn (and checked
    /// with <see cref="IValidatable.Validate"/>, if it implements it) before the handler runs.
    /// <code>
    /// var charge = TaskDefinition.Create&lt;ChargeIn, ChargeOut&gt;("payments.charge", "1",
    ///     async (input, attempt, ct) =&gt; new ChargeOut { ChargeId = "ch-" + attempt.IdempotencyKey });
    /// </code>
    /// </summary>
    public sealed class TaskDefinition<TIn, TOut> : ITaskDefinition
    {
        public string Name { get; private set; }
        public string Contract { get; private set; }
        public string Language { get; private set; }
        public Func<TIn, Attempt, CancellationToken, Task<TOut>> Handler { get; private set; }

        public TaskDefinition(string name, string contract, Func<TIn, Attempt, CancellationToken, Task<TOut>> handler, string language = null)
        {
            if (handler == null) throw new ArgumentNullException("handler");
            Name = name;
            Contract = contract;
            Handler = handler;
            Language = language;
        }

        /// <summary>This task pinned to workers of one language (<c>csharp</c>, <c>go</c>, <c>any</c>, …).</summary>
        public TaskDefinition<TIn, TOut> Pinned(string language)
        {
            return new TaskDefinition<TIn, TOut>(Name, Contract, Handler, language);
        }

        /// <summary>Decodes and checks a value as this task's input.</summary>
        public TIn ParseInput(JToken raw) { return Contracts.Decode<TIn>(raw, Name + " input"); }

        /// <summary>Decodes and checks a value as this task's output.</summary>
        public TOut ParseOutput(JToken raw) { return Contracts.Decode<TOut>(raw, Name + " output"); }

        public async Task<JToken> RunAsync(JToken raw, Attempt attempt, CancellationToken ct)
        {
            TIn input;
            try
            {
                input = ParseInput(raw);
            }
            catch (ContractValidationException e)
            {
                throw new TaskError("INVALID_INPUT", e.Message, false);
            }
            var output = await Handler(input, attempt, ct).ConfigureAwait(false);
            try
            {
                Contracts.Validate(output);
            }
            catch (Exception e)
            {
                throw new TaskError("INVALID_OUTPUT", new ContractValidationException(Name + " output", e).Message, false);
            }
            JToken json;
            try
            {
                json = output == null ? JValue.CreateNull() : JToken.FromObject(output, Contracts.Serializer);
            }
            catch (Exception e)
            {
                throw new TaskError("RESULT_NOT_JSON", "the output is not JSON: " + e.Message, false);
            }
            return json;
        }
    }

    /// <summary>Factories of typed tasks.</summary>
    public static class TaskDefinition
    {
        /// <summary>A typed task with an async handler.</summary>
        public static TaskDefinition<TIn, TOut> Create<TIn, TOut>(string name, string contract, Func<TIn, Attempt, CancellationToken, Task<TOut>> handler)
        {
            return new TaskDefinition<TIn, TOut>(name, contract, handler);
        }

        /// <summary>A typed task with a synchronous handler.</summary>
        public static TaskDefinition<TIn, TOut> Create<TIn, TOut>(string name, string contract, Func<TIn, Attempt, TOut> handler)
        {
            return new TaskDefinition<TIn, TOut>(name, contract, (input, attempt, ct) => System.Threading.Tasks.Task.FromResult(handler(input, attempt)));
        }
    }

    /// <summary>Decoding and checking values against contract types.</summary>
    public static class Contracts
    {
        /// <summary>The serializer of contract values (Newtonsoft defaults; members named by <c>[JsonProperty]</c>).</summary>
        public static readonly JsonSerializer Serializer = JsonSerializer.CreateDefault();

        /// <summary>Decodes raw into T and runs T's Validate, if it has one.</summary>
        public static T Decode<T>(JToken raw, string what)
        {
            T value;
            try
            {
                value = raw == null ? default(T) : raw.ToObject<T>(Serializer);
            }
            catch (Exception e)
            {
                throw new ContractValidationException(what, e);
            }
            try
            {
                Validate(value);
            }
            catch (Exception e)
            {
                throw new ContractValidationException(what, e);
            }
            return value;
        }

        /// <summary>Runs <see cref="IValidatable.Validate"/> when the value implements it.</summary>
        public static void Validate(object value)
        {
            var v = value as IValidatable;
            if (v != null) v.Validate();
        }
    }
}
