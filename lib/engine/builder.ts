/**
 * What every decision module shares: the injected clock and id source (`Context`), the event
 * builder that applies each event to the working copy of the state as it emits it, and the
 * expression scope of a state.
 */
import type { ErrorInfo, EventBody, HistoryEvent } from "./events.ts";
import { ExpressionError, type Scope } from "./expr.ts";
import type { WorkflowDoc } from "./ir.ts";
import { apply, type ExecutionState, isOpenStatus, type StepState } from "./state.ts";
import { type Tree, treeOf } from "./tree.ts";

export interface Context {
  now: number;
  /** A fresh unique id (uuid) — the only source of randomness the core sees. */
  newId: () => string;
  /**
   * The server's limits on child workflows (`--max-child-depth`,
   * `--max-children-per-execution`); absent or null: none. A child step started past one
   * fails with CHILD_LIMIT, recorded in history like every decision: replay reads the
   * failure, never the limit.
   */
  limits?: ChildLimits;
}

export interface ChildLimits {
  /** Deepest child allowed (a root execution is depth 0, its children depth 1). */
  max_depth: number | null;
  /** Child steps one run may have open (started, not ended) at once. */
  max_children: number | null;
}

export class Builder {
  readonly events: HistoryEvent[] = [];
  readonly tree: Tree;
  constructor(readonly def: WorkflowDoc, readonly state: ExecutionState, readonly ctx: Context) {
    this.tree = treeOf(def);
  }
  emit(body: EventBody): HistoryEvent {
    // `seq, type, time_ms` first, so stored and served events read in that order.
    const { type, ...fields } = body;
    const e = {
      seq: this.state.last_seq + 1,
      type,
      time_ms: this.ctx.now,
      ...fields,
    } as HistoryEvent;
    apply(this.state, e);
    this.events.push(e);
    return e;
  }
}

export function isOpen(st: StepState | undefined): st is StepState {
  return !!st && isOpenStatus(st.status);
}

/** The bindings expressions see on a state (queries use it too). */
export function scope(s: ExecutionState, signal?: unknown): Scope {
  return {
    input: s.input,
    steps: s.outputs,
    vars: s.vars,
    ...(signal !== undefined ? { signal } : {}),
    execution: {
      id: s.execution_id,
      run_id: s.run_id,
      root_id: s.root_id,
      parent_id: s.parent_id,
      workflow: s.workflow,
      version: s.version,
      run: s.run_number,
    },
  };
}

/** `@<seq>` when `frame` is a handler run's list or nested in one, else "". */
export function suffixOf(frame: string): string {
  return /@\d+/.exec(frame)?.[0] ?? "";
}

/** The document's id of a step: `charge@7` (a handler run's step) is step `charge`. */
export function baseId(stepId: string): string {
  return stepId.replace(/@\d+/, "");
}

/**
 * The scope of an expression of `frame`. In a handler run, `$signal` is the run's payload and
 * `$steps.<id>` also reads the run's own steps.
 */
export function scopeAt(s: ExecutionState, frame: string): Scope {
  const suffix = suffixOf(frame);
  if (suffix === "") return scope(s);
  const run = s.handlers[suffix.slice(1)];
  const own: Record<string, unknown> = {};
  for (const [id, st] of Object.entries(s.steps)) {
    const at = id.lastIndexOf("@");
    if (at > 0 && id.slice(at) === suffix && st.status === "succeeded") {
      own[id.slice(0, at)] = st.output;
    }
  }
  return { ...scope(s, run?.payload ?? null), steps: { ...s.outputs, ...own } };
}

export function expressionFailure(e: unknown, where: string): ErrorInfo {
  const message = e instanceof ExpressionError ? e.message : String(e);
  const code = e instanceof ExpressionError ? e.code : "EXPRESSION_ERROR";
  return { code, message: `${where}: ${message}`, retryable: false };
}

/** Frame field of an event: omitted for the top level, so orbit-ir/1 events keep their shape. */
export function frameField(frame: string): { frame?: string } {
  return frame === "$" ? {} : { frame };
}
