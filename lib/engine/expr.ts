/**
 * Expressions: JSONata inside `{% … %}` strings, as AWS Step Functions does. A value without
 * `{% %}` is a literal; objects and arrays are evaluated member by member. Expressions see
 * `$input`, `$steps`, `$vars`, `$signal` and `$execution`.
 *
 * Compilation is cached per expression text, so a definition's expressions are parsed once.
 *
 * Most expressions are plain paths (`$input`, `$steps.validate.total`): those are read directly
 * from the scope instead of running JSONata, with JSONata's own rules for a path (a missing or
 * non-object step is undefined, a field is an own property, an array value at the end is
 * returned as it is). A path that meets an array before its end (JSONata maps it) and every
 * other expression go through JSONata. Either way the result is made plain JSON, so it never
 * shares objects with the scope.
 *
 * Every JSONata evaluation runs on a budget (issue 37: an expression must not be able to take
 * the server down): at most `timeoutMs` of running time, `maxDepth` nested evaluations (a
 * recursive function), `maxSequence` items in one sequence, and a result of at most
 * `maxResultBytes` as JSON; regular expressions run on RE2 (./regex.ts). An overrun is an
 * ExpressionLimitError (code EXPRESSION_LIMIT), which fails the step or the execution like any
 * other expression error. On a server, JSONata runs in a sandbox of worker threads with a hard
 * deadline (see ExpressionSandbox), so the server's own thread never runs user code.
 */
import jsonata from "jsonata";
import { LinearRegExp } from "./regex.ts";

type Compiled = ReturnType<typeof jsonata>;

const cache = new Map<string, Compiled>();

/** The scope variables a plain path may start from. */
const PATH_ROOTS = new Set(["input", "steps", "vars", "signal", "execution"]);

/** A plain path: a scope variable and the field names after it. */
interface PlainPath {
  root: string;
  fields: string[];
}

/** Per expression text: its plain path, or null when JSONata must evaluate it. */
const paths = new Map<string, PlainPath | null>();

/** Per template object: whether every expression in it is a plain path. */
const plainTemplates = new WeakMap<object, boolean>();

/** Has exactly these keys (the JSONata parser adds others for filters, sorts, focus, …). */
function hasOnlyKeys(node: Record<string, unknown>, keys: readonly string[]): boolean {
  const own = Object.keys(node);
  return own.length === keys.length && keys.every((k) => Object.hasOwn(node, k));
}

const LEAF_KEYS = ["type", "value", "position"] as const;

/** Reads the parsed form of `text`: a plain path when it is nothing more than one. */
function plainPathOf(text: string): PlainPath | null {
  let p = paths.get(text);
  if (p !== undefined) return p;
  p = null;
  try {
    const ast = compile(text).ast() as unknown as Record<string, unknown>;
    const isRoot = (n: Record<string, unknown>) =>
      n.type === "variable" && hasOnlyKeys(n, LEAF_KEYS) && PATH_ROOTS.has(n.value as string);
    if (isRoot(ast)) {
      p = { root: ast.value as string, fields: [] };
    } else if (ast.type === "path" && hasOnlyKeys(ast, ["type", "steps"])) {
      const steps = ast.steps as Array<Record<string, unknown>>;
      const rest = steps.slice(1);
      if (
        steps.length >= 2 && isRoot(steps[0]!) &&
        rest.every((n) =>
          n.type === "name" && typeof n.value === "string" && hasOnlyKeys(n, LEAF_KEYS)
        )
      ) {
        p = { root: steps[0]!.value as string, fields: rest.map((n) => n.value as string) };
      }
    }
  } catch {
    p = null; // invalid text: JSONata reports it when evaluated
  }
  if (paths.size > 10_000) paths.clear();
  paths.set(text, p);
  return p;
}

/** The value of a plain path on the scope, or NEEDS_JSONATA when an array is met on the way. */
function readPath(p: PlainPath, scope: Scope): unknown {
  let v = (scope as unknown as Record<string, unknown>)[p.root];
  for (const field of p.fields) {
    if (v === undefined) return undefined;
    // JSONata maps a path over an array (and flattens): leave that to JSONata.
    if (Array.isArray(v)) return NEEDS_JSONATA;
    // JSONata's lookup: an own property of an object that is not a function value.
    if (v === null || typeof v !== "object" || !Object.hasOwn(v, field) || isFunctionValue(v)) {
      return undefined;
    }
    v = (v as Record<string, unknown>)[field];
  }
  return v;
}

const NEEDS_JSONATA = Symbol("needs JSONata");

/** The JSONata text of a `{% … %}` string, or null for a literal. */
export function expressionText(value: unknown): string | null {
  if (typeof value !== "string") return null;
  const t = value.trim();
  if (t.startsWith("{%") && t.endsWith("%}") && t.length >= 4) return t.slice(2, -2).trim();
  return null;
}

