package dev.orbit.sdk;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A cancellation signal (Go's context.Context, reduced): waits end early when it is cancelled,
 * listeners run once, a child is cancelled with its parent.
 */
final class Cancellation {
  private final Object lock = new Object();
  private boolean cancelled;
  private final List<Runnable> listeners = new ArrayList<>();
  private Runnable detach = () -> {};

  boolean isCancelled() {
    synchronized (lock) {
      return cancelled;
    }
  }

  void cancel() {
    List<Runnable> run;
    synchronized (lock) {
      if (cancelled) return;
      cancelled = true;
      lock.notifyAll();
      run = new ArrayList<>(listeners);
      listeners.clear();
    }
    detach.run();
    for (Runnable r : run) {
      try {
        r.run();
      } catch (RuntimeException ignored) {
        // a listener's failure is not the canceller's
      }
    }
  }

  /** Runs {@code r} when cancelled (at once when already); answers its removal. */
  Runnable onCancel(Runnable r) {
    synchronized (lock) {
      if (!cancelled) {
        listeners.add(r);
        return () -> {
          synchronized (lock) {
            listeners.remove(r);
          }
        };
      }
    }
    r.run();
    return () -> {};
  }

  /** A cancellation that ends with this one too; {@link #release} detaches it. */
  Cancellation child() {
    Cancellation c = new Cancellation();
    c.detach = onCancel(c::cancel);
    return c;
  }

  void release() {
    detach.run();
  }

  /** Waits {@code d}; false when cancelled first. */
  boolean sleep(Duration d) {
    long end = System.nanoTime() + d.toNanos();
    synchronized (lock) {
      while (!cancelled) {
        long left = end - System.nanoTime();
        if (left <= 0) return true;
        try {
          lock.wait(Math.max(1, left / 1_000_000), 0);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
      return false;
    }
  }

  /** Waits until cancelled or {@code d} has passed; true when cancelled. */
  boolean await(Duration d) {
    return !sleep(d) && isCancelled();
  }
}
