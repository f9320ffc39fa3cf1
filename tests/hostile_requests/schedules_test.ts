/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): schedules, every route with
 * bodies and ids it must refuse.
 */
import {
  type Case,
  type Fixture,
  hostileTests,
  INJECTIONS,
  kit,
  type Request,
  SCHEDULE,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { post, postText } = kit(fx);
  const every = { workflow: "Hostile.Instant", every_s: 60 };
  const sched = (name: string, r: Request, status: number, code: string): Case => ({
    name: `schedules: ${name}`,
    ...r,
    status,
    code,
  });
  const patch = (path: string, json: unknown) => ({ method: "PATCH", path, json });
  const one = `/v1/schedules/${SCHEDULE}`;
  return [
    sched("create: truncated JSON", postText("/v1/schedules", '{"schedule_id":'), 400, "BAD_JSON"),
    sched("create: JSON array", post("/v1/schedules", []), 422, "INVALID_SCHEDULE"),
    sched(
      "create: input 1e999",
      postText(
        "/v1/schedules",
        '{"schedule_id":"s-inf","workflow":"Hostile.Instant","every_s":60,"input":{"n":1e999}}',
      ),
      422,
      "INVALID_REQUEST",
    ),
    sched(
      "create: existing id",
      post("/v1/schedules", { ...every, schedule_id: SCHEDULE }),
      409,
      "SCHEDULE_EXISTS",
    ),
    sched(
      "create: unknown workflow",
      post("/v1/schedules", { ...every, schedule_id: "s2", workflow: "No.Such" }),
      404,
      "UNKNOWN_WORKFLOW",
    ),
    sched(
      "create: every_s 0",
      post("/v1/schedules", { ...every, schedule_id: "s2", every_s: 0 }),
      422,
      "INVALID_SCHEDULE",
    ),
    sched(
      "create: cron and every_s",
      post("/v1/schedules", { ...every, schedule_id: "s2", cron: "* * * * *" }),
      422,
      "INVALID_SCHEDULE",
    ),
    sched(
      "create: id with @",
      post("/v1/schedules", { ...every, schedule_id: "s@2" }),
      422,
      "INVALID_SCHEDULE",
    ),
    sched(
      "create: injection as id",
      post("/v1/schedules", { ...every, schedule_id: INJECTIONS[0] }),
      422,
      "INVALID_SCHEDULE",
    ),
    sched(
      "create: unknown member",
      post("/v1/schedules", { ...every, schedule_id: "s2", x: 1 }),
      422,
      "INVALID_SCHEDULE",
    ),
    sched(
      "create: bad time zone",
      post("/v1/schedules", {
        ...every,
        every_s: undefined,
        schedule_id: "s2",
        cron: "0 9 * * *",
        timezone: "Mars/Base",
      }),
      422,
      "INVALID_SCHEDULE",
    ),
    sched(
      "read: unknown id",
      { method: "GET", path: "/v1/schedules/nope" },
      404,
      "UNKNOWN_SCHEDULE",
    ),
    sched(
      "patch: unknown id",
      patch("/v1/schedules/nope", { every_s: 5 }),
      404,
      "UNKNOWN_SCHEDULE",
    ),
    sched("patch: every_s -1", patch(one, { every_s: -1 }), 422, "INVALID_SCHEDULE"),
    sched("patch: schedule_id", patch(one, { schedule_id: "other" }), 422, "INVALID_SCHEDULE"),
    sched("patch: not JSON", { method: "PATCH", path: one, text: "{" }, 400, "BAD_JSON"),
    sched(
      "delete: unknown id",
      { method: "DELETE", path: "/v1/schedules/nope" },
      404,
      "UNKNOWN_SCHEDULE",
    ),
    sched("trigger: unknown id", post("/v1/schedules/nope/trigger", {}), 404, "UNKNOWN_SCHEDULE"),
    sched("trigger: a member", post(`${one}/trigger`, { now: true }), 422, "INVALID_REQUEST"),
    sched("pause: unknown id", post("/v1/schedules/nope/pause", {}), 404, "UNKNOWN_SCHEDULE"),
    sched("resume: a member", post(`${one}/resume`, { at: 1 }), 422, "INVALID_REQUEST"),
  ];
}

hostileTests("schedules", cases, 21);
