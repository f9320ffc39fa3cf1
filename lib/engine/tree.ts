/**
 * The step tree of a validated document, indexed once per document: every step by id (ids
 * are unique across the whole document), the step list ("frame") each one runs in, and the
 * signals some `wait_signal` waits for.
 *
 * Frame ids: `$` is the top-level list; `<if step>.then` / `<if step>.else` and
 * `<parallel step>[<i>]` are branch lists. Step ids hold no `.`, `[` or `$`, so frame ids never
 * collide with each other.
 */
import { kindOf, type Step, type StepKind, type WorkflowDoc } from "./ir.ts";

export const ROOT_FRAME = "$";

export interface StepEntry {
  step: Step;
  kind: StepKind;
  /** The frame the step runs in (null for the top-level steps of a handler). */
  frame: string | null;
  handler: string | null;
}

export interface Tree {
  byId: Map<string, StepEntry>;
  /** Step list of every frame. */
  frames: Map<string, Step[]>;
  /** Signals a `wait_signal` step waits for: only these are buffered. */
  waited: Set<string>;
}

const cache = new WeakMap<WorkflowDoc, Tree>();

export function branchFrame(stepId: string, branch: "then" | "else" | number): string {
  return typeof branch === "number" ? `${stepId}[${branch}]` : `${stepId}.${branch}`;
}

export function treeOf(doc: WorkflowDoc): Tree {
  const hit = cache.get(doc);
  if (hit) return hit;
  const t: Tree = { byId: new Map(), frames: new Map(), waited: new Set() };
  const walk = (steps: Step[], frame: string | null, handler: string | null) => {
    if (frame !== null) t.frames.set(frame, steps);
    for (const s of steps) {
      const kind = kindOf(s);
      t.byId.set(s.id, { step: s, kind, frame, handler });
      if ("wait_signal" in s) t.waited.add(s.wait_signal);
      // Branch lists of handler steps are registered under their document ids too: a
      // handler run's frame `x@7.then` runs the list of `x.then`.
      if ("parallel" in s) s.parallel.forEach((b, i) => walk(b, branchFrame(s.id, i), handler));
      if ("if" in s) {
        for (const b of ["then", "else"] as const) walk(s[b] ?? [], branchFrame(s.id, b), handler);
      }
    }
  };
  walk(doc.steps, ROOT_FRAME, null);
  for (const [name, steps] of Object.entries(doc.handlers ?? {})) walk(steps, null, name);
  cache.set(doc, t);
  return t;
}
