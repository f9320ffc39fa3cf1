/**
 * Hostile child workflows against a real server process (issue 37): a workflow that starts
 * itself stops at `--max-child-depth` (default 32) and a tree that doubles at every level at
 * `--max-descendants`, both with CHILD_LIMIT in history; a cancel of the root of a growing
 * tree ends every descendant cancelled and starts no new one; `--max-active-executions` holds
 * children back instead of letting them past. No fixed sleeps: every wait is for a condition.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir, waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";

type Api = ReturnType<typeof api>;
type Row = { execution_id: string; status: string; parent_id: string | null; error: unknown };

const wf = (name: string, steps: unknown[], extra: Record<string, unknown> = {}) => ({
  ir: "orbit-ir/2",
  name,
  version: "1.0.0",
  steps,
  ...extra,
});

/** Starts itself as a child, for ever. */
const BOMB = wf("Bomb", [{ id: "again", child: { workflow: "Bomb" } }]);
/** Starts itself twice at every level, for ever. */
const DOUBLE = wf("Double", [{
  id: "both",
  parallel: [[{ id: "l", child: { workflow: "Double" } }], [{
    id: "r",
    child: { workflow: "Double" },
  }]],
}]);
/** The same, one level every 50 ms. */
const SLOW_DOUBLE = wf("SlowDouble", [{ id: "nap", sleep_s: 0.05 }, {
  id: "both",
  parallel: [[{ id: "l", child: { workflow: "SlowDouble" } }], [{
    id: "r",
    child: { workflow: "SlowDouble" },
  }]],
}]);
const LEAF = wf("Leaf", [{ id: "r", return: 1 }]);

