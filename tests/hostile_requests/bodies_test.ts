/**
 * Hostile requests (the set-up and checks: tests/support/hostile.ts): bodies that are not JSON or
 * not a JSON object, bodies over `--max-body-bytes`, deep nesting.
 */
import assert from "node:assert/strict";
import {
  bigString,
  type Case,
  deepObject,
  enc,
  type Fixture,
  hostileTests,
  ignored,
  INSTANT,
  kit,
  LIMIT,
  nested,
  ORDER,
  RUNNING,
} from "../support/hostile.ts";

export function cases(fx: Fixture): Case[] {
  const { start, startText, post, postText, s, okStart } = kit(fx);
  return [
    // --- bodies that are not JSON, or not a JSON object ---------------------------------------
    {
      name: "start: truncated JSON",
      ...startText('{"workflow":"Hostile.Order"'),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "start: trailing garbage",
      ...startText('{"workflow":"Hostile.Order"} {"x":1}'),
      status: 400,
      code: "BAD_JSON",
    },
    { name: "start: not JSON at all", ...startText("hello world"), status: 400, code: "BAD_JSON" },
    {
      name: "start: single quotes",
      ...startText("{'workflow':'Hostile.Order'}"),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "start: NaN literal",
      ...startText('{"workflow":"Hostile.Order","input":NaN}'),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "start: raw NUL byte",
      ...startText('{"workflow":"Hostile.Order\u0000"}'),
      status: 400,
      code: "BAD_JSON",
    },
    { name: "start: empty body", ...startText(""), status: 422, code: "INVALID_REQUEST" },
    { name: "start: JSON null", ...startText("null"), status: 422, code: "INVALID_REQUEST" },
    { name: "start: JSON array", ...startText("[]"), status: 422, code: "INVALID_REQUEST" },
    {
      name: "start: JSON string",
      ...startText('"Hostile.Order"'),
      status: 422,
      code: "INVALID_REQUEST",
    },
    { name: "start: JSON number", ...startText("42"), status: 422, code: "INVALID_REQUEST" },
    {
      name: "start: __proto__ smuggling",
      ...startText('{"__proto__":{"workflow":"Hostile.Order"}}'),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: invalid UTF-8 in execution_id",
      ...startText(
        new Uint8Array([
          ...enc.encode('{"workflow":"Hostile.Order","input":{"order_id":"x"},"execution_id":"a'),
          0xff,
          0xfe,
          ...enc.encode('"}'),
        ]),
      ),
      status: 400,
      code: "INVALID_ENCODING",
    },
    {
      name: "start: invalid UTF-8 in input (text() would store U+FFFD)",
      ...startText(
        new Uint8Array([
          ...enc.encode(
            '{"workflow":"Hostile.Order","execution_id":"utf8-1","input":{"order_id":"',
          ),
          0xc3,
          0x28,
          ...enc.encode('"}}'),
        ]),
      ),
      status: 400,
      code: "INVALID_ENCODING",
    },
    {
      name: "start: a truncated UTF-8 sequence at the end of a string",
      ...startText(
        new Uint8Array([
          ...enc.encode(
            '{"workflow":"Hostile.Order","execution_id":"utf8-2","input":{"order_id":"',
          ),
          0xe2,
          0x82,
          ...enc.encode('"}}'),
        ]),
      ),
      status: 400,
      code: "INVALID_ENCODING",
    },
    {
      name: "start: UTF-8 encoded surrogate (CESU-8)",
      ...startText(
        new Uint8Array([
          ...enc.encode(
            '{"workflow":"Hostile.Order","execution_id":"utf8-3","input":{"order_id":"',
          ),
          0xed,
          0xa0,
          0x80,
          ...enc.encode('"}}'),
        ]),
      ),
      status: 400,
      code: "INVALID_ENCODING",
    },
    {
      name: "deploy: invalid UTF-8 in the description",
      ...postText("/v1/workflows", ""),
      text: new Uint8Array([
        ...enc.encode(JSON.stringify({ ...INSTANT, version: "5.0.0" }).slice(0, -1)),
        ...enc.encode(',"description":"'),
        0xff,
        ...enc.encode('"}'),
      ]),
      status: 400,
      code: "INVALID_ENCODING",
    },
    {
      name: "complete: invalid UTF-8 in the output",
      ...postText("/v1/tasks/complete", ""),
      text: new Uint8Array([...enc.encode(`{"token":"${RUNNING}/x","output":"`), 0x80, 34, 125]),
      status: 400,
      code: "INVALID_ENCODING",
    },
    {
      name: "start: input 1e999 (JSON.parse makes it Infinity, stored as null)",
      ...startText(
        '{"workflow":"Hostile.Order","execution_id":"inf-1","input":{"order_id":"x","n":1e999}}',
      ),
      status: 422,
      code: "INVALID_REQUEST",
      check: (b) => assert.equal(b.error.problems[0].path, "$.input.n", JSON.stringify(b)),
    },
    {
      name: "start: input -1e999 in an array",
      ...startText(
        '{"workflow":"Hostile.Order","execution_id":"inf-2","input":{"order_id":"x","a":[1,-1e999]}}',
      ),
      status: 422,
      code: "INVALID_REQUEST",
      check: (b) => assert.equal(b.error.problems[0].path, "$.input.a[1]", JSON.stringify(b)),
    },
    {
      name: "deploy: a literal 1e999",
      ...postText(
        "/v1/workflows",
        JSON.stringify({ ...INSTANT, version: "6.0.0", steps: [{ id: "done", return: 7 }] })
          .replace('"return":7', '"return":1e999'),
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: output 1e999",
      ...postText("/v1/tasks/complete", `{"token":"${RUNNING}/x","output":{"total":1e999}}`),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "signal: payload 1e999",
      ...postText(`/v1/executions/${RUNNING}/signals/go`, '{"payload":1e999}'),
      status: 422,
      code: "INVALID_REQUEST",
    },
    { name: "deploy: empty body", ...postText("/v1/workflows", ""), status: 400, code: "BAD_JSON" },
    {
      name: "deploy: truncated JSON",
      ...postText("/v1/workflows", '{"ir":"orbit-ir/1",'),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "register: truncated JSON",
      ...postText("/v1/workers/register", '{"worker_id":'),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "register: JSON null",
      ...postText("/v1/workers/register", "null"),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "register: empty body",
      ...postText("/v1/workers/register", ""),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "poll: not JSON",
      ...postText("/v1/workers/poll", "session_id=x"),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "poll: array",
      ...postText("/v1/workers/poll", `["${s}"]`),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "heartbeat: trailing garbage",
      ...postText("/v1/workers/heartbeat", `{"session_id":"${s}"}]`),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "unregister: empty body",
      ...postText("/v1/workers/unregister", ""),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: not JSON",
      ...postText("/v1/tasks/complete", "<xml/>"),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "complete: empty body",
      ...postText("/v1/tasks/complete", ""),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "fail: JSON null",
      ...postText("/v1/tasks/fail", "null"),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "cancel: truncated JSON",
      ...postText(`/v1/executions/${RUNNING}/cancel`, '{"reason":"x'),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "cancel: JSON array",
      ...postText(`/v1/executions/${RUNNING}/cancel`, "[]"),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "signal: not JSON",
      ...postText(`/v1/executions/${RUNNING}/signals/go`, "go"),
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "signal: JSON number",
      ...postText(`/v1/executions/${RUNNING}/signals/go`, "1"),
      status: 422,
      code: "INVALID_REQUEST",
    },

    // --- bodies over --max-body-bytes -----------------------------------------------------------
    {
      name: "start: body over the limit",
      ...start({ ...okStart, input: { order_id: bigString(LIMIT + 10) } }),
      status: 413,
      code: "BODY_TOO_LARGE",
    },
    {
      name: "deploy: body over the limit",
      ...post("/v1/workflows", { ...ORDER, version: "9.0.0", description: bigString(LIMIT) }),
      status: 413,
      code: "BODY_TOO_LARGE",
    },
    {
      name: "complete: body over the limit, chunked",
      method: "POST",
      path: "/v1/tasks/complete",
      stream: () =>
        new ReadableStream({
          start(ctl) {
            ctl.enqueue(enc.encode(`{"token":"${RUNNING}/x","output":"`));
            for (let i = 0; i < 20; i++) ctl.enqueue(enc.encode(bigString(4096)));
            ctl.enqueue(enc.encode('"}'));
            ctl.close();
          },
        }),
      status: 413,
      code: "BODY_TOO_LARGE",
    },
    {
      name: "start: chunked over the limit, raw",
      path: "/v1/executions",
      raw: {
        head:
          "POST /v1/executions HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
        body: Array.from({ length: 20 }, () => `1000\r\n${bigString(4096)}\r\n`).join("") +
          "0\r\n\r\n",
      },
      status: 413,
      code: "BODY_TOO_LARGE",
    },
    {
      name: "start: content-length claims 10 MB, a few bytes sent",
      path: "/v1/executions",
      raw: {
        head:
          "POST /v1/executions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 10000000",
        body: '{"workflow":"Hostile.Order"',
      },
      status: 413,
      code: "BODY_TOO_LARGE",
    },
    {
      name: "start: content-length claims 5 bytes, more sent",
      path: "/v1/executions",
      raw: {
        head: "POST /v1/executions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 5",
        body: JSON.stringify({ ...okStart, execution_id: "smuggled" }),
      },
      status: 400,
      code: "BAD_JSON",
    },
    {
      name: "start: body over the limit without credentials",
      ...start({ ...okStart, input: { order_id: bigString(LIMIT + 10) } }),
      auth: null,
      status: 401,
      code: "UNAUTHORIZED",
    },

    // --- deep nesting ---------------------------------------------------------------------------
    {
      name: "start: input nested 20000 arrays deep",
      ...startText(
        `{"workflow":"Hostile.Order","input":{"order_id":"x","deep":${nested(20_000)}}}`,
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "start: input nested 5000 objects deep",
      ...startText(
        `{"workflow":"Hostile.Order","input":{"order_id":"x","deep":${deepObject(5000)}}}`,
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "deploy: step input nested 20000 deep",
      ...postText(
        "/v1/workflows",
        JSON.stringify({ ...INSTANT, version: "8.0.0", steps: [{ id: "done", return: 0 }] })
          .replace('"return":0', `"return":${nested(20_000)}`),
      ),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "complete: output nested 250 deep is within the limit (forged token: ignored)",
      ...postText("/v1/tasks/complete", `{"token":"${RUNNING}/x","output":${nested(250)}}`),
      status: 200,
      check: ignored,
    },
    {
      name: "complete: output nested 20000 deep",
      ...postText("/v1/tasks/complete", `{"token":"${RUNNING}/x","output":${nested(20_000)}}`),
      status: 422,
      code: "INVALID_REQUEST",
    },
    {
      name: "signal: payload nested 20000 deep",
      ...postText(`/v1/executions/${RUNNING}/signals/go`, `{"payload":${nested(20_000)}}`),
      status: 422,
      code: "INVALID_REQUEST",
    },
  ];
}

hostileTests("bodies", cases, 52);
