package dev.orbit.sdk;

import com.google.gson.FieldNamingPolicy;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import java.lang.reflect.Type;

/**
 * The SDK's JSON mapping (Gson): Java's camelCase names are the API's snake_case ones
 * ({@code orderId} ↔ {@code order_id}; {@code @SerializedName} overrides), records are
 * supported, and {@link JsonElement} holds any JSON value as it came.
 */
public final class Json {
  private Json() {}

  /** The Gson the SDK encodes and decodes contracts with. */
  public static final Gson GSON =
      new GsonBuilder()
          .setFieldNamingPolicy(FieldNamingPolicy.LOWER_CASE_WITH_UNDERSCORES)
          .disableHtmlEscaping()
          .create();

  /** Any value (a record, a map, a JsonElement, null) as a JSON tree. */
  public static JsonElement toTree(Object value) {
    if (value == null) return JsonNull.INSTANCE;
    if (value instanceof JsonElement) return (JsonElement) value;
    return GSON.toJsonTree(value);
  }

  /** A JSON tree as {@code type} (null for a missing value). */
  public static <T> T fromTree(JsonElement tree, Type type) {
    return GSON.fromJson(tree == null ? JsonNull.INSTANCE : tree, type);
  }

  public static String stringify(Object value) {
    return GSON.toJson(toTree(value));
  }
}
