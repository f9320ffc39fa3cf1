/** `POST /v1/tasks/complete` and `/fail`: a worker reports an attempt's result by token. */
import { Hono } from "hono";
import { z } from "zod";
import type { Runtime } from "../lib/runtime.ts";
import { plainName } from "../lib/names.ts";
import { body } from "./util.ts";

// Its form (`<execution id>/<uuid>`) is checked by the runtime: 422 INVALID_TOKEN.
const token = z.string();

// Optional: a worker that names its session and max_tasks gets its next tasks in the answer.
const take = {
  session_id: z.string().min(1).max(200).optional(),
  max_tasks: z.number().int().min(0).max(1000).optional(),
};

export const completeSchema = z.object({ token, output: z.unknown().optional(), ...take });
export const failSchema = z.object({
  token,
  ...take,
  error: z.object({
    // Written to history, shown by the CLI and the console, matched against `non_retryable`.
    code: plainName(200),
    message: z.string().max(100_000).default(""),
    retryable: z.boolean().optional(),
    details: z.unknown().optional(),
  }),
});

function takeOf(r: { session_id?: string | undefined; max_tasks?: number | undefined }) {
  return r.session_id && r.max_tasks
    ? { sessionId: r.session_id, maxTasks: r.max_tasks }
    : undefined;
}

export function taskRoutes(rt: Runtime): Hono {
  const app = new Hono();
  app.post("/complete", async (c) => {
    const r = await body(c, completeSchema);
    return c.json(
      await rt.workers.report(r.token, { output: r.output ?? null }, takeOf(r), c.req.raw.signal),
    );
  });
  app.post("/fail", async (c) => {
    const r = await body(c, failSchema);
    const error = { code: r.error.code, message: r.error.message } as {
      code: string;
      message: string;
      retryable?: boolean;
      details?: unknown;
    };
    if (r.error.retryable !== undefined) error.retryable = r.error.retryable;
    if (r.error.details !== undefined) error.details = r.error.details;
    return c.json(await rt.workers.report(r.token, { error }, takeOf(r), c.req.raw.signal));
  });
  return app;
}
