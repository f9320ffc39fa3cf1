/**
 * Shared mode's notification bus: the outbox of NOTIFYs sent after the commits they announce,
 * the waiters for an execution's end, and the five channels a node listens on (orbit_tasks,
 * orbit_inbox, orbit_done, orbit_defs, orbit_reply).
 */
import { setImmediate } from "node:timers";
import type postgres from "postgres";
import { log } from "../../lib/log.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { SharedContext } from "./context.ts";
import type { InboxEntry } from "./messages.ts";

/** How long notifications nobody awaits on the request path wait for others to join them. */
const NOTIFY_BATCH_MS = 5;

export type Notification = { channel: string; payload: string };

export class Notifier {
  /** Notifications waiting for the statement in flight (see notify). */
  #outbox = new Map<string, Notification>();
  #notifying = false;
  /** Ends the batching wait of notifications at once (an urgent one arrived). */
  #hurry: (() => void) | null = null;
  #done = new Map<string, Set<() => void>>();
  /**
   * No other node heartbeated within the node timeout at the last heartbeat: `orbit_tasks` and
   * `orbit_done` would reach only this node's own listener, so they are delivered in memory and
   * not sent. A node that joins meanwhile is seen at the next heartbeat (within a second); until
   * then its polls and waits find work by their one-second re-check.
   */
  alone = false;

  constructor(readonly ctx: SharedContext) {}

  /** Waits for the end of `execId` on this server look again. */
  wakeDone(execId: string): void {
    for (const w of [...(this.#done.get(execId) ?? [])]) w();
  }

  /** Ownership.onDone: wakes `wake` when `execId` may have closed; answers an unsubscribe. */
  onDone(execId: string, wake: () => void): () => void {
    let set = this.#done.get(execId);
    if (!set) this.#done.set(execId, set = new Set());
    set.add(wake);
    return () => {
      set!.delete(wake);
      if (set!.size === 0) this.#done.delete(execId);
    };
  }

  /**
   * Sends notifications in a statement of their own, after the commit they announce (a NOTIFY
   * inside a writing transaction would serialize every commit of the cluster). One statement
   * is in flight at a time; what arrives meanwhile goes out together in the next one, each
   * channel and payload once (replies are unique). A lost one is covered by the one-second
   * re-checks of polls, waits and the inbox.
   */
  notify(list: Notification[]): void {
    if (list.length === 0 || !this.ctx.conns) return;
    let urgent = false;
    for (const n of list) {
      if (this.alone && n.channel === "orbit_tasks") {
        this.ctx.workers?.wake(); // what this node's listener would have done
        continue;
      }
      if (this.alone && n.channel === "orbit_done") {
        this.wakeDone(n.payload);
        continue;
      }
      this.#outbox.set(`${n.channel}\u0000${n.payload}`, n);
      if (n.channel === "orbit_inbox" || n.channel === "orbit_reply") urgent = true;
    }
    if (this.#outbox.size === 0) return;
    if (urgent) this.#hurry?.();
    if (!this.#notifying) void this.#send(urgent);
  }

  async #send(urgent: boolean): Promise<void> {
    this.#notifying = true;
    try {
      // Let the commits that end in this turn of the event loop add theirs. What nobody
      // awaits on the request path (new tasks, finished executions: polls and waits also look
      // again every second) waits a little longer, to go out together with more.
      await new Promise<void>((r) => {
        if (urgent) return setImmediate(r);
        const t = setTimeout(done, NOTIFY_BATCH_MS);
        this.#hurry = done;
        function done() {
          clearTimeout(t);
          r();
        }
      });
      this.#hurry = null;
      while (this.#outbox.size > 0 && this.ctx.conns) {
        const batch = [...this.#outbox.values()];
        this.#outbox.clear();
        const m = this.ctx.rt?.metrics;
        if (m) { for (const n of batch) m.notificationsSent.inc({ channel: n.channel }); }
        await this.ctx.sql("req")(q.NOTIFY, [batch]).catch((e) =>
          log.shared.warn("shared: cannot send notifications", { error: (e as Error).message })
        );
      }
    } finally {
      this.#notifying = false;
    }
  }
}

/**
 * Who an `orbit_tasks` announcement is for:
 * - `own`: this node queued the rows (its memory holds them, its commit woke its polls);
 * - `served`: another node queued them, and workers poll that node: its own polls take them in
 *   memory as their slots free (no claim statement; the result comes back to the owner, no
 *   forward), so this node looks for them only after FOREIGN_TASK_DELAY_MS;
 * - `open`: rows nobody is about to take: queued by a node no worker polls, or put back (a
 *   release, a takeover): this node looks at once.
 */
export type TasksAnnounced = "own" | "served" | "open";

/** The payload announcing rows `nodeId` queued; `served`: workers poll it (see TasksAnnounced). */
export function tasksPayload(nodeId: string, served: boolean): string {
  return served ? nodeId : `${nodeId} open`;
}

/**
 * What an `orbit_tasks` payload (tasksPayload; "" for rows put back) tells node `me`. A server of
 * an earlier version names itself alone: `served`, which costs its rows the delay at most.
 */
export function tasksAnnounced(payload: string, me: string): TasksAnnounced {
  if (payload === me || payload === `${me} open`) return "own";
  return payload === "" || payload.endsWith(" open") ? "open" : "served";
}

/** What a node does with each channel it listens on. */
export interface Listeners {
  /** Rows were queued or put back (see TasksAnnounced). */
  tasks(announced: TasksAnnounced): void;
  /** Announcements may have been lost (the listener reconnected): polls look again. */
  tasksMissed(): void;
  /** This node's inbox has entries (`entry`: a result that came with its notification). */
  inbox(entry?: InboxEntry): void;
  done(execId: string): void;
  /** A workflow deployed through another server (`null`: any, the listener reconnected). */
  defs(name: string | null): void;
  /** A reply to a forward of this node's (the text after the node id). */
  reply(text: string): void;
}

/** Listens on the five channels, for node `id`. */
export async function listen(sql: postgres.Sql, id: string, on: Listeners): Promise<void> {
  // Rows another node queued (or put back) may be claimed here; this node's own are in its
  // memory already (its commit woke the polls). (Re)connected: what was announced meanwhile
  // is lost, so polls look again.
  await sql.listen(
    "orbit_tasks",
    (payload) => on.tasks(tasksAnnounced(payload, id)),
    () => on.tasksMissed(),
  );
  await sql.listen("orbit_inbox", (payload) => {
    const sp = payload.indexOf(" ");
    if ((sp < 0 ? payload : payload.slice(0, sp)) !== id) return;
    if (sp < 0) return on.inbox();
    try {
      on.inbox(JSON.parse(payload.slice(sp + 1)) as InboxEntry);
    } catch {
      on.inbox();
    }
  });
  await sql.listen("orbit_done", (execId) => on.done(execId));
  // A deploy through another server clears that workflow's cached latest version; whenever
  // the listening connection is (re)established (postgres.js listens again after it breaks),
  // every cached latest version is dropped, since what was announced meanwhile is lost.
  await sql.listen("orbit_defs", (name) => on.defs(name), () => on.defs(null));
  await sql.listen("orbit_reply", (payload) => {
    const sp = payload.indexOf(" ");
    if (payload.slice(0, sp) !== id) return;
    on.reply(payload.slice(sp + 1));
  });
}
