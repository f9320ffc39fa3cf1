/** Executions: start, read, list, history, wait, cancel, signals, queries. */
import { type Context, Hono } from "hono";
import { z } from "zod";
import type { Runtime } from "../lib/runtime.ts";
import { notFound } from "../lib/errors.ts";
import { EXECUTION_STATUSES } from "../lib/engine/events.ts";
import { NAME_RE } from "../lib/engine/ir.ts";
import { EXECUTION_ID_RE } from "../lib/executions/types.ts";
import type { ExecutionRow } from "../lib/store/store.ts";
import { runQuery, sendSignal } from "../lib/executions/signals.ts";
import { pendingOf } from "../lib/executions/pending.ts";
import { body, intParam, limitParam, query } from "./util.ts";

const startSchema = z.object({
  workflow: z.string().min(1).max(128),
  // Checked by the runtime, which answers INVALID_VERSION and INVALID_EXECUTION_ID.
  version: z.string().optional(),
  input: z.unknown().optional(),
  execution_id: z.string().optional(),
});
const listQuery = z.object({
  workflow: z.string().regex(NAME_RE, "must be a workflow name").optional(),
  status: z.enum(EXECUTION_STATUSES as [string, ...string[]]).optional(),
  limit: limitParam(1000).optional(),
  cursor: z.string().max(1000).optional(),
});
const historyQuery = z.object({
  after_seq: intParam(Number.MAX_SAFE_INTEGER).optional(),
  limit: limitParam(10_000).optional(),
  run_id: z.string().regex(EXECUTION_ID_RE, "must be a run id").optional(),
});
const waitQuery = z.object({
  timeout_s: z.string().regex(/^\d+(\.\d+)?$/, "must be a number of seconds").transform(Number)
    .pipe(z.number().max(300, "must be at most 300")).optional(),
});
const cancelSchema = z.object({ reason: z.string().max(10_000).optional() });
const signalSchema = z.object({ payload: z.unknown().optional() });

export function executionRoutes(rt: Runtime): Hono {
  const app = new Hono();
  // Created now, so it watches dispatches (the last worker of a task) from the first request.
  const pending = pendingOf(rt);

  /**
   * The `:id` of the path. No execution has an id that start would refuse, and some of those
   * (a NUL) the store cannot even look up: they are unknown without a query.
   */
  function executionId(c: Context): string {
    const id = c.req.param("id")!;
    if (!EXECUTION_ID_RE.test(id)) {
      throw notFound("UNKNOWN_EXECUTION", `execution ${id.slice(0, 200)} does not exist`);
    }
    return id;
  }

  app.post("/", async (c) => {
    const r = await body(c, startSchema);
    const { created, row } = await rt.executions.start(r);
    return c.json(row, created ? 201 : 200);
  });
  app.get("/", async (c) => {
    const q = query(c, listQuery);
    return c.json(
      await rt.reads.list({
        limit: q.limit ?? 100,
        ...(q.workflow ? { workflow: q.workflow } : {}),
        ...(q.status ? { status: q.status as ExecutionRow["status"] } : {}),
        ...(q.cursor ? { cursor: q.cursor } : {}),
      }),
    );
  });
  app.get("/:id", async (c) => c.json(await rt.reads.get(executionId(c))));
  app.get("/:id/history", async (c) => {
    const q = query(c, historyQuery);
    return c.json(
      await rt.reads.history(executionId(c), {
        run_id: q.run_id,
        after_seq: q.after_seq,
        limit: q.limit ?? 1000,
      }),
    );
  });
  app.get("/:id/wait", async (c) => {
    const q = query(c, waitQuery);
    const ms = (q.timeout_s ?? 30) * 1000;
    return c.json(await rt.executions.wait(executionId(c), ms, c.req.raw.signal));
  });
  app.post("/:id/cancel", async (c) => {
    const r = await body(c, cancelSchema);
    return c.json(
      await rt.executions.cancel(executionId(c), r.reason ?? "cancelled by request"),
    );
  });
  app.post("/:id/signals/:name", async (c) => {
    const r = await body(c, signalSchema);
    return c.json(await sendSignal(rt.executions, executionId(c), c.req.param("name"), r.payload));
  });
  app.get("/:id/pending", async (c) => c.json(await pending.of(executionId(c))));
  app.get("/:id/queries/:name", async (c) => {
    return c.json(await runQuery(rt.executions, executionId(c), c.req.param("name")));
  });
  return app;
}
