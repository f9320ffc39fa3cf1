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

/** The request body as JSON checked against `schema`: 400 BAD_JSON, 422 INVALID_REQUEST. */
export async function body<T extends z.ZodType>(c: Context, schema: T): Promise<z.infer<T>> {
  const text = await c.req.text();
  let raw: unknown = {};
  if (text.trim() !== "") {
    try {
      raw = JSON.parse(text);
    } catch (e) {
      throw new OrbitError(
        400,
        "BAD_JSON",
        `request body is not valid JSON: ${(e as Error).message}`,
      );
    }
  }
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
  const text = await c.req.text();
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new OrbitError(
      400,
      "BAD_JSON",
      `request body is not valid JSON: ${(e as Error).message}`,
    );
  }
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
