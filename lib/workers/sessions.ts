/**
 * The worker session store of a single server (SPEC §4): sessions in memory, their last
 * contact, the expiry of silent ones, which session holds which live attempt, and the cancel
 * notices a session's next heartbeat carries.
 *
 * A session expires one --session-timeout after its last contact (a poll in progress counts as
 * contact). Attempts recovered from history whose worker has not been heard of ("orphans")
 * are due one session timeout after they were seen, unless a heartbeat of a new session names
 * their token first. An attempt its live worker leaves out of its heartbeats for a session
 * timeout is due once. What is due is handed to the dispatcher (./dispatcher.ts), which redelivers;
 * this is its SessionStore on one server and in standby mode.
 */
import type { HistoryEvent } from "../engine/events.ts";
import type { ExecutionState } from "../engine/state.ts";
import { liveTokens } from "../engine/state.ts";
import { notFound } from "../errors.ts";
import { log } from "../log.ts";

export interface TaskRegistration {
  name: string;
  contract: string;
  language?: string | undefined;
}

export interface Session {
  session_id: string;
  worker_id: string;
  runtime: string;
  tasks: TaskRegistration[];
  concurrency: number;
  created_ms: number;
  last_contact_ms: number;
  polling: number;
  tokens: Set<string>;
  cancel: Set<string>;
  told: Set<string>;
}

/** What an owner needs of a worker's session to dispatch a task to it. */
export type EagerSession = Pick<Session, "session_id" | "worker_id" | "runtime" | "tasks">;

/** What a worker tells about itself when it registers. */
export type SessionRegistration = Omit<
  Session,
  "session_id" | "created_ms" | "last_contact_ms" | "polling" | "tokens" | "cancel" | "told"
>;

/** What the sweep found due: the caller redelivers the attempts concerned. */
export interface SweepHandlers {
  /** A session silent for a session timeout, already forgotten; its attempts are lost. */
  expired(s: Session): void;
  /** An attempt of a live session left out of its heartbeats for a session timeout. */
  unlisted(s: Session, token: string): void;
  /** An attempt recovered from history that no worker reported within a session timeout. */
  orphaned(token: string): void;
}

/** Whether a task pinned to `language` may go to a session serving it under `reg`. */
export function languageFits(
  language: string | null,
  reg: TaskRegistration,
  s: Pick<Session, "runtime">,
): boolean {
  return language === null || language === "any" || language === (reg.language ?? s.runtime);
}

/** Whether the session serves the step's task (name, contract version and language). */
export function serves(
  s: Pick<Session, "tasks" | "runtime">,
  st: { task: string; contract: string; language: string | null },
): boolean {
  return s.tasks.some((reg) =>
    reg.name === st.task && reg.contract === st.contract && languageFits(st.language, reg, s)
  );
}

/** The command that dispatches step `step` to the session under a new task token. */
export function dispatchTo(
  executionId: string,
  step: string,
  s: Pick<Session, "session_id" | "worker_id">,
  newId: () => string,
): { type: "dispatch"; step: string; token: string; worker_id: string; worker_session: string } {
  return {
    type: "dispatch",
    step,
    token: `${executionId}/${newId()}`,
    worker_id: s.worker_id,
    worker_session: s.session_id,
  };
}

/** How often the sweep looks for silent sessions and attempts. */
const SWEEP_MS = 250;

export class WorkerSessions {
  readonly sessions = new Map<string, Session>();
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #tokenSession = new Map<string, string>();
  #orphans = new Map<string, number>();
  /**
   * Live attempts of live sessions: when the worker last had it (its dispatch, or a heartbeat
   * listing it), and whether a heartbeat since then left it out (`doubted`: reported once).
   */
  #confirmed = new Map<string, { at: number; missed: boolean; doubted: boolean }>();

  constructor(
    readonly opts: { sessionTimeoutMs: number; now: () => number; newId: () => string },
  ) {}

  register(r: SessionRegistration): string {
    const now = this.opts.now();
    const s: Session = {
      ...r,
      session_id: this.opts.newId(),
      created_ms: now,
      last_contact_ms: now,
      polling: 0,
      tokens: new Set(),
      cancel: new Set(),
      told: new Set(),
    };
    this.sessions.set(s.session_id, s);
    log.engine.info("worker registered", {
      worker_id: r.worker_id,
      runtime: r.runtime,
      tasks: r.tasks.length,
    });
    return s.session_id;
  }

  /** The session `id`, in contact now; UNKNOWN_SESSION when it is unknown or expired. */
  contact(id: string): Session {
    const s = this.sessions.get(id);
    if (!s) {
      throw notFound(
        "UNKNOWN_SESSION",
        `worker session ${id} is unknown or expired; register again`,
      );
    }
    s.last_contact_ms = this.opts.now();
    return s;
  }

  touch(s: Session): void {
    s.last_contact_ms = this.opts.now();
  }

  /** Forgets a session (its worker unregistered); answers its attempts, the caller's to lose. */
  remove(s: Session): string[] {
    this.sessions.delete(s.session_id);
    return [...s.tokens];
  }

