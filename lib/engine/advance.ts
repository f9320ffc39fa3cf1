/**
 * Moving a run forward: after every accepted command, `advance` walks the step lists from the
 * top, starts the next step of every list that can go on, finishes `if` and `parallel` steps
 * whose branches all reached their end, hands buffered signals to waiting `wait_signal` steps,
 * and ends the run (completed, failed, cancelled, timed out, continued) when it should. It stops
 * when the run waits for something outside: a worker, a timer, a signal, a child, an HTTP call.
 *
 * Every decision it takes is an event, so replay never evaluates an expression: the branch an
 * `if` took, the inputs of tasks, the variables an `assign` set, the id of a child.
 *
 * Handler runs are lists too: after the top level, every handler run in progress is walked (in
 * signal order), its steps named `<id>@<signal seq>`. The run completes when its top-level list
 * reached its end and no handler run is in progress.
 */
import type { ErrorInfo, StartedKind } from "./events.ts";
import { evaluate } from "./expr.ts";
import {
  countSteps,
  DEFAULT_HTTP_TIMEOUT_S,
  HTTP_TASK,
  type HttpStep,
  kindOf,
  MAX_SLEEP_S,
  type Step,
  type TaskStep,
} from "./ir.ts";
import type { Scope } from "./expr.ts";
import {
  type Builder,
  expressionFailure,
  frameField,
  isOpen,
  scopeAt,
  suffixOf,
} from "./builder.ts";
import { beginCompensation, cancelOpen, compensate, timeoutError } from "./saga.ts";
import { ROOT_FRAME } from "./tree.ts";

type Walk = "done" | "blocked" | "progress";

/** Moves the run forward until it waits for something outside or ends. */
export async function advance(b: Builder): Promise<void> {
  const s = b.state;
  // Each turn that makes progress emits at least one event for some step, and a step emits a
  // handful; the bound only stops a turn that would never settle (a defect, not a workflow).
  const bound = 8 * (countSteps(b.def) + s.compensation_queue.length) + 1_000;
  for (let guard = 0; guard < bound; guard++) {
    if (s.phase === "closed") return;
    if (s.phase === "compensating") {
      if (await compensate(b) === "blocked") return;
      continue;
    }
    if (s.failure) {
      cancelOpen(b, "execution failed");
      beginCompensation(b, "failed");
      if (s.phase === "running") b.emit({ type: "WorkflowFailed", error: s.failure });
      continue;
    }
    if (s.cancel_reason !== null) {
      // Cancelled with nothing to compensate.
      b.emit({ type: "WorkflowCancelled", reason: s.cancel_reason });
      continue;
    }
    if (s.timed_out) {
      cancelOpen(b, "workflow timed out");
      beginCompensation(b, "timed_out");
      if (s.phase === "running") b.emit({ type: "WorkflowTimedOut", error: timeoutError(b) });
      continue;
    }
    const r = await walk(b, ROOT_FRAME);
    if (r === "progress" || await walkHandlers(b) === "progress") continue;
    if (r === "done" && Object.keys(s.handlers).length === 0) {
      b.emit({ type: "WorkflowCompleted", output: s.outputs });
      continue;
    }
    return;
  }
  // Never a 500 on every later result: the execution fails, with what happened.
  b.emit({
    type: "WorkflowFailed",
    error: {
      code: "ENGINE_LIMIT",
      message: `the engine took more than ${bound} turns on one decision without settling`,
      retryable: false,
    },
  });
}

/** The step list a frame runs. */
function listOf(b: Builder, frame: string): readonly Step[] {
  if (frame === ROOT_FRAME) return b.def.steps;
  if (/^@\d+$/.test(frame)) {
    const run = b.state.handlers[frame.slice(1)];
    return run ? b.def.handlers?.[run.signal] ?? [] : [];
  }
  return b.tree.frames.get(frame.replace(/@\d+/, "")) ?? [];
}

/** Handler runs, oldest first; one that reached its end is recorded HandlerCompleted. */
async function walkHandlers(b: Builder): Promise<Walk> {
  const seqs = Object.keys(b.state.handlers).map(Number).sort((x, y) => x - y);
  for (const seq of seqs) {
    const r = await walk(b, `@${seq}`);
    if (r === "progress") return r;
    if (r === "done") {
      const signal = b.state.handlers[String(seq)]!.signal;
      b.emit({ type: "HandlerCompleted", signal, signal_seq: seq });
      return "progress";
    }
  }
  return "blocked";
}

