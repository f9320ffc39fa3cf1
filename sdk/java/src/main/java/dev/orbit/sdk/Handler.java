package dev.orbit.sdk;

/**
 * Runs one attempt of a task: from the decoded input to the output. Throw a {@link
 * TaskException} to fail with a chosen code; any other exception is TASK_ERROR, retryable. The
 * attempt is cancelled (the runtime cancelled it, its deadline passed, or the worker gives up on
 * it at shutdown) by interrupting the handler's thread: blocking calls throw {@link
 * InterruptedException}, which the SDK reports as CANCELLED, DEADLINE_EXCEEDED or WORKER_STOPPED.
 */
@FunctionalInterface
public interface Handler<I, O> {
  O handle(I input, Attempt attempt) throws Exception;
}
