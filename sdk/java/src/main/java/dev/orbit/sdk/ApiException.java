package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A non-2xx answer of the ORBIT runtime. {@link #code()} and the message come from the body's
 * {@code {"error": {"code", "message", …}}}; {@link #details()} holds its other members (for
 * example {@code leader_addr} of a 503 NOT_LEADER).
 *
 * <pre>{@code
 * try { client.get("o-1"); }
 * catch (ApiException e) { if (e.hasCode(ApiException.UNKNOWN_EXECUTION)) … }
 * }</pre>
 */
public class ApiException extends OrbitException {
  private static final long serialVersionUID = 1L;

  public static final String UNKNOWN_SESSION = "UNKNOWN_SESSION";
  public static final String NOT_LEADER = "NOT_LEADER";
  public static final String UNKNOWN_EXECUTION = "UNKNOWN_EXECUTION";
  public static final String UNKNOWN_WORKFLOW = "UNKNOWN_WORKFLOW";
  public static final String UNKNOWN_SIGNAL = "UNKNOWN_SIGNAL";
  public static final String EXECUTION_FINISHED = "EXECUTION_FINISHED";
  public static final String SIGNAL_PAYLOAD_INVALID = "SIGNAL_PAYLOAD_INVALID";
  public static final String STORAGE_ERROR = "STORAGE_ERROR";
  public static final String INVALID_RESPONSE = "INVALID_RESPONSE";

  private final int status;
  private final String code;
  private final String apiMessage;
  private final transient Map<String, JsonElement> details;
  private final String body;
  private final String method;
  private final String path;

  public ApiException(
      int status,
      String code,
      String message,
      Map<String, JsonElement> details,
      String body,
      String method,
      String path) {
    super("ORBIT " + method + " " + path + " answered " + status + " " + code + ": " + message);
    this.status = status;
    this.code = code;
    this.apiMessage = message;
    this.details = details == null ? Map.of() : Collections.unmodifiableMap(details);
    this.body = body == null ? "" : body;
    this.method = method;
    this.path = path;
  }

  /** The HTTP status. */
  public int status() {
    return status;
  }

  /** The API's error code ({@code UNKNOWN_EXECUTION}, {@code NOT_LEADER}, …; HTTP_nnn without one). */
  public String code() {
    return code;
  }

  /** The API's message. */
  public String apiMessage() {
    return apiMessage;
  }

  /** The error object's other members. */
  public Map<String, JsonElement> details() {
    return details;
  }

  /** The raw answer. */
  public String body() {
    return body;
  }

  public String method() {
    return method;
  }

  public String path() {
    return path;
  }

  public boolean hasCode(String c) {
    return code.equals(c);
  }

  /** Whether repeating the request may help: every 5xx, 503 NOT_LEADER included. */
  public boolean isRetryable() {
    return status >= 500;
  }

  /** The leader's address named by a 503 NOT_LEADER answer, or null. */
  public String leaderAddr() {
    JsonElement v = details.get("leader_addr");
    return v != null && v.isJsonPrimitive() ? v.getAsString() : null;
  }

  /** Whether this is a 404 UNKNOWN_SESSION answer. */
  public boolean isUnknownSession() {
    return status == 404 && UNKNOWN_SESSION.equals(code);
  }

  static ApiException fromResponse(int status, byte[] data, String method, String path) {
    String text = new String(data, StandardCharsets.UTF_8);
    String code = null;
    String message = null;
    Map<String, JsonElement> details = new LinkedHashMap<>();
    try {
      JsonElement parsed = JsonParser.parseString(text);
      if (parsed.isJsonObject() && parsed.getAsJsonObject().get("error") instanceof JsonObject) {
        for (Map.Entry<String, JsonElement> e :
            parsed.getAsJsonObject().getAsJsonObject("error").entrySet()) {
          JsonElement v = e.getValue();
          if (e.getKey().equals("code") && v.isJsonPrimitive()) code = v.getAsString();
          else if (e.getKey().equals("message") && v.isJsonPrimitive()) message = v.getAsString();
          else details.put(e.getKey(), v);
        }
      }
    } catch (RuntimeException notJson) {
      // the body is not JSON: the code is HTTP_nnn and the message the text
    }
    if (code == null || code.isEmpty()) code = "HTTP_" + status;
    if (message == null || message.isEmpty()) {
      message = text.strip();
      if (message.length() > 200) message = message.substring(0, 200);
      if (message.isEmpty()) message = "HTTP " + status;
    }
    return new ApiException(status, code, message, details, text, method, path);
  }

  /** Whether {@code t} is a connection error or a 5xx answer: what the worker retries. */
  public static boolean isRetryable(Throwable t) {
    return t instanceof ConnectionException
        || (t instanceof ApiException && ((ApiException) t).isRetryable());
  }

  /** Whether {@code t} is a 404 UNKNOWN_SESSION answer. */
  public static boolean isUnknownSession(Throwable t) {
    return t instanceof ApiException && ((ApiException) t).isUnknownSession();
  }
}
