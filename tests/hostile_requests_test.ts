/**
 * Hostile and malformed requests against a real server process, once on SQLite and once on
 * PostgreSQL (SPEC §3: "No request, however malformed, crashes the server or changes anything
 * when refused").
 *
 * Set-up: one deployed workflow with an input schema (plus one that completes at once), one
 * running execution, one finished execution, one registered worker session. Then a table of
 * requests runs, each checked for its status and `{"error":{"code","message"}}` body. After each
 * group of cases (the name before its first `:`), the definitions, the execution list, the
 * schedules, the worker sessions and the histories read the same as before, and so does every
 * row of every table of the database (read directly, the table list from the database's own
 * catalogue); at the end the server logged no unhandled error, and it still serves (health, a
 * normal deploy + start + completion).
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import postgres from "postgres";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";

const TOKEN = "secret";
const LIMIT = 65_536;
const RUNNING = "order-1";
const FINISHED = "instant-1";
/** Tables a sanity start must grow. */
const TABLES = ["execution_events", "workflow_executions", "workflow_definitions"] as const;
const SCHEDULE = "hostile-s";
const INJECTIONS = ["' OR 1=1 --", '"; DROP TABLE execution_events; --'] as const;

const ORDER = {
  ir: "orbit-ir/1",
  name: "Hostile.Order",
  version: "1.0.0",
  input_schema: {
    type: "object",
    required: ["order_id"],
    properties: { order_id: { type: "string" } },
  },
  steps: [
    { id: "charge", task: "payments.charge", contract: "1", input: "{% $input %}" },
  ],
};
const INSTANT = {
  ir: "orbit-ir/1",
  name: "Hostile.Instant",
  version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};

interface Fixture {
  url: string;
  session: string;
  /** The run of the running execution. */
  runId: string;
}

interface Request {
  method?: string;
  path: string;
  /** Sent as JSON (`JSON.stringify`). */
  json?: unknown;
  /** Sent as is. */
  text?: string | Uint8Array;
  /** Sent as a stream (chunked transfer encoding). */
  stream?: () => ReadableStream<Uint8Array>;
  /** A whole HTTP/1.1 request head (without Host/Authorization/Connection) and body, over TCP. */
  raw?: { head: string; body: string };
  /** The Authorization header; default `Bearer secret`, null for none. */
  auth?: string | null;
}

interface Case extends Request {
  name: string;
  status: number;
  /** The error code; absent for the few cases that are answered normally (and change nothing). */
  code?: string;
  // deno-lint-ignore no-explicit-any
  check?: (body: any) => void;
}

interface Answer {
  status: number;
  contentType: string;
  text: string;
}

const enc = new TextEncoder();

async function send(url: string, r: Request): Promise<Answer> {
  const auth = r.auth === undefined ? `Bearer ${TOKEN}` : r.auth;
  if (r.raw) return await sendRaw(url, r.raw, auth);
  const headers: Record<string, string> = {};
  if (auth !== null) headers.authorization = auth;
  let body: BodyInit | undefined;
  if (r.json !== undefined) {
    headers["content-type"] = "application/json";
    body = JSON.stringify(r.json);
  } else if (r.text !== undefined) {
    headers["content-type"] = "application/json";
    body = r.text as BodyInit;
  } else if (r.stream) {
    headers["content-type"] = "application/json";
    body = r.stream();
  }
  const res = await fetch(url + r.path, { method: r.method ?? "GET", headers, body });
  return {
    status: res.status,
    contentType: res.headers.get("content-type") ?? "",
    text: await res.text(),
  };
}

/** One request over a fresh TCP connection, for what fetch will not send (a lying length). */
async function sendRaw(
  url: string,
  raw: { head: string; body: string },
  auth: string | null,
): Promise<Answer> {
  const u = new URL(url);
  const conn = await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
  const timer = setTimeout(() => conn.close(), 10_000);
  try {
    const head = raw.head + `\r\nHost: ${u.host}\r\nConnection: close` +
      (auth !== null ? `\r\nAuthorization: ${auth}` : "") + "\r\n\r\n";
    const bytes = enc.encode(head + raw.body);
    for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(65_536);
    let total = 0;
    for (;;) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
      total += n;
      const all = concat(chunks, total);
      const text = new TextDecoder().decode(all);
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) continue;
      const len = text.slice(0, end).match(/\r\ncontent-length: *(\d+)/i);
      if (len && all.length >= enc.encode(text.slice(0, end + 4)).length + Number(len[1])) break;
    }
    const text = new TextDecoder().decode(concat(chunks, total));
    const end = text.indexOf("\r\n\r\n");
    assert.ok(end > 0, `no HTTP answer over TCP: ${JSON.stringify(text)}`);
    const headLines = text.slice(0, end).split("\r\n");
    const status = Number(headLines[0]!.split(" ")[1]);
    const ct = headLines.find((l) => /^content-type:/i.test(l))?.replace(/^[^:]*: */, "") ?? "";
    return { status, contentType: ct, text: text.slice(end + 4) };
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed by the timer or the server */ }
  }
}

