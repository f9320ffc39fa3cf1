package dev.orbit.sdk;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Exponential backoff with jitter: by default 200 ms, 400 ms, 800 ms … up to 5 s, each plus up
 * to 20 %.
 *
 * @param initial the first delay (default 200 ms)
 * @param max the largest delay (default 5 s)
 * @param factor growth (default 2)
 * @param jitter random extra share of each delay, 0–1 (default 0.2)
 */
public record Backoff(Duration initial, Duration max, double factor, double jitter) {
  public static final Backoff DEFAULT =
      new Backoff(Duration.ofMillis(200), Duration.ofSeconds(5), 2, 0.2);

  public Backoff {
    if (initial == null || initial.isNegative() || initial.isZero()) initial = Duration.ofMillis(200);
    if (max == null || max.isNegative() || max.isZero()) max = Duration.ofSeconds(5);
    if (factor < 1) factor = 2;
    if (jitter <= 0 || jitter > 1) jitter = 0.2;
  }

  /** The wait before retry number {@code attempt} (from 0). */
  public Duration delay(int attempt) {
    double maxMs = max.toNanos() / 1e6;
    double base = Math.min(initial.toNanos() / 1e6 * Math.pow(factor, attempt), maxMs);
    double d = Math.min(base * (1 + ThreadLocalRandom.current().nextDouble() * jitter), maxMs);
    return Duration.ofNanos((long) (d * 1e6));
  }

  /** Counts the consecutive failures of one loop. */
  static final class Retrier {
    private final Backoff backoff;
    private int attempt;

    Retrier(Backoff backoff) {
      this.backoff = backoff;
    }

    Duration next() {
      return backoff.delay(attempt++);
    }

    void reset() {
      attempt = 0;
    }
  }

  /** A delay as the SDKs' log lines write it: 0.2s, 1.6s, 5s. */
  static String format(Duration d) {
    long ms = d.toMillis();
    if (ms < 10_000) {
      long tenths = Math.round(ms / 100.0);
      return tenths % 10 == 0 ? (tenths / 10) + "s" : (tenths / 10) + "." + (tenths % 10) + "s";
    }
    return Math.round(ms / 1000.0) + "s";
  }
}
