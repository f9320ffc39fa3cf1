/**
 * The built-in HTTP adapter: the server itself runs the `http` steps of orbit-ir/2 (the pure
 * core schedules them as the built-in task `orbit.http`; this is the I/O half).
 *
 * State model: a scheduled http step is dispatched to the adapter (StepDispatched, worker
 * `orbit-http`) like a task to a worker, then called; the result goes back as a `complete` or
 * `fail` command with that token, so retries, backoff, deadlines and at-most-once results are
 * the engine's, exactly as for tasks. Every attempt sends `Idempotency-Key: <the step's key>`,
 * the same for every attempt of the step.
 *
 * Failure handling: a host outside `--http-allow` fails the step for good (HTTP_NOT_ALLOWED);
 * connection errors, timeouts (HTTP_TIMEOUT), 5xx, 408 and 429 are retryable; other 4xx are
 * not. Redirects are not followed (a 3xx is the step's output), so a redirect cannot leave the
 * allow list. A call in flight when the server stopped is redone one `--session-timeout` after
 * recovery, as the reference page has it for a new leader (StepAttemptUncertain, then the same
 * attempt again with the same key): the old server's call may still finish meanwhile. A
 * dispatch or result whose commit failed is committed again by the adapter itself after a
 * short pause (see `#attempt`): nothing else would move the step.
 */
import type { Command } from "../engine/decide.ts";
import type { ErrorInfo } from "../engine/events.ts";
import { httpAllowed, httpRefusal } from "../engine/http_allow.ts";
import { type ExecutionState, openSteps, type StepState } from "../engine/state.ts";
import type { Executions } from "../executions/executions.ts";
import type { ExecutionObserver } from "../executions/types.ts";
import { log } from "../log.ts";

