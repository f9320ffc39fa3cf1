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
 */
import jsonata from "jsonata";

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

/** Compiles (and caches) a JSONata expression; throws with JSONata's message when invalid. */
export function compile(text: string): Compiled {
  let c = cache.get(text);
  if (!c) {
    c = jsonata(text);
    if (cache.size > 10_000) cache.clear();
    cache.set(text, c);
  }
  return c;
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
    try {
      const result = await compile(text).evaluate({}, { ...scope });
      // JSONata returns undefined for "no match"; JSON has null.
      return result === undefined ? null : normalize(result);
    } catch (e) {
      const msg = (e as { message?: string }).message ?? String(e);
      throw new ExpressionError(`Cannot evaluate expression "${text}": ${msg}`);
    }
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
