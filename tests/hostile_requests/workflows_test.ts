/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): deploying.
 */
import assert from "node:assert/strict";
import {
  type Case,
  type Fixture,
  hostileTests,
  INSTANT,
  kit,
  ORDER,
  problemsCheck,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { post, postText } = kit(fx);
  return [
    // --- deploying ------------------------------------------------------------------------------
    {
      name: "deploy: JSON null",
      ...postText("/v1/workflows", "null"),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: JSON array",
      ...post("/v1/workflows", [ORDER]),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: empty object",
      ...post("/v1/workflows", {}),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(3),
    },
    {
      name: "deploy: no steps",
      ...post("/v1/workflows", { ...ORDER, version: "2.0.0", steps: [] }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: bad name",
      ...post("/v1/workflows", { ...ORDER, name: "1; DROP TABLE workflow_definitions" }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: bad version",
      ...post("/v1/workflows", { ...ORDER, version: "one" }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: unknown IR",
      ...post("/v1/workflows", { ...ORDER, version: "2.0.0", ir: "orbit-ir/9" }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: unknown top-level field",
      ...post("/v1/workflows", { ...ORDER, version: "2.0.0", owner: "me" }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: every step broken",
      ...post("/v1/workflows", {
        ...ORDER,
        version: "2.0.0",
        steps: [
          null,
          { id: "a" },
          { id: "b", task: "t", contract: "1", return: 1 },
          { id: "c", task: "bad task!", contract: "", retry: { max_attempts: 0 }, timeout_s: -1 },
          { id: "c", task: "t", contract: "1", input: "{% $steps.later %}" },
          { id: "d", task: "t", contract: "1", input: "{% ((( %}" },
          { id: "e", wait_signal: "go" },
          { id: "f", return: 1 },
          { id: "later", task: "t", contract: "1" },
        ],
      }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(5),
    },
    {
      name: "deploy: invalid input_schema",
      ...post("/v1/workflows", { ...ORDER, version: "2.0.0", input_schema: { type: 5 } }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: input_schema with a bad regex",
      ...post("/v1/workflows", {
        ...ORDER,
        version: "2.0.0",
        input_schema: { type: "string", pattern: "(" },
      }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: input_schema not an object",
      ...post("/v1/workflows", { ...ORDER, version: "2.0.0", input_schema: "object" }),
      status: 422,
      code: "INVALID_WORKFLOW",
      check: problemsCheck(),
    },
    {
      name: "deploy: a different document under a deployed version",
      ...post("/v1/workflows", { ...ORDER, description: "changed" }),
      status: 409,
      code: "WORKFLOW_VERSION_EXISTS",
    },
    {
      name: "deploy: different steps under a deployed version",
      ...post("/v1/workflows", { ...INSTANT, steps: [{ id: "done", return: "changed" }] }),
      status: 409,
      code: "WORKFLOW_VERSION_EXISTS",
    },
    {
      name: "deploy: the same document again is a no-op",
      ...post("/v1/workflows", JSON.parse(JSON.stringify(ORDER))),
      status: 200,
      check: (b) => assert.equal(b.created, false),
    },
    {
      name: "deploy: the same document with keys reordered is a no-op",
      ...post("/v1/workflows", Object.fromEntries(Object.entries(ORDER).reverse())),
      status: 200,
      check: (b) => assert.equal(b.created, false),
    },
  ];
}

hostileTests("workflows", cases, 16);
