/**
 * Validation of a workflow document (`orbit-ir/1` or `orbit-ir/2`). Deploy calls it and
 * answers every problem with its JSON path; nothing here does I/O.
 *
 * Beyond the shape of each step kind it checks: step ids unique across the whole document
 * (nested lists and handlers included, so events can name a step by id alone); `return` and
 * `continue_as_new` last in their list; expressions that compile; `$steps.<id>` references
 * that can have a value where they are read (see `visibility` below); signals that are
 * declared; handlers that do not end the run (no `return`, no `continue_as_new`); literal
 * `http` URLs allowed by `--http-allow` when the caller passes the allow list.
 */
import { z } from "zod";
import { compile, expressionsIn, expressionText, regexProblems } from "./expr.ts";
import { compileSchema } from "../jsonschema.ts";
import { httpAllowed, httpRefusal } from "./http_allow.ts";
import {
  countSteps,
  IR2_KINDS,
  MAX_SLEEP_S,
  MAX_STEPS,
  NAME_RE,
  type Problem,
  SEMVER_RE,
  SUPPORTED_IR,
  type WorkflowDoc,
} from "./ir.ts";

const IR1_KINDS = ["task", "return"] as const;
const IR2_TOP = ["timeout_s", "signals", "queries", "handlers"] as const;

const STEP_ID_RE = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const TASK_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const VAR_RE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const SIGNAL_RE = /^[A-Za-z][A-Za-z0-9_.-]{0,127}$/;
const HTTP_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] as const;
const MAX_S = MAX_SLEEP_S;

export interface ValidateOptions {
  /** `--http-allow` patterns: literal `http` URLs outside them are refused. Unchecked if absent. */
  httpAllow?: readonly string[];
}

const retrySchema = z.strictObject({
  max_attempts: z.number().int().min(1).max(1000).optional(),
  initial_ms: z.number().int().min(0).max(86_400_000).optional(),
  backoff: z.number().min(1).max(100).optional(),
  max_ms: z.number().int().min(0).max(86_400_000).optional(),
  non_retryable: z.array(z.string().min(1)).optional(),
});
const timeoutS = z.number().positive().max(MAX_S).optional();

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
  timeout_s: timeoutS,
};

const stepId = z.string().regex(
  STEP_ID_RE,
  "must start with a letter and use letters, digits, _ or -",
);
const list = z.array(z.unknown());

const STEP_SCHEMAS: Record<string, z.ZodType> = {
  task: z.strictObject({
    id: stepId,
    ...taskFields,
    compensate: z.strictObject(taskFields).optional(),
  }),
  return: z.strictObject({ id: stepId, return: z.unknown() }),
  wait_signal: z.strictObject({
    id: stepId,
    wait_signal: z.string().regex(SIGNAL_RE, "must be a signal name"),
    timeout_s: timeoutS,
  }),
  sleep_s: z.strictObject({
    id: stepId,
    sleep_s: z.union([z.number().min(0).max(MAX_S), z.string()], {
      message: "must be a number of seconds or a {% %} expression",
    }),
  }),
  http: z.strictObject({
    id: stepId,
    http: z.strictObject({
      method: z.enum(HTTP_METHODS, { message: `must be one of ${HTTP_METHODS.join(", ")}` })
        .optional(),
      url: z.string().min(1, "must be a URL or a {% %} expression"),
      headers: z.record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/), z.unknown()).optional(),
      body: z.unknown().optional(),
      timeout_s: timeoutS,
    }),
    retry: retrySchema.optional(),
    timeout_s: timeoutS,
  }),
  child: z.strictObject({
    id: stepId,
    child: z.strictObject({
      workflow: z.string().regex(NAME_RE, "must be a workflow name"),
      version: z.string().regex(
        SEMVER_RE,
        "must be a semantic version such as 1.0.0 (each number at most 15 digits)",
      )
        .optional(),
      input: z.unknown().optional(),
      execution_id: z.string().min(1).max(200).optional(),
    }),
    timeout_s: timeoutS,
  }),
  parallel: z.strictObject({
    id: stepId,
    parallel: z.array(list).min(1, "a parallel step needs at least one branch"),
  }),
  if: z.strictObject({
    id: stepId,
    if: z.union([z.string(), z.boolean()], { message: "must be a {% %} condition or a boolean" }),
    then: list.optional(),
    else: list.optional(),
  }),
  assign: z.strictObject({
    id: stepId,
    assign: z.record(z.string().regex(VAR_RE, "variable names are identifiers"), z.unknown())
      .refine((o) => Object.keys(o).length > 0, "assign at least one variable"),
  }),
  continue_as_new: z.strictObject({
    id: stepId,
    continue_as_new: z.strictObject({ input: z.unknown().optional() }),
  }),
};

