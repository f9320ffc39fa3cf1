/**
 * The workflow IR (`orbit-ir/1`) and its validation. Deploy validates the whole document and
 * reports every problem with its JSON path; nothing here does I/O.
 *
 * Step kinds are told apart by their kind key (`task`, `return`, and, for `orbit-ir/2`, the
 * keys listed in IR2_KINDS). A document names exactly one IR version.
 */
import { z } from "zod";
import { compile, expressionsIn } from "./expr.ts";
import { compileSchema } from "../jsonschema.ts";

export const SUPPORTED_IR = ["orbit-ir/1"] as const;
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
const IR1_KINDS = ["task", "return"] as const;

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

export type Step = TaskStep | ReturnStep;

export interface WorkflowDoc {
  ir: string;
  name: string;
  version: string;
  description?: string;
  input_schema?: Record<string, unknown>;
  steps: Step[];
}

export interface Problem {
  path: string;
  message: string;
}

export const NAME_RE = /^[A-Za-z][A-Za-z0-9_.-]{0,127}$/;
export const SEMVER_RE =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/;
const STEP_ID_RE = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const TASK_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

const retrySchema = z.strictObject({
  max_attempts: z.number().int().min(1).max(1000).optional(),
  initial_ms: z.number().int().min(0).max(86_400_000).optional(),
  backoff: z.number().min(1).max(100).optional(),
  max_ms: z.number().int().min(0).max(86_400_000).optional(),
  non_retryable: z.array(z.string().min(1)).optional(),
});

const taskFields = {
  task: z.string().regex(TASK_RE, "must be a task name such as `payments.charge`"),
  contract: z.string().min(1).max(64),
  language: z.string().regex(
    /^[a-z][a-z0-9_+-]{0,31}$/,
    "must be a language such as `python` or `any`",
  )
    .optional(),
  input: z.unknown().optional(),
  retry: retrySchema.optional(),
  timeout_s: z.number().positive().max(31_536_000).optional(),
};

const stepId = z.string().regex(
  STEP_ID_RE,
  "must start with a letter and use letters, digits, _ or -",
);

const taskStepSchema = z.strictObject({
  id: stepId,
  ...taskFields,
  compensate: z.strictObject(taskFields).optional(),
});
const returnStepSchema = z.strictObject({ id: stepId, return: z.unknown() });

const docSchema = z.strictObject({
  ir: z.string(),
  name: z.string().regex(NAME_RE, "must start with a letter and use letters, digits, _ . or -"),
  version: z.string().regex(SEMVER_RE, "must be a semantic version such as 1.0.0"),
  description: z.string().max(10_000).optional(),
  input_schema: z.record(z.string(), z.unknown()).optional(),
  steps: z.array(z.unknown()).min(1, "a workflow needs at least one step"),
});

function jsonPath(base: string, path: ReadonlyArray<PropertyKey>): string {
  let out = base;
  for (const p of path) out += typeof p === "number" ? `[${p}]` : `.${String(p)}`;
  return out;
}

function zodProblems(base: string, error: z.ZodError): Problem[] {
  return error.issues.flatMap((i) =>
    // An unknown key is a problem at that key's own path, one problem per key.
    i.code === "unrecognized_keys"
      ? i.keys.map((k) => ({ path: jsonPath(base, [...i.path, k]), message: `unknown key "${k}"` }))
      : [{ path: jsonPath(base, i.path), message: i.message }]
  );
}

/** `$steps.<id>` references in an expression. */
function stepRefs(text: string): string[] {
  return [...text.matchAll(/\$steps\.([A-Za-z][A-Za-z0-9_]*)/g)].map((m) => m[1]!);
}

/**
 * Validates a workflow document. Returns the typed document, or every problem found, each with
 * its JSON path (`$.steps[1].retry.max_attempts`).
 */