/** What one evaluation may spend. */
export interface ExpressionBudget {
  /** Running time of one evaluation (JSONata's own guard, checked at every node). */
  timeoutMs: number;
  /** Nested evaluations (JSONata's `stack`: a recursive function's depth, times a few). */
  maxDepth: number;
  /** Items in one sequence (JSONata's `sequence`). */
  maxSequence: number;
  /** The result as JSON, in UTF-16 units. */
  maxResultBytes: number;
}

export const DEFAULT_EXPRESSION_BUDGET: Readonly<ExpressionBudget> = {
  timeoutMs: 1000,
  maxDepth: 2000,
  maxSequence: 1_000_000,
  maxResultBytes: 1_048_576,
};

/**
 * Where JSONata runs: a sandbox the server injects (lib/expressions/sandbox.ts: worker threads with a
 * hard deadline, since one call of a built-in such as `$distinct` over a large array runs
 * without ever reaching JSONata's guards), or in this thread when none is set (tests, tools).
 * Either way the same evaluateJsonata runs the expression; the sandbox answers its result or
 * throws an ExpressionError or ExpressionLimitError.
 */
export interface ExpressionSandbox {
  evaluate(text: string, scope: Scope): Promise<unknown>;
}

let budget: ExpressionBudget = { ...DEFAULT_EXPRESSION_BUDGET };
let sandbox: ExpressionSandbox | null = null;

/** Sets the budget and the sandbox of every evaluation from now on. */
export function configureExpressions(
  o: { budget?: Partial<ExpressionBudget>; sandbox?: ExpressionSandbox | null },
): void {
  if (o.budget !== undefined) budget = { ...DEFAULT_EXPRESSION_BUDGET, ...o.budget };
  if (o.sandbox !== undefined) sandbox = o.sandbox;
  cache.clear();
}

/** The budget in force. */
export function expressionBudget(): Readonly<ExpressionBudget> {
  return budget;
}

/** A budget overrun raised from inside a built-in (mapped to ExpressionLimitError). */
function limitReached(message: string): never {
  throw { code: "ORBIT_LIMIT", message, stack: new Error().stack };
}

/**
 * `$sort` in linear-logarithmic time. JSONata's own merge sort merges by recursion on
 * `slice(1)`: quadratic time and memory, so `$sort([1..100000])` ran the process out of memory
 * without ever reaching a guard. Same contract: numbers or strings sort ascending, a comparator
 * `function($l, $r)` answers true to put `$r` first, and the sort is stable.
 */
async function sortFn(
  arr: unknown[] | undefined,
  comparator?: (a: unknown, b: unknown) => Promise<unknown>,
): Promise<unknown[] | undefined> {
  if (arr === undefined) return undefined;
  if (arr.length <= 1) return arr;
  if (comparator === undefined) {
    const numbers = arr.every((v) => typeof v === "number" && Number.isFinite(v));
    if (!numbers && !arr.every((v) => typeof v === "string")) {
      throw { code: "D3070", index: 1, stack: new Error().stack };
    }
    return [...arr].sort((a, b) =>
      (a as number | string) < (b as number | string)
        ? -1
        : (a as number | string) > (b as number | string)
        ? 1
        : 0
    );
  }
  // Bottom-up merge sort: n log n comparisons, each the user's function (so on the budget).
  let src = [...arr];
  let dst = new Array<unknown>(src.length);
  for (let width = 1; width < src.length; width *= 2) {
    for (let lo = 0; lo < src.length; lo += 2 * width) {
      const mid = Math.min(lo + width, src.length), hi = Math.min(lo + 2 * width, src.length);
      let i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = await comparator(src[i], src[j]) ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    [src, dst] = [dst, src];
  }
  return src;
}

/** `$pad` that refuses a width past the result budget before it builds the string. */
function padFn(this: unknown, str: string | undefined, width: number, char?: string) {
  if (Math.abs(Math.trunc(width)) > budget.maxResultBytes) {
    limitReached(`$pad width ${width} is past the limit of ${budget.maxResultBytes}`);
  }
  if (str === undefined) return undefined;
  const fill = char === undefined || char.length === 0 ? " " : char;
  const w = Math.trunc(width);
  const chars = [...str].length;
  const missing = Math.abs(w) - chars;
  if (missing <= 0) return str;
  const padding = [...fill.repeat(Math.ceil(missing / [...fill].length))].slice(0, missing)
    .join("");
  return w > 0 ? str + padding : padding + str;
}

/** Compiles (and caches) a JSONata expression; throws with JSONata's message when invalid. */
export function compile(text: string): Compiled {
  let c = cache.get(text);
  if (!c) {
    c = jsonata(text, {
      timeout: budget.timeoutMs,
      stack: budget.maxDepth,
      sequence: budget.maxSequence,
      // JSONata uses only `lastIndex` and `exec` of the class it is given.
      RegexEngine: LinearRegExp as unknown as RegExpConstructor,
    });
    // Bound in the expression's own frame, so they stand in for the built-ins of that name.
    c.registerFunction("sort", sortFn as never, "<af?:a>");
    c.registerFunction("pad", padFn as never, "<s-ns?:s>");
    if (cache.size > 10_000) cache.clear();
    cache.set(text, c);
  }
  return c;
}

/**
 * Problems with the regular expressions of an expression that compiles: every `/…/` literal
 * must be one RE2 runs (no backreferences or lookarounds). Checked at deploy, so a definition
 * never fails at run time for a pattern it could not run.
 */
export function regexProblems(text: string): string[] {
  const out: string[] = [];
  const visit = (n: unknown) => {
    if (Array.isArray(n)) return n.forEach(visit);
    if (n === null || typeof n !== "object") return;
    const node = n as Record<string, unknown>;
    if (node.type === "regex" && node.value instanceof RegExp) {
      try {
        new LinearRegExp(node.value);
      } catch (e) {
        out.push(`regular expression /${node.value.source}/: ${(e as Error).message}`);
      }
      return;
    }
    for (const v of Object.values(node)) visit(v);
  };
  visit(compile(text).ast());
  return out;
}

/** Every `{% … %}` string inside a template, with its JSON path relative to `path`. */
export function* expressionsIn(
  value: unknown,
  path: string,
): Generator<{ path: string; text: string }> {
  const text = expressionText(value);
  if (text !== null) {
    yield { path, text };
  } else if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) yield* expressionsIn(value[i], `${path}[${i}]`);
  } else if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) yield* expressionsIn(v, `${path}.${k}`);
  }
}

