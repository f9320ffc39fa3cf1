/**
 * Expressions: JSONata inside `{% … %}` strings, as AWS Step Functions does. A value without
 * `{% %}` is a literal; objects and arrays are evaluated member by member. Expressions see
 * `$input`, `$steps`, `$vars`, `$signal` and `$execution`.
 *
 * Compilation is cached per expression text, so a definition's expressions are parsed once.
 */
import jsonata from "jsonata";

type Compiled = ReturnType<typeof jsonata>;

const cache = new Map<string, Compiled>();

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
export async function evaluate(template: unknown, scope: Scope): Promise<unknown> {
  const text = expressionText(template);
  if (text !== null) {
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
    for (const item of template) out.push(await evaluate(item, scope));
    return out;
  }
  if (template !== null && typeof template === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(template)) out[k] = await evaluate(v, scope);
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
 * JSONata results can carry sequence markers and non-plain arrays; make them plain JSON.
 * Functions have no JSON form (a lambda is even circular), so they become null at any depth.
 */
function normalize(v: unknown): unknown {
  if (isFunctionValue(v)) return null;
  if (typeof v === "number" && !Number.isFinite(v)) return null;
  if (v === null || typeof v !== "object") return v;
  return JSON.parse(JSON.stringify(v, (_k, x) => isFunctionValue(x) ? null : x));
}
