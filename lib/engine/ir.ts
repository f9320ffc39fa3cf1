/**
 * The workflow IR (`orbit-ir/1` and its superset `orbit-ir/2`): document types and the helpers
 * the core shares. `validate.ts` checks a document; nothing here does I/O.
 *
 * Step kinds are told apart by their kind key (`task`, `return`, and, for `orbit-ir/2`, the
 * keys listed in IR2_KINDS). A document names exactly one IR version.
 */
export const SUPPORTED_IR = ["orbit-ir/1", "orbit-ir/2"] as const;
export const IR2_KINDS = [
  "wait_signal",
  "sleep_s",
  "http",
  "child",
  "parallel",
  "if",
  "assign",
  "continue_as_new",
] as const;
export const NAME_RE = /^[A-Za-z][A-Za-z0-9_.-]{0,127}$/;
/**
 * A semantic version as semver.org's own expression has it (no leading zeros, no empty
 * identifiers), each number at most 15 digits (below 2^53, which npm `semver` refuses) and 128
 * characters in all: every version deploy accepts is one that sorting and "the latest" can read.
 */
export const SEMVER_RE = new RegExp(
  "^(?=.{5,128}$)(0|[1-9]\\d{0,14})\\.(0|[1-9]\\d{0,14})\\.(0|[1-9]\\d{0,14})" +
    "(?:-(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\\.(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?" +
    "(?:\\+[0-9a-zA-Z-]+(?:\\.[0-9a-zA-Z-]+)*)?$",
);
/** The longest sleep, wait or timeout a definition may ask for (a year), literal or computed. */
export const MAX_SLEEP_S = 31_536_000;

export interface RetryPolicy {
  max_attempts: number;
  initial_ms: number;
  backoff: number;
  max_ms: number;
  non_retryable: string[];
}

/** Applied where a step gives no `retry` (or leaves out some of its fields). */
export const DEFAULT_RETRY: RetryPolicy = {
  max_attempts: 3,
  initial_ms: 1000,
  backoff: 2,
  max_ms: 60_000,
  non_retryable: [],
};

/** Timeout of one HTTP attempt when the step gives no `timeout_s`. */
export const DEFAULT_HTTP_TIMEOUT_S = 30;

/** The built-in task name under which `http` steps are scheduled (the server runs them). */
export const HTTP_TASK = "orbit.http";

export interface TaskSpec {
  task: string;
  contract: string;
  language?: string;
  input?: unknown;
  retry?: Partial<RetryPolicy>;
  timeout_s?: number;
}

export interface TaskStep extends TaskSpec {
  id: string;
  compensate?: TaskSpec;
}

export interface ReturnStep {
  id: string;
  return: unknown;
}

export interface WaitSignalStep {
  id: string;
  wait_signal: string;
  timeout_s?: number;
}

export interface SleepStep {
  id: string;
  /** Seconds, or a `{% %}` expression that evaluates to seconds. */
  sleep_s: number | string;
}

export interface HttpRequestSpec {
  method?: string;
  url: string;
  headers?: Record<string, unknown>;
  body?: unknown;
  timeout_s?: number;
}

export interface HttpStep {
  id: string;
  http: HttpRequestSpec;
  retry?: Partial<RetryPolicy>;
  timeout_s?: number;
}

export interface ChildStep {
  id: string;
  child: { workflow: string; version?: string; input?: unknown; execution_id?: string };
  timeout_s?: number;
}

export interface ParallelStep {
  id: string;
  parallel: Step[][];
}

export interface IfStep {
  id: string;
  if: string | boolean;
  then?: Step[];
  else?: Step[];
}

export interface AssignStep {
  id: string;
  assign: Record<string, unknown>;
}

export interface ContinueAsNewStep {
  id: string;
  continue_as_new: { input?: unknown };
}

export type Step =
  | TaskStep
  | ReturnStep
  | WaitSignalStep
  | SleepStep
  | HttpStep
  | ChildStep
  | ParallelStep
  | IfStep
  | AssignStep
  | ContinueAsNewStep;

export interface SignalDecl {
  schema?: Record<string, unknown>;
  description?: string;
}

export interface WorkflowDoc {
  ir: string;
  name: string;
  version: string;
  description?: string;
  input_schema?: Record<string, unknown>;
  /** orbit-ir/2: the whole execution's deadline, from its first run's start. */
  timeout_s?: number;
  signals?: Record<string, SignalDecl>;
  queries?: Record<string, unknown>;
  handlers?: Record<string, Step[]>;
  steps: Step[];
}

/** The most steps a definition may hold, counted by countSteps. */
export const MAX_STEPS = 10_000;

/**
 * The steps of a document at every depth: `then`/`else` and `parallel` branches, handlers, and
 * a task step's compensation each count. Reads an unchecked document too (anything that is not a
 * list of objects counts nothing), so deploy can judge a document before it is typed.
 */
export function countSteps(doc: unknown): number {
  if (doc === null || typeof doc !== "object") return 0;
  let n = counted.get(doc);
  if (n === undefined) counted.set(doc, n = count(doc));
  return n;
}

/** countSteps per document object (a deployed definition is one object while cached). */
const counted = new WeakMap<object, number>();

function count(doc: unknown): number {
  const isObj = (v: unknown): v is Record<string, unknown> =>
    v !== null && typeof v === "object" && !Array.isArray(v);
  const list = (v: unknown): number => {
    if (!Array.isArray(v)) return 0;
    let n = 0;
    for (const s of v) {
      if (!isObj(s)) continue;
      n += 1 + (isObj(s.compensate) ? 1 : 0) + list(s.then) + list(s.else);
      if (Array.isArray(s.parallel)) { for (const b of s.parallel) n += list(b); }
    }
    return n;
  };
  if (!isObj(doc)) return 0;
  let n = list(doc.steps);
  if (isObj(doc.handlers)) { for (const h of Object.values(doc.handlers)) n += list(h); }
  return n;
}

export interface Problem {
  path: string;
  message: string;
}

export type StepKind =
  | "task"
  | "return"
  | "wait_signal"
  | "sleep"
  | "http"
  | "child"
  | "parallel"
  | "if"
  | "assign"
  | "continue_as_new";

/** The kind of a (validated) step. */
export function kindOf(s: Step): StepKind {
  if ("task" in s) return "task";
  if ("return" in s) return "return";
  if ("wait_signal" in s) return "wait_signal";
  if ("sleep_s" in s) return "sleep";
  if ("http" in s) return "http";
  if ("child" in s) return "child";
  if ("parallel" in s) return "parallel";
  if ("if" in s) return "if";
  if ("assign" in s) return "assign";
  return "continue_as_new";
}

export function isTaskStep(s: Step): s is TaskStep {
  return "task" in s;
}

export function retryPolicy(spec: TaskSpec | HttpStep): RetryPolicy {
  return { ...DEFAULT_RETRY, ...spec.retry } as RetryPolicy;
}

/** Backoff before attempt `attempt + 1` after attempt `attempt` failed. */
export function backoffMs(policy: RetryPolicy, attempt: number): number {
  return Math.min(policy.max_ms, Math.round(policy.initial_ms * policy.backoff ** (attempt - 1)));
}

/** The id under which a step's compensation runs (step ids contain no dots). */
export function compensationId(stepId: string): string {
  return `${stepId}.compensate`;
}

/** Canonical JSON: object keys sorted, so equal documents serialize equally. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v).sort();
    return `{${
      keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`)
        .join(",")
    }}`;
  }
  return JSON.stringify(v);
}