/** One step list: start its current step, or look into it when it is open. */
async function walk(b: Builder, frame: string): Promise<Walk> {
  const s = b.state;
  const cursor = frame === ROOT_FRAME ? s.cursor : s.frames[frame]!.cursor;
  const d = listOf(b, frame)[cursor];
  if (!d) return "done";
  const sid = d.id + suffixOf(frame);
  const st = s.steps[sid];
  if (!st) {
    await start(b, d, frame, sid);
    return "progress";
  }
  if (!isOpen(st)) return "blocked"; // failed or cancelled: the run's failure path takes over
  switch (st.kind) {
    case "if":
    case "parallel": {
      let done = true;
      for (const f of st.branches ?? []) {
        const r = await walk(b, f);
        if (r === "progress") return r;
        if (r === "blocked") done = false;
      }
      if (!done) return "blocked";
      const outputs = (st.branches ?? []).map((f) => s.frames[f]!.last_output);
      b.emit({
        type: "StepSucceeded",
        step: st.id,
        attempt: st.attempt,
        output: st.kind === "if" ? outputs[0] ?? null : outputs,
      });
      return "progress";
    }
    case "wait_signal": {
      const sig = s.signals.find((x) => x.signal === st.signal);
      if (!sig) return "blocked";
      b.emit({
        type: "StepSucceeded",
        step: st.id,
        attempt: st.attempt,
        output: sig.payload,
        signal_seq: sig.seq,
      });
      return "progress";
    }
    default:
      return "blocked";
  }
}

/** JSONata's truthiness (`$boolean`), for `if` conditions. */
export function truthy(v: unknown): boolean {
  if (v === null || v === undefined) return false;
  if (Array.isArray(v)) return v.some(truthy);
  if (typeof v === "object") return Object.keys(v).length > 0;
  return Boolean(v);
}

function failStarted(b: Builder, sid: string, frame: string, kind: StartedKind, error: ErrorInfo) {
  b.emit({ type: "StepStarted", step: sid, attempt: 1, kind, ...frameField(frame) });
  b.emit({ type: "StepFailed", step: sid, attempt: 1, error, will_retry: false });
}

function timeoutTimer(b: Builder, id: string, timeoutS: number | undefined) {
  if (!timeoutS) return;
  b.emit({
    type: "TimerStarted",
    timer_id: `timeout:${id}`,
    fire_at_ms: b.ctx.now + Math.round(timeoutS * 1000),
    purpose: "timeout",
    step: id,
    attempt: 1,
  });
}

/** Schedules a task or http step (a failed evaluation is a failed first attempt). */
// deno-lint-ignore no-control-regex
const BAD_HEADER_VALUE = /[\r\n\0]|[^\u0000-\u00ff]/;

function schedule(
  b: Builder,
  d: TaskStep | HttpStep,
  sid: string,
  frame: string,
  input: unknown,
  error: ErrorInfo | null,
) {
  const s = b.state;
  const http = "http" in d;
  const timeoutS = http ? d.timeout_s ?? d.http.timeout_s ?? DEFAULT_HTTP_TIMEOUT_S : d.timeout_s;
  b.emit({
    type: "StepScheduled",
    step: sid,
    attempt: 1,
    task: http ? HTTP_TASK : d.task,
    contract: http ? "1" : d.contract,
    language: http ? null : d.language ?? null,
    input: error ? null : input,
    idempotency_key: `${s.run_id}:${sid}`,
    timeout_ms: timeoutS ? Math.round(timeoutS * 1000) : null,
    ...(http ? { kind: "http" as const } : {}),
    ...frameField(frame),
  });
  if (error) {
    // Recorded as a failed first attempt, so replay reaches the same state.
    b.emit({ type: "StepFailed", step: sid, attempt: 1, error, will_retry: false });
  }
}

async function evalOr(
  tpl: unknown,
  sc: Scope,
  where: string,
): Promise<{ v: unknown; error: null } | { v: null; error: ErrorInfo }> {
  try {
    return { v: await evaluate(tpl, sc), error: null };
  } catch (e) {
    return { v: null, error: expressionFailure(e, where) };
  }
}

