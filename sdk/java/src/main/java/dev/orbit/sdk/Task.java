package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import java.lang.reflect.Type;

/**
 * A typed task contract: its name, contract version, and a handler from {@code I} to {@code O},
 * usually records. The input is decoded into {@code I} (and checked with {@link
 * Validated#validate()} when {@code I} implements it) before the handler runs; an output that
 * implements {@link Validated} is checked before it is reported.
 *
 * <pre>{@code
 * record Charge(String orderId, double amount) {}
 * record Charged(String chargeId) {}
 *
 * Task<Charge, Charged> charge = Task.of("payments.charge", "1", Charge.class,
 *     (in, a) -> new Charged("ch-" + a.idempotencyKey()));
 * }</pre>
 */
public final class Task<I, O> {
  private final String name;
  private final String contract;
  private final String language;
  private final Type inputType;
  private final Handler<I, O> handler;

  private Task(String name, String contract, String language, Type inputType, Handler<I, O> h) {
    if (name == null || name.isEmpty() || contract == null || contract.isEmpty()) {
      throw new IllegalArgumentException("every task needs a name and a contract version");
    }
    this.name = name;
    this.contract = contract;
    this.language = language;
    this.inputType = inputType;
    this.handler = h;
  }

  /** A typed task. */
  public static <I, O> Task<I, O> of(
      String name, String contract, Class<I> input, Handler<I, O> handler) {
    return new Task<>(name, contract, null, input, handler);
  }

  /** A typed task whose input is a generic type ({@code new TypeToken<List<Item>>(){}.getType()}). */
  public static <I, O> Task<I, O> ofType(
      String name, String contract, Type input, Handler<I, O> handler) {
    return new Task<>(name, contract, null, input, handler);
  }

  /** The task pinned to workers of one language ({@code java}, {@code go}, {@code any}, …). */
  public Task<I, O> pinned(String lang) {
    return new Task<>(name, contract, lang, inputType, handler);
  }

  public String name() {
    return name;
  }

  public String contract() {
    return contract;
  }

  /** The language the task is pinned to, or null. */
  public String language() {
    return language;
  }

  /** Decodes and checks a value as this task's input. */
  public I parseInput(JsonElement raw) {
    return decode(raw, inputType, name + " input");
  }

  static <T> T decode(JsonElement raw, Type type, String what) {
    T v;
    try {
      v = Json.fromTree(raw == null ? JsonNull.INSTANCE : raw, type);
    } catch (RuntimeException e) {
      throw new ValidationException(what, e);
    }
    if (v == null && raw != null && !raw.isJsonNull()) {
      throw new ValidationException(what, new IllegalArgumentException("no value"));
    }
    check(v, what);
    return v;
  }

  static void check(Object v, String what) {
    if (v instanceof Validated) {
      try {
        ((Validated) v).validate();
      } catch (RuntimeException e) {
        throw new ValidationException(what, e);
      }
    }
  }

  /** Runs one attempt: the output as JSON, or an exception. */
  JsonElement run(Attempt a, JsonElement raw) throws Exception {
    I in;
    try {
      in = parseInput(raw);
    } catch (ValidationException e) {
      throw new TaskException("INVALID_INPUT", e.getMessage(), false);
    }
    O out = handler.handle(in, a);
    try {
      check(out, name + " output");
    } catch (ValidationException e) {
      throw new TaskException("INVALID_OUTPUT", e.getMessage(), false);
    }
    return Json.toTree(out);
  }
}
