/** `POST /v1/tasks/complete` and `/fail`: a worker reports an attempt's result by token. */
import { Hono } from "hono";
import { z } from "zod";
import type { Runtime } from "../lib/runtime.ts";
import { body } from "./util.ts";

const token = z.string().min(3).max(512);

const completeSchema = z.object({ token, output: z.unknown().optional() });
const failSchema = z.object({
  token,
  error: z.object({
    code: z.string().min(1).max(200),
    message: z.string().max(100_000).default(""),
    retryable: z.boolean().optional(),
    details: z.unknown().optional(),
  }),
});

export function taskRoutes(rt: Runtime): Hono {
  const app = new Hono();
  app.post("/complete", async (c) => {
    const r = await body(c, completeSchema);
    const accepted = await rt.executions.report(r.token, { output: r.output ?? null });
    return c.json({ accepted });
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
    const accepted = await rt.executions.report(r.token, { error });
    return c.json({ accepted });
  });
  return app;
}
