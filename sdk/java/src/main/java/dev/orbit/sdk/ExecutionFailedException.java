package dev.orbit.sdk;

/**
 * What {@link Client#result} throws when the execution did not complete: it failed, was
 * cancelled or timed out, or was still running when the wait ran out.
 */
public class ExecutionFailedException extends OrbitException {
  private static final long serialVersionUID = 1L;

  private final transient Execution execution;

  public ExecutionFailedException(Execution execution) {
    super(describe(execution));
    this.execution = execution;
  }

  public Execution execution() {
    return execution;
  }

  private static String describe(Execution x) {
    if (Execution.RUNNING.equals(x.status())) {
      return "execution " + x.executionId() + " is still running";
    }
    if (x.error() != null && x.error().message() != null && !x.error().message().isEmpty()) {
      return "execution " + x.executionId() + " ended " + x.status() + ": " + x.error().code()
          + " " + x.error().message();
    }
    return "execution " + x.executionId() + " ended " + x.status();
  }
}
