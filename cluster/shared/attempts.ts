/**
 * Shared mode's watch over the attempts of executions owned here (reference page, "Worker
 * sessions"): every 500 ms the owner reads the last contact of the sessions holding them; a
 * session silent past --session-timeout, or gone, makes its attempts uncertain (redelivered
 * with the same idempotency key), and so does an attempt its live worker does not list in its
 * heartbeats. Attempts of executions taken over from a dead node are redelivered one
 * --session-timeout after the takeover unless their result arrives.
 */
import { type ExecutionState, liveTokens } from "../../lib/engine/state.ts";
import { executionOfToken } from "../../lib/executions/types.ts";
import { log } from "../../lib/log.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { SharedSessions, WorkersContext } from "./sessions.ts";

export class AttemptWatch {
  /** Live attempts of executions owned here: token → session. */
  #held = new Map<string, { execution_id: string; session: string; worker_id: string }>();
  /** Attempts taken over from a dead node: token → when to redeliver if nothing arrived. */
  #orphans = new Map<string, number>();
  #checking = false;
  #checkStarted = 0;

  constructor(readonly w: WorkersContext, readonly sessions: SharedSessions) {}

  /** Attempts of executions just taken over: redelivered after a session timeout. */
  adoptOrphans(tokens: string[]): void {
    const at = this.w.opts.now() + this.w.opts.sessionTimeoutMs;
    for (const t of tokens) this.#orphans.set(t, at);
  }

  /**
   * An execution's new state was installed: its live attempts are watched, those that ended
   * are not.
   */
  installed(prev: ExecutionState | null, next: ExecutionState): void {
    const live = new Set<string>();
    for (const { token, info } of liveTokens(next)) {
      live.add(token);
      if (next.phase === "closed") continue;
      const uncertain = (info as { uncertain?: boolean }).uncertain === true;
      if (!uncertain && !this.#held.has(token)) {
        this.#held.set(token, {
          execution_id: next.execution_id,
          session: info.worker_session,
          worker_id: info.worker_id,
        });
      }
      if (uncertain) this.#held.delete(token);
    }
    if (prev) {
      for (const { token } of liveTokens(prev)) {
        if (live.has(token) && next.phase !== "closed") continue;
        this.#held.delete(token);
        this.#orphans.delete(token);
      }
    }
  }

  /** The execution left memory (another node took it): its attempts are not watched here. */
  dropped(last: ExecutionState): void {
    for (const { token } of liveTokens(last)) {
      this.#held.delete(token);
      this.#orphans.delete(token);
    }
  }

  /**
   * The owner's watch over the sessions holding its attempts (every 500 ms). A check that has
   * not finished within 10 s (a wedged connection) no longer holds the next ones back.
   */
  async check(): Promise<void> {
    const { executions, opts } = this.w;
    if (this.#checking && opts.now() - this.#checkStarted < 10_000) return;
    if (this.#checking) {
      log.engine.warn("the worker session check has not finished for 10 s; starting another");
    }
    const mine = this.#checkStarted = opts.now();
    this.#checking = true;
    try {
      const now = opts.now();
      const calm = now - opts.healthySince() > opts.sessionTimeoutMs + 1000;
      for (const [token, at] of [...this.#orphans]) {
        if (at > now) continue;
        this.#orphans.delete(token);
        const h = this.#held.get(token);
        const id = h?.execution_id ?? executionOfToken(token);
        if (!id) continue;
        this.#held.delete(token);
        executions.uncertain(
          id,
          token,
          "no result arrived within --session-timeout after this node took the execution over",
        );
      }
      if (!calm) return;
      const sessions = new Set<string>();
      for (const h of this.#held.values()) sessions.add(h.session);
      /** Sessions found alive in this pass: only their attempts are judged by confirmation. */
      const alive = new Set<string>();
      if (sessions.size > 0) {
        const rows = await this.w.q<{ session_id: string; last_contact_ms: number }>(
          q.SESSION_CONTACTS,
          [[...sessions]],
        );
        const contact = new Map(rows.map((r) => [r.session_id, r.last_contact_ms]));
        // Inserted before it was cached, so a session cached here without a row was removed.
        for (const id of sessions) if (!contact.has(id)) this.sessions.gone(id);
        for (const [token, h] of [...this.#held]) {
          const local = this.sessions.sessions.get(h.session);
          const last = Math.max(contact.get(h.session) ?? -Infinity, local?.last_contact_ms ?? 0);
          if (
            (local && local.polling > 0) ||
            ((contact.has(h.session) || local) && now - last <= opts.sessionTimeoutMs)
          ) {
            alive.add(h.session);
            continue;
          }
          this.#held.delete(token);
          this.#orphans.delete(token);
          executions.uncertain(
            h.execution_id,
            token,
            `worker \`${h.worker_id}\` stopped responding`,
          );
        }
      }
      // After the sessions: an attempt its live worker does not list in its heartbeats was
      // never received (the answer that carried it was lost, e.g. with a server that paused):
      // redelivered one session timeout after its claim or its last confirmation.
      if (this.#held.size > 0) {
        const rows = await this.w.q<{ token: string; claimed_ms: number | null }>(
          q.CONFIRMED_AT,
          [[...this.#held.keys()]],
        );
        for (const r of rows) {
          const h = this.#held.get(r.token);
          if (!h || r.claimed_ms === null || !alive.has(h.session)) continue;
          if (now - Number(r.claimed_ms) <= opts.sessionTimeoutMs + 1000) continue;
          this.#held.delete(r.token);
          this.#orphans.delete(r.token);
          executions.uncertain(
            h.execution_id,
            r.token,
            `worker \`${h.worker_id}\` does not list the attempt in its heartbeats`,
          );
        }
      }
      await this.sessions.expire(now);
    } catch (e) {
      log.engine.warn("cannot check worker sessions", { error: (e as Error).message });
    } finally {
      if (this.#checkStarted === mine) this.#checking = false;
    }
  }
}