/**
 * The server's limits on child workflows (Context.limits): a child deeper than the depth
 * limit, or one more than the open children a run may have, is not started. The failure is
 * the step's (CHILD_LIMIT), so the parent's own failure path runs as for any failed step.
 */
function childLimit(b: Builder, sid: string): ErrorInfo | null {
  const limits = b.ctx.limits;
  const s = b.state;
  const depth = s.depth + 1;
  if (limits?.max_depth != null && depth > limits.max_depth) {
    return {
      code: "CHILD_LIMIT",
      message: `step "${sid}" would start a child at depth ${depth}, beyond the server's ` +
        `limit of ${limits.max_depth} (--max-child-depth)`,
      retryable: false,
      details: { limit: "max_child_depth", max: limits.max_depth, depth },
    };
  }
  if (limits?.max_children != null) {
    let open = 0;
    for (const st of Object.values(s.steps)) if (st.kind === "child" && isOpen(st)) open++;
    if (open >= limits.max_children) {
      return {
        code: "CHILD_LIMIT",
        message: `step "${sid}" would start child ${open + 1} of this run while ${open} ` +
          `run, beyond the server's limit of ${limits.max_children} ` +
          "(--max-children-per-execution)",
        retryable: false,
        details: { limit: "max_children_per_execution", max: limits.max_children, open },
      };
    }
  }
  return null;
}

