package dev.orbit.sdk;

/**
 * Thrown by a task handler to fail the attempt with a chosen code:
 *
 * <pre>{@code
 * throw TaskException.fail("CARD_DECLINED", "the card was declined");   // not retried
 * throw TaskException.retry("UPSTREAM_DOWN", "the provider is down");   // the retry policy decides
 * throw new TaskException("OUT_OF_STOCK", "…", false, Map.of("sku", sku));
 * }</pre>
 *
 * Any other exception fails the attempt as TASK_ERROR, retryable.
 */
public class TaskException extends OrbitException {
  private static final long serialVersionUID = 1L;

  private final String code;
  private final boolean retryable;
  private final transient Object details;

  public TaskException(String code, String message, boolean retryable, Object details) {
    super(message);
    this.code = code;
    this.retryable = retryable;
    this.details = details;
  }

  public TaskException(String code, String message, boolean retryable) {
    this(code, message, retryable, null);
  }

  /** A failure the runtime does not retry. */
  public static TaskException fail(String code, String message) {
    return new TaskException(code, message, false);
  }

  /** A failure the runtime may retry (subject to the step's retry policy). */
  public static TaskException retry(String code, String message) {
    return new TaskException(code, message, true);
  }

  public String code() {
    return code;
  }

  public boolean retryable() {
    return retryable;
  }

  /** Structured data reported with the failure (any JSON-able value), or null. */
  public Object details() {
    return details;
  }

  @Override
  public String toString() {
    return code + ": " + getMessage();
  }
}
