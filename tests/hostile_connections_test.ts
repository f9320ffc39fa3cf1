/**
 * Connections that hold the server without using it (lib/http_server.ts), against real server
 * processes: silent connections, request heads that crawl, kept-alive connections left open are
 * closed after `--header-timeout` / `--idle-timeout`; long polls and waits longer than both are
 * not cut; a client that hangs up mid-body is no error; a graceful stop does not wait for idle
 * connections.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir, waitFor } from "./support/server.ts";
import { readAnswer, writeAll } from "./support/raw_http.ts";
import { serverRefusal } from "./support/refusal.ts";
import { registerWorker } from "./support/workers.ts";

const HEADER_S = 1;
const IDLE_S = 2;
/** The watchdog looks a few times per timeout; a slow machine adds a little. */
const SLACK_MS = 2_500;

async function connect(url: string): Promise<Deno.Conn> {
  const u = new URL(url);
  return await Deno.connect({ hostname: u.hostname, port: Number(u.port) });
}

/** Milliseconds until the server closes `conn` (reads and drops whatever it sends first). */
async function closedAfter(conn: Deno.Conn, since: number, limitMs = 30_000): Promise<number> {
  const buf = new Uint8Array(65_536);
  const timer = setTimeout(() => conn.close(), limitMs);
  try {
    for (;;) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) return Date.now() - since;
    }
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

function assertWithin(ms: number, fromMs: number, what: string) {
  assert.ok(ms >= fromMs - 100, `${what}: closed after ${ms} ms, before its ${fromMs} ms`);
  assert.ok(ms < fromMs + SLACK_MS, `${what}: still open ${ms} ms later (limit ${fromMs} ms)`);
}

Deno.test({
  name: "silent, crawling and idle connections are closed; long polls and waits are not cut",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--header-timeout", String(HEADER_S), "--idle-timeout", String(IDLE_S)],
    });
    try {
      const host = new URL(server.url).host;
      const t0 = Date.now();
      // 40 connections that never send a byte, and one whose head crawls a byte at a time.
      const silent = await Promise.all(Array.from({ length: 40 }, () => connect(server.url)));
      const crawl = await connect(server.url);
      const head = `GET /v1/health HTTP/1.1\r\nHost: ${host}\r\nX-Pad: ${"a".repeat(100)}\r\n`;
      let crawling = true;
      const crawler = (async () => {
        for (let i = 0; i < head.length && crawling; i++) {
          await writeAll(crawl, head[i]!).catch(() => (crawling = false));
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      // A kept-alive connection: one request answered, then nothing.
      const idle = await connect(server.url);
      await writeAll(idle, `GET /v1/health HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
      assert.equal((await readAnswer(idle))?.status, 200);
      const idleSince = Date.now();

      // Long polls and waits longer than both timeouts, on connections silent meanwhile.
      const c = api(server.url);
      const session = await registerWorker(c, {
        worker_id: "w-long",
        tasks: [{ name: "nothing.here", contract: "1" }],
      });
      const pollSince = Date.now();
      const poll = c.post("/v1/workers/poll", { session_id: session, wait_s: 4 });
      assert.equal(
        (await c.post("/v1/workflows", {
          ir: "orbit-ir/1",
          name: "Conn.Wait",
          version: "1.0.0",
          steps: [{ id: "s", task: "no.worker", contract: "1" }],
        })).status,
        201,
      );
      assert.equal(
        (await c.post("/v1/executions", { workflow: "Conn.Wait", execution_id: "cw-1" })).status,
        201,
      );
      const waitSince = Date.now();
      const wait = c.get("/v1/executions/cw-1/wait?timeout_s=4");

      const silentMs = await Promise.all(silent.map((s) => closedAfter(s, t0)));
      for (const ms of silentMs) assertWithin(ms, HEADER_S * 1000, "a silent connection");
      assertWithin(await closedAfter(crawl, t0), HEADER_S * 1000, "a crawling head");
      crawling = false;
      await crawler;
      assertWithin(await closedAfter(idle, idleSince), IDLE_S * 1000, "a kept-alive connection");

      const polled = await poll;
      assert.equal(polled.status, 200, JSON.stringify(polled.body));
      assert.deepEqual(polled.body.tasks, [], "the poll waited its wait_s out");
      assert.ok(Date.now() - pollSince >= 3_900, "the poll was not cut");
      const waited = await wait;
      assert.equal(waited.status, 200, JSON.stringify(waited.body));
      assert.equal(waited.body.status, "running");
      assert.ok(Date.now() - waitSince >= 3_900, "the wait was not cut");
      assert.equal((await c.get("/v1/health")).status, 200, "still serving");
    } finally {
      await server.kill("SIGKILL");
    }
  },
});

Deno.test({
  name: "a client that hangs up mid-body is no error",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--log-level", "debug"],
    });
    try {
      const host = new URL(server.url).host;
      const heads = [
        `POST /v1/executions HTTP/1.1\r\nHost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"workflow":`,
        `POST /v1/workflows HTTP/1.1\r\nHost: ${host}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"ir"\r\n`,
      ];
      const gone = /client went away before its request was read/;
      // Either line: the hang-up was seen (before the fix, as ERROR … unhandled error BadResource).
      const seen = () =>
        server.logs.filter((l) => gone.test(l) || /unhandled error/.test(l)).length;
      for (const [i, head] of [...heads, ...heads, heads[0]!].entries()) {
        const conn = await connect(server.url);
        await writeAll(conn, head);
        const before = seen();
        conn.close();
        await waitFor(() => seen() > before, `the server to see hang-up ${i}`, 10_000);
      }
      const errors = server.logs.filter((l) => /ERROR|unhandled|BadResource.*at /.test(l));
      assert.deepEqual(errors, [], "no error logged for clients that went away");
      assert.ok(server.logs.filter((l) => gone.test(l)).every((l) => l.includes(" DEBUG ")));
      assert.equal((await api(server.url).get("/v1/health")).status, 200);
    } finally {
      await server.kill("SIGKILL");
    }
  },
});

Deno.test({
  name: "a graceful stop does not wait for idle connections",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({ db: `${await tempDir()}/orbit.db` });
    const host = new URL(server.url).host;
    const idle = await connect(server.url);
    await writeAll(idle, `GET /v1/health HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    assert.equal((await readAnswer(idle))?.status, 200);
    const silent = await connect(server.url);
    const since = Date.now();
    const status = await server.kill("SIGTERM");
    assert.equal(status.code, 0);
    assert.ok(Date.now() - since < 5_000, `stopped after ${Date.now() - since} ms`);
    assert.ok(server.logs.some((l) => l.includes("INFO orbit_runtime::server: stopped")));
    for (const c of [idle, silent]) await closedAfter(c, since, 5_000);
  },
});

Deno.test("--header-timeout and --idle-timeout take seconds of at least 0.1", async () => {
  const dir = await tempDir();
  let r = await serverRefusal(["--db", `${dir}/orbit.db`, "--header-timeout", "0"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^error: --header-timeout must be a number of at least 0\.1, got "0"/m);
  r = await serverRefusal(["--db", `${dir}/orbit.db`], { ORBIT_IDLE_TIMEOUT: "soon" });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--idle-timeout must be a number of at least 0\.1, got "soon"/);
});