async function deploy(c: Api, ...docs: unknown[]): Promise<void> {
  for (const doc of docs) {
    const r = await c.post("/v1/workflows", doc);
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
}

/** Every execution of `workflow`, through the list's cursor. */
async function all(c: Api, workflow: string): Promise<Row[]> {
  const out: Row[] = [];
  let cursor: string | null = null;
  do {
    const r: { status: number; body: { executions: Row[]; next_cursor?: string | null } } = await c
      .get(
        `/v1/executions?workflow=${workflow}&limit=1000${cursor ? `&cursor=${cursor}` : ""}`,
      );
    assert.equal(r.status, 200, JSON.stringify(r.body));
    out.push(...r.body.executions);
    cursor = r.body.next_cursor ?? null;
  } while (cursor);
  return out;
}

async function history(c: Api, id: string) {
  const r = await c.get(`/v1/executions/${id}/history`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.events as Array<Record<string, unknown> & { type: string }>;
}

/** A start and its end through the server's queues: what was in flight before it is done. */
async function barrier(c: Api, id: string): Promise<void> {
  const r = await c.post("/v1/executions", { workflow: "Leaf", execution_id: id });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  await waitFor(async () => {
    const w = await c.get(`/v1/executions/${id}/wait?timeout_s=10`);
    return w.body.status === "completed";
  }, `execution ${id} to complete`);
}

async function withServer(db: string, args: string[], fn: (c: Api) => Promise<void>) {
  const server = await startServer({ db, args });
  try {
    await fn(api(server.url));
  } finally {
    await server.kill("SIGKILL");
  }
}

testEachStore(
  "a workflow that starts itself as a child stops at the default depth limit with CHILD_LIMIT",
  async (store) => {
    await withServer(await store.newDb(), [], async (c) => {
      await deploy(c, BOMB, LEAF);
      assert.equal(
        (await c.post("/v1/executions", { workflow: "Bomb", execution_id: "b" }))
          .status,
        201,
      );
      const root = await waitFor(async () => {
        const r = await c.get("/v1/executions/b/wait?timeout_s=10");
        return r.body.status !== "running" ? r.body : null;
      }, "the root to end");
      assert.equal(root.status, "failed");
      assert.equal(root.error.code, "CHILD_FAILED");
      // Depth 0 (the root) to 32; the child step of depth 32 was refused.
      const rows = await all(c, "Bomb");
      assert.equal(rows.length, 33);
      assert.ok(rows.every((r) => r.status === "failed"), JSON.stringify(rows.slice(0, 3)));
      const deepest = `b${".again".repeat(32)}`;
      const events = await history(c, deepest);
      assert.equal(events[0]!.depth, 32);
      const failed = events.find((e) => e.type === "StepFailed")!;
      assert.equal((failed.error as { code: string }).code, "CHILD_LIMIT");
      assert.match(
        (failed.error as { message: string }).message,
        /depth 33, beyond the server's limit of 32 \(--max-child-depth\)/,
      );
      assert.equal((await c.get(`/v1/executions/${deepest}.again`)).status, 404);
    });
  },
);

testEachStore(
  "a tree that doubles at every level stops at --max-descendants, and every execution ends",
  async (store) => {
    await withServer(await store.newDb(), ["--max-descendants", "40"], async (c) => {
      await deploy(c, DOUBLE, LEAF);
      assert.equal(
        (await c.post("/v1/executions", { workflow: "Double", execution_id: "d" })).status,
        201,
      );
      const root = await waitFor(async () => {
        const r = await c.get("/v1/executions/d/wait?timeout_s=10");
        return r.body.status !== "running" ? r.body : null;
      }, "the root to end");
      assert.equal(root.status, "failed");
      await waitFor(
        async () => (await all(c, "Double")).every((r) => r.status !== "running"),
        "every execution of the tree to end",
      );
      await barrier(c, "after-d");
      const rows = await all(c, "Double");
      assert.ok(rows.every((r) => r.status !== "running"));
      const limited = [];
      for (const r of rows) {
        for (const e of await history(c, r.execution_id)) {
          if (e.type === "StepFailed" && (e.error as { code: string }).code === "CHILD_LIMIT") {
            limited.push(e.error as { message: string });
          }
        }
      }
      assert.ok(limited.length > 0, "some child start was refused");
      assert.match(limited[0]!.message, /limit of 40 \(--max-descendants\)/);
    });
  },
);

testEachStore(
  "cancelling the root of a growing tree cancels every descendant and starts no new one",
  async (store) => {
    await withServer(await store.newDb(), [], async (c) => {
      await deploy(c, SLOW_DOUBLE, LEAF);
      assert.equal(
        (await c.post("/v1/executions", { workflow: "SlowDouble", execution_id: "t" })).status,
        201,
      );
      await waitFor(
        async () => (await c.get("/v1/executions/t.l.l")).status === 200,
        "the tree to grow",
      );
      // Children start while the cancel runs: every one ends cancelled all the same.
      const r = await c.post("/v1/executions/t/cancel", { reason: "stop the tree" });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.status, "cancelled");
      await waitFor(
        async () => (await c.get("/v1/health")).body.active_executions === 0,
        "every descendant to end",
      );
      await barrier(c, "after-t");
      const rows = await all(c, "SlowDouble");
      assert.ok(rows.length >= 4, `${rows.length} executions`);
      assert.deepEqual(
        [...new Set(rows.map((r) => r.status))],
        ["cancelled"],
        JSON.stringify(rows.filter((r) => r.status !== "cancelled").slice(0, 5)),
      );
      assert.equal((await c.get("/v1/health")).body.active_executions, 0);
    });
  },
);

testEachStore(
  "--max-active-executions holds children back, and a cancel of the root releases them",
  async (store) => {
    await withServer(await store.newDb(), ["--max-active-executions", "3"], async (c) => {
      await deploy(c, BOMB, LEAF);
      assert.equal(
        (await c.post("/v1/executions", { workflow: "Bomb", execution_id: "h" })).status,
        201,
      );
      // Three run (the root and two levels); the third level's start is held.
      const held = await waitFor(async () => {
        const p = await c.get(`/v1/executions/h.again.again/pending`);
        return p.status === 200 && p.body.pending?.[0]?.reason === "CHILD_HELD"
          ? p.body.pending[0]
          : null;
      }, "the third child to be held");
      assert.equal(held.max_active_executions, 3);
      assert.equal((await c.get("/v1/health")).body.active_executions, 3);
      assert.equal((await all(c, "Bomb")).length, 3);
      const r = await c.post("/v1/executions/h/cancel", { reason: "stop" });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      await waitFor(
        async () => (await c.get("/v1/health")).body.active_executions === 0,
        "every execution to end",
      );
      await barrier(c, "after-h");
      const rows = await all(c, "Bomb");
      assert.equal(rows.length, 3, "the held child never started");
      assert.deepEqual([...new Set(rows.map((r) => r.status))], ["cancelled"]);
    });
  },
);

Deno.test(
  "a doubling tree at the default limits does not hold the server's answers back",
  async () => {
    // 10,000 descendants started as fast as the server can: its commits follow each other
    // without a pause. Requests must still be answered between them (issue 37: /v1/health
    // waited 2.7-15 s behind such a tree when commits were chained on immediates; 0.1-0.25 s
    // since a chained commit waits for a timer turn).
    await withServer(`${await tempDir()}/orbit.db`, [], async (c) => {
      await deploy(c, DOUBLE, LEAF);
      assert.equal(
        (await c.post("/v1/executions", { workflow: "Double", execution_id: "big" })).status,
        201,
      );
      let ended = false;
      const latencies: number[] = [];
      const probe = (async () => {
        while (!ended) {
          const started = performance.now();
          const r = await c.get("/v1/health");
          latencies.push(performance.now() - started);
          assert.equal(r.status, 200);
          await new Promise((r) => setTimeout(r, 50));
        }
      })();
      try {
        await waitFor(
          async () => {
            const r = await c.get("/v1/executions/big/wait?timeout_s=10");
            return r.body.status !== "running";
          },
          "the root to end",
          120_000,
        );
        await waitFor(
          async () => (await c.get("/v1/health")).body.active_executions === 0,
          "every execution of the tree to end",
          120_000,
        );
      } finally {
        ended = true;
        await probe;
      }
      const rows = await all(c, "Double");
      assert.ok(rows.length >= 1000, `${rows.length} executions: the tree grew`);
      const worst = Math.max(...latencies);
      assert.ok(latencies.length >= 10, `${latencies.length} probes answered`);
      assert.ok(worst < 2000, `the slowest of ${latencies.length} probes took ${worst} ms`);
    });
  },
);
