/**
 * Signals: a SignalReceived event records every signal a running execution accepts.
 *
 * - When the workflow declares a handler for it, the event opens a handler run: the handler's
 *   steps (any kind but `return` and `continue_as_new`) run in the frame `@<seq>` with `$signal`
 *   bound to the payload, named `<step id>@<seq>` so that runs for several signals go on side
 *   by side. `advance.ts` walks them after the top-level list; steps that need no outside help
 *   (`assign`, `if`) finish in the same decision. HandlerCompleted ends the run; the workflow
 *   completes only when no handler run is left.
 * - When some `wait_signal` step of the workflow waits for the signal's name, the signal is
 *   also buffered; the next wait for that name (one already waiting, or a later one) consumes
 *   it.
 *
 * While the saga runs (compensating), or once a failure is recorded, signals are recorded but
 * no handler runs.
 */
import type { Builder } from "./builder.ts";

export function receiveSignal(b: Builder, name: string, payload: unknown): void {
  const s = b.state;
  const handler = b.def.handlers?.[name];
  b.emit({
    type: "SignalReceived",
    signal: name,
    payload: payload ?? null,
    ...(b.tree.waited.has(name) ? { buffered: true } : {}),
    ...(handler && s.phase === "running" && !s.failure ? { handler: true } : {}),
  });
}
