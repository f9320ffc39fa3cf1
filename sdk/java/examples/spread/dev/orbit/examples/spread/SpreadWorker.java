package dev.orbit.examples.spread;

import com.google.gson.JsonElement;
import dev.orbit.sdk.Backoff;
import dev.orbit.sdk.Logger;
import dev.orbit.sdk.Task;
import dev.orbit.sdk.Worker;
import java.time.Duration;

/**
 * A small worker for tests/cluster_shared_spread_java_test.ts: it serves {@code t.spread}
 * (contract 1, echoes its input) with four slots, reads a shared cluster's live servers every
 * 200 ms, and writes its log lines and one {@code ran <execution> <step>} line per attempt on
 * standard output.
 *
 * <pre>
 * java -cp orbit-sdk.jar:orbit-examples.jar:gson.jar dev.orbit.examples.spread.SpreadWorker URL
 * </pre>
 */
public final class SpreadWorker {
  private SpreadWorker() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 1) {
      System.err.println("usage: SpreadWorker URL");
      System.exit(2);
    }
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
    Worker w = Worker.builder()
        .server(args[0])
        .workerId("spread-java")
        .tasks(spread)
        .concurrency(4)
        .pollWait(Duration.ofSeconds(5))
        .nodeRefresh(Duration.ofMillis(200))
        .heartbeatInterval(Duration.ofMillis(500))
        .backoff(new Backoff(Duration.ofMillis(50), Duration.ofMillis(500), 2, 0.2))
        .logger(out)
        .build();
    w.run();
  }
}
