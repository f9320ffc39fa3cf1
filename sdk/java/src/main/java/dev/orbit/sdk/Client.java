package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import java.lang.reflect.Type;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Talks to the ORBIT HTTP API (orbit-api/1). Its errors are {@link ApiException} (with the API's
 * code) and {@link ConnectionException}; only GETs are repeated, on connection errors.
 *
 * <pre>{@code
 * Client c = new Client("http://127.0.0.1:7233", System.getenv("ORBIT_TOKEN"));
 * Execution x = c.start("OrderProcessing", null, order, "o-1");
 * x = c.await("o-1", Duration.ofMinutes(1));   // check x.status()
 * }</pre>
 */
public final class Client {
  private final Transport tr;
  private final Duration timeout;
  private final int getRetries;
  private final Backoff backoff;

  public Client(String server) {
    this(server, null);
  }

  public Client(String server, String token) {
    this(server, token, null, Duration.ofSeconds(30), 3, Backoff.DEFAULT);
  }

  /**
   * @param http the HTTP client (null: a connection pool of its own)
   * @param timeout bounds every request but waits
   * @param getRetries how often a GET is repeated on a connection error
   */
  public Client(String server, String token, HttpClient http, Duration timeout, int getRetries,
      Backoff backoff) {
    this.tr = new Transport(server, token, http);
    this.timeout = timeout == null || timeout.isZero() || timeout.isNegative()
        ? Duration.ofSeconds(30) : timeout;
    this.getRetries = Math.max(0, getRetries);
    this.backoff = backoff == null ? Backoff.DEFAULT : backoff;
  }

  /** The runtime's URL. */
  public String server() {
    return tr.server;
  }

  private JsonElement post(String path, Object body) {
    return tr.call(null, "POST", path, null, body, timeout);
  }

  private JsonElement get(String path, Map<String, String> q, Duration t) {
    Backoff.Retrier r = new Backoff.Retrier(backoff);
    for (int attempt = 0; ; attempt++) {
      try {
        return tr.call(null, "GET", path, q, null, t);
      } catch (ConnectionException e) {
        if (attempt >= getRetries) throw e;
        if (!new Cancellation().sleep(r.next())) throw e;
      }
    }
  }

  private static String esc(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
  }

  private static String exec(String id) {
    return "/v1/executions/" + esc(id);
  }

  /** Deploys a workflow definition (a document: a map, a record, a JsonElement). */
  public JsonElement deploy(Object document) {
    return post("/v1/workflows", document);
  }

  /**
   * Starts an execution (version null: the latest deployed; input null: none); with an
   * executionId that exists, answers the existing one.
   */
  public Execution start(String workflow, String version, Object input, String executionId) {
    JsonObject body = new JsonObject();
    body.addProperty("workflow", workflow);
    if (version != null) body.addProperty("version", version);
    if (input != null) body.add("input", Json.toTree(input));
    if (executionId != null) body.addProperty("execution_id", executionId);
    return Json.fromTree(post("/v1/executions", body), Execution.class);
  }

  /** Reads an execution. */
  public Execution get(String executionId) {
    return Json.fromTree(get(exec(executionId), null, timeout), Execution.class);
  }

  /**
   * Waits until the execution is terminal or {@code max} has passed (null: no limit), and answers
   * it as last read: check its status. Long waits are cut into server waits of at most 300 s.
   */
  public Execution await(String executionId, Duration max) {
    Instant deadline = max == null ? null : Instant.now().plus(max);
    while (true) {
      long waitS = 300;
      if (deadline != null) {
        long leftMs = Duration.between(Instant.now(), deadline).toMillis();
        waitS = Math.max(0, Math.min(300, (leftMs + 999) / 1000));
      }
      long began = System.nanoTime();
      Map<String, String> q = Map.of("timeout_s", Long.toString(waitS));
      Execution x = Json.fromTree(
          get(exec(executionId) + "/wait", q, Duration.ofSeconds(waitS).plus(timeout)),
          Execution.class);
      if (x.isTerminal() || (deadline != null && !Instant.now().isBefore(deadline))) return x;
      // The runtime answered early without a final status: do not spin.
      if (System.nanoTime() - began < 1_000_000_000L) new Cancellation().sleep(Duration.ofSeconds(1));
    }
  }

