/**
 * Schedules (SPEC §3, §6): create, list, read, PATCH, delete, trigger, pause, resume. A
 * schedule reads as the §6 object plus `next_fire_ms`, `fired` and `skipped`; errors are
 * 404 UNKNOWN_SCHEDULE, 404 UNKNOWN_WORKFLOW, 409 SCHEDULE_EXISTS, 422 INVALID_SCHEDULE.
 */
import { Hono } from "hono";
import { z } from "zod";
import type { Runtime } from "../lib/runtime.ts";
import { NAME_RE } from "../lib/engine/ir.ts";
import { body, query, rawJson } from "./util.ts";

const listQuery = z.object({
  workflow: z.string().regex(NAME_RE, "must be a workflow name").optional(),
});
/** trigger, pause and resume take no members; an empty body is `{}`. */
const noMembers = z.strictObject({});

export function scheduleRoutes(rt: Runtime): Hono {
  const app = new Hono();
  const schedules = rt.schedules;

  app.post("/", async (c) => c.json(await schedules.create(await rawJson(c)), 201));
  app.get("/", async (c) => {
    const q = query(c, listQuery);
    return c.json({ schedules: await schedules.list(q.workflow) });
  });
  app.get("/:id", async (c) => c.json(await schedules.get(c.req.param("id"))));
  app.patch(
    "/:id",
    async (c) => c.json(await schedules.update(c.req.param("id"), await rawJson(c))),
  );
  app.delete("/:id", async (c) => {
    const id = c.req.param("id");
    await schedules.remove(id);
    return c.json({ schedule_id: id, deleted: true });
  });
  app.post("/:id/trigger", async (c) => {
    await body(c, noMembers);
    const { created, row } = await schedules.trigger(c.req.param("id"));
    return c.json(row, created ? 201 : 200);
  });
  app.post("/:id/pause", async (c) => {
    await body(c, noMembers);
    return c.json(await schedules.pause(c.req.param("id")));
  });
  app.post("/:id/resume", async (c) => {
    await body(c, noMembers);
    return c.json(await schedules.resume(c.req.param("id")));
  });
  return app;
}