export const HTTP_WORKER = "orbit-http";
/** Responses larger than this fail the attempt (HTTP_RESPONSE_TOO_LARGE, not retried). */
export const MAX_RESPONSE_BYTES = 1 << 20;
/** The pause before a failed commit of a dispatch or a result is tried again; it doubles. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5_000;

interface Request {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: unknown;
}

type Outcome = { output: unknown } | { error: ErrorInfo };

export class HttpAdapter implements ExecutionObserver {
  #inflight = new Map<string, { execution: string; step: string; abort: AbortController }>();
  #timers = new Set<ReturnType<typeof setTimeout>>();
  #stopped = false;

  constructor(
    readonly executions: Executions,
    readonly opts: { allow: readonly string[]; newId: () => string; sessionTimeoutMs: number },
  ) {}

  stop(): void {
    this.#stopped = true;
    for (const f of this.#inflight.values()) f.abort.abort();
    for (const t of this.#timers) clearTimeout(t);
  }

  installed(prev: ExecutionState | null, next: ExecutionState): void {
    if (this.#stopped) return;
    const id = next.execution_id;
    // A call whose step closed meanwhile (cancel, failure elsewhere) is abandoned.
    for (const [key, f] of this.#inflight) {
      if (f.execution !== id) continue;
      const st = next.steps[f.step];
      if (
        next.phase === "closed" || !st || (st.status !== "dispatched" && st.status !== "scheduled")
      ) {
        f.abort.abort();
        this.#inflight.delete(key);
      }
    }
    for (const st of openSteps(next, "http")) {
      if (st.status === "scheduled") this.#run(id, st);
      else if (st.status === "dispatched" && prev === null) {
        // Recovered from history: the call was in flight when the server stopped.
        for (const [token, info] of Object.entries(st.tokens)) {
          if (!info.uncertain) this.#redoLater(id, token);
        }
      }
    }
  }

  #redoLater(id: string, token: string): void {
    const t = setTimeout(() => {
      this.#timers.delete(t);
      this.executions.command(id, {
        type: "uncertain",
        token,
        reason: "the server stopped while the HTTP call was in flight",
      }).catch((e) => {
        log.engine.error("cannot redo an HTTP call; retrying", { error: String(e) });
        if (!this.#stopped) this.#redoLater(id, token);
      });
    }, this.opts.sessionTimeoutMs);
    this.#timers.add(t);
  }

  #run(id: string, st: StepState): void {
    const key = `${id}\u0000${st.id}\u0000${st.attempt}`;
    if (this.#inflight.has(key)) return;
    const entry = { execution: id, step: st.id, abort: new AbortController() };
    this.#inflight.set(key, entry);
    (async () => {
      try {
        await this.#attempt(id, st.id, st.attempt, entry.abort.signal);
      } finally {
        // In the same turn as the attempt's last look at the step: an install after it finds
        // the key free and runs the step again.
        if (this.#inflight.get(key) === entry) this.#inflight.delete(key);
      }
    })().catch((e) => {
      log.engine.error("HTTP step failed in the adapter", {
        execution_id: id,
        step: st.id,
        error: (e as Error).message,
      });
    });
  }

  /**
   * One attempt of an http step: record its dispatch, call, record the result.
   *
   * Nothing but this adapter moves the step while it is scheduled or dispatched (no deadline
   * unless it has `timeout_s`), so a commit that fails is tried again here, after a pause,
   * while the execution is held and the step is where the failed commit left it. Each retry
   * goes through `command`, which first rebuilds memory from history when the failed commit
   * may have landed: a dispatch that landed then finds the step dispatched (and `#resync` marks
   * that token uncertain, whose redelivery makes the call), a result that landed finds the
   * step closed; neither is appended twice, and no call is made twice for one recorded
   * dispatch unless the history marks it uncertain.
   */
  async #attempt(id: string, step: string, attempt: number, signal: AbortSignal): Promise<void> {
    let token = "";
    let now: StepState | undefined;
    for (let pause = RETRY_FIRST_MS;; pause = Math.min(2 * pause, RETRY_MAX_MS)) {
      token = `${id}/${this.opts.newId()}`;
      try {
        const r = await this.executions.command(id, {
          type: "dispatch",
          step,
          token,
          worker_id: HTTP_WORKER,
          worker_session: HTTP_WORKER,
        });
        now = r?.accepted ? r.state.steps[step] : undefined;
        break;
      } catch (e) {
        this.#retrying("dispatch", id, step, e, pause);
      }
      if (!(await this.#pause(pause, signal))) return;
      const cur = this.executions.stateOf(id)?.steps[step];
      if (cur?.status !== "scheduled" || cur.attempt !== attempt) return;
    }
    if (!now) return;
    const outcome = await this.call(
      now.input as Request,
      now.idempotency_key,
      now.timeout_ms,
      signal,
    );
    if (signal.aborted || this.#stopped) return;
    const result: Command = "error" in outcome
      ? { type: "fail", token, error: outcome.error }
      : { type: "complete", token, output: outcome.output };
    for (let pause = RETRY_FIRST_MS;; pause = Math.min(2 * pause, RETRY_MAX_MS)) {
      try {
        await this.executions.command(id, result);
        return;
      } catch (e) {
        this.#retrying("result", id, step, e, pause);
      }
      if (!(await this.#pause(pause, signal))) return;
      // Rebuilt meanwhile with this attempt no longer current (closed, or its token marked
      // uncertain and redelivered): the result is not this call's to record any more.
      const cur = this.executions.stateOf(id)?.steps[step];
      const live = cur?.tokens[token];
      if (cur?.status !== "dispatched" || cur.attempt !== attempt || !live || live.uncertain) {
        return;
      }
    }
  }

  #retrying(what: string, id: string, step: string, e: unknown, pause: number): void {
    log.engine.warn(`cannot record an HTTP step's ${what}; trying again`, {
      execution_id: id,
      step,
      retry_in_ms: pause,
      error: (e as Error).message,
    });
  }

  /** Waits `ms`; false when the call was abandoned or the adapter stopped meanwhile. */
  #pause(ms: number, signal: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.#timers.delete(t);
        signal.removeEventListener("abort", done);
        resolve(!signal.aborted && !this.#stopped);
      };
      const t = setTimeout(done, ms);
      this.#timers.add(t);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  /** One HTTP call; never throws. */
  async call(
    req: Request,
    idempotencyKey: string,
    timeoutMs: number | null,
    signal: AbortSignal,
  ): Promise<Outcome> {
    const allowed = httpAllowed(req.url, this.opts.allow);
    if (!allowed.ok) {
      return {
        error: {
          code: "HTTP_NOT_ALLOWED",
          message: httpRefusal(allowed, this.opts.allow),
          retryable: false,
          details: { url: req.url },
        },
      };
    }
    let headers: Headers;
    try {
      headers = new Headers(req.headers);
    } catch (e) {
      // A header value HTTP cannot carry (the engine refuses them when it schedules the step;
      // a history written before it did may hold one): the call cannot be made.
      return {
        error: {
          code: "HTTP_INVALID_REQUEST",
          message: `${req.method} ${req.url}: ${(e as Error).message}`,
          retryable: false,
        },
      };
    }
    headers.set("idempotency-key", idempotencyKey);
    let body: string | undefined;
    if (req.body !== undefined && req.method !== "GET" && req.method !== "HEAD") {
      if (typeof req.body === "string") body = req.body;
      else {
        body = JSON.stringify(req.body);
        if (!headers.has("content-type")) headers.set("content-type", "application/json");
      }
    }
    const signals = [signal, ...(timeoutMs ? [AbortSignal.timeout(timeoutMs)] : [])];
    let res: Response;
    try {
      res = await fetch(req.url, {
        method: req.method,
        headers,
        ...(body !== undefined ? { body } : {}),
        redirect: "manual",
        signal: AbortSignal.any(signals),
      });
    } catch (e) {
      const timeout = (e as Error).name === "TimeoutError";
      return {
        error: {
          code: timeout ? "HTTP_TIMEOUT" : "HTTP_CONNECTION_ERROR",
          message: timeout
            ? `${req.method} ${req.url} did not answer within ${timeoutMs! / 1000} s`
            : `${req.method} ${req.url} failed: ${(e as Error).message}`,
          retryable: true,
        },
      };
    }
    let text: string;
    try {
      text = await readLimited(res);
    } catch (e) {
      return {
        error: {
          code: "HTTP_RESPONSE_TOO_LARGE",
          message: `${req.method} ${req.url}: ${(e as Error).message}`,
          retryable: false,
        },
      };
    }
    let parsed: unknown = text;
    if (/\bjson\b/i.test(res.headers.get("content-type") ?? "") && text !== "") {
      try {
        parsed = JSON.parse(text);
      } catch { /* not JSON after all: keep the text */ }
    }
    const output = { status: res.status, headers: Object.fromEntries(res.headers), body: parsed };
    if (res.status < 400) return { output };
    const retryable = res.status >= 500 || res.status === 408 || res.status === 429;
    return {
      error: {
        code: `HTTP_${res.status}`,
        message: `${req.method} ${req.url} answered ${res.status}`,
        retryable,
        details: output,
      },
    };
  }
}

async function readLimited(res: Response): Promise<string> {
  if (!res.body) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += chunk.byteLength;
    if (size > MAX_RESPONSE_BYTES) {
      await res.body.cancel().catch(() => {});
      throw new Error(`the response is larger than ${MAX_RESPONSE_BYTES} bytes`);
    }
    chunks.push(chunk);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all);
}
