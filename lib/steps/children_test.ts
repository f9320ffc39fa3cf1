/**
 * The child coordinator in process, over a real SQLite store: a child whose parent was
 * cancelled before the child's start came to be committed is never created.
 */
import assert from "node:assert/strict";
import { openSqliteStore } from "../store/sqlite.ts";
import { Runtime } from "../runtime.ts";
import type { Store } from "../store/store.ts";

const dir = Deno.makeTempDirSync({ prefix: "orbit-children-test-" });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));

Deno.test("children: a child whose parent is cancelled before its start commits is not started", async () => {
  const inner = await openSqliteStore(`${dir}/cancel.db`);
  await inner.migrate();
  // The coordinator's first read of the child's row waits until the parent is cancelled.
  let release!: () => void;
  const cancelled = new Promise<void>((r) => release = r);
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === "getExecution") {
        return async (id: string) => {
          if (id === "p.kid") await cancelled;
          return await target.getExecution(id);
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  }) as Store;
  const rt = new Runtime(store, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
  await rt.start();
  try {
    const ir = (name: string, steps: unknown[]) => ({
      ir: "orbit-ir/2",
      name,
      version: "1.0.0",
      steps,
    });
    await rt.definitions.deploy(
      { ...ir("Kid", [{ id: "w", wait_signal: "go" }]), signals: { go: {} } },
    );
    await rt.definitions.deploy(ir("P", [{ id: "kid", child: { workflow: "Kid" } }]));
    const starts: Array<Promise<unknown>> = [];
    const start = rt.executions.start.bind(rt.executions);
    rt.executions.start = (...args) => {
      const p = start(...args);
      starts.push(p.catch(() => {}));
      return p;
    };
    await rt.executions.start({ workflow: "P", execution_id: "p" });
    assert.equal((await rt.executions.cancel("p", "stop")).status, "cancelled");
    release();
    // The coordinator's start of the child, refused in its own turn.
    while (starts.length < 2) await new Promise((r) => setTimeout(r, 1));
    await Promise.all(starts);
    await rt.committer.idle();
    assert.equal(await inner.getExecution("p.kid"), null, "the child was never created");
    assert.equal((await inner.getExecution("p"))?.status, "cancelled");
  } finally {
    await rt.stop();
  }
});
