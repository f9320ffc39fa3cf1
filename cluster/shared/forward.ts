/**
 * Shared mode's forwarding, on the sender's side: a command for an execution another node
 * owns goes into that owner's inbox (orbit_inbox, NOTIFY orbit_inbox), and waits up to 10 s for
 * its reply (NOTIFY orbit_reply); with none, the entry is withdrawn and the request answers
 * 503 OWNER_UNAVAILABLE. Owned here (a takeover in progress), the command is applied here.
 */
import type { Command } from "../../lib/engine/decide.ts";
import { OrbitError, storageError, storageFailure } from "../../lib/errors.ts";
import type { ExecutionRow } from "../../lib/store/store.ts";
import type { EagerSession, TaskPayload } from "../../lib/workers/sessions.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { SharedContext } from "./context.ts";
import { fitsNotification, type Inbox, replyOf } from "./inbox.ts";
import type { Membership } from "./membership.ts";
import { inboxOf, type Reply } from "./messages.ts";
import type { Notifier } from "./notify.ts";
import type { Ownership } from "./ownership.ts";

const FORWARD_WAIT_MS = 10_000;
/** How long a forward whose entry the owner deleted (applied or answered) waits for the reply. */
const FORWARD_LATE_REPLY_MS = 2_000;
/** Replies that came with no waiter, kept for one that registers late (Forwarder.#early). */
const EARLY_REPLIES_MAX = 1_000;

export type Forwarded = {
  accepted: boolean;
  row?: ExecutionRow;
  seq?: number;
  tasks?: TaskPayload[];
};

export class Forwarder {
  #replies = new Map<number, (r: Reply) => void>();
  #early = new Map<number, Reply>();

  constructor(
    readonly ctx: SharedContext,
    readonly parts: {
      ownership: Ownership;
      inbox: Inbox;
      membership: Membership;
      notifier: Notifier;
    },
  ) {}

  /** A reply to one of this node's forwards (NOTIFY orbit_reply, the text after the node id). */
  onReply(text: string): void {
    try {
      const r = JSON.parse(text) as Reply;
      const waiter = this.#replies.get(r.seq);
      if (waiter) waiter(r);
      else {
        // Before its waiter (rare), or after the waiter gave up: kept, the oldest dropped.
        this.#early.set(r.seq, r);
        if (this.#early.size > EARLY_REPLIES_MAX) {
          this.#early.delete(this.#early.keys().next().value!);
        }
      }
    } catch { /* not ours */ }
  }

