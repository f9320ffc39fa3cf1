/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): unknown executions,
 * workflows and versions, invalid execution ids, injection strings in ids and query parameters.
 */
import {
  type Case,
  e,
  type Fixture,
  hostileTests,
  INJECTIONS,
  kit,
  RUNNING,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { start, post, okStart } = kit(fx);
  return [
    // --- unknown executions, workflows, versions ------------------------------------------------
    {
      name: "get: unknown execution",
      path: "/v1/executions/nope",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "history: unknown execution",
      path: "/v1/executions/nope/history",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "wait: unknown execution",
      path: "/v1/executions/nope/wait?timeout_s=1",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "cancel: unknown execution",
      ...post("/v1/executions/nope/cancel", {}),
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "signal: unknown execution",
      ...post("/v1/executions/nope/signals/go", {}),
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "query: unknown execution",
      path: "/v1/executions/nope/queries/q",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "start: unknown workflow",
      ...start({ workflow: "Nope" }),
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "start: unknown version",
      ...start({ ...okStart, version: "9.9.9" }),
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "get: unknown workflow",
      path: "/v1/workflows/Nope",
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "get: unknown version",
      path: "/v1/workflows/Hostile.Order/9.9.9",
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "start: version not semver",
      ...start({ ...okStart, version: "latest" }),
      status: 422,
      code: "INVALID_VERSION",
    },
    {
      name: "start: version 1.0",
      ...start({ ...okStart, version: "1.0" }),
      status: 422,
      code: "INVALID_VERSION",
    },
    {
      name: "start: version v1.0.0",
      ...start({ ...okStart, version: "v1.0.0" }),
      status: 422,
      code: "INVALID_VERSION",
    },
    {
      name: "start: version empty",
      ...start({ ...okStart, version: "" }),
      status: 422,
      code: "INVALID_VERSION",
    },
    {
      name: "start: version 100 chars",
      ...start({ ...okStart, version: "1".repeat(100) }),
      status: 422,
      code: "INVALID_VERSION",
    },
    {
      name: "get: version not semver",
      path: "/v1/workflows/Hostile.Order/latest",
      status: 422,
      code: "INVALID_VERSION",
    },

    // --- invalid execution ids ------------------------------------------------------------------
    {
      name: "start: execution_id with slash",
      ...start({ ...okStart, execution_id: "a/b" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id with spaces",
      ...start({ ...okStart, execution_id: "a b c" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id 500 chars",
      ...start({ ...okStart, execution_id: "a".repeat(500) }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id 201 chars",
      ...start({ ...okStart, execution_id: "a".repeat(201) }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id empty",
      ...start({ ...okStart, execution_id: "" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id leading dash",
      ...start({ ...okStart, execution_id: "-x" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id ..",
      ...start({ ...okStart, execution_id: ".." }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id with newline",
      ...start({ ...okStart, execution_id: "a\nb" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id trailing newline",
      ...start({ ...okStart, execution_id: "ab\n" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id unicode",
      ...start({ ...okStart, execution_id: "bestellung-ü" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id RTL override",
      ...start({ ...okStart, execution_id: "a\u202eb" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id emoji",
      ...start({ ...okStart, execution_id: "🚀" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },
    {
      name: "start: execution_id fullwidth digits",
      ...start({ ...okStart, execution_id: "１２３" }),
      status: 422,
      code: "INVALID_EXECUTION_ID",
    },

    // --- injection strings in ids and query parameters ------------------------------------------
    ...INJECTIONS.flatMap((inj): Case[] => [
      {
        name: `start: execution_id ${inj}`,
        ...start({ ...okStart, execution_id: inj }),
        status: 422,
        code: "INVALID_EXECUTION_ID",
      },
      {
        name: `start: workflow ${inj}`,
        ...start({ workflow: inj }),
        status: 404,
        code: "UNKNOWN_WORKFLOW",
      },
      {
        name: `start: version ${inj}`,
        ...start({ ...okStart, version: inj }),
        status: 422,
        code: "INVALID_VERSION",
      },
      {
        name: `get execution ${inj}`,
        path: `/v1/executions/${e(inj)}`,
        status: 404,
        code: "UNKNOWN_EXECUTION",
      },
      {
        name: `history of ${inj}`,
        path: `/v1/executions/${e(inj)}/history`,
        status: 404,
        code: "UNKNOWN_EXECUTION",
      },
      {
        name: `wait for ${inj}`,
        path: `/v1/executions/${e(inj)}/wait?timeout_s=1`,
        status: 404,
        code: "UNKNOWN_EXECUTION",
      },
      {
        name: `cancel ${inj}`,
        ...post(`/v1/executions/${e(inj)}/cancel`, {}),
        status: 404,
        code: "UNKNOWN_EXECUTION",
      },
      {
        name: `signal ${inj}`,
        ...post(`/v1/executions/${e(inj)}/signals/${e(inj)}`, {}),
        status: 404,
        code: "UNKNOWN_EXECUTION",
      },
      {
        name: `signal name ${inj}`,
        ...post(`/v1/executions/${RUNNING}/signals/${e(inj)}`, {}),
        status: 404,
        code: "UNKNOWN_SIGNAL",
      },
      {
        name: `query name ${inj}`,
        path: `/v1/executions/${RUNNING}/queries/${e(inj)}`,
        status: 404,
        code: "UNKNOWN_QUERY",
      },
      {
        name: `get workflow ${inj}`,
        path: `/v1/workflows/${e(inj)}`,
        status: 404,
        code: "UNKNOWN_WORKFLOW",
      },
      {
        name: `get workflow version ${inj}`,
        path: `/v1/workflows/Hostile.Order/${e(inj)}`,
        status: 422,
        code: "INVALID_VERSION",
      },
      {
        name: `list ?workflow=${inj}`,
        path: `/v1/executions?workflow=${e(inj)}`,
        status: 400,
        code: "INVALID_QUERY",
      },
      {
        name: `list ?status=${inj}`,
        path: `/v1/executions?status=${e(inj)}`,
        status: 400,
        code: "INVALID_QUERY",
      },
      {
        name: `list ?cursor=${inj}`,
        path: `/v1/executions?cursor=${e(inj)}`,
        status: 400,
        code: "INVALID_CURSOR",
      },
      {
        name: `list ?limit=${inj}`,
        path: `/v1/executions?limit=${e(inj)}`,
        status: 400,
        code: "INVALID_QUERY",
      },
      {
        name: `history ?run_id=${inj}`,
        path: `/v1/executions/${RUNNING}/history?run_id=${e(inj)}`,
        status: 400,
        code: "INVALID_QUERY",
      },
      {
        name: `history ?after_seq=${inj}`,
        path: `/v1/executions/${RUNNING}/history?after_seq=${e(inj)}`,
        status: 400,
        code: "INVALID_QUERY",
      },
      {
        name: `poll session ${inj}`,
        ...post("/v1/workers/poll", { session_id: inj, wait_s: 0 }),
        status: 404,
        code: "UNKNOWN_SESSION",
      },
      {
        name: `unregister session ${inj}`,
        ...post("/v1/workers/unregister", { session_id: inj }),
        status: 404,
        code: "UNKNOWN_SESSION",
      },
      {
        name: `complete token ${inj}/x`,
        ...post("/v1/tasks/complete", { token: `${inj}/x`, output: 1 }),
        status: 422,
        code: "INVALID_TOKEN",
      },
      {
        name: `fail token ${RUNNING}${inj}/x`,
        ...post("/v1/tasks/fail", {
          token: `${RUNNING}${inj}/x`,
          error: { code: "E", message: "m" },
        }),
        status: 422,
        code: "INVALID_TOKEN",
      },
    ]),
  ];
}

hostileTests("ids", cases, 73);
