/**
 * Shared mode's inbox, on the owner's side: the one place that reads, applies and settles the
 * commands other servers forwarded to the executions this node owns (orbit_inbox), answers
 * their senders (NOTIFY orbit_reply), and answers entries nobody owns any more.
 */
import type { Command } from "../../lib/engine/decide.ts";
import type { ExecutionState } from "../../lib/engine/state.ts";
import { stepOfToken } from "../../lib/engine/state.ts";
import { OrbitError } from "../../lib/errors.ts";
import { rowOf } from "../../lib/executions/types.ts";
import { unitOf } from "../../lib/executions/shared_changes.ts";
import { log } from "../../lib/log.ts";
import { InboxGoneError } from "../../lib/store/store.ts";
import type { EagerSession } from "../../lib/workers/sessions.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { SharedContext } from "./context.ts";
import { commandOf, errorOf, type InboxEntry, type Reply } from "./messages.ts";
import type { Notifier } from "./notify.ts";
import type { Ownership } from "./ownership.ts";

/** A NOTIFY payload must stay below 8000 bytes (node id and a space come first). */
export const REPLY_MAX_BYTES = 7000;
const utf8 = new TextEncoder();

/** Whether `text` fits into a NOTIFY payload (REPLY_MAX_BYTES). */
export function fitsNotification(text: string): boolean {
  return text.length * 3 <= REPLY_MAX_BYTES || utf8.encode(text).length <= REPLY_MAX_BYTES;
}

/** What a command's outcome answers its sender (a reply, or an error). */
export function replyOf(
  cmd: Command,
  r: {
    accepted: boolean;
    state: ExecutionState;
    events: readonly { type: string; seq: number }[];
  } | null,
  id: string,
  now: number,
): Omit<Reply, "seq"> {
  if (!r) {
    return {
      error: { status: 409, code: "EXECUTION_FINISHED", message: `execution ${id} is not running` },
    };
  }
  if (cmd.type === "signal") {
    const received = r.events.find((ev) => ev.type === "SignalReceived");
    if (!received) {
      return {
        error: {
          status: 409,
          code: "EXECUTION_FINISHED",
          message: `execution ${id} is already ${r.state.status}`,
          fields: { status: r.state.status },
        },
      };
    }
    return { accepted: true, signal_seq: received.seq, row: rowOf(r.state, now) };
  }
  // A worker's result needs no row in its answer.
  if (cmd.type === "complete" || cmd.type === "fail") return { accepted: r.accepted };
  return { accepted: r.accepted, row: rowOf(r.state, now) };
}

export class Inbox {
  #draining: Promise<void> | null = null;
  #drainAgain = false;
  #applying = new Set<number>();
  /**
   * Inbox entries applied (or removed) here lately: an entry reaches the owner twice, in its
   * notification and in the inbox read that may have started before its commit deleted it.
   */
  #applied = new Set<number>();

  constructor(
    readonly ctx: SharedContext,
    readonly ownership: Ownership,
    readonly notifier: Notifier,
  ) {}