  /**
   * Waits for the execution and decodes its output as {@code type} (null: not decoded); throws
   * {@link ExecutionFailedException} when it did not complete.
   */
  public <T> T result(String executionId, Duration max, Type type) {
    Execution x = await(executionId, max);
    if (!Execution.COMPLETED.equals(x.status())) throw new ExecutionFailedException(x);
    if (type == null) return null;
    try {
      return Json.fromTree(x.output(), type);
    } catch (RuntimeException e) {
      throw new ValidationException(x.workflow() + " output", e);
    }
  }

  /**
   * One page of history: the events after {@code afterSeq} (0: from the start), at most {@code
   * limit} of them (0: the server's default).
   */
  public HistoryPage history(String executionId, long afterSeq, int limit) {
    Map<String, String> q = new LinkedHashMap<>();
    if (afterSeq > 0) q.put("after_seq", Long.toString(afterSeq));
    if (limit > 0) q.put("limit", Integer.toString(limit));
    JsonElement res = get(exec(executionId) + "/history", q, timeout);
    List<HistoryEvent> events = new ArrayList<>();
    Long next = null;
    if (res.isJsonObject()) {
      JsonObject o = res.getAsJsonObject();
      if (o.get("events") != null && o.get("events").isJsonArray()) {
        for (JsonElement e : o.getAsJsonArray("events")) {
          if (e.isJsonObject()) events.add(HistoryEvent.of(e.getAsJsonObject()));
        }
      }
      JsonElement n = o.get("next_after_seq");
      if (n != null && !n.isJsonNull()) next = n.getAsLong();
    }
    return new HistoryPage(events, next);
  }

  /** The whole history, page after page. */
  public List<HistoryEvent> historyEvents(String executionId) {
    List<HistoryEvent> all = new ArrayList<>();
    long after = 0;
    while (true) {
      HistoryPage page = history(executionId, after, 0);
      all.addAll(page.events());
      if (page.nextAfterSeq() == null || page.events().isEmpty() || page.nextAfterSeq() == after) {
        return all;
      }
      after = page.nextAfterSeq();
    }
  }

  /** Why a running execution waits: every open item with its reason. */
  public JsonObject pending(String executionId) {
    JsonElement res = get(exec(executionId) + "/pending", null, timeout);
    return res.isJsonObject() ? res.getAsJsonObject() : new JsonObject();
  }

  /** Sends a signal (payload null: none); answers its seq in the history. */
  public long signal(String executionId, String name, Object payload) {
    JsonObject body = new JsonObject();
    if (payload != null) body.add("payload", Json.toTree(payload));
    JsonElement res = post(exec(executionId) + "/signals/" + esc(name), body);
    JsonElement seq = res.isJsonObject() ? res.getAsJsonObject().get("seq") : null;
    return seq != null && seq.isJsonPrimitive() ? seq.getAsLong() : 0;
  }

  /** Evaluates a declared query on the execution's current state, decoded as {@code type}. */
  public <T> T query(String executionId, String name, Type type) {
    JsonElement res = get(exec(executionId) + "/queries/" + esc(name), null, timeout);
    JsonElement r = res.isJsonObject() ? res.getAsJsonObject().get("result") : null;
    return Json.fromTree(r == null ? JsonNull.INSTANCE : r, type);
  }

  /** Cancels an execution (its compensations run) and answers it. */
  public Execution cancel(String executionId, String reason) {
    JsonObject body = new JsonObject();
    if (reason != null && !reason.isEmpty()) body.addProperty("reason", reason);
    return Json.fromTree(post(exec(executionId) + "/cancel", body), Execution.class);
  }

  /** The registered worker sessions. */
  public JsonElement workers() {
    return get("/v1/workers", null, timeout);
  }

  /** GET /v1/health. */
  public JsonElement health() {
    return get("/v1/health", null, timeout);
  }
}
