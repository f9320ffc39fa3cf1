/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): credentials, every
 * protected route with every kind of bad Authorization header.
 */
import {
  type Case,
  type Fixture,
  hostileTests,
  ORDER,
  type Request,
  RUNNING,
  SCHEDULE,
} from "../support/hostile.ts";

/** The routes behind the bearer token, each with a request that would change state if let in. */
function protectedRoutes(fx: Fixture): Request[] {
  return [
    { method: "GET", path: "/v1/workflows" },
    { method: "POST", path: "/v1/workflows", json: { ...ORDER, name: "Hostile.Sneaky" } },
    { method: "GET", path: "/v1/workflows/Hostile.Order" },
    { method: "GET", path: "/v1/workflows/Hostile.Order/1.0.0" },
    {
      method: "POST",
      path: "/v1/executions",
      json: { workflow: "Hostile.Order", input: { order_id: "sneaky" }, execution_id: "sneaky" },
    },
    { method: "GET", path: "/v1/executions" },
    { method: "GET", path: `/v1/executions/${RUNNING}` },
    { method: "GET", path: `/v1/executions/${RUNNING}/history` },
    { method: "GET", path: `/v1/executions/${RUNNING}/wait?timeout_s=0` },
    { method: "POST", path: `/v1/executions/${RUNNING}/cancel`, json: { reason: "sneaky" } },
    { method: "POST", path: `/v1/executions/${RUNNING}/signals/go`, json: {} },
    { method: "GET", path: `/v1/executions/${RUNNING}/queries/status` },
    {
      method: "POST",
      path: "/v1/workers/register",
      json: {
        worker_id: "sneaky",
        runtime: "deno",
        tasks: [{ name: "payments.charge", contract: "1" }],
      },
    },
    { method: "POST", path: "/v1/workers/poll", json: { session_id: fx.session, wait_s: 0 } },
    { method: "POST", path: "/v1/workers/heartbeat", json: { session_id: fx.session, tokens: [] } },
    { method: "POST", path: "/v1/workers/unregister", json: { session_id: fx.session } },
    { method: "GET", path: "/v1/workers" },
    { method: "POST", path: "/v1/tasks/complete", json: { token: `${RUNNING}/x`, output: 1 } },
    {
      method: "POST",
      path: "/v1/tasks/fail",
      json: { token: `${RUNNING}/x`, error: { code: "E", message: "m" } },
    },
    { method: "GET", path: `/v1/executions/${RUNNING}/pending` },
    {
      method: "POST",
      path: "/v1/schedules",
      json: { schedule_id: "sneaky", workflow: "Hostile.Instant", every_s: 1 },
    },
    { method: "GET", path: "/v1/schedules" },
    { method: "GET", path: `/v1/schedules/${SCHEDULE}` },
    { method: "PATCH", path: `/v1/schedules/${SCHEDULE}`, json: { every_s: 1 } },
    { method: "DELETE", path: `/v1/schedules/${SCHEDULE}` },
    { method: "POST", path: `/v1/schedules/${SCHEDULE}/trigger`, json: {} },
    { method: "POST", path: `/v1/schedules/${SCHEDULE}/pause`, json: {} },
    { method: "POST", path: `/v1/schedules/${SCHEDULE}/resume`, json: {} },
    { method: "GET", path: "/v1/metrics" },
    { method: "GET", path: "/v1/no-such-route" },
  ];
}

const BAD_AUTH: Array<[string, string | null]> = [
  ["none", null],
  ["`Bearer` alone", "Bearer"],
  ["`Bearer ` with nothing after", "Bearer "],
  ["Basic scheme", "Basic c2VjcmV0"],
  ["Basic x", "Basic x"],
  ["wrong token", "Bearer wrong!"],
  ["shorter token", "Bearer secre"],
  ["longer token", "Bearer secret2"],
  ["token with a space and more", "Bearer secret extra"],
  ["token without a scheme", "secret"],
  ["token in another scheme", "Token secret"],
];

export function cases(fx: Fixture): Case[] {
  const cases: Case[] = [];
  for (const route of protectedRoutes(fx)) {
    for (const [what, auth] of BAD_AUTH) {
      cases.push({
        name: `auth (${what}): ${route.method} ${route.path}`,
        ...route,
        auth,
        status: 401,
        code: "UNAUTHORIZED",
      });
    }
  }
  return cases;
}

hostileTests("auth", cases, 330);
