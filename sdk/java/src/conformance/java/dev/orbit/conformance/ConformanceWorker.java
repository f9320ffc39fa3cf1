package dev.orbit.conformance;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.orbit.sdk.ApiException;
import dev.orbit.sdk.Attempt;
import dev.orbit.sdk.Logger;
import dev.orbit.sdk.Task;
import dev.orbit.sdk.TaskException;
import dev.orbit.sdk.Validated;
import dev.orbit.sdk.Worker;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;

/**
 * The Java SDK's conformance worker: the program the language-neutral conformance suite
 * (tests/conformance/README.md) drives. It serves the suite's four tasks with the Java SDK and
 * prints one JSON line per event on standard output.
 *
 * <pre>
 * java -cp orbit-sdk.jar:gson.jar dev.orbit.conformance.ConformanceWorker --server http://127.0.0.1:7233
 * </pre>
 *
 * Environment: ORBIT_SERVER, ORBIT_TOKEN, CONFORMANCE_WORKER_ID, CONFORMANCE_TASKS (names,
 * comma-separated; default all), CONFORMANCE_CONCURRENCY (default 2), CONFORMANCE_HEARTBEAT_MS
 * (default 500), CONFORMANCE_POLL_WAIT_S (default 10), CONFORMANCE_STOP_GRACE_MS (default 30000).
 * SIGTERM or SIGINT: stop gracefully, print {"event":"stopped"}, exit 0.
 */
public final class ConformanceWorker {
  private ConformanceWorker() {}

  private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

  /** Prints one event line on standard output. */
  static void emit(String event, JsonObject fields) {
    JsonObject o = fields == null ? new JsonObject() : fields;
    o.addProperty("event", event);
    synchronized (OUT) {
      OUT.println(o);
      OUT.flush();
    }
  }

  static JsonObject attemptFields(Attempt a) {
    JsonObject o = new JsonObject();
    o.addProperty("task", a.task());
    o.addProperty("execution_id", a.executionId());
    o.addProperty("step", a.step());
    o.addProperty("attempt", a.attempt());
    o.addProperty("redelivery", a.redelivery());
    o.addProperty("idempotency_key", a.idempotencyKey());
    o.addProperty("token", a.token());
    return o;
  }

  // ---- the contracts

  record EchoIn(JsonElement value) {}

  record EchoOut(JsonElement value, int attempt, boolean redelivery, String idempotencyKey,
      String runtime) {}

  record FailIn(String code, String message, boolean retryable, int succeedOnAttempt)
      implements Validated {
    @Override
    public void validate() {
      if (code == null || code.isEmpty()) throw new IllegalArgumentException("code is required");
    }
  }

  record AttemptOut(int attempt) {}

  record SleepIn(long ms) {}

  record SleepOut(long sleptMs) {}

  record HoldOut(boolean redelivered) {}

  static List<Task<?, ?>> tasks() {
    return List.of(
        Task.of("conformance.echo", "1", EchoIn.class, (in, a) -> {
          emit("executing", attemptFields(a));
          return new EchoOut(in.value(), a.attempt(), a.redelivery(), a.idempotencyKey(), "java");
        }),
        Task.of("conformance.fail", "1", FailIn.class, (in, a) -> {
          emit("executing", attemptFields(a));
          if (in.succeedOnAttempt() > 0 && a.attempt() >= in.succeedOnAttempt()) {
            return new AttemptOut(a.attempt());
          }
          throw new TaskException(in.code(), in.message(), in.retryable(),
              Map.of("attempt", a.attempt()));
        }),
        Task.of("conformance.sleep", "1", SleepIn.class, (in, a) -> {
          emit("executing", attemptFields(a));
          try {
            a.sleep(Duration.ofMillis(in.ms()));
          } catch (InterruptedException e) {
            // the SDK reports it as CANCELLED, DEADLINE_EXCEEDED or WORKER_STOPPED
            emit("cancelled", attemptFields(a));
            throw e;
          }
          return new SleepOut(in.ms());
        }),
        Task.of("conformance.hold", "1", JsonObject.class, (in, a) -> {
          emit("executing", attemptFields(a));
          if (a.redelivery()) return new HoldOut(true);
          try {
            a.awaitCancellation();
          } catch (InterruptedException e) {
            emit("cancelled", attemptFields(a));
            throw e;
          }
          return new HoldOut(false);
        }));
  }

  static int envInt(String name, int def) {
    try {
      int v = Integer.parseInt(System.getenv().getOrDefault(name, ""));
      return v > 0 ? v : def;
    } catch (NumberFormatException e) {
      return def;
    }
  }

  public static void main(String[] args) throws InterruptedException {
    String server = System.getenv("ORBIT_SERVER");
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--server") && i + 1 < args.length) server = args[++i];
      else if (args[i].startsWith("--server=")) server = args[i].substring(9);
    }
    if (server == null || server.isEmpty()) server = "http://127.0.0.1:7233";
    String workerId = System.getenv().getOrDefault("CONFORMANCE_WORKER_ID", "");
    if (workerId.isEmpty()) workerId = "conformance-java";
    Set<String> want = new HashSet<>();
    for (String n : System.getenv().getOrDefault("CONFORMANCE_TASKS", "").split(",")) {
      if (!n.strip().isEmpty()) want.add(n.strip());
    }
    List<Task<?, ?>> served = new ArrayList<>();
    for (Task<?, ?> t : tasks()) if (want.isEmpty() || want.contains(t.name())) served.add(t);
    Duration grace = Duration.ofMillis(envInt("CONFORMANCE_STOP_GRACE_MS", 30000));
    Worker w;
    try {
      w = Worker.builder()
          .server(server)
          .token(System.getenv("ORBIT_TOKEN"))
          .workerId(workerId)
          .tasks(served)
          .concurrency(envInt("CONFORMANCE_CONCURRENCY", 2))
          .heartbeatInterval(Duration.ofMillis(envInt("CONFORMANCE_HEARTBEAT_MS", 500)))
          .pollWait(Duration.ofSeconds(envInt("CONFORMANCE_POLL_WAIT_S", 10)))
          .shutdownGrace(grace)
          .logger(Logger.stderr())
          .build();
    } catch (IllegalArgumentException e) {
      System.err.println("error: " + e.getMessage());
      System.exit(2);
      return;
    }
    // SIGTERM or SIGINT run the shutdown hooks: stop gracefully, then exit 0 (halt keeps the
    // status the hook chose instead of the signal's 143).
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      w.stop(grace);
      emit("stopped", null);
      System.err.flush();
      Runtime.getRuntime().halt(0);
    }, "conformance-stop"));
    try {
      w.start();
    } catch (ApiException e) {
      System.err.println("error: " + e.getMessage());
      Runtime.getRuntime().halt(1);
    }
    if (w.state() == Worker.State.RUNNING) {
      JsonObject ready = new JsonObject();
      ready.addProperty("sdk", "java");
      ready.addProperty("worker_id", workerId);
      ready.addProperty("runtime", "java");
      ready.addProperty("tasks", served.size());
      emit("ready", ready);
    }
    new CountDownLatch(1).await(); // until a signal's shutdown hook ends the process
  }
}