/** The bindings an expression sees. */
export interface Scope {
  input: unknown;
  steps: Record<string, unknown>;
  vars: Record<string, unknown>;
  signal?: unknown;
  execution: {
    id: string;
    run_id: string;
    root_id: string;
    parent_id?: string | null;
    workflow: string;
    version: string;
    run?: number;
  };
}

export class ExpressionError extends Error {
  override name = "ExpressionError";
  /** The error code a step or execution fails with. */
  readonly code: string = "EXPRESSION_ERROR";
}

/** An evaluation that overran its budget (time, depth, sequence, result size, memory). */
export class ExpressionLimitError extends ExpressionError {
  override name = "ExpressionLimitError";
  override readonly code = "EXPRESSION_LIMIT";
}

/** JSONata's codes for a guard that stopped an evaluation (jsonata.js, errorCodes). */
const LIMIT_CODES = new Set([
  "ORBIT_LIMIT", // a built-in refused an argument past the budget (limitReached)
  "D1011", // stack too deep
  "D1012", // ran too long
  "D2014", // a range of more than 10 million items
  "D2015", // a sequence longer than the limit
]);

/** Whether a failure of JSONata is a budget overrun rather than a mistake in the expression. */
function isLimit(e: unknown): boolean {
  if (e instanceof RangeError) return true; // call stack, string or array length
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && LIMIT_CODES.has(code);
}

/** Whether the result is longer than `max` characters as JSON. */
function tooLarge(v: unknown, max: number): boolean {
  if (v === null || typeof v !== "object") {
    return typeof v === "string" && v.length > max;
  }
  try {
    return JSON.stringify(v).length > max;
  } catch {
    return true; // a string too long to build
  }
}

/** Evaluates a template: literals as they are, `{% %}` strings through JSONata. */
export function evaluate(template: unknown, scope: Scope): Promise<unknown> {
  if (isPlainTemplate(template)) {
    const v = evaluatePlain(template, scope);
    if (v !== NEEDS_JSONATA) return Promise.resolve(v);
  }
  return evaluateAsync(template, scope);
}

/** Whether every `{% %}` string in `template` is a plain path (cached per template). */
function isPlainTemplate(template: unknown): boolean {
  if (template === null || typeof template !== "object") {
    const text = expressionText(template);
    return text === null || plainPathOf(text) !== null;
  }
  let plain = plainTemplates.get(template);
  if (plain === undefined) {
    plain = Array.isArray(template)
      ? template.every(isPlainTemplate)
      : Object.values(template).every(isPlainTemplate);
    plainTemplates.set(template, plain);
  }
  return plain;
}