function concat(chunks: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

const e = encodeURIComponent;
const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
const deepObject = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
const bigString = (bytes: number) => "x".repeat(bytes);
const b64url = (s: string) => btoa(s).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");

/** A result the server ignored: `accepted` false and, if the answer has them, no tasks. */
// deno-lint-ignore no-explicit-any
function ignored(b: any): void {
  assert.equal(b.accepted, false, JSON.stringify(b));
  assert.deepEqual(b.tasks ?? [], [], JSON.stringify(b));
}

function problemsCheck(minCount = 1) {
  // deno-lint-ignore no-explicit-any
  return (b: any) => {
    const problems = b.error.problems;
    assert.ok(Array.isArray(problems) && problems.length >= minCount, JSON.stringify(b));
    for (const p of problems) {
      assert.equal(typeof p.path, "string", JSON.stringify(p));
      assert.ok(p.path.startsWith("$"), JSON.stringify(p));
      assert.equal(typeof p.message, "string", JSON.stringify(p));
      assert.ok(p.message.length > 0, JSON.stringify(p));
    }
  };
}

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

function table(fx: Fixture): Case[] {
  const start = (json: unknown) => ({ method: "POST", path: "/v1/executions", json });
  const startText = (text: string | Uint8Array) => ({
    method: "POST",
    path: "/v1/executions",
    text,
  });
  const post = (path: string, json: unknown) => ({ method: "POST", path, json });
  const postText = (path: string, text: string) => ({ method: "POST", path, text });
  const s = fx.session;
  const okStart = { workflow: "Hostile.Order", version: "1.0.0", input: { order_id: "x" } };
  const reg = {
    worker_id: "w2",
    runtime: "deno",
    tasks: [{ name: "payments.charge", contract: "1" }],
    concurrency: 1,
  };
  const cases: Case[] = [
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

  // --- schedules: every route with bodies and ids it must refuse ---------------------------------
  const every = { workflow: "Hostile.Instant", every_s: 60 };
  const sched = (name: string, r: Request, status: number, code: string): Case => ({
    name: `schedules: ${name}`,
    ...r,
    status,
    code,
  });
  const patch = (path: string, json: unknown) => ({ method: "PATCH", path, json });
  const one = `/v1/schedules/${SCHEDULE}`;
  cases.push(
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
  );

  // --- credentials: every protected route, every kind of bad Authorization header -------------
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

async function runCase(url: string, c: Case): Promise<void> {
  const a = await send(url, c);
  let body: unknown;
  try {
    body = JSON.parse(a.text);
  } catch {
    assert.fail(`${c.name}: answer is not JSON (status ${a.status}): ${a.text.slice(0, 300)}`);
  }
  const shown = a.text.length > 600 ? a.text.slice(0, 600) + "…" : a.text;
  assert.equal(a.status, c.status, `${c.name}: status ${a.status}, expected ${c.status}: ${shown}`);
  assert.match(a.contentType, /^application\/json/, `${c.name}: content-type ${a.contentType}`);
  if (c.code !== undefined) {
    const err = (body as { error?: { code?: unknown; message?: unknown } })?.error;
    assert.ok(err && typeof err === "object", `${c.name}: no error object: ${shown}`);
    assert.equal(err.code, c.code, `${c.name}: code ${String(err.code)}, expected ${c.code}`);
    assert.equal(typeof err.message, "string", `${c.name}: message is not a string`);
    assert.ok((err.message as string).length > 0, `${c.name}: empty message`);
  }
  try {
    c.check?.(body);
  } catch (err) {
    throw new Error(`${c.name}: ${(err as Error).message.replaceAll("\n", " ")}`);
  }
}

/** What a refused request must not change. */
async function snapshot(url: string) {
  const c = api(url, TOKEN);
  const get = async (path: string) => {
    const r = await c.get(path);
    assert.equal(r.status, 200, `${path}: ${JSON.stringify(r.body)}`);
    return r.body;
  };
  return {
    workflows: await get("/v1/workflows"),
    order_versions: await get("/v1/workflows/Hostile.Order"),
    order_document: await get("/v1/workflows/Hostile.Order/1.0.0"),
    instant_document: await get("/v1/workflows/Hostile.Instant/1.0.0"),
    executions: await get("/v1/executions?limit=1000"),
    running: await get(`/v1/executions/${RUNNING}`),
    workers: await get("/v1/workers"),
    running_history: await get(`/v1/executions/${RUNNING}/history`),
    finished_history: await get(`/v1/executions/${FINISHED}/history`),
    schedules: await get("/v1/schedules"),
    schedule: await get(`/v1/schedules/${SCHEDULE}`),
  };
}

interface Db {
  counts(): Promise<Record<string, number>>;
  /** Every row of every table, each table's rows as sorted JSON lines. */
  rows(): Promise<Record<string, string[]>>;
  close(): Promise<void>;
}

const rowLines = (rows: unknown[]) => rows.map((r) => JSON.stringify(r)).sort();

function sqliteDb(path: string): Db {
  const read = <T>(fn: (db: DatabaseSync) => T): T => {
    const db = new DatabaseSync(path, { readOnly: true });
    try {
      return fn(db);
    } finally {
      db.close();
    }
  };
  const tables = (db: DatabaseSync) =>
    (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
      name: string;
    }[]).map((t) => t.name);
  return {
    counts: () =>
      Promise.resolve(read((db) => {
        const out: Record<string, number> = {};
        for (const t of TABLES) {
          out[t] = Number((db.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n);
        }
        return out;
      })),
    rows: () =>
      Promise.resolve(read((db) => {
        const out: Record<string, string[]> = {};
        for (const t of tables(db)) out[t] = rowLines(db.prepare(`SELECT * FROM "${t}"`).all());
        return out;
      })),
    close: () => Promise.resolve(),
  };
}

function postgresDb(url: string): Db {
  const sql = postgres(url, { onnotice: () => {}, max: 1 });
  return {
    async counts() {
      const out: Record<string, number> = {};
      for (const t of TABLES) {
        const [r] = await sql.unsafe(`SELECT count(*)::int AS n FROM ${t}`);
        out[t] = Number(r!.n);
      }
      return out;
    },
    async rows() {
      const out: Record<string, string[]> = {};
      const tables = await sql.unsafe(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename",
      );
      for (const { tablename } of tables) {
        out[tablename] = rowLines(await sql.unsafe(`SELECT * FROM "${tablename}"`));
      }
      return out;
    },
    close: () => sql.end({ timeout: 5 }),
  };
}

async function setUp(url: string): Promise<Fixture> {
  const c = api(url, TOKEN);
  for (const doc of [ORDER, INSTANT]) {
    const r = await c.post("/v1/workflows", doc);
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
  const run = await c.post("/v1/executions", {
    workflow: "Hostile.Order",
    version: "1.0.0",
    execution_id: RUNNING,
    input: { order_id: "A1" },
  });
  assert.equal(run.status, 201, JSON.stringify(run.body));
  const fin = await c.post("/v1/executions", {
    workflow: "Hostile.Instant",
    execution_id: FINISHED,
    input: { n: 1 },
  });
  assert.equal(fin.status, 201, JSON.stringify(fin.body));
  await waitFor(async () => {
    const r = await c.get(`/v1/executions/${FINISHED}`);
    return r.body?.status === "completed";
  }, `${FINISHED} to complete`);
  await waitFor(async () => {
    const r = await c.get(`/v1/executions/${RUNNING}/history`);
    return r.body?.events?.some((ev: { type: string }) => ev.type === "StepScheduled");
  }, `${RUNNING} to schedule its step`);
  const sched = await c.post("/v1/schedules", {
    schedule_id: SCHEDULE,
    workflow: "Hostile.Instant",
    every_s: 3600,
    paused: true,
  });
  assert.equal(sched.status, 201, JSON.stringify(sched.body));
  const reg = await c.post("/v1/workers/register", {
    worker_id: "hostile-worker",
    runtime: "deno",
    tasks: [{ name: "payments.charge", contract: "1" }],
    concurrency: 2,
  });
  assert.equal(reg.status, 200, JSON.stringify(reg.body));
  assert.equal(typeof reg.body.session_id, "string");
  return { url, session: reg.body.session_id, runId: run.body.run_id };
}

async function hostileRun(db: string, tables: Db): Promise<void> {
  const server: ServerProcess = await startServer({
    db,
    // A long session timeout: the registered session must not expire while the table runs.
    args: ["--token", TOKEN, "--max-body-bytes", String(LIMIT), "--session-timeout", "3600"],
  });
  try {
    const fx = await setUp(server.url);
    const before = await snapshot(server.url);
    const countsBefore = await tables.counts();
    const rowsBefore = await tables.rows();

    const cases = table(fx);
    assert.ok(cases.length >= 40, `only ${cases.length} cases`);
    const failures: string[] = [];
    // Groups by the case name before its first `:` ("start", "auth (none)", …), in table order.
    const groups = new Map<string, Case[]>();
    for (const c of cases) {
      const g = c.name.split(":")[0]!;
      groups.set(g, [...(groups.get(g) ?? []), c]);
    }
    for (const [group, list] of groups) {
      for (const c of list) {
        try {
          await runCase(server.url, c);
        } catch (err) {
          failures.push((err as Error).message.split("\n")[0]!);
        }
      }
      // The group changed nothing: through the API, and in every row of every table.
      assert.deepEqual(
        await snapshot(server.url),
        before,
        `group "${group}" changed the API's view`,
      );
      const rows = await tables.rows();
      for (const t of new Set([...Object.keys(rowsBefore), ...Object.keys(rows)])) {
        assert.deepEqual(rows[t], rowsBefore[t], `group "${group}" changed table ${t}`);
      }
    }
    assert.ok(Object.keys(rowsBefore).length >= 10, `only tables ${Object.keys(rowsBefore)}`);
    assert.deepEqual(failures, [], `${failures.length} of ${cases.length} cases failed`);

    // Health and ready need no credentials, and ignore bad ones.
    for (const path of ["/v1/health", "/v1/ready"]) {
      for (const auth of [null, "Bearer wrong", "Basic x", "Bearer"]) {
        const a = await send(server.url, { path, auth });
        assert.equal(a.status, 200, `${path} with ${auth}: ${a.text}`);
        assert.match(a.contentType, /^application\/json/);
      }
    }

    // Nothing changed.
    const after = await snapshot(server.url);
    assert.deepEqual(after, before);
    assert.deepEqual(await tables.counts(), countsBefore);
    const unhandled = server.logs.filter((l) => /unhandled error|request failed|panic/i.test(l));
    assert.deepEqual(unhandled, [], "the server logged unhandled errors");
    assert.ok(!server.logs.some((l) => l.includes("forged")), "a forged log line got through");

    // The server still serves: a normal deploy, start and completion.
    const c = api(server.url, TOKEN);
    const health = await c.get("/v1/health");
    assert.equal(health.status, 200);
    assert.equal(health.body.status, "ok");
    const dep = await c.post("/v1/workflows", { ...INSTANT, name: "Hostile.Sanity" });
    assert.equal(dep.status, 201, JSON.stringify(dep.body));
    const st = await c.post("/v1/executions", { workflow: "Hostile.Sanity", input: { ok: 1 } });
    assert.equal(st.status, 201, JSON.stringify(st.body));
    const done = await waitFor(async () => {
      const r = await c.get(`/v1/executions/${st.body.execution_id}`);
      return r.body?.status === "completed" ? r.body : null;
    }, "the sanity execution to complete");
    assert.deepEqual(done.output, { ok: 1 });
    const order = await c.post("/v1/executions", {
      workflow: "Hostile.Order",
      input: { order_id: "B2" },
    });
    assert.equal(order.status, 201, JSON.stringify(order.body));
    assert.equal(order.body.status, "running");
    const poll = await c.post("/v1/workers/poll", { session_id: fx.session, wait_s: 5 });
    assert.equal(poll.status, 200, JSON.stringify(poll.body));
    assert.equal(poll.body.tasks.length, 1);
    const counts = await tables.counts();
    for (const t of TABLES) assert.ok(counts[t]! > countsBefore[t]!, `${t} grew`);
  } finally {
    await server.kill();
    await tables.close();
  }
}

Deno.test("hostile requests: SQLite", async () => {
  const dir = await tempDir();
  try {
    const path = `${dir}/orbit.db`;
    await hostileRun(path, sqliteDb(path));
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("hostile requests: PostgreSQL", async () => {
  const pg = await sharedPostgres();
  const url = await pg.createDatabase();
  await hostileRun(url, postgresDb(url));
});