export function validateWorkflow(
  raw: unknown,
): { ok: true; doc: WorkflowDoc } | { ok: false; problems: Problem[] } {
  const problems: Problem[] = [];
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return { ok: false, problems: [{ path: "$", message: "a workflow must be a JSON object" }] };
  }
  const top = docSchema.safeParse(raw);
  if (!top.success) problems.push(...zodProblems("$", top.error));
  const r = raw as Record<string, unknown>;
  if (typeof r.ir === "string" && !(SUPPORTED_IR as readonly string[]).includes(r.ir)) {
    problems.push({
      path: "$.ir",
      message: r.ir === "orbit-ir/2"
        ? "orbit-ir/2 is not supported by this server yet; use orbit-ir/1"
        : `unknown IR version "${r.ir}"; supported: ${SUPPORTED_IR.join(", ")}`,
    });
  }
  if (r.input_schema !== undefined && typeof r.input_schema === "object" && r.input_schema) {
    try {
      compileSchema(r.input_schema);
    } catch (e) {
      problems.push({
        path: "$.input_schema",
        message: `invalid JSON Schema: ${(e as Error).message}`,
      });
    }
  }
  const steps = Array.isArray(r.steps) ? r.steps : [];
  const seen = new Map<string, number>();
  steps.forEach((s, i) => {
    const base = `$.steps[${i}]`;
    if (s === null || typeof s !== "object" || Array.isArray(s)) {
      problems.push({ path: base, message: "a step must be a JSON object" });
      return;
    }
    const step = s as Record<string, unknown>;
    const kinds = [...IR1_KINDS, ...IR2_KINDS].filter((k) => k in step);
    if (kinds.length !== 1) {
      problems.push({
        path: base,
        message: kinds.length === 0
          ? `a step needs one of: ${IR1_KINDS.join(", ")}`
          : `a step has exactly one kind, found ${kinds.join(" and ")}`,
      });
      return;
    }
    const kind = kinds[0]!;
    if ((IR2_KINDS as readonly string[]).includes(kind)) {
      problems.push({ path: `${base}.${kind}`, message: `\`${kind}\` steps need orbit-ir/2` });
      return;
    }
    const parsed = (kind === "task" ? taskStepSchema : returnStepSchema).safeParse(step);
    if (!parsed.success) problems.push(...zodProblems(base, parsed.error));
    if (typeof step.id === "string") {
      const prev = seen.get(step.id);
      if (prev !== undefined) {
        problems.push({
          path: `${base}.id`,
          message: `duplicate step id "${step.id}" (also $.steps[${prev}])`,
        });
      } else seen.set(step.id, i);
    }
    if (kind === "return" && i !== steps.length - 1) {
      problems.push({ path: base, message: "a return step must be the last step" });
    }
    const templates: Array<[string, unknown, boolean]> = kind === "task"
      ? [[`${base}.input`, step.input, false]]
      : [[`${base}.return`, step.return, false]];
    if (kind === "task" && step.compensate && typeof step.compensate === "object") {
      templates.push([
        `${base}.compensate.input`,
        (step.compensate as Record<string, unknown>).input,
        true,
      ]);
    }
    for (const [path, tpl, ownStepVisible] of templates) {
      for (const e of expressionsIn(tpl, path)) {
        try {
          compile(e.text);
        } catch (err) {
          problems.push({ path: e.path, message: `invalid expression: ${(err as Error).message}` });
          continue;
        }
        for (const ref of stepRefs(e.text)) {
          const at = seen.get(ref);
          const visible = at !== undefined && (at < i || (ownStepVisible && at === i));
          if (!visible) {
            const idx = steps.findIndex((x) => (x as { id?: unknown })?.id === ref);
            problems.push({
              path: e.path,
              message: idx < 0
                ? `unknown step "${ref}" in $steps.${ref}`
                : idx === i
                ? `step "${ref}" cannot read its own output in its input`
                : `step "${ref}" runs later; an expression can only read steps that ran before it`,
            });
          }
        }
      }
    }
  });
  if (problems.length > 0) return { ok: false, problems };
  return { ok: true, doc: raw as WorkflowDoc };
}

export function isTaskStep(s: Step): s is TaskStep {
  return "task" in s;
}

export function retryPolicy(spec: TaskSpec): RetryPolicy {
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
