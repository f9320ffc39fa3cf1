package dev.orbit.sdk;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;

/** What a handler learns about the attempt it runs, and how it sees the attempt cancelled. */
public final class Attempt {
  private final String token;
  private final String executionId;
  private final String step;
  private final int attempt;
  private final String task;
  private final String contract;
  private final String idempotencyKey;
  private final boolean redelivery;
  private final Instant deadline;
  private final Logger logger;
  final CompletableFuture<String> cancelled = new CompletableFuture<>();

  public Attempt(
      String token, String executionId, String step, int attempt, String task, String contract,
      String idempotencyKey, boolean redelivery, Instant deadline, Logger logger) {
    this.token = token;
    this.executionId = executionId;
    this.step = step;
    this.attempt = attempt;
    this.task = task;
    this.contract = contract;
    this.idempotencyKey = idempotencyKey;
    this.redelivery = redelivery;
    this.deadline = deadline;
    this.logger = logger == null ? Logger.stderr() : logger;
  }

  /** The attempt's task token ({@code <execution id>/<uuid>}). */
  public String token() {
    return token;
  }

  public String executionId() {
    return executionId;
  }

  /** The step id in the workflow definition. */
  public String step() {
    return step;
  }

  /** The attempt number, from 1. */
  public int attempt() {
    return attempt;
  }

  public String task() {
    return task;
  }

  public String contract() {
    return contract;
  }

  /**
   * The same for every attempt and redelivery of one step execution: deduplicate side effects
   * on it.
   */
  public String idempotencyKey() {
    return idempotencyKey;
  }

  /** True when the attempt was handed out again after its worker went silent. */
  public boolean redelivery() {
    return redelivery;
  }

  /** When the runtime stops waiting for this attempt, or null when it did not say. */
  public Instant deadline() {
    return deadline;
  }

  /** The worker's logger. */
  public Logger logger() {
    return logger;
  }

  /** Whether the attempt was cancelled. */
  public boolean isCancelled() {
    return cancelled.isDone();
  }

  /** Why the attempt was cancelled ({@code cancel}, {@code deadline}, {@code shutdown}), or null. */
  public String cancelReason() {
    return cancelled.getNow(null);
  }

  /** Completes with the reason when the attempt is cancelled. */
  public CompletableFuture<String> cancellation() {
    return cancelled.copy();
  }

  /** Throws {@link InterruptedException} when the attempt is cancelled. */
  public void checkCancelled() throws InterruptedException {
    if (isCancelled() || Thread.currentThread().isInterrupted()) {
      throw new InterruptedException("the attempt was cancelled (" + cancelReason() + ")");
    }
  }

  /** Waits {@code d}, or throws {@link InterruptedException} when the attempt is cancelled first. */
  public void sleep(Duration d) throws InterruptedException {
    checkCancelled();
    Thread.sleep(Math.max(0, d.toMillis()));
  }

  /** Waits until the attempt is cancelled, then throws {@link InterruptedException}. */
  public void awaitCancellation() throws InterruptedException {
    try {
      cancelled.get();
    } catch (java.util.concurrent.ExecutionException e) {
      // never completed exceptionally
    }
    throw new InterruptedException("the attempt was cancelled (" + cancelReason() + ")");
  }
}
