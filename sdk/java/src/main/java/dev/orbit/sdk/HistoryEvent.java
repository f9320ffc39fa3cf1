package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;

/**
 * One event of an execution's history: the common members, and {@link #fields()} with every
 * member as the API sent it.
 */
public record HistoryEvent(long seq, String type, long timeMs, String step, int attempt,
    JsonObject fields) {
  static HistoryEvent of(JsonObject o) {
    return new HistoryEvent(num(o, "seq"), text(o, "type"), num(o, "time_ms"), text(o, "step"),
        (int) num(o, "attempt"), o);
  }

  /** One member, or null. */
  public JsonElement get(String name) {
    return fields.get(name);
  }

  private static long num(JsonObject o, String k) {
    JsonElement v = o.get(k);
    return v != null && v.isJsonPrimitive() && v.getAsJsonPrimitive().isNumber() ? v.getAsLong() : 0;
  }

  private static String text(JsonObject o, String k) {
    JsonElement v = o.get(k);
    return v != null && v.isJsonPrimitive() ? v.getAsString() : null;
  }
}
