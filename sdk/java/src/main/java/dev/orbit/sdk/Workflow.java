package dev.orbit.sdk;

import java.lang.reflect.Type;
import java.time.Duration;

/**
 * A typed reference to a deployed workflow: its input and output types.
 *
 * <pre>{@code
 * Workflow<Order, OrderResult> orders = Workflow.of("OrderProcessing", "1.0.0", OrderResult.class);
 * Execution x = orders.start(client, "order-1", new Order(…));
 * OrderResult res = orders.result(client, x.executionId(), Duration.ofMinutes(1));
 * }</pre>
 */
public record Workflow<I, O>(String name, String version, Type outputType) {
  public static <I, O> Workflow<I, O> of(String name, String version, Class<O> output) {
    return new Workflow<>(name, version, output);
  }

  /** Starts an execution with a typed input (executionId null: generated). */
  public Execution start(Client c, String executionId, I input) {
    return c.start(name, version, input, executionId);
  }

  /** Waits for the execution and decodes its output; {@link ExecutionFailedException} unless completed. */
  public O result(Client c, String executionId, Duration timeout) {
    return c.result(executionId, timeout, outputType);
  }
}
