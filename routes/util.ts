/** Request parsing shared by the route modules: JSON bodies and queries checked with zod. */
import type { Context } from "hono";
import { z } from "zod";
import { OrbitError } from "../lib/errors.ts";

function problems(error: z.ZodError, base: string) {
  return error.issues.map((i) => ({
    path: base + i.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join(""),
    message: i.message,
  }));
}

/** Deepest nesting of arrays and objects a request body may have. */
export const MAX_JSON_DEPTH = 256;

/**
 * The first thing in a parsed body that no store can keep or no engine code should walk: NUL
 * characters (PostgreSQL's jsonb and text refuse U+0000), unpaired surrogates (jsonb refuses
 * them too), numbers JSON.parse made infinite (`1e999`: JSON.stringify would store `null`),
 * nesting deeper than MAX_JSON_DEPTH (recursive code overflows its stack). Iterative, so the
 * check itself cannot overflow. Refused the same way on every store.
 */
export function unstorable(value: unknown): { path: string; message: string } | null {
  return storable(value) ? null : firstUnstorable(value);
}

/**
 * Whether `value` holds nothing `unstorable` refuses: the same checks, without building a path
 * (or any object) per node, since almost every body passes. Iterative too.
 */
function storable(value: unknown): boolean {
  const values: unknown[] = [value];
  const depths: number[] = [0];
  while (values.length > 0) {
    const v = values.pop();
    const depth = depths.pop()!;
    if (typeof v === "string") {
      if (v.includes("\u0000") || !v.isWellFormed()) return false;
    } else if (typeof v === "number") {
      if (!Number.isFinite(v)) return false;
    } else if (v !== null && typeof v === "object") {
      if (depth >= MAX_JSON_DEPTH) return false;
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          if (i in v) {
            values.push(v[i]);
            depths.push(depth + 1);
          }
        }
      } else {
        for (const k of Object.keys(v)) {
          if (k.includes("\u0000") || !k.isWellFormed()) return false;
          values.push((v as Record<string, unknown>)[k]);
          depths.push(depth + 1);
        }
      }
    }
  }
  return true;
}

/** The first problem in `value`, with its path (the walk `unstorable` reports from). */
function firstUnstorable(value: unknown): { path: string; message: string } | null {
  type Item = { v: unknown; depth: number; parent: Item | null; key: string | number };
  const pathOf = (it: Item | null): string => {
    const parts: string[] = [];
    for (let p = it; p && p.parent; p = p.parent) {
      parts.push(typeof p.key === "number" ? `[${p.key}]` : `.${p.key}`);
    }
    return "$" + parts.reverse().join("");
  };
  const stack: Item[] = [{ v: value, depth: 0, parent: null, key: "" }];
  while (stack.length > 0) {
    const it = stack.pop()!;
    const v = it.v;
    if (typeof v === "string") {
      if (v.includes("\u0000")) {
        return { path: pathOf(it), message: "must not contain U+0000 (NUL)" };
      }
      if (!v.isWellFormed()) {
        return { path: pathOf(it), message: "must not contain unpaired UTF-16 surrogates" };
      }
    } else if (typeof v === "number") {
      if (!Number.isFinite(v)) {
        return {
          path: pathOf(it),
          message: "must be a finite number (a JSON number this large parses to infinity)",
        };
      }
    } else if (v !== null && typeof v === "object") {
      if (it.depth >= MAX_JSON_DEPTH) {
        return { path: pathOf(it), message: `nested deeper than ${MAX_JSON_DEPTH} levels` };
      }
      const entries: Array<[string | number, unknown]> = Array.isArray(v)
        ? v.map((x, i) => [i, x])
        : Object.entries(v);
      for (const [k, x] of entries) {
        if (typeof k === "string" && (k.includes("\u0000") || !k.isWellFormed())) {
          return {
            path: pathOf(it),
            message: "keys must not contain U+0000 or unpaired surrogates",
          };
        }
        stack.push({ v: x, depth: it.depth + 1, parent: it, key: k });
      }
    }
  }
  return null;
}

function checkStorable(raw: unknown): void {
  const problem = unstorable(raw);
  if (problem) {
    const message = `request body breaks the contract: ${problem.path} ${problem.message}`;
    throw new OrbitError(422, "INVALID_REQUEST", message, { problems: [problem] });
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The request body as text: 400 INVALID_ENCODING when it is not UTF-8 (`text()` would put
 * U+FFFD in place of every bad byte, and a body would be stored as something its sender never
 * sent). Read as bytes, which hono keeps for the next reader of the same request.
 */
export async function bodyText(c: Context): Promise<string> {
  const bytes = await c.req.arrayBuffer();
  try {
    return utf8.decode(bytes);
  } catch {
    throw new OrbitError(
      400,
      "INVALID_ENCODING",
      "request body is not valid UTF-8 (JSON bodies must be UTF-8)",
    );
  }
}

/**
 * The request body as JSON checked against `schema`: 400 INVALID_ENCODING, 400 BAD_JSON,
 * 422 INVALID_REQUEST.
 */
export async function body<T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> {
  const text = await bodyText(c);
  const raw = text.trim() === "" ? {} : parseJson(text);
  const r = schema.safeParse(raw);
  if (!r.success) {
    throw new OrbitError(422, "INVALID_REQUEST", "request body breaks the contract", {
      problems: problems(r.error, "$"),
    });
  }
  return r.data;
}

/** The raw JSON body (for documents validated elsewhere). */
export async function rawJson(c: Context): Promise<unknown> {
  return parseJson(await bodyText(c));
}

/** A request body's JSON: 400 BAD_JSON when it is not JSON, checked to be storable. */
function parseJson(text: string): unknown {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new OrbitError(
      400,
      "BAD_JSON",
      `request body is not valid JSON: ${(e as Error).message}`,
    );
  }
  checkStorable(raw);
  return raw;
}

export function query<T extends z.ZodType>(c: Context, schema: T): z.infer<T> {
  const r = schema.safeParse(c.req.query());
  if (!r.success) {
    throw new OrbitError(400, "INVALID_QUERY", "query parameters are invalid", {
      problems: problems(r.error, "?"),
    });
  }
  return r.data;
}

/** A non-negative integer query parameter. */
export const intParam = (max: number) =>
  z.string().regex(/^\d{1,15}$/, "must be a non-negative integer").transform(Number).pipe(
    z.number().max(max, `must be at most ${max}`),
  );

/**
 * A page size: 1 to `max`. A page of none would answer the same cursor again, and a client that
 * pages until there is no next one would never stop.
 */
export const limitParam = (max: number) =>
  z.string().regex(/^\d{1,15}$/, "must be a whole number from 1").transform(Number).pipe(
    z.number().min(1, "must be at least 1").max(max, `must be at most ${max}`),
  );
