package dev.orbit.sdk;

import com.google.gson.JsonElement;
import java.lang.reflect.Type;

/** One run of a workflow definition, as the API reads it. */
public record Execution(
    String executionId, String runId, String rootId, String workflow, String version,
    String status, JsonElement input, JsonElement output, ErrorInfo error, long createdMs,
    Long closedMs) {
  public static final String RUNNING = "running";
  public static final String COMPLETED = "completed";
  public static final String FAILED = "failed";
  public static final String CANCELLED = "cancelled";
  public static final String TIMED_OUT = "timed_out";
  public static final String CONTINUED = "continued";

  /** Whether a status is final. */
  public static boolean isTerminal(String status) {
    return COMPLETED.equals(status) || FAILED.equals(status) || CANCELLED.equals(status)
        || TIMED_OUT.equals(status) || CONTINUED.equals(status);
  }

  public boolean isTerminal() {
    return isTerminal(status);
  }

  /** The output decoded as {@code type}. */
  public <T> T outputAs(Type type) {
    return Json.fromTree(output, type);
  }

  /** An execution's or a step's error. */
  public record ErrorInfo(String code, String message, Boolean retryable, JsonElement details) {}
}
