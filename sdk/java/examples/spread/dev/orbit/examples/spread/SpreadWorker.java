package dev.orbit.examples.spread;

import com.google.gson.JsonElement;
import dev.orbit.sdk.Backoff;
import dev.orbit.sdk.Logger;
import dev.orbit.sdk.Task;
import dev.orbit.sdk.Worker;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;

/**
 * A small worker for tests/cluster_shared_spread_java_test.ts: it serves {@code t.spread}
 * (contract 1, echoes its input) and {@code t.slow} (contract 1, echoes its input once a line
 * {@code finish} is read on standard input), reads a shared cluster's live servers every 200 ms,
 * and writes its log lines (debug ones too) and one {@code ran <execution> <step>} line per
 * attempt on standard output.
 *
 * <pre>
 * java -cp orbit-sdk.jar:orbit-examples.jar:gson.jar dev.orbit.examples.spread.SpreadWorker \
 *     URL [CONCURRENCY (4)] [REQUEST_TIMEOUT_S (30)]
 * </pre>
 */
public final class SpreadWorker {
  private SpreadWorker() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length < 1 || args.length > 3) {
      System.err.println("usage: SpreadWorker URL [CONCURRENCY] [REQUEST_TIMEOUT_S]");
      System.exit(2);
    }
    int concurrency = args.length > 1 ? Integer.parseInt(args[1]) : 4;
    long requestTimeoutS = args.length > 2 ? Long.parseLong(args[2]) : 30;
    CountDownLatch finish = new CountDownLatch(1);
    Thread stdin = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(
          new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
        for (String line; (line = r.readLine()) != null; ) {
          if (line.strip().equals("finish")) finish.countDown();
        }
      } catch (IOException ignored) {
        // no more input
      }
    }, "spread-stdin");
    stdin.setDaemon(true);
    stdin.start();
    Logger out = (level, message) -> {
      synchronized (System.out) {
        System.out.println(level + " " + message);
        System.out.flush();
      }
    };
    Task<JsonElement, JsonElement> spread = Task.of("t.spread", "1", JsonElement.class, (in, a) -> {
      synchronized (System.out) {
        System.out.println("ran " + a.executionId() + " " + a.step());
        System.out.flush();
      }
      return in;
    });
    Task<JsonElement, JsonElement> slow = Task.of("t.slow", "1", JsonElement.class, (in, a) -> {
      synchronized (System.out) {
        System.out.println("ran " + a.executionId() + " " + a.step());
        System.out.flush();
      }
      finish.await();
      return in;
    });
    Worker w = Worker.builder()
        .server(args[0])
        .workerId("spread-java")
        .tasks(spread, slow)
        .concurrency(concurrency)
        .requestTimeout(Duration.ofSeconds(requestTimeoutS))
        .pollWait(Duration.ofSeconds(5))
        .nodeRefresh(Duration.ofMillis(200))
        .heartbeatInterval(Duration.ofMillis(500))
        .backoff(new Backoff(Duration.ofMillis(50), Duration.ofMillis(500), 2, 0.2))
        .logger(out)
        .debug(true) // which server each slot talks to, for a failing test's output
        .build();
    w.run();
  }
}
