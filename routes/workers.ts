/** The worker protocol (SPEC §4): register, poll, heartbeat, unregister, list. */
import { Hono } from "hono";
import { z } from "zod";
import type { Runtime } from "../lib/runtime.ts";
import { plainName } from "../lib/names.ts";
import { body } from "./util.ts";

const sessionId = z.string().min(1).max(200);

// Logged, written to history and shown by the CLI and the console: no control, invisible or
// bidirectional characters (a newline would forge a log line, U+202E reorder one).
export const registerSchema = z.object({
  worker_id: plainName(200),
  runtime: plainName(64).default("any"),
  tasks: z.array(z.object({
    name: plainName(200),
    contract: plainName(64),
    language: plainName(32).optional(),
  })).min(1).max(1000),
  concurrency: z.number().int().min(1).max(10_000).default(1),
});
export const pollSchema = z.object({
  session_id: sessionId,
  max_tasks: z.number().int().min(1).max(1000).default(1),
  wait_s: z.number().min(0).max(60).default(30),
});
export const heartbeatSchema = z.object({
  session_id: sessionId,
  tokens: z.array(z.string().max(512)).max(10_000).default([]),
});
export const unregisterSchema = z.object({ session_id: sessionId });

export function workerRoutes(rt: Runtime): Hono {
  const app = new Hono();
  app.post("/register", async (c) => {
    const r = await body(c, registerSchema);
    const session_id = await rt.workers.register(r);
    return c.json({ session_id });
  });
  app.post("/poll", async (c) => {
    const r = await body(c, pollSchema);
    const tasks = await rt.workers.poll(
      r.session_id,
      r.max_tasks,
      r.wait_s * 1000,
      c.req.raw.signal,
    );
    return c.json({ tasks });
  });
  app.post("/heartbeat", async (c) => {
    const r = await body(c, heartbeatSchema);
    return c.json({ cancel: await rt.workers.heartbeat(r.session_id, r.tokens) });
  });
  app.post("/unregister", async (c) => {
    const r = await body(c, unregisterSchema);
    await rt.workers.unregister(r.session_id);
    return c.json({ ok: true });
  });
  app.get("/", async (c) => c.json({ workers: await rt.workers.list() }));
  return app;
}
