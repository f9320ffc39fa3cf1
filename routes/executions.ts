/** Executions: start, read, list, history, wait, cancel, signals, queries. */
import { type Context, Hono } from "hono";
import { z } from "zod";
import type { Runtime } from "../lib/runtime.ts";
import { notFound, OrbitError, storageError } from "../lib/errors.ts";
import { EXECUTION_STATUSES } from "../lib/engine/events.ts";
import { NAME_RE } from "../lib/engine/ir.ts";
import { EXECUTION_ID_RE } from "../lib/executions.ts";
import { type ExecutionRow, InvalidCursorError } from "../lib/store/store.ts";
import { runQuery, sendSignal } from "../lib/signals.ts";
import { pendingOf } from "../lib/pending.ts";
import { body, intParam, query } from "./util.ts";

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
  limit: intParam(1000).optional(),
  cursor: z.string().max(1000).optional(),
});
const historyQuery = z.object({
  after_seq: intParam(Number.MAX_SAFE_INTEGER).optional(),
  limit: intParam(10_000).optional(),
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

  async function load(id: string): Promise<ExecutionRow> {
    const row = await rt.store.getExecution(id);
    if (!row) throw notFound("UNKNOWN_EXECUTION", `execution ${id} does not exist`);
    return row;
  }

  app.post("/", async (c) => {
    const r = await body(c, startSchema);
    const { created, row } = await rt.executions.start(r);
    return c.json(row, created ? 201 : 200);
  });
  app.get("/", async (c) => {
    const q = query(c, listQuery);
    try {
      const page = await rt.store.listExecutions({
        limit: q.limit ?? 100,
        ...(q.workflow ? { workflow: q.workflow } : {}),
        ...(q.status ? { status: q.status as ExecutionRow["status"] } : {}),
        ...(q.cursor ? { cursor: q.cursor } : {}),
      });
      return c.json(page);
    } catch (e) {
      // Only a cursor the store cannot read is the client's fault; anything else is storage.
      if (e instanceof InvalidCursorError) {
        throw new OrbitError(400, "INVALID_CURSOR", "cursor is not one this server handed out");
      }
      throw e instanceof OrbitError ? e : storageError(e);
    }
  });
  app.get("/:id", async (c) => c.json(await load(executionId(c))));
  app.get("/:id/history", async (c) => {
    const q = query(c, historyQuery);
    const row = await load(executionId(c));
    const runId = q.run_id ?? row.run_id;
    if (runId !== row.run_id) {
      // Another run must be one of this execution's (its WorkflowCreated names the execution).
      const [first] = await rt.store.readHistory(runId, 0, 1);
      if (!first || (first as { execution_id?: string }).execution_id !== row.execution_id) {
        throw notFound("UNKNOWN_EXECUTION", `execution ${row.execution_id} has no run ${runId}`);
      }
    }
    const limit = Math.max(1, q.limit ?? 1000);
    const events = await rt.store.readHistory(runId, q.after_seq ?? 0, limit + 1);
    const more = events.length > limit;
    if (more) events.length = limit;
    return c.json({
      execution_id: row.execution_id,
      run_id: runId,
      events,
      ...(more ? { next_after_seq: events.at(-1)!.seq } : {}),
    });
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
