/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): worker sessions and task
 * tokens.
 */
import {
  type Case,
  FINISHED,
  type Fixture,
  hostileTests,
  ignored,
  INJECTIONS,
  kit,
  RUNNING,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { post, s } = kit(fx);
  return [
    // --- worker sessions and task tokens --------------------------------------------------------
    {
      name: "poll: unknown session",
      ...post("/v1/workers/poll", { session_id: "no-such-session", wait_s: 0 }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "poll: unknown session, long wait",
      ...post("/v1/workers/poll", { session_id: "no-such-session", wait_s: 60 }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "heartbeat: unknown session",
      ...post("/v1/workers/heartbeat", { session_id: "no-such-session", tokens: [`${RUNNING}/x`] }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "unregister: unknown session",
      ...post("/v1/workers/unregister", { session_id: "no-such-session" }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "poll: session id with a suffix",
      ...post("/v1/workers/poll", { session_id: `${s} `, wait_s: 0 }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "heartbeat: session id upper-cased",
      ...post("/v1/workers/heartbeat", { session_id: s.toUpperCase() }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "complete: token without slash",
      ...post("/v1/tasks/complete", { token: "abcdef", output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token with leading slash",
      ...post("/v1/tasks/complete", { token: "/abcdef", output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token with trailing slash",
      ...post("/v1/tasks/complete", { token: `${RUNNING}/`, output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token empty",
      ...post("/v1/tasks/complete", { token: "", output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token x",
      ...post("/v1/tasks/complete", { token: "x", output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token 600 chars",
      ...post("/v1/tasks/complete", { token: `${"a".repeat(599)}/`, output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "fail: token without slash",
      ...post("/v1/tasks/fail", { token: "abcdef", error: { code: "E", message: "m" } }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token of an unknown execution",
      ...post("/v1/tasks/complete", { token: "no-such-execution/0b0e9c1c", output: 1 }),
      status: 404,
      code: "UNKNOWN_TASK",
    },
    {
      name: "fail: token of an unknown execution",
      ...post("/v1/tasks/fail", {
        token: "no-such-execution/0b0e9c1c",
        error: { code: "E", message: "m", retryable: false },
      }),
      status: 404,
      code: "UNKNOWN_TASK",
    },
    {
      name: "complete: malformed token with the real session and max_tasks",
      ...post("/v1/tasks/complete", { token: "garbage", output: 1, session_id: s, max_tasks: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: unknown execution's token with the real session and max_tasks",
      ...post("/v1/tasks/complete", {
        token: "no-such-execution/0b0e9c1c",
        output: 1,
        session_id: s,
        max_tasks: 1,
      }),
      status: 404,
      code: "UNKNOWN_TASK",
    },
    {
      name: "fail: injection token with the real session and max_tasks",
      ...post("/v1/tasks/fail", {
        token: `${INJECTIONS[0]}/x`,
        error: { code: "E", message: "m" },
        session_id: s,
        max_tasks: 1,
      }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: forged token of the running execution is ignored",
      ...post("/v1/tasks/complete", { token: `${RUNNING}/forged`, output: { paid: true } }),
      status: 200,
      check: ignored,
    },
    {
      name: "fail: forged token of the finished execution is ignored",
      ...post("/v1/tasks/fail", {
        token: `${FINISHED}/forged`,
        error: { code: "E", message: "m" },
      }),
      status: 200,
      check: ignored,
    },
  ];
}

hostileTests("workers", cases, 20);