  /** Sweeps every 250 ms; what is due goes to `lost` (redelivered by the dispatcher). */
  start(lost: (token: string, reason: string) => void): void {
    this.#sweeper = setInterval(() =>
      this.sweep({
        expired: (s) => {
          for (const t of s.tokens) lost(t, `worker \`${s.worker_id}\` stopped responding`);
        },
        unlisted: (s, t) =>
          lost(t, `worker \`${s.worker_id}\` does not list the attempt in its heartbeats`),
        orphaned: (t) =>
          lost(
            t,
            "no worker reported the attempt within --session-timeout after this server started",
          ),
      }), SWEEP_MS);
  }

  stop(): void {
    clearInterval(this.#sweeper);
  }

  /**
   * A heartbeat of `s` listing the attempts its worker runs: attempts it runs that another
   * session (or none) held become its own; answers the tokens its worker should cancel.
   */
  heartbeat(s: Session, tokens: string[]): string[] {
    const cancel = new Set(s.cancel);
    s.cancel.clear();
    for (const t of tokens) {
      if (
        this.#orphans.delete(t) ||
        (this.#tokenSession.has(t) && this.#tokenSession.get(t) !== s.session_id)
      ) {
        // A worker that registered again still runs this attempt: it now belongs to this session.
        const old = this.sessions.get(this.#tokenSession.get(t) ?? "");
        old?.tokens.delete(t);
        this.#tokenSession.set(t, s.session_id);
        s.tokens.add(t);
        // Watched from now on like an attempt handed out here: should its worker stop listing
        // it without a result, it is redelivered one session timeout later.
        this.#confirmed.set(t, { at: this.opts.now(), missed: false, doubted: false });
      } else if (!this.#tokenSession.has(t) && !s.told.has(t)) {
        cancel.add(t);
      }
    }
    for (const t of cancel) s.told.add(t);
    if (s.told.size > 10_000) s.told.clear();
    const listed = new Set(tokens);
    const now = this.opts.now();
    for (const t of s.tokens) {
      const c = this.#confirmed.get(t);
      if (!c) continue;
      if (listed.has(t)) {
        c.at = now;
        c.missed = false;
      } else {
        c.missed = true;
      }
    }
    return [...cancel];
  }

  list() {
    return [...this.sessions.values()].map((s) => ({
      session_id: s.session_id,
      worker_id: s.worker_id,
      runtime: s.runtime,
      tasks: s.tasks,
      concurrency: s.concurrency,
      created_ms: s.created_ms,
      last_contact_ms: s.last_contact_ms,
      in_flight: s.tokens.size,
    }));
  }

  /** The token bookkeeping of a committed change (track), the attempts reported in it spared. */
  installed(
    prev: ExecutionState | null,
    next: ExecutionState,
    events: readonly HistoryEvent[],
  ): void {
    const reported = new Set<string>();
    for (const e of events) {
      if ((e.type === "StepSucceeded" || e.type === "StepFailed") && e.token) reported.add(e.token);
    }
    this.track(prev, next, reported);
  }

  /**
   * The token bookkeeping of a committed change: new live attempts join their session (or
   * become orphans when it is not known here); attempts that died leave theirs, and its worker
   * is told to cancel them unless their token is in `reported` (the worker reported it).
   */
  track(prev: ExecutionState | null, next: ExecutionState, reported: ReadonlySet<string>): void {
    const now = this.opts.now();
    const live = new Set<string>();
    for (const { token, info } of liveTokens(next)) {
      live.add(token);
      if (this.#tokenSession.has(token) || this.#orphans.has(token)) continue;
      if (this.sessions.has(info.worker_session)) {
        this.#tokenSession.set(token, info.worker_session);
        this.sessions.get(info.worker_session)!.tokens.add(token);
        this.#confirmed.set(token, { at: now, missed: false, doubted: false });
      } else {
        this.#orphans.set(token, now + this.opts.sessionTimeoutMs);
      }
    }
    if (prev) {
      for (const { token } of liveTokens(prev)) {
        if (live.has(token)) continue;
        this.#orphans.delete(token);
        this.#confirmed.delete(token);
        const sid = this.#tokenSession.get(token);
        this.#tokenSession.delete(token);
        const s = sid ? this.sessions.get(sid) : undefined;
        if (s) {
          s.tokens.delete(token);
          if (!reported.has(token)) s.cancel.add(token);
        }
      }
    }
  }

  /** Expires silent sessions and hands what is due to `due`, in that order. */
  sweep(due: SweepHandlers): void {
    const now = this.opts.now();
    for (const s of [...this.sessions.values()]) {
      if (s.polling > 0 || now - s.last_contact_ms <= this.opts.sessionTimeoutMs) continue;
      this.sessions.delete(s.session_id);
      log.engine.info("worker session expired", {
        worker_id: s.worker_id,
        session_id: s.session_id,
      });
      due.expired(s);
      for (const t of s.tokens) this.#confirmed.delete(t);
    }
    // An attempt its live worker leaves out of its heartbeats for a session timeout was never
    // received (the answer that carried it was lost, e.g. on a connection cut after the server
    // wrote it): redelivered with the same idempotency key, as shared mode does.
    for (const s of this.sessions.values()) {
      for (const t of s.tokens) {
        const c = this.#confirmed.get(t);
        if (!c || c.doubted || !c.missed || now - c.at <= this.opts.sessionTimeoutMs) continue;
        c.doubted = true;
        due.unlisted(s, t);
      }
    }
    for (const [token, expires] of [...this.#orphans]) {
      if (expires > now) continue;
      this.#orphans.delete(token);
      due.orphaned(token);
    }
  }
}

export interface TaskPayload {
  token: string;
  execution_id: string;
  step: string;
  attempt: number;
  task: string;
  contract: string;
  input: unknown;
  idempotency_key: string;
  redelivery: boolean;
  deadline_ms: number | null;
}