const docSchema = z.strictObject({
  ir: z.string(),
  name: z.string().regex(NAME_RE, "must start with a letter and use letters, digits, _ . or -"),
  version: z.string().regex(
    SEMVER_RE,
    "must be a semantic version such as 1.0.0 (each number at most 15 digits)",
  ),
  description: z.string().max(10_000).optional(),
  input_schema: z.record(z.string(), z.unknown()).optional(),
  timeout_s: timeoutS,
  signals: z.record(
    z.string().regex(SIGNAL_RE, "signal names start with a letter"),
    z.strictObject({
      schema: z.record(z.string(), z.unknown()).optional(),
      description: z.string().max(10_000).optional(),
    }),
  ).optional(),
  queries: z.record(z.string().regex(SIGNAL_RE, "query names start with a letter"), z.unknown())
    .optional(),
  handlers: z.record(z.string(), list).optional(),
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

const obj = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

/** Where a step sits: its list (by the list's JSON path), index, owning step and handler. */
interface Placed {
  path: string;
  list: string;
  index: number;
  /** JSON path of the step whose branch holds this one. */
  owner: string | null;
  /** The branch list of `owner` it is in (`then`, `else`, `parallel[1]`). */
  branch: string | null;
  handler: string | null;
  kind: string;
}

class Checker {
  readonly problems: Problem[] = [];
  /** First place of each step id. */
  readonly ids = new Map<string, string>();
  /** Every step object, by JSON path. */
  readonly at = new Map<string, Placed>();
  readonly waits: Array<{ path: string; signal: string }> = [];

  constructor(readonly ir2: boolean, readonly opts: ValidateOptions) {}

  add(path: string, message: string) {
    this.problems.push({ path, message });
  }

  /** Pass 1: shapes, kinds, ids and places of every step in one list (recursively). */
  walkList(
    steps: unknown[],
    listPath: string,
    owner: string | null,
    branch: string | null,
    handler: string | null,
  ) {
    steps.forEach((s, i) => {
      const base = `${listPath}[${i}]`;
      if (!obj(s)) return this.add(base, "a step must be a JSON object");
      const kinds = [...IR1_KINDS, ...IR2_KINDS].filter((k) => k in s);
      if (kinds.length !== 1) {
        const known = this.ir2 ? [...IR1_KINDS, ...IR2_KINDS] : IR1_KINDS;
        return this.add(
          base,
          kinds.length === 0
            ? `a step needs one of: ${known.join(", ")}`
            : `a step has exactly one kind, found ${kinds.join(" and ")}`,
        );
      }
      const kind = kinds[0]!;
      if (!this.ir2 && (IR2_KINDS as readonly string[]).includes(kind)) {
        return this.add(`${base}.${kind}`, `\`${kind}\` steps need orbit-ir/2`);
      }
      const parsed = STEP_SCHEMAS[kind]!.safeParse(s);
      if (!parsed.success) this.problems.push(...zodProblems(base, parsed.error));
      this.at.set(base, { path: base, list: listPath, index: i, owner, branch, handler, kind });
      if (typeof s.id === "string") {
        const prev = this.ids.get(s.id);
        if (prev !== undefined) {
          this.add(`${base}.id`, `duplicate step id "${s.id}" (also ${prev})`);
        } else this.ids.set(s.id, base);
      }
      if ((kind === "return" || kind === "continue_as_new") && i !== steps.length - 1) {
        this.add(
          base,
          kind === "return"
            ? "a return step must be the last step"
            : "a continue_as_new step must be the last step of its list",
        );
      }
      if (handler !== null && (kind === "return" || kind === "continue_as_new")) {
        this.add(base, `a handler cannot end the run: \`${kind}\` is not allowed in handlers`);
        return;
      }
      if (kind === "if") {
        for (const b of ["then", "else"] as const) {
          if (Array.isArray(s[b])) this.walkList(s[b], `${base}.${b}`, base, b, handler);
        }
      }
      if (kind === "parallel" && Array.isArray(s.parallel)) {
        s.parallel.forEach((br, j) => {
          if (Array.isArray(br)) {
            this.walkList(br, `${base}.parallel[${j}]`, base, `parallel[${j}]`, handler);
          }
        });
      }
      if (
        kind === "wait_signal" && typeof s.wait_signal === "string" && SIGNAL_RE.test(s.wait_signal)
      ) {
        this.waits.push({ path: `${base}.wait_signal`, signal: s.wait_signal });
      }
    });
  }

  /** A step and its owners, nearest first (JSON paths). */
  chain(path: string): string[] {
    const out: string[] = [];
    for (let p: string | null = path; p !== null; p = this.at.get(p)?.owner ?? null) out.push(p);
    return out;
  }

  /**
   * Visibility: an expression of step S (or of its `if` condition) can read a step R that ran
   * before S could start: R, or the step R is nested in, precedes S or one of S's owners in
   * the same list. Steps after an `if` may read the steps of its branches (null when the other
   * branch ran). Parallel branches cannot read each other. Handlers and queries run at any time:
   * they may read every step of the main flow (null until it ran). A handler's steps are read
   * by the later steps of the same handler only (each signal runs the handler anew).
   */
  visibility(ref: string, from: string | null, own: boolean): string | null {
    const rPath = this.ids.get(ref);
    const r = rPath === undefined ? undefined : this.at.get(rPath);
    if (!r) return `unknown step "${ref}" in $steps.${ref}`;
    const fHandler = from === null ? null : this.at.get(from)?.handler ?? null;
    if (r.handler !== null && r.handler !== fHandler) {
      return `step "${ref}" belongs to the handler of signal "${r.handler}": only the later steps of that handler can read it`;
    }
    if (from === null || (r.handler === null && fHandler !== null)) return null;
    if (r.path === from) {
      return own ? null : `step "${ref}" cannot read its own output in its input`;
    }
    const rChain = this.chain(r.path);
    const fChain = this.chain(from);
    for (const x of fChain) {
      const xp = this.at.get(x)!;
      const top = rChain.find((y) => this.at.get(y)!.list === xp.list);
      if (top !== undefined && this.at.get(top)!.index < xp.index) return null;
    }
    const common = rChain.find((o) => o !== r.path && fChain.includes(o));
    if (common !== undefined && this.at.get(common)!.kind === "parallel") {
      const rb = this.at.get(rChain[rChain.indexOf(common) - 1]!)!.branch;
      const fb = this.at.get(fChain[fChain.indexOf(common) - 1]!)?.branch;
      if (rb !== fb) {
        const pid = (this.ids.entries().find(([, p]) => p === common) ?? [common])[0];
        return `step "${ref}" runs in another branch of parallel step "${pid}"; branches cannot read each other's steps`;
      }
    }
    return `step "${ref}" runs later; an expression can only read steps that ran before it`;
  }

  /** Pass 2: expressions compile and their `$steps` references are visible. */
  template(path: string, tpl: unknown, from: string | null, own = false) {
    for (const e of expressionsIn(tpl, path)) {
      try {
        compile(e.text);
      } catch (err) {
        this.add(e.path, `invalid expression: ${(err as Error).message}`);
        continue;
      }
      for (const p of regexProblems(e.text)) this.add(e.path, `invalid expression: ${p}`);
      for (const ref of stepRefs(e.text)) {
        const problem = this.visibility(ref, from, own);
        if (problem) this.add(e.path, problem);
      }
    }
  }

  /** Pass 2 over one list: the templates of each step. */
  expressions(steps: unknown[], listPath: string) {
    steps.forEach((s, i) => {
      const base = `${listPath}[${i}]`;
      if (!obj(s)) return;
      const id = this.at.has(base) ? base : null;
      const kind = [...IR1_KINDS, ...IR2_KINDS].find((k) => k in s);
      if (!this.ir2 && (IR2_KINDS as readonly string[]).includes(kind ?? "")) return;
      switch (kind) {
        case "task":
          this.template(`${base}.input`, s.input, id);
          if (obj(s.compensate)) {
            this.template(`${base}.compensate.input`, s.compensate.input, id, true);
          }
          break;
        case "return":
          this.template(`${base}.return`, s.return, id);
          break;
        case "sleep_s":
          if (typeof s.sleep_s === "string") {
            if (expressionText(s.sleep_s) === null) {
              this.add(`${base}.sleep_s`, "must be a number of seconds or a {% %} expression");
            } else this.template(`${base}.sleep_s`, s.sleep_s, id);
          }
          break;
        case "http":
          if (obj(s.http)) {
            for (const k of ["url", "headers", "body"]) {
              this.template(`${base}.http.${k}`, s.http[k], id);
            }
            this.httpUrl(`${base}.http.url`, s.http.url);
          }
          break;
        case "child":
          if (obj(s.child)) {
            this.template(`${base}.child.input`, s.child.input, id);
            this.template(`${base}.child.execution_id`, s.child.execution_id, id);
          }
          break;
        case "if":
          this.template(`${base}.if`, s.if, id);
          if (typeof s.if === "string" && expressionText(s.if) === null) {
            this.add(`${base}.if`, "a condition must be a {% %} expression or a boolean");
          }
          for (const b of ["then", "else"]) {
            if (Array.isArray(s[b])) this.expressions(s[b] as unknown[], `${base}.${b}`);
          }
          break;
        case "parallel":
          if (Array.isArray(s.parallel)) {
            s.parallel.forEach((br, j) => {
              if (Array.isArray(br)) this.expressions(br, `${base}.parallel[${j}]`);
            });
          }
          break;
        case "assign":
          this.template(`${base}.assign`, s.assign, id);
          break;
        case "continue_as_new":
          if (obj(s.continue_as_new)) {
            this.template(`${base}.continue_as_new.input`, s.continue_as_new.input, id);
          }
          break;
      }
    });
  }

  httpUrl(path: string, url: unknown) {
    if (typeof url !== "string" || url === "" || expressionText(url) !== null) return;
    const r = httpAllowed(url, this.opts.httpAllow ?? ["*"]);
    if (r.ok) return;
    if (r.reason === "not_allowed" && this.opts.httpAllow === undefined) return;
    this.add(
      path,
      r.reason === "not_allowed"
        ? httpRefusal(r, this.opts.httpAllow ?? [])
        : "must be an absolute http: or https: URL, or a {% %} expression",
    );
  }
}

/**
 * Validates a workflow document. Returns the typed document, or every problem found, each with
 * its JSON path (`$.steps[1].retry.max_attempts`, `$.steps[2].parallel[0][1].input`).
 */
export function validateWorkflow(
  raw: unknown,
  opts: ValidateOptions = {},
): { ok: true; doc: WorkflowDoc } | { ok: false; problems: Problem[] } {
  if (!obj(raw)) {
    return { ok: false, problems: [{ path: "$", message: "a workflow must be a JSON object" }] };
  }
  const r = raw;
  const ir2 = r.ir !== "orbit-ir/1";
  const c = new Checker(ir2, opts);
  const top = docSchema.safeParse(raw);
  if (!top.success) c.problems.push(...zodProblems("$", top.error));
  if (typeof r.ir === "string" && !(SUPPORTED_IR as readonly string[]).includes(r.ir)) {
    c.add("$.ir", `unknown IR version "${r.ir}"; supported: ${SUPPORTED_IR.join(", ")}`);
  }
  if (!ir2) {
    for (const k of IR2_TOP) if (k in r) c.add(`$.${k}`, `\`${k}\` needs orbit-ir/2`);
  }
  const total = countSteps(r);
  if (total > MAX_STEPS) {
    // Judged before anything else is walked: the rest of the checks cost per step.
    return {
      ok: false,
      problems: [{
        path: "$.steps",
        message: `a workflow may hold at most ${MAX_STEPS} steps (branches, handlers and ` +
          `compensations included); this one has ${total}`,
      }],
    };
  }
  const schemas: Array<[string, unknown]> = [["$.input_schema", r.input_schema]];
  if (obj(r.signals)) {
    for (const [name, decl] of Object.entries(r.signals)) {
      if (obj(decl)) schemas.push([`$.signals.${name}.schema`, decl.schema]);
    }
  }
  for (const [path, schema] of schemas) {
    if (!obj(schema)) continue;
    try {
      compileSchema(schema);
    } catch (e) {
      c.add(path, `invalid JSON Schema: ${(e as Error).message}`);
    }
  }
  const steps = Array.isArray(r.steps) ? r.steps : [];
  const handlers = ir2 && obj(r.handlers) ? Object.entries(r.handlers) : [];
  c.walkList(steps, "$.steps", null, null, null);
  for (const [name, hs] of handlers) {
    if (Array.isArray(hs)) c.walkList(hs, `$.handlers.${name}`, null, null, name);
  }
  c.expressions(steps, "$.steps");
  for (const [name, hs] of handlers) {
    if (Array.isArray(hs)) c.expressions(hs, `$.handlers.${name}`);
  }
  const signals = obj(r.signals) ? r.signals : {};
  if (ir2) {
    for (const w of c.waits) {
      if (!(w.signal in signals)) {
        c.add(w.path, `unknown signal "${w.signal}"; declare it under $.signals`);
      }
    }
    for (const [name] of handlers) {
      if (!(name in signals)) {
        c.add(
          `$.handlers.${name}`,
          `handler for undeclared signal "${name}"; declare it under $.signals`,
        );
      }
    }
    if (obj(r.queries)) {
      for (const [name, tpl] of Object.entries(r.queries)) {
        c.template(`$.queries.${name}`, tpl, null);
      }
    }
  }
  if (c.problems.length > 0) return { ok: false, problems: c.problems };
  return { ok: true, doc: raw as unknown as WorkflowDoc };
}