/** A template of plain paths and literals, without JSONata (NEEDS_JSONATA when it must). */
function evaluatePlain(template: unknown, scope: Scope): unknown {
  const text = expressionText(template);
  if (text !== null) {
    const v = readPath(plainPathOf(text)!, scope);
    if (v === NEEDS_JSONATA) return v;
    return v === undefined ? null : normalize(v);
  }
  if (Array.isArray(template)) {
    const out = [];
    for (const item of template) {
      const v = evaluatePlain(item, scope);
      if (v === NEEDS_JSONATA) return v;
      out.push(v);
    }
    return out;
  }
  if (template !== null && typeof template === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, t] of Object.entries(template)) {
      const v = evaluatePlain(t, scope);
      if (v === NEEDS_JSONATA) return v;
      out[k] = v;
    }
    return out;
  }
  return template;
}

async function evaluateAsync(template: unknown, scope: Scope): Promise<unknown> {
  const text = expressionText(template);
  if (text !== null) {
    const path = plainPathOf(text);
    if (path) {
      const v = readPath(path, scope);
      if (v !== NEEDS_JSONATA) return v === undefined ? null : normalize(v);
    }
    return sandbox ? await sandbox.evaluate(text, scope) : await evaluateJsonata(text, scope);
  }
  if (Array.isArray(template)) {
    const out = [];
    for (const item of template) out.push(await evaluateAsync(item, scope));
    return out;
  }
  if (template !== null && typeof template === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(template)) out[k] = await evaluateAsync(v, scope);
    return out;
  }
  return template;
}

/** An expression's text shortened for a message. */
function brief(text: string): string {
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/**
 * Runs one JSONata expression in this thread, on the budget: its plain JSON result, or an
 * ExpressionError (ExpressionLimitError for an overrun). What a sandbox runs.
 */
export async function evaluateJsonata(text: string, scope: Scope): Promise<unknown> {
  let result: unknown;
  try {
    result = await compile(text).evaluate({}, { ...scope });
    // JSONata returns undefined for "no match"; JSON has null.
    result = result === undefined ? null : normalize(result);
  } catch (e) {
    const msg = (e as { message?: string }).message ?? String(e);
    if (isLimit(e)) {
      throw new ExpressionLimitError(`Expression "${brief(text)}" overran its budget: ${msg}`);
    }
    throw new ExpressionError(`Cannot evaluate expression "${text}": ${msg}`);
  }
  if (tooLarge(result, budget.maxResultBytes)) {
    throw new ExpressionLimitError(
      `Expression "${brief(text)}" produced more than ${budget.maxResultBytes} characters ` +
        "of JSON",
    );
  }
  return result;
}

/** JSONata functions and lambdas are objects marked by a flag, not JS functions. */
function isFunctionValue(v: unknown): boolean {
  return typeof v === "function" ||
    (v !== null && typeof v === "object" && ("_jsonata_function" in v || "_jsonata_lambda" in v));
}

/**
 * JSONata results can carry sequence markers and non-plain arrays; make them plain JSON (a new
 * value: what JSON.parse(JSON.stringify(v)) gives). Functions have no JSON form (a lambda is
 * even circular), so they become null at any depth.
 */
function normalize(v: unknown): unknown {
  if (isFunctionValue(v)) return null;
  if (typeof v === "number" && !Number.isFinite(v)) return null;
  if (v === null || typeof v !== "object") return v;
  try {
    return plainCopy(v);
  } catch (e) {
    // A circular value overflows the stack: the round trip reports it in JSON's own words.
    if (!(e instanceof NotPlain || e instanceof RangeError)) throw e;
    return JSON.parse(JSON.stringify(v, (_k, x) => isFunctionValue(x) ? null : x));
  }
}

/** A value `plainCopy` leaves to the JSON round trip (a class instance, a bigint, …). */
class NotPlain {}

const OMIT = Symbol("omitted member");

/**
 * What the JSON round trip makes of a value inside a result, several times faster: members
 * that are undefined are dropped (array items become null), non-finite numbers become null,
 * -0 becomes 0, function values become null. Throws NotPlain for anything else.
 */
function plainCopy(v: unknown): unknown {
  switch (typeof v) {
    case "string":
    case "boolean":
      return v;
    case "number":
      return Number.isFinite(v) ? (v === 0 ? 0 : v) : null;
    case "undefined":
      return OMIT;
    case "function":
      return null;
    case "object": {
      if (v === null) return null;
      if ("_jsonata_function" in v || "_jsonata_lambda" in v) return null;
      if (Array.isArray(v)) {
        const out = new Array(v.length);
        for (let i = 0; i < v.length; i++) {
          const x = plainCopy(v[i]);
          out[i] = x === OMIT ? null : x;
        }
        return out;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) throw new NotPlain();
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(v)) {
        if (k === "__proto__" || k === "toJSON") throw new NotPlain();
        const x = plainCopy((v as Record<string, unknown>)[k]);
        if (x !== OMIT) out[k] = x;
      }
      return out;
    }
    default:
      throw new NotPlain();
  }
}
