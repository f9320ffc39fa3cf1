/**
 * `Workers.PollStream`: the worker protocol's poll as a server stream that pushes tasks as the
 * session's slots free (proto/orbit/v1/workers.proto), built on the binding's own calls: behind
 * the stream are the long polls of `POST /v1/workers/poll`, made through the server's HTTP
 * handler as every call of the binding is, for as many tasks as there are free slots.
 *
 * Slots: each task pushed holds one until the worker is done with it, which this server learns
 * from the calls passing through the binding (the {@link SlotEvents} server.ts feeds): a
 * Complete or Fail of the token answered here, or a Heartbeat of the session that no longer
 * lists it (the result went over HTTP, or to another server) — a heartbeat that arrived after
 * the answer to one that arrived after the push, so sent once the worker had the task (a push and
 * the answers on one connection arrive in order). With every slot held, no poll is
 * in flight: the stream waits for one of those events. A poll's error (UNKNOWN_SESSION, a
 * standby's NOT_LEADER, …) ends the stream with that error's status and metadata; the client's
 * cancellation ends the poll in flight, as a closed HTTP connection does.
 */
import type * as grpc from "@grpc/grpc-js";
import { taskMessage } from "./methods.ts";

/** The least time between two polls of a stream that answered no task. */
const MIN_EMPTY_POLL_MS = 250;

/** What frees a slot: results and heartbeats the binding answered. */
export class SlotEvents {
  readonly #watchers = new Set<(e: SlotEvent) => void>();

  /** A Complete or Fail of `token` was answered (accepted or not: the worker is done with it). */
  reported(token: string): void {
    for (const w of this.#watchers) w({ kind: "reported", token });
  }

  /** A Heartbeat of `session` listed `tokens` as the ones it still runs. */
  heartbeat(session: string, tokens: string[]): void {
    for (const w of this.#watchers) w({ kind: "heartbeat", session, tokens });
  }

  watch(w: (e: SlotEvent) => void): () => void {
    this.#watchers.add(w);
    return () => this.#watchers.delete(w);
  }
}

type SlotEvent =
  | { kind: "reported"; token: string }
  | { kind: "heartbeat"; session: string; tokens: string[] };

/** The HTTP answer of one request through the server's handler. */
export interface Outcome {
  status: number;
  text: string;
  headers: Headers;
}

export interface PollStreamDeps {
  events: SlotEvents;
  /** NOT_LEADER on a standby that does not lead, else null. */
  refused(): Partial<grpc.StatusObject> | null;
  /** One request through the HTTP handler with the call's credentials and cancellation. */
  dispatch(
    call: grpc.ServerWritableStream<Record<string, unknown>, unknown>,
    path: string,
    body: string,
  ): Promise<Outcome>;
  /** An error answer as the binding's status. */
  error(out: Outcome): Partial<grpc.StatusObject>;
}

/**
 * Serves one PollStream call until the client cancels it or a poll fails (then the call ends
 * with that error): it never ends on its own.
 */
export async function pollStream(
  call: grpc.ServerWritableStream<Record<string, unknown>, unknown>,
  deps: PollStreamDeps,
): Promise<void> {
  const refused = deps.refused();
  if (refused) {
    call.emit("error", refused);
    return;
  }
  const session = String(call.request.session_id ?? "");
  const slots = Math.max(1, Number(call.request.slots ?? 1));
  const waitS = call.request.wait_s as number | undefined;
  /** The tasks out: token → the number of the session's heartbeats seen when it was pushed. */
  const held = new Map<string, number>();
  let beats = 0;
  let cancelled = false;
  let wake: (() => void) | null = null;
  const poke = () => {
    const w = wake;
    wake = null;
    w?.();
  };
  call.on("cancelled", () => {
    cancelled = true;
    poke();
  });
  const unwatch = deps.events.watch((e) => {
    if (e.kind === "reported") {
      if (held.delete(e.token)) poke();
    } else if (e.session === session) {
      beats++;
      const running = new Set(e.tokens);
      for (const [t, at] of [...held]) if (beats >= at + 2 && !running.has(t)) held.delete(t);
      if (held.size < slots) poke();
    }
  });
  try {
    while (!cancelled) {
      if (held.size >= slots) {
        await new Promise<void>((resolve) => wake = resolve);
        continue;
      }
      const body = JSON.stringify({
        session_id: session,
        max_tasks: slots - held.size,
        ...(waitS !== undefined ? { wait_s: waitS } : {}),
      });
      const began = Date.now();
      const out = await deps.dispatch(call, "/v1/workers/poll", body);
      if (cancelled) return;
      if (out.status >= 300) {
        call.emit("error", deps.error(out));
        return;
      }
      const tasks = (JSON.parse(out.text).tasks ?? []) as Array<Record<string, unknown>>;
      for (const t of tasks) {
        held.set(String(t.token), beats);
        call.write(taskMessage(t));
      }
      // A poll that answers nothing at once (wait_s 0, a server stopping: its polls are
      // released) is not repeated at once: the stream would spin.
      const early = MIN_EMPTY_POLL_MS - (Date.now() - began);
      if (tasks.length === 0 && early > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, early);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = null;
      }
    }
  } finally {
    unwatch();
  }
}
