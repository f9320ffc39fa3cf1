/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): query parameters out of
 * range, unknown routes and wrong methods, signals, cancels and queries on ir/1 executions.
 */
import assert from "node:assert/strict";
import {
  b64url,
  type Case,
  FINISHED,
  type Fixture,
  hostileTests,
  kit,
  ORDER,
  RUNNING,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { post } = kit(fx);
  return [
    // --- query parameters out of range ----------------------------------------------------------
    { name: "list: limit=-1", path: "/v1/executions?limit=-1", status: 400, code: "INVALID_QUERY" },
    {
      name: "list: limit=0 (a page of none)",
      path: "/v1/executions?limit=0",
      status: 400,
      code: "INVALID_QUERY",
      check: (b) => assert.match(b.error.problems[0].message, /at least 1/),
    },
    {
      name: "history: limit=0 (a page of none)",
      path: `/v1/executions/${RUNNING}/history?limit=0`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: limit=abc",
      path: "/v1/executions?limit=abc",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: limit=100000",
      path: "/v1/executions?limit=100000",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: limit=1.5",
      path: "/v1/executions?limit=1.5",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: limit=1e3",
      path: "/v1/executions?limit=1e3",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: limit empty",
      path: "/v1/executions?limit=",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: limit 20 digits",
      path: `/v1/executions?limit=${"9".repeat(20)}`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: status=bogus",
      path: "/v1/executions?status=bogus",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: status=RUNNING",
      path: "/v1/executions?status=RUNNING",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: workflow 200 chars",
      path: `/v1/executions?workflow=${"W".repeat(200)}`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: bad cursor",
      path: "/v1/executions?cursor=not-a-cursor",
      status: 400,
      code: "INVALID_CURSOR",
    },
    {
      name: "list: cursor of the wrong shape",
      path: `/v1/executions?cursor=${b64url('{"a":1}')}`,
      status: 400,
      code: "INVALID_CURSOR",
    },
    {
      name: "list: cursor with a NUL id",
      path: `/v1/executions?cursor=${b64url('[1,"\\u0000"]')}`,
      status: 400,
      code: "INVALID_CURSOR",
    },
    {
      name: "list: cursor with a huge number",
      path: `/v1/executions?cursor=${b64url('[1e400,"a"]')}`,
      status: 400,
      code: "INVALID_CURSOR",
    },
    {
      name: "list: cursor 2000 chars",
      path: `/v1/executions?cursor=${"A".repeat(2000)}`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "history: after_seq=x",
      path: `/v1/executions/${RUNNING}/history?after_seq=x`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "history: after_seq=-1",
      path: `/v1/executions/${RUNNING}/history?after_seq=-1`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "history: limit=abc",
      path: `/v1/executions/${RUNNING}/history?limit=abc`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "history: limit=100000",
      path: `/v1/executions/${RUNNING}/history?limit=100000`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "history: run_id of another execution",
      path: `/v1/executions/${FINISHED}/history?run_id=${fx.runId}`,
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "history: run_id 300 chars",
      path: `/v1/executions/${RUNNING}/history?run_id=${"r".repeat(300)}`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "wait: timeout_s=999",
      path: `/v1/executions/${RUNNING}/wait?timeout_s=999`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "wait: timeout_s=301",
      path: `/v1/executions/${RUNNING}/wait?timeout_s=301`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "wait: timeout_s=abc",
      path: `/v1/executions/${RUNNING}/wait?timeout_s=abc`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "wait: timeout_s=-1",
      path: `/v1/executions/${RUNNING}/wait?timeout_s=-1`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "wait: timeout_s=Infinity",
      path: `/v1/executions/${RUNNING}/wait?timeout_s=Infinity`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "wait: timeout_s 400 digits",
      path: `/v1/executions/${RUNNING}/wait?timeout_s=${"9".repeat(400)}`,
      status: 400,
      code: "INVALID_QUERY",
    },

    // --- unknown routes and wrong methods -------------------------------------------------------
    { name: "unknown route under /v1", path: "/v1/nope", status: 404, code: "NOT_FOUND" },
    {
      name: "unknown sub-route",
      path: `/v1/executions/${RUNNING}/nope`,
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "unknown route outside /v1",
      path: "/nope",
      auth: null,
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "unknown API version",
      path: "/v2/executions",
      auth: null,
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "DELETE an execution",
      method: "DELETE",
      path: `/v1/executions/${RUNNING}`,
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "PUT a workflow",
      method: "PUT",
      path: "/v1/workflows",
      json: ORDER,
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "PATCH executions",
      method: "PATCH",
      path: "/v1/executions",
      json: {},
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "POST to an execution",
      ...post(`/v1/executions/${RUNNING}`, {}),
      status: 404,
      code: "NOT_FOUND",
    },
    { name: "GET register", path: "/v1/workers/register", status: 404, code: "NOT_FOUND" },
    { name: "GET poll", path: "/v1/workers/poll", status: 404, code: "NOT_FOUND" },
    { name: "GET complete", path: "/v1/tasks/complete", status: 404, code: "NOT_FOUND" },
    {
      name: "GET cancel",
      path: `/v1/executions/${RUNNING}/cancel`,
      status: 404,
      code: "NOT_FOUND",
    },
    {
      name: "DELETE a workflow",
      method: "DELETE",
      path: "/v1/workflows/Hostile.Order/1.0.0",
      status: 404,
      code: "NOT_FOUND",
    },
    { name: "POST health", ...post("/v1/health", {}), status: 404, code: "NOT_FOUND" },

    // --- signals, cancel, queries on ir/1 executions --------------------------------------------
    {
      name: "signal to an ir/1 execution",
      ...post(`/v1/executions/${RUNNING}/signals/approve`, { payload: { ok: true } }),
      status: 404,
      code: "UNKNOWN_SIGNAL",
    },
    {
      name: "signal to a finished execution",
      ...post(`/v1/executions/${FINISHED}/signals/approve`, {}),
      status: 409,
      code: "EXECUTION_FINISHED",
    },
    {
      name: "cancel a finished execution",
      ...post(`/v1/executions/${FINISHED}/cancel`, { reason: "again" }),
      status: 409,
      code: "EXECUTION_FINISHED",
    },
    {
      name: "query an ir/1 execution",
      path: `/v1/executions/${RUNNING}/queries/status`,
      status: 404,
      code: "UNKNOWN_QUERY",
    },
  ];
}

hostileTests("routes", cases, 47);