/** Starts step `d` of `frame` under the name `sid` (`<id>@<seq>` in a handler run). */
async function start(b: Builder, d: Step, frame: string, sid: string): Promise<void> {
  const s = b.state;
  const now = b.ctx.now;
  const f = frameField(frame);
  const sc = scopeAt(s, frame);
  if ("task" in d) {
    const r = await evalOr(d.input ?? null, sc, `step "${sid}" input`);
    return schedule(b, d, sid, frame, r.v, r.error);
  }
  if ("return" in d) {
    const r = await evalOr(d.return, sc, `step "${sid}" return`);
    if (r.error) {
      // A failed return is a step failure like any other: the saga runs first.
      const error = { ...r.error, details: { step: sid } };
      cancelOpen(b, "execution failed");
      beginCompensation(b, "failed", error);
      if (s.phase === "running") b.emit({ type: "WorkflowFailed", error });
      return;
    }
    cancelOpen(b, `step "${sid}" returned`, frame);
    b.emit({ type: "WorkflowCompleted", output: r.v });
    return;
  }
  if ("http" in d) {
    const r = await evalOr(
      { url: d.http.url, headers: d.http.headers ?? {}, body: d.http.body ?? null },
      sc,
      `step "${sid}" http`,
    );
    if (r.error) return schedule(b, d, sid, frame, null, r.error);
    const req = r.v as { url: unknown; headers: unknown; body: unknown };
    if (typeof req.url !== "string" || req.headers === null || typeof req.headers !== "object") {
      return schedule(b, d, sid, frame, null, {
        code: "EXPRESSION_ERROR",
        message: `step "${sid}" http: url must evaluate to a string and headers to an object`,
        retryable: false,
      });
    }
    const headers = Object.fromEntries(
      Object.entries(req.headers).map((
        [k, v],
      ) => [k, typeof v === "string" ? v : JSON.stringify(v)]),
    );
    // What a header value cannot carry (Fetch: no CR, LF or NUL; bytes only): refused here, as
    // the call could never be made.
    const bad = Object.keys(headers).find((k) => BAD_HEADER_VALUE.test(headers[k]!));
    if (bad !== undefined) {
      return schedule(b, d, sid, frame, null, {
        code: "EXPRESSION_ERROR",
        message: `step "${sid}" http: header "${bad}" must evaluate to a value without line ` +
          "breaks, NUL or characters beyond U+00FF",
        retryable: false,
      });
    }
    const hasBody = d.http.body !== undefined;
    return schedule(b, d, sid, frame, {
      method: d.http.method ?? (hasBody ? "POST" : "GET"),
      url: req.url,
      headers,
      ...(hasBody ? { body: req.body } : {}),
    }, null);
  }
  if ("wait_signal" in d) {
    b.emit({
      type: "StepStarted",
      step: sid,
      attempt: 1,
      kind: "wait_signal",
      ...f,
      signal: d.wait_signal,
      ...(d.timeout_s ? { timeout_ms: Math.round(d.timeout_s * 1000) } : {}),
    });
    return timeoutTimer(b, sid, d.timeout_s);
  }
  if ("sleep_s" in d) {
    const r = await evalOr(d.sleep_s, sc, `step "${sid}" sleep_s`);
    const secs = r.v;
    // The cap a literal sleep_s has at deploy holds for a computed one too.
    if (
      r.error || typeof secs !== "number" || !Number.isFinite(secs) || secs < 0 ||
      secs > MAX_SLEEP_S
    ) {
      return failStarted(
        b,
        sid,
        frame,
        "sleep",
        r.error ?? {
          code: "EXPRESSION_ERROR",
          message: `step "${sid}" sleep_s must be a number of seconds from 0 to ${MAX_SLEEP_S}` +
            `, got ${JSON.stringify(secs)?.slice(0, 100)}`,
          retryable: false,
        },
      );
    }
    b.emit({ type: "StepStarted", step: sid, attempt: 1, kind: "sleep", ...f });
    b.emit({
      type: "TimerStarted",
      timer_id: `sleep:${sid}`,
      fire_at_ms: now + Math.round(secs * 1000),
      purpose: "sleep",
      step: sid,
      attempt: 1,
    });
    return;
  }
  if ("child" in d) {
    const input = await evalOr(d.child.input ?? null, sc, `step "${sid}" child input`);
    const fallback = s.run_number === 1
      ? `${s.execution_id}.${sid}`
      : `${s.execution_id}.${sid}.${s.run_number}`;
    const id = d.child.execution_id === undefined
      ? { v: fallback, error: null }
      : await evalOr(d.child.execution_id, sc, `step "${sid}" child execution_id`);
    const error = input.error ?? id.error ??
      (typeof id.v === "string" ? null : {
        code: "EXPRESSION_ERROR",
        message: `step "${sid}" child execution_id must evaluate to a string`,
        retryable: false,
      });
    if (error) return failStarted(b, sid, frame, "child", error);
    const refused = childLimit(b, sid);
    if (refused) return failStarted(b, sid, frame, "child", refused);
    b.emit({
      type: "StepStarted",
      step: sid,
      attempt: 1,
      kind: "child",
      ...f,
      child: {
        workflow: d.child.workflow,
        version: d.child.version ?? null,
        execution_id: id.v as string,
        input: input.v,
      },
      ...(d.timeout_s ? { timeout_ms: Math.round(d.timeout_s * 1000) } : {}),
    });
    return timeoutTimer(b, sid, d.timeout_s);
  }
  if ("parallel" in d) {
    b.emit({
      type: "StepStarted",
      step: sid,
      attempt: 1,
      kind: "parallel",
      ...f,
      branches: d.parallel.length,
    });
    return;
  }
  if ("if" in d) {
    const r = await evalOr(d.if, sc, `step "${sid}" condition`);
    if (r.error) return failStarted(b, sid, frame, "if", r.error);
    const branch = truthy(r.v) ? "then" : "else";
    b.emit({ type: "StepStarted", step: sid, attempt: 1, kind: "if", ...f, branch });
    return;
  }
  if ("assign" in d) {
    const r = await evalOr(d.assign, sc, `step "${sid}" assign`);
    if (r.error) return failStarted(b, sid, frame, "assign", r.error);
    b.emit({
      type: "VarsAssigned",
      step: sid,
      attempt: 1,
      vars: r.v as Record<string, unknown>,
      ...f,
    });
    return;
  }
  if ("continue_as_new" in d) {
    const tpl = d.continue_as_new.input;
    const r = tpl === undefined
      ? { v: s.input, error: null }
      : await evalOr(tpl, sc, `step "${sid}" continue_as_new input`);
    if (r.error) return failStarted(b, sid, frame, "continue_as_new", r.error);
    cancelOpen(b, "continued as new", frame);
    b.emit({
      type: "WorkflowContinuedAsNew",
      step: sid,
      attempt: 1,
      new_run_id: b.ctx.newId(),
      input: r.v,
    });
    return;
  }
  throw new Error(`unknown step kind ${kindOf(d)}`);
}
