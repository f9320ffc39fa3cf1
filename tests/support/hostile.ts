/**
 * Hostile and malformed requests against a real server process, once on SQLite and once on
 * PostgreSQL (SPEC §3: "No request, however malformed, crashes the server or changes anything
 * when refused"). The cases live in tests/hostile_requests/*_test.ts, one file per family; this
 * module is what they share.
 *
 * Set-up: one deployed workflow with an input schema (plus one that completes at once), one
 * running execution, one finished execution, one registered worker session. Then a family's
 * table of requests runs, each checked for its status and `{"error":{"code","message"}}` body.
 * After each group of cases (the name before its first `:`), the definitions, the execution list,
 * the schedules, the worker sessions and the histories read the same as before, and so does
 * every row of every table of the database (read directly, the table list from the database's
 * own catalogue); at the end the server logged no unhandled error, and it still serves (health,
 * a normal deploy + start + completion).
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import postgres from "postgres";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "./server.ts";
import { sharedPostgres } from "./pg.ts";
import { registerWorker } from "./workers.ts";

export const TOKEN = "secret";
export const LIMIT = 65_536;
export const RUNNING = "order-1";
export const FINISHED = "instant-1";
/** Tables a sanity start must grow. */
const TABLES = ["execution_events", "workflow_executions", "workflow_definitions"] as const;
export const SCHEDULE = "hostile-s";
export const INJECTIONS = ["' OR 1=1 --", '"; DROP TABLE execution_events; --'] as const;

export const ORDER = {
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
export const INSTANT = {
  ir: "orbit-ir/1",
  name: "Hostile.Instant",
  version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};

export interface Fixture {
  url: string;
  session: string;
  /** The run of the running execution. */
  runId: string;
}

export interface Request {
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

export interface Case extends Request {
  name: string;
  status: number;
  /** The error code; absent for the few cases that are answered normally (and change nothing). */
  code?: string;
  // deno-lint-ignore no-explicit-any
  check?: (body: any) => void;
}

export interface Answer {
  status: number;
  contentType: string;
  text: string;
}

export const enc = new TextEncoder();

export async function send(url: string, r: Request): Promise<Answer> {
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

export const e = encodeURIComponent;
export const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
export const deepObject = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
export const bigString = (bytes: number) => "x".repeat(bytes);
export const b64url = (s: string) =>
  btoa(s).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");

/** A result the server ignored: `accepted` false and, if the answer has them, no tasks. */
// deno-lint-ignore no-explicit-any
export function ignored(b: any): void {
  assert.equal(b.accepted, false, JSON.stringify(b));
  assert.deepEqual(b.tasks ?? [], [], JSON.stringify(b));
}

export function problemsCheck(minCount = 1) {
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

/** Request builders the families' tables share; `s` is the registered worker's session. */
export function kit(fx: Fixture) {
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
  return { start, startText, post, postText, s, okStart, reg };
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
  const session = await registerWorker(c, {
    worker_id: "hostile-worker",
    runtime: "deno",
    tasks: [{ name: "payments.charge", contract: "1" }],
    concurrency: 2,
  });
  return { url, session, runId: run.body.run_id };
}

async function hostileRun(
  db: string,
  tables: Db,
  table: (fx: Fixture) => Case[],
  minCases: number,
): Promise<void> {
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
    assert.ok(cases.length >= minCases, `only ${cases.length} cases`);
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

/**
 * The family's two tests, `hostile requests (family): SQLite` and `…: PostgreSQL`, each on a
 * fresh server and database; `minCases` guards against a table that lost its cases.
 */
export function hostileTests(
  family: string,
  table: (fx: Fixture) => Case[],
  minCases: number,
): void {
  Deno.test(`hostile requests (${family}): SQLite`, async () => {
    const dir = await tempDir();
    try {
      const path = `${dir}/orbit.db`;
      await hostileRun(path, sqliteDb(path), table, minCases);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  });

  Deno.test(`hostile requests (${family}): PostgreSQL`, async () => {
    const pg = await sharedPostgres();
    const url = await pg.createDatabase();
    await hostileRun(url, postgresDb(url), table, minCases);
  });
}
