/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): wrong types, field by
 * field, and inputs against the workflow's input schema.
 */
import assert from "node:assert/strict";
import {
  bigString,
  type Case,
  type Fixture,
  hostileTests,
  kit,
  problemsCheck,
  RUNNING,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { start, post, postText, s, okStart, reg } = kit(fx);
  return [
    // --- wrong types, field by field ------------------------------------------------------------
    {
      name: "start: workflow number",
      ...start({ workflow: 42 }),
      status: 422,
      code: "INVALID_REQUEST",
      check: problemsCheck(),
    },
    {
      name: "start: workflow empty",
      ...start({ workflow: "" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: workflow object",
      ...start({ workflow: { $ne: null } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: workflow missing",
      ...start({ input: { order_id: "x" } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: version number",
      ...start({ ...okStart, version: 1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: version null",
      ...start({ ...okStart, version: null }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: execution_id number",
      ...start({ ...okStart, execution_id: 7 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: execution_id array",
      ...start({ ...okStart, execution_id: ["a"] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id number",
      ...post("/v1/workers/register", { ...reg, worker_id: 5 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: worker_id empty",
      ...post("/v1/workers/register", { ...reg, worker_id: "" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: runtime array",
      ...post("/v1/workers/register", { ...reg, runtime: [] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: tasks string",
      ...post("/v1/workers/register", { ...reg, tasks: "payments.charge" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: tasks empty",
      ...post("/v1/workers/register", { ...reg, tasks: [] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: task name number",
      ...post("/v1/workers/register", { ...reg, tasks: [{ name: 1, contract: "1" }] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: task contract missing",
      ...post("/v1/workers/register", { ...reg, tasks: [{ name: "a" }] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: task null",
      ...post("/v1/workers/register", { ...reg, tasks: [null] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: language number",
      ...post("/v1/workers/register", {
        ...reg,
        tasks: [{ name: "a", contract: "1", language: 3 }],
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: concurrency string",
      ...post("/v1/workers/register", { ...reg, concurrency: "2" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: concurrency 0",
      ...post("/v1/workers/register", { ...reg, concurrency: 0 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: concurrency 1.5",
      ...post("/v1/workers/register", { ...reg, concurrency: 1.5 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: concurrency 1e400",
      ...postText(
        "/v1/workers/register",
        JSON.stringify(reg).replace('"concurrency":1', '"concurrency":1e400'),
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: 1001 tasks",
      ...post("/v1/workers/register", {
        ...reg,
        tasks: Array.from({ length: 1001 }, (_, i) => ({ name: `t${i}`, contract: "1" })),
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: session_id number",
      ...post("/v1/workers/poll", { session_id: 1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: session_id missing",
      ...post("/v1/workers/poll", { wait_s: 0 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: max_tasks string",
      ...post("/v1/workers/poll", { session_id: s, max_tasks: "1" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: max_tasks 0",
      ...post("/v1/workers/poll", { session_id: s, max_tasks: 0 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: wait_s 61",
      ...post("/v1/workers/poll", { session_id: s, wait_s: 61 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: wait_s -1",
      ...post("/v1/workers/poll", { session_id: s, wait_s: -1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: wait_s string",
      ...post("/v1/workers/poll", { session_id: s, wait_s: "5" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: wait_s 1e400",
      ...postText("/v1/workers/poll", `{"session_id":"${s}","wait_s":1e400}`),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "heartbeat: session_id missing",
      ...post("/v1/workers/heartbeat", { tokens: [] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "heartbeat: tokens string",
      ...post("/v1/workers/heartbeat", { session_id: s, tokens: "a/b" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "heartbeat: tokens of numbers",
      ...post("/v1/workers/heartbeat", { session_id: s, tokens: [1, 2] }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "heartbeat: session_id bool",
      ...post("/v1/workers/heartbeat", { session_id: true }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "unregister: session_id null",
      ...post("/v1/workers/unregister", { session_id: null }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: token number",
      ...post("/v1/tasks/complete", { token: 12, output: 1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: token missing",
      ...post("/v1/tasks/complete", { output: 1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: token object",
      ...post("/v1/tasks/complete", { token: { a: 1 } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error missing",
      ...post("/v1/tasks/fail", { token: `${RUNNING}/x` }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error string",
      ...post("/v1/tasks/fail", { token: `${RUNNING}/x`, error: "boom" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error.code number",
      ...post("/v1/tasks/fail", { token: `${RUNNING}/x`, error: { code: 1, message: "m" } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error.code empty",
      ...post("/v1/tasks/fail", { token: `${RUNNING}/x`, error: { code: "", message: "m" } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error.message number",
      ...post("/v1/tasks/fail", { token: `${RUNNING}/x`, error: { code: "E", message: 5 } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: error.retryable string",
      ...post("/v1/tasks/fail", {
        token: `${RUNNING}/x`,
        error: { code: "E", message: "m", retryable: "yes" },
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: session_id number",
      ...post("/v1/tasks/complete", { token: `${RUNNING}/x`, session_id: 5, max_tasks: 1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: max_tasks -1",
      ...post("/v1/tasks/complete", { token: `${RUNNING}/x`, session_id: s, max_tasks: -1 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: max_tasks string",
      ...post("/v1/tasks/complete", { token: `${RUNNING}/x`, session_id: s, max_tasks: "1" }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: max_tasks 1.5",
      ...post("/v1/tasks/fail", {
        token: `${RUNNING}/x`,
        session_id: s,
        max_tasks: 1.5,
        error: { code: "E", message: "m" },
      }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: token number",
      ...post("/v1/tasks/fail", { token: 1, error: { code: "E", message: "m" } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "cancel: reason number",
      ...post(`/v1/executions/${RUNNING}/cancel`, { reason: 5 }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "cancel: reason object",
      ...post(`/v1/executions/${RUNNING}/cancel`, { reason: { a: 1 } }),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "cancel: reason too long",
      ...post(`/v1/executions/${RUNNING}/cancel`, { reason: bigString(10_001) }),
      status: 422,
      code: "INVALID_REQUEST",
    },

    // --- input against input_schema -------------------------------------------------------------
    {
      name: "start: input missing",
      ...start({ workflow: "Hostile.Order" }),
      status: 422,
      code: "INPUT_INVALID",
      check: problemsCheck(),
    },
    {
      name: "start: input empty object",
      ...start({ workflow: "Hostile.Order", input: {} }),
      status: 422,
      code: "INPUT_INVALID",
      check: problemsCheck(),
    },
    {
      name: "start: input wrong type",
      ...start({ workflow: "Hostile.Order", input: { order_id: 5 } }),
      status: 422,
      code: "INPUT_INVALID",
      check: problemsCheck(),
    },
    {
      name: "start: input a string",
      ...start({ workflow: "Hostile.Order", input: "order" }),
      status: 422,
      code: "INPUT_INVALID",
      check: problemsCheck(),
    },
    {
      name: "start: input invalid with a fresh id",
      ...start({ workflow: "Hostile.Order", input: [], execution_id: "fresh-1" }),
      status: 422,
      code: "INPUT_INVALID",
    },
    {
      name: "start: an existing id with other input returns it unchanged",
      ...start({ workflow: "Hostile.Order", input: { order_id: "OTHER" }, execution_id: RUNNING }),
      status: 200,
      check: (b) => {
        assert.equal(b.execution_id, RUNNING);
        assert.deepEqual(b.input, { order_id: "A1" });
        assert.equal(b.status, "running");
      },
    },
  ];
}

hostileTests("fields", cases, 58);
