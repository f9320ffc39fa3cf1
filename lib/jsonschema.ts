/**
 * User-declared JSON Schemas (workflow `input_schema`, signal payloads), compiled once with
 * Ajv and cached by their canonical text (and by the schema object itself, see `byObject`).
 * Patterns (`pattern`, `patternProperties`) run on RE2 (engine/regex.ts): linear time whatever
 * the pattern and the input, and a pattern RE2 cannot run is refused when the schema compiles.
 */
import AjvModule from "ajv";
import { ajvLinearRegExp } from "./engine/regex.ts";

// deno-lint-ignore no-explicit-any
const Ajv = ((AjvModule as any).default ?? AjvModule) as any;
const ajv = new Ajv({ allErrors: true, strict: false, code: { regExp: ajvLinearRegExp } });
// deno-lint-ignore no-explicit-any
const cache = new Map<string, any>();

export interface SchemaProblem {
  path: string;
  message: string;
}

/**
 * The compiled validator per schema object: a definition's schema is one object for as long as
 * the definition is cached, so a start finds its validator without encoding the schema again.
 */
// deno-lint-ignore no-explicit-any
const byObject = new WeakMap<object, any>();

// deno-lint-ignore no-explicit-any
export function compileSchema(schema: unknown): any {
  const isObject = schema !== null && typeof schema === "object";
  let v = isObject ? byObject.get(schema) : undefined;
  if (v) return v;
  const key = JSON.stringify(schema);
  v = cache.get(key);
  if (!v) {
    v = ajv.compile(schema);
    cache.set(key, v);
  }
  if (isObject) byObject.set(schema, v);
  return v;
}

/** Validates a value; returns every problem with a JSON path rooted at `base`. */
export function validateAgainst(schema: unknown, value: unknown, base = "$"): SchemaProblem[] {
  const v = compileSchema(schema);
  if (v(value)) return [];
  // deno-lint-ignore no-explicit-any
  return (v.errors ?? []).map((e: any) => ({
    path: base +
      String(e.instancePath ?? "").replace(
        /\/([^/]+)/g,
        (_m: string, p: string) => /^\d+$/.test(p) ? `[${p}]` : `.${p}`,
      ),
    message: e.message ?? "is invalid",
  }));
}