  /** Applies the inbox of the executions this node owns, in seq order (one drain at a time). */
  drain(): void {
    const c = this.ctx;
    if (!c.resumed || c.stopped) return;
    if (this.#draining) {
      this.#drainAgain = true;
      return;
    }
    this.#draining = (async () => {
      try {
        do {
          this.#drainAgain = false;
          const entries = await c.sql("hb")<InboxEntry>(q.READ_INBOX, [c.nodeId, 500]);
          // Entries of different executions apply concurrently (their appends share
          // commits); those of one execution one after another, in seq order.
          await this.#applyAll(entries);
          if (entries.length === 500) this.#drainAgain = true;
        } while (this.#drainAgain && !c.stopped);
      } catch (e) {
        log.shared.warn("shared: cannot read the inbox; retrying", {
          error: (e as Error).message,
        });
      } finally {
        this.#draining = null;
      }
    })();
  }

  /**
   * Applies the pending entries of one execution this node owns now (a result that needs its
   * dispatch); answers how many there were.
   */
  async drainExecution(id: string): Promise<number> {
    const entries = await this.ctx.sql("req")<InboxEntry>(q.READ_INBOX_OF, [id, this.ctx.nodeId]);
    await this.#applyAll(entries);
    return entries.length;
  }

  /** Entries in seq order: one execution's one after another, executions side by side. */
  async #applyAll(entries: InboxEntry[]): Promise<void> {
    const byExecution = new Map<string, InboxEntry[]>();
    for (const e of entries) {
      const list = byExecution.get(e.execution_id);
      if (list) list.push(e);
      else byExecution.set(e.execution_id, [e]);
    }
    await Promise.all([...byExecution.values()].map(async (list) => {
      for (const e of list) await this.#apply(e);
    }));
  }

  /**
   * A worker's result that came with its notification: applied at once, without reading the
   * inbox, when its execution is held here and the attempt it answers is recorded (so no
   * earlier entry of the execution, such as that attempt's `dispatched`, has to go first).
   * Anything else goes through the inbox read, in seq order.
   */
  direct(e: InboxEntry): void {
    const c = this.ctx;
    const token = e.payload?.token;
    const state = c.rt?.executions.stateOf(e.execution_id);
    if (
      !c.resumed || c.stopped || !state || typeof token !== "string" ||
      (e.kind !== "complete" && e.kind !== "fail") || !stepOfToken(state, token)
    ) {
      return this.drain();
    }
    e.seq = Number(e.seq);
    this.#apply(e).catch((err) =>
      log.shared.warn("shared: cannot apply an inbox entry; the inbox read retries it", {
        execution_id: e.execution_id,
        error: (err as Error).message,
      })
    );
  }

  #markApplied(seq: number): void {
    this.#applied.add(seq);
    if (this.#applied.size > 100_000) {
      for (const s of this.#applied) {
        this.#applied.delete(s);
        if (this.#applied.size <= 90_000) break;
      }
    }
  }

  async #apply(e: InboxEntry): Promise<void> {
    if (this.#applying.has(e.seq) || this.#applied.has(e.seq)) return;
    this.#applying.add(e.seq);
    const c = this.ctx;
    try {
      const ex = c.rt!.executions;
      const cmd = commandOf(e);
      if (!cmd) {
        await c.sql("hb")(q.DELETE_INBOX, [e.seq]);
        this.#markApplied(e.seq);
        return;
      }
      // Owned here (the inbox join says so) but perhaps not in memory: load it first.
      if (!(await ex.loadOwned(e.execution_id))) return;
      // A claim offers one unit (a queued row, lib/executions/shared_changes.ts). A row queued
      // before the attempt turned uncertain is not the unit the step waits for now: its worker
      // was told `redelivery: false`, so the offer is refused (the worker hears cancel) and the
      // current unit's row goes out with the flag the dispatch records.
      if (cmd.type === "dispatch" && e.payload.unit !== undefined) {
        // Memory tells which unit the step waits for only once no append of it is in doubt
        // (one that landed may have queued the unit this claim took); while that cannot be
        // found out, the entry stays for the next inbox read.
        try {
          await ex.settle(e.execution_id);
        } catch {
          return;
        }
        const s = ex.stateOf(e.execution_id);
        const st = s?.steps[cmd.step];
        if (s && st && unitOf(s, st) !== String(e.payload.unit)) {
          if (!(await this.#settle(e))) return;
          await c.sql("hb")(q.CANCEL_TASK, [cmd.token]);
          this.#markApplied(e.seq);
          return;
        }
      }
      // A result forwarded with its worker's session: the step it makes ready goes to a worker
      // of this server's when one serves it, else to that worker with the reply (Workers.eager).
      const take = (cmd.type === "complete" || cmd.type === "fail") && e.payload.take
        ? c.workers?.eager(e.execution_id, e.payload.take as EagerSession, true)
        : undefined;
      let r;
      try {
        // Owned here: should it leave memory meanwhile (--cache-executions), it loads again.
        r = await ex.command(e.execution_id, cmd, take?.follow, [e.seq], true);
      } catch (err) {
        take?.failed();
        if (err instanceof InboxGoneError) {
          // Withdrawn by the server that forwarded it (it has answered its client), or applied
          // by an earlier commit that landed: nothing was written, nothing to answer.
          this.#markApplied(e.seq);
          return;
        }
        if (err instanceof OrbitError && err.status < 500 && (await this.#settle(e))) {
          this.#finish(e, { error: errorOf(err) });
        }
        return; // storage errors and fencing: the entry stays for the owner to apply
      }
      // The step the result made ready: to the reporting worker (with the reply), or to a
      // poll waiting here, delivered now that the append committed (Workers.eager).
      const next = take && r ? take.tasks(r) : [];
      if (!r) take?.failed();
      // Applied: the commit of its events deleted the entry, or it is deleted now (unless this
      // node turns out to have lost the execution: the new owner answers it then).
      if ((!r || r.events.length === 0) && !(await this.#settle(e))) return;
      this.#markApplied(e.seq);
      if (cmd.type === "dispatch" && !r?.accepted) {
        await c.sql("hb")(q.CANCEL_TASK, [cmd.token]);
      }
      const m = c.rt!.metrics;
      if (cmd.type === "complete" || cmd.type === "fail") {
        if (!r?.accepted) m.resultsIgnored.inc();
        else if (cmd.type === "fail") m.tasksFailed.inc();
        else m.tasksSucceeded.inc();
      }
      const reply = replyOf(cmd, r ?? null, e.execution_id, c.now());
      if (next.length > 0) reply.tasks = next;
      this.#finish(e, reply);
    } finally {
      this.#applying.delete(e.seq);
    }
  }

  /**
   * Deletes an entry answered without an event (SETTLE_INBOX). False when another node owns
   * the execution, or this one at another epoch: memory here is stale (this node lost it and
   * has not noticed yet), so it is let go, and the entry stays for the owner.
   */
  async #settle(e: InboxEntry): Promise<boolean> {
    const c = this.ctx;
    const id = e.execution_id;
    const held = this.ownership.epochOf(id) ?? null;
    const gone = await c.sql("hb")(q.SETTLE_INBOX, [e.seq, id, c.nodeId, held]);
    if (gone.length > 0) return true;
    const [o] = await c.sql("hb")<{ node_id: string; epoch: number }>(q.OWNER_OF, [id]);
    if (o && (o.node_id !== c.nodeId || (held !== null && Number(o.epoch) !== held))) {
      if (c.rt!.executions.holds(id)) await this.ownership.dropLost([id]);
      return false;
    }
    // Gone already (withdrawn by its sender, or answered before): nothing more to send.
    this.#markApplied(e.seq);
    return false;
  }

  #finish(e: InboxEntry, reply: Omit<Reply, "seq">): void {
    if (!e.reply_to) return;
    let text = JSON.stringify({ seq: e.seq, ...reply });
    if (!fitsNotification(text)) {
      // NOTIFY payloads end at 8000 bytes: what the waiting node can read itself stays out.
      const small: Omit<Reply, "seq"> = { ...reply };
      if (small.row) {
        delete small.row;
        small.row_omitted = true;
      }
      if (small.tasks) {
        small.tasks = small.tasks.map((t) => ({ ...t, input: null }));
        small.inputs_omitted = true;
      }
      text = JSON.stringify({ seq: e.seq, ...small });
    }
    this.notifier.notify([{ channel: "orbit_reply", payload: `${e.reply_to} ${text}` }]);
  }

  /** Entries of executions nobody owns any more: answered as finished, then removed. */
  async orphans(): Promise<void> {
    const c = this.ctx;
    const entries = await c.sql("hb")<InboxEntry & { created_ms: number }>(q.ORPHAN_INBOX, [
      100,
      c.now() - 2000,
    ]);
    for (const e of entries) {
      const gone = await c.sql("hb")(q.DELETE_INBOX, [e.seq]);
      if (gone.length === 0) continue;
      if (e.kind === "dispatched") {
        await c.sql("hb")(q.CANCEL_TASK, [String(e.payload.token)]);
      }
      if (e.kind === "complete" || e.kind === "fail") {
        this.#finish(e, { accepted: false });
      } else {
        this.#finish(e, {
          error: {
            status: 409,
            code: "EXECUTION_FINISHED",
            message: `execution ${e.execution_id} is no longer running`,
          },
        });
      }
    }
  }
}
