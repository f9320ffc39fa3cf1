/**
 * Shared mode's notification bus: the outbox of NOTIFYs sent after the commits they announce,
 * the waiters for an execution's end, and the six channels a node listens on (orbit_tasks,
 * orbit_inbox, orbit_done, orbit_wait, orbit_defs, orbit_reply).
 */
import { setImmediate } from "node:timers";
import type postgres from "postgres";
import { log } from "../../lib/log.ts";
import * as q from "../../sql/postgres/shared/mod.ts";
import type { SharedContext } from "./context.ts";
import type { InboxEntry } from "./messages.ts";

/** How long notifications nobody awaits on the request path wait for others to join them. */
const NOTIFY_BATCH_MS = 5;
/**
 * A wait on a server that does not hold the execution announces itself (`NOTIFY orbit_wait`)
 * when it begins and again this often while it lasts (its one-second re-reads ask again; a
 * takeover's new owner hears of it within this time).
 */
export const WAIT_ANNOUNCE_MS = 5_000;
/** How long a node remembers an announced wait: two announcements, and some. */
export const WAIT_MEMORY_MS = 2 * WAIT_ANNOUNCE_MS + 1_000;
/**
 * A node announces rows it queued for its own polling workers (`served`, see TasksAnnounced) at
 * most this often; rows queued meanwhile are announced at the end of the interval, together.
 * Such an announcement asks the other nodes to look only after FOREIGN_TASK_DELAY_MS (200 ms),
 * so holding it back up to this long changes little for them, and it spares a statement per
 * commit that queued rows: under load nearly every start queues its first task this way (the
 * owner's slots are busy), about one NOTIFY statement for every two orders with three capped
 * servers, each received and handled by every node (issue 39; docs/performance-log.md).
 */
export const SERVED_ANNOUNCE_MS = 100;
/** Beyond this many remembered waits (either map), expired entries are dropped on the next one. */
const WAIT_MAPS_PRUNE_AT = 10_000;

export type Notification = { channel: string; payload: string };

export class Notifier {
  /** Notifications waiting for the statement in flight (see notify). */
  #outbox = new Map<string, Notification>();
  #notifying = false;
  /** Ends the batching wait of notifications at once (an urgent one arrived). */
  #hurry: (() => void) | null = null;
  #done = new Map<string, Set<() => void>>();
  /**
   * Executions some server's clients wait for without holding them (orbit_wait, this node's own
   * included), each until when it is remembered, oldest first: their end is announced to every
   * server (`NOTIFY orbit_done`); the others' is not (waitedElsewhere).
   */
  #waited = new Map<string, number>();
  /** When this node last announced a wait for each execution (announceWait). */
  #announced = new Map<string, number>();
  /**
   * No other node heartbeated within the node timeout at the last heartbeat: `orbit_tasks` and
   * `orbit_done` would reach only this node's own listener, so they are delivered in memory and
   * not sent. A node that joins meanwhile is seen at the next heartbeat (within a second); until
   * then its polls and waits find work by their one-second re-check.
   */
  alone = false;
  /** When this node last sent a `served` announcement (announceServed). */
  #servedAt = -Infinity;
  /** A held-back `served` announcement, sent at the end of its interval. */
  #servedTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(readonly ctx: SharedContext) {}

  /**
   * Announces rows this node queued for its own polling workers (`payload`: tasksPayload(id,
   * true)), at most once per SERVED_ANNOUNCE_MS: one that comes sooner after the last is sent
   * when that interval ends, once for however many came.
   */
  announceServed(payload: string): void {
    const wait = this.#servedAt + SERVED_ANNOUNCE_MS - this.ctx.now();
    if (wait <= 0) {
      this.#servedAt = this.ctx.now();
      this.notify([{ channel: "orbit_tasks", payload }]);
      return;
    }
    if (this.#servedTimer !== null) return;
    this.#servedTimer = setTimeout(() => {
      this.#servedTimer = null;
      this.#servedAt = this.ctx.now();
      this.notify([{ channel: "orbit_tasks", payload }]);
    }, wait);
  }

  /** Drops a held-back announcement (the node stops). */
  stop(): void {
    if (this.#servedTimer !== null) clearTimeout(this.#servedTimer);
    this.#servedTimer = null;
  }

  /** Waits for the end of `execId` on this server look again. */
  wakeDone(execId: string): void {
    for (const w of [...(this.#done.get(execId) ?? [])]) w();
  }

  /**
   * Ownership.onDone: wakes `wake` when `execId` may have closed; answers an unsubscribe. The
   * wait is announced to the servers (announceWait), so that its owner notifies its end.
   */
  onDone(execId: string, wake: () => void): () => void {
    let set = this.#done.get(execId);
    if (!set) this.#done.set(execId, set = new Set());
    set.add(wake);
    this.#announceWait(execId);
    return () => {
      set!.delete(wake);
      if (set!.size === 0) this.#done.delete(execId);
    };
  }

  /**
   * `NOTIFY orbit_wait` for a wait here on an execution this node does not hold, at most every
   * WAIT_ANNOUNCE_MS per execution. Alone, nobody else could end it: nothing is sent.
   */
  #announceWait(execId: string): void {
    if (this.alone || !this.ctx.conns) return;
    const now = this.ctx.now();
    const last = this.#announced.get(execId);
    if (last !== undefined && now - last < WAIT_ANNOUNCE_MS) return;
    remember(this.#announced, execId, now, now - WAIT_ANNOUNCE_MS);
    this.notify([{ channel: "orbit_wait", payload: execId }]);
  }

  /** A server announced a wait for `execId` (orbit_wait). */
  waited(execId: string): void {
    const now = this.ctx.now();
    remember(this.#waited, execId, now + WAIT_MEMORY_MS, now);
  }

  /**
   * Of the executions a commit of this node closed, those whose end is announced
   * (`NOTIFY orbit_done`): the ones a server announced a wait for. A client waiting on this
   * node, which holds the execution, is woken in memory (wakeDone); one that waits elsewhere
   * announced itself, or finds the end by its one-second re-read (a wait that began in the few
   * milliseconds before the end, before its announcement arrived; one of a server of an
   * earlier version, which does not announce).
   */
  waitedElsewhere(closed: string[]): string[] {
    if (this.#waited.size === 0) return [];
    const now = this.ctx.now();
    return closed.filter((id) => {
      const until = this.#waited.get(id);
      if (until === undefined) return false;
      this.#waited.delete(id);
      return until >= now;
    });
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

/**
 * Sets `key` to `value` in `map` as its newest entry; past WAIT_MAPS_PRUNE_AT entries, drops
 * the oldest ones whose value is below `expired` (values grow with insertion).
 */
function remember(map: Map<string, number>, key: string, value: number, expired: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size <= WAIT_MAPS_PRUNE_AT) return;
  for (const [k, v] of map) {
    if (v >= expired) break;
    map.delete(k);
  }
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
  /** A server's client waits for `execId` without that server holding it. */
  wait(execId: string): void;
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
  await sql.listen("orbit_wait", (execId) => on.wait(execId));
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