  /**
   * Applies `cmd` on the owner of `id`. Owned here but not loaded (a takeover in progress):
   * loads it and applies it here. Owned elsewhere: the owner's inbox, and its reply (10 s at
   * most). Null when nobody owns it.
   */
  async forward(id: string, cmd: Command, take?: EagerSession): Promise<Forwarded | null> {
    const c = this.ctx;
    const { ownership, inbox, membership, notifier } = this.parts;
    const ex = c.rt!.executions;
    const { kind, payload } = inboxOf(cmd);
    if (take && (cmd.type === "complete" || cmd.type === "fail")) payload.take = take;
    const waits = cmd.type !== "uncertain";
    // The owner, and the entry in its inbox when it is another node, in one statement.
    const [o] = await c.sql("req")<
      { node_id: string; epoch: number; instance: string | null; seq: number | null }
    >(
      q.FORWARD,
      [c.nodeId, id, kind, payload, c.now(), waits ? c.nodeId : null],
    );
    if (!o) return null;
    if (o.node_id === c.nodeId) {
      const epoch = o.instance === c.instance ? Number(o.epoch) : await ownership.reclaim(id);
      if (epoch === null) throw membership.replacedError(id);
      if (!ex.holds(id)) ownership.hold(id, epoch);
      let r = await ex.command(id, cmd, undefined, undefined, true);
      if (
        r && !r.accepted && r.events.length === 0 &&
        (cmd.type === "complete" || cmd.type === "fail") && (await inbox.drainExecution(id)) > 0
      ) {
        // Loaded just now from history (a takeover in progress): the attempt's dispatch may
        // still be an entry of this node's inbox, written by another server's claim.
        r = await ex.command(id, cmd, undefined, undefined, true);
      }
      if (!r) return null;
      const reply = replyOf(cmd, r, id, c.now());
      if (reply.error) throw errorOfReply(reply.error);
      return {
        accepted: reply.accepted ?? false,
        ...(reply.row ? { row: reply.row } : {}),
        ...(reply.signal_seq !== undefined ? { seq: reply.signal_seq } : {}),
      };
    }
    const seq = Number(o.seq);
    c.rt!.metrics.commandsForwarded.inc({ kind });
    // A result travels with its notification when it fits (the owner then needs no inbox
    // read); anything else only names the owner.
    let note = o.node_id;
    if (kind === "complete" || kind === "fail") {
      const text = `${o.node_id} ${
        JSON.stringify({ seq, execution_id: id, kind, payload, reply_to: c.nodeId })
      }`;
      if (fitsNotification(text)) note = text;
    }
    notifier.notify([{ channel: "orbit_inbox", payload: note }]);
    if (!waits) return { accepted: true };
    let reply = await this.#awaitReply(seq, FORWARD_WAIT_MS);
    if (!reply) {
      // Withdraw the entry: once it is deleted here, the owner's commit of it cannot land
      // (COMMIT_OWNED locks its entries and writes nothing for one gone), so a retry is safe.
      let withdrawn: number;
      try {
        withdrawn = (await c.sql("req")(q.DELETE_INBOX, [seq])).length;
      } catch (err) {
        // The entry may still be there, and be applied later: not "nothing was applied".
        throw storageFailure(err) ?? storageError(err);
      }
      // Gone already: the owner applied or answered it; its reply is on its way (or was lost).
      if (withdrawn === 0) reply = await this.#awaitReply(seq, FORWARD_LATE_REPLY_MS);
      if (!reply && withdrawn > 0) {
        throw new OrbitError(
          503,
          "OWNER_UNAVAILABLE",
          `execution ${id} is owned by node \`${o.node_id}\`, which did not apply the request ` +
            "within 10 s (it may have stopped; another node takes its executions over after " +
            "--node-timeout); nothing was applied, retry",
          { owner_node: o.node_id, retry_after_s: 1 },
          { "retry-after": "1" },
        );
      }
      if (!reply) {
        throw new OrbitError(
          500,
          "STORAGE_ERROR",
          `STORAGE_ERROR: execution ${id} is owned by node \`${o.node_id}\`, which took the ` +
            "request but whose answer was lost: it may have been applied; read the execution " +
            "(its history) before retrying",
          { owner_node: o.node_id },
        );
      }
    }
    if (reply.error) throw errorOfReply(reply.error);
    // A reply too large for a notification leaves out the row and the tasks' inputs (both
    // committed before the reply was sent): read them here.
    let row = reply.row;
    if (reply.row_omitted) row = (await c.store!.getExecution(id)) ?? undefined;
    let tasks = reply.tasks ?? [];
    if (reply.inputs_omitted && tasks.length > 0) {
      const inputs = new Map(
        (await c.sql("req")<{ token: string; input: unknown }>(q.TASK_INPUTS, [
          tasks.map((t) => t.token),
        ]).catch(() => [])).map((r) => [r.token, r.input]),
      );
      // A task whose row is gone is not handed out: its owner redelivers it when the worker's
      // heartbeats never list it.
      tasks = tasks.filter((t) => inputs.has(t.token)).map((t) => ({
        ...t,
        input: inputs.get(t.token),
      }));
    }
    return {
      accepted: reply.accepted ?? false,
      ...(row ? { row } : {}),
      ...(reply.signal_seq !== undefined ? { seq: reply.signal_seq } : {}),
      ...(tasks.length > 0 ? { tasks } : {}),
    };
  }

  #awaitReply(seq: number, ms: number): Promise<Reply | null> {
    const early = this.#early.get(seq);
    if (early) {
      this.#early.delete(seq);
      return Promise.resolve(early);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#replies.delete(seq);
        resolve(null);
      }, ms);
      this.#replies.set(seq, (r) => {
        clearTimeout(timer);
        this.#replies.delete(seq);
        resolve(r);
      });
    });
  }
}

function errorOfReply(e: NonNullable<Reply["error"]>): OrbitError {
  return new OrbitError(e.status, e.code, e.message, e.fields ?? {});
}
