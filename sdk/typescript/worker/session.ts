/** Worker role, the session: register (with retries), the session id, registering again, unregister. */

import { isRetryable, isUnknownSession, OrbitApiError } from "../errors.ts";
import { Backoff, formatSeconds, sleep } from "../http.ts";
import { type AnyTask, describe, Stopped, type WorkerCore } from "./common.ts";

/** What the worker registers with. */
export interface Registration {
  readonly runtime: string;
  readonly tasks: readonly AnyTask[];
  readonly concurrency: number;
}

/**
 * The worker's one session, shared by its slots and its heartbeats: registered on demand (one
 * registration at a time), forgotten when the runtime answers UNKNOWN_SESSION, unregistered at
 * the end.
 */
export class Session {
  readonly #core: WorkerCore;
  readonly #registration: Registration;
  /** Called when a session is forgotten: long polls of it end (the slots poll again). */
  readonly #onLost: (sessionId: string) => void;

  #id: string | null = null;
  #registering: Promise<string> | null = null;
  #registeredOnce = false;

  constructor(core: WorkerCore, registration: Registration, onLost: (sessionId: string) => void) {
    this.#core = core;
    this.#registration = registration;
    this.#onLost = onLost;
  }

  /** The current session id, if registered. */
  get id(): string | null {
    return this.#id;
  }

  /** The registration under way, if one is. */
  get registering(): Promise<string> | null {
    return this.#registering;
  }

  /** The current session, registering when there is none (one registration at a time). */
  ensure(): Promise<string> {
    if (this.#id) return Promise.resolve(this.#id);
    if (!this.#registering) {
      this.#registering = this.#register().finally(() => (this.#registering = null));
    }
    return this.#registering;
  }

  async #register(): Promise<string> {
    const core = this.#core;
    const { runtime, tasks, concurrency } = this.#registration;
    const body = {
      worker_id: core.workerId,
      runtime,
      tasks: tasks.map((t) => ({
        name: t.name,
        contract: t.contract,
        ...(t.language ? { language: t.language } : {}),
      })),
      concurrency,
    };
    const res = await retrying(
      core,
      "register",
      core.stopping,
      (signal) =>
        core.transport.post<{ session_id: string }>("/v1/workers/register", body, {
          signal,
          timeoutMs: core.requestTimeoutMs,
        }),
      // Before the first success, a refusal (401, 403, 422) is the caller's to see.
      () => this.#registeredOnce,
    );
    if (!res || typeof res.session_id !== "string") {
      throw new OrbitApiError({
        status: 200,
        code: "INVALID_RESPONSE",
        message: "register answered without a session_id",
        body: res,
      });
    }
    this.#id = res.session_id;
    this.#registeredOnce = true;
    core.logger.info(
      `worker registered worker_id=${core.workerId} runtime=${runtime} tasks=${tasks.length} session_id=${res.session_id}`,
    );
    return res.session_id;
  }

  /** Drops `sessionId` after 404 UNKNOWN_SESSION (once; a newer session is kept). */
  forget(sessionId: string, op: string): void {
    if (this.#id !== sessionId) return;
    this.#id = null;
    this.#core.logger.warn(
      `${op}: the runtime does not know session ${sessionId} (UNKNOWN_SESSION); registering again`,
    );
    // A long poll of that session is pointless now: end it, the slot registers and polls again.
    this.#onLost(sessionId);
  }

  async unregister(): Promise<void> {
    const core = this.#core;
    const sessionId = this.#id;
    if (!sessionId) return;
    const backoff = new Backoff(core.backoff);
    for (let attempt = 1;; attempt++) {
      try {
        await core.transport.post("/v1/workers/unregister", { session_id: sessionId }, {
          timeoutMs: core.requestTimeoutMs,
        });
        this.#id = null;
        return;
      } catch (err) {
        if (isUnknownSession(err)) return;
        if (isRetryable(err) && attempt < 4) {
          const delay = backoff.next();
          core.logger.warn(
            `unregister failed: ${describe(err, core.server)}; retrying in ${formatSeconds(delay)}`,
          );
          await sleep(delay);
          continue;
        }
        core.logger.warn(`unregister failed: ${describe(err, core.server)}; giving up`);
        return;
      }
    }
  }
}

/**
 * Runs `fn` until it succeeds, retrying connection errors and 5xx with backoff (and other
 * errors too when `retryOthers()` says so). Rejects with {@link Stopped} when `signal` aborts.
 */
async function retrying<T>(
  core: WorkerCore,
  op: string,
  signal: AbortSignal,
  fn: (signal: AbortSignal) => Promise<T>,
  retryOthers: () => boolean = () => false,
): Promise<T> {
  const backoff = new Backoff(core.backoff);
  for (;;) {
    if (signal.aborted) throw new Stopped();
    try {
      return await fn(signal);
    } catch (err) {
      if (signal.aborted) throw new Stopped();
      const retryable = isRetryable(err);
      if (!retryable && !retryOthers()) throw err;
      const delay = backoff.next();
      core.logger[retryable ? "warn" : "error"](
        `${op} failed: ${describe(err, core.server)}; retrying in ${formatSeconds(delay)}`,
      );
      try {
        await sleep(delay, signal);
      } catch {
        throw new Stopped();
      }
    }
  }
}
