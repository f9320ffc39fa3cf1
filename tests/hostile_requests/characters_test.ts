/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): NUL, control and other
 * awkward characters.
 */
import assert from "node:assert/strict";
import {
  type Case,
  e,
  type Fixture,
  hostileTests,
  INSTANT,
  kit,
  RUNNING,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { start, startText, post, postText, s, okStart, reg } = kit(fx);
  return [
    // --- NUL, control and other awkward characters ----------------------------------------------
    {
      name: "get: execution id NUL",
      path: "/v1/executions/%00",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id with NUL inside",
      path: `/v1/executions/${RUNNING}%00`,
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "history: execution id NUL",
      path: "/v1/executions/a%00b/history",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "cancel: execution id NUL",
      ...post("/v1/executions/%00/cancel", {}),
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "wait: execution id NUL",
      path: "/v1/executions/%00/wait?timeout_s=1",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "signal: execution id NUL",
      ...post("/v1/executions/%00/signals/go", {}),
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id with an encoded slash",
      path: `/v1/executions/${RUNNING}%2F..`,
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id bad percent-encoding",
      path: "/v1/executions/%ZZ",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id encoded lone surrogate",
      path: "/v1/executions/%ED%A0%80",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id RTL override",
      path: "/v1/executions/%E2%80%AEorder-1",
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id with a newline",
      path: `/v1/executions/${RUNNING}%0A`,
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: execution id 500 chars",
      path: `/v1/executions/${"a".repeat(500)}`,
      status: 404,
      code: "UNKNOWN_EXECUTION",
    },
    {
      name: "get: workflow name NUL",
      path: "/v1/workflows/%00",
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "get: workflow name with NUL inside",
      path: "/v1/workflows/Hostile.Order%00/1.0.0",
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "get: workflow version NUL",
      path: "/v1/workflows/Hostile.Order/1.0.0%00",
      status: 422,
      code: "INVALID_VERSION",
    },
    {
      name: "get: workflow name unicode",
      path: `/v1/workflows/${e("Bestellung-ü")}`,
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "list: workflow filter NUL",
      path: "/v1/executions?workflow=%00",
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: workflow filter unicode",
      path: `/v1/executions?workflow=${e("Ünïcode")}`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "list: cursor NUL",
      path: "/v1/executions?cursor=%00",
      status: 400,
      code: "INVALID_CURSOR",
    },
    {
      name: "history: run_id NUL",
      path: `/v1/executions/${RUNNING}/history?run_id=%00`,
      status: 400,
      code: "INVALID_QUERY",
    },
    {
      name: "start: execution_id with NUL",
      ...start({ ...okStart, execution_id: "a\u0000b" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: workflow with NUL",
      ...start({ workflow: "Hostile.Order\u0000" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: workflow unicode",
      ...start({ workflow: "Bestellung-ü" }),
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "start: workflow with a newline",
      ...start({ workflow: "Hostile.Order\n" }),
      status: 404,
      code: "UNKNOWN_WORKFLOW",
    },
    {
      name: "start: input with NUL",
      ...start({ ...okStart, execution_id: "nul-input", input: { order_id: "a\u0000b" } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: input key with NUL",
      ...start({ ...okStart, execution_id: "nul-key", input: { order_id: "a", "k\u0000": 1 } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: input with a lone surrogate",
      ...startText(
        '{"workflow":"Hostile.Order","execution_id":"surrogate","input":{"order_id":"\\ud800"}}',
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "deploy: description with NUL",
      ...post("/v1/workflows", { ...INSTANT, version: "3.0.0", description: "a\u0000b" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "deploy: literal with a lone surrogate",
      ...postText(
        "/v1/workflows",
        JSON.stringify({ ...INSTANT, version: "3.0.0", steps: [{ id: "done", return: "S" }] })
          .replace('"S"', '"\\udfff"'),
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "cancel: reason with NUL",
      ...post(`/v1/executions/${RUNNING}/cancel`, { reason: "stop\u0000" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: output with NUL",
      ...post("/v1/tasks/complete", { token: `${RUNNING}/x`, output: "\u0000" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: message with NUL",
      ...post("/v1/tasks/fail", { token: `${RUNNING}/x`, error: { code: "E", message: "\u0000" } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: token with NUL",
      ...post("/v1/tasks/complete", { token: "\u0000/x", output: 1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: token with unicode",
      ...post("/v1/tasks/complete", { token: "ü/x", output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "complete: token with a newline",
      ...post("/v1/tasks/complete", { token: `${RUNNING}\n/x`, output: 1 }),
      status: 422,
      code: "INVALID_TOKEN",
    },
    {
      name: "poll: session id with NUL",
      ...post("/v1/workers/poll", { session_id: `${s}\u0000`, wait_s: 0 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: session id unicode",
      ...post("/v1/workers/poll", { session_id: "sitzung-ü", wait_s: 0 }),
      status: 404,
      code: "UNKNOWN_SESSION",
    },
    {
      name: "register: worker_id with a newline (log forging)",
      ...post("/v1/workers/register", {
        ...reg,
        worker_id: "w\n2026-01-01T00:00:00Z INFO orbit_runtime::engine: forged",
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id with a carriage return",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\rX" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id with an escape sequence",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\u001b[31mred" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: runtime with a newline",
      ...post("/v1/workers/register", { ...reg, runtime: "deno\nx=1" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id with U+202E (right-to-left override)",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\u202egnp.exe" }),
      status: 422,
      code: "INVALID_REQUEST",
      check: (b) => assert.match(b.error.problems[0].message, /U\+202E/),
    },
    {
      name: "register: worker_id with U+2066 (left-to-right isolate)",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\u2066x\u2069" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id with a zero-width space",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\u200bx" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id with U+2028 (line separator)",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\u2028x" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: task name with a newline (log forging)",
      ...post("/v1/workers/register", {
        ...reg,
        tasks: [{ name: "payments.charge\nINFO forged", contract: "1" }],
      }),
      status: 422,
      code: "INVALID_REQUEST",
      check: (b) => assert.equal(b.error.problems[0].path, "$.tasks[0].name"),
    },
    {
      name: "register: task contract with U+202E",
      ...post("/v1/workers/register", {
        ...reg,
        tasks: [{ name: "payments.charge", contract: "1\u202e" }],
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: task language with an escape sequence",
      ...post("/v1/workers/register", {
        ...reg,
        tasks: [{ name: "payments.charge", contract: "1", language: "py\u001b[2J" }],
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: runtime with U+202E",
      ...post("/v1/workers/register", { ...reg, runtime: "deno\u202e" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error code with a newline",
      ...post("/v1/tasks/fail", {
        token: `${RUNNING}/x`,
        error: { code: "E\nINFO forged", message: "m" },
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id with NUL",
      ...post("/v1/workers/register", { ...reg, worker_id: "w\u0000" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
  ];
}

hostileTests("characters", cases, 51);
