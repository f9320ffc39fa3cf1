/** Worker role, heartbeats: keep the session and its attempts' leases alive, apply cancel notices. */

import { isRetryable, isUnknownSession } from "../errors.ts";
import { Backoff, formatSeconds, sleep } from "../http.ts";
import { describe, type WorkerCore } from "./common.ts";
import { abort } from "./execute.ts";
import type { Session } from "./session.ts";

/**
 * Heartbeats the session every `heartbeatMs` with the tokens of the attempts in flight (which
 * extends their leases), aborts the attempts the answer cancels, and registers again when the
 * session is gone. Ends when `core.hbStop` aborts.
 */
export async function runHeartbeats(
  core: WorkerCore,
  session: Session,
  heartbeatMs: number,
): Promise<void> {
  const backoff = new Backoff(core.backoff);
  const stop = core.hbStop;
  let delay = heartbeatMs;
  while (!stop.aborted) {
    try {
      await sleep(delay, stop);
    } catch {
      break;
    }
    delay = heartbeatMs;
    const sessionId = session.id;
    if (!sessionId) {
      // The poll loop registers again; while stopping there is nothing to keep alive.
      if (!core.stopping.aborted) session.ensure().catch(() => {});
      continue;
    }
    const tokens = [...core.inflight.keys()];
    try {
      const res = await core.transport.post<{ cancel?: string[] } | null>(
        "/v1/workers/heartbeat",
        { session_id: sessionId, tokens },
        { signal: stop, timeoutMs: core.requestTimeoutMs },
      );
      backoff.reset();
      for (const token of res?.cancel ?? []) {
        const entry = core.inflight.get(token);
        if (!entry || entry.handlerDone) continue;
        core.logger.info(`task cancelled by the runtime token=${token} step=${entry.task.step}`);
        abort(entry, "cancel");
      }
    } catch (err) {
      if (stop.aborted) break;
      if (isUnknownSession(err)) {
        session.forget(sessionId, "heartbeat");
        if (!core.stopping.aborted) session.ensure().catch(() => {});
        delay = 0;
        continue;
      }
      delay = backoff.next();
      const level = isRetryable(err) ? "warn" : "error";
      core.logger[level](
        `heartbeat failed: ${describe(err, core.server)}; retrying in ${formatSeconds(delay)}`,
      );
    }
  }
}
