/**
 * The engine shell (`Executions`) over a real SQLite store, in process: what only the shell
 * does between commits (the next run of a continue-as-new, started after the run's end).
 */
import assert from "node:assert/strict";
import { openSqliteStore } from "../store/sqlite.ts";
import { Runtime } from "../runtime.ts";

const dir = Deno.makeTempDirSync({ prefix: "orbit-executions-test-" });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
let n = 0;

async function runtime(opts: { cacheExecutions?: number | null } = {}): Promise<Runtime> {
  const store = await openSqliteStore(`${dir}/${++n}.db`);
  await store.migrate();
  const rt = new Runtime(store, {
    sessionTimeoutMs: 30_000,
    maxActiveExecutions: null,
    cacheExecutions: opts.cacheExecutions ?? null,
  });
  await rt.start();
  return rt;
}

/** Continues at once (no step waits in between) until `$input` reaches `until`. */
const CHAIN = {
  ir: "orbit-ir/2",
  name: "Chain",
  version: "1.0.0",
  steps: [
    {
      id: "more",
      if: "{% $input.n < $input.until %}",
      then: [{
        id: "again",
        continue_as_new: { input: { n: "{% $input.n + 1 %}", until: "{% $input.until %}" } },
      }],
    },
    { id: "done", return: { n: "{% $input.n %}", run: "{% $execution.run %}" } },
  ],
};

for (const cache of [null, 10_000]) {
  Deno.test(
    `executions: a chain of 100 runs that each continue at once reaches its last run ` +
      `(cache ${cache ?? "off"})`,
    async () => {
      const rt = await runtime({ cacheExecutions: cache });
      try {
        await rt.definitions.deploy(CHAIN);
        await rt.executions.start({
          workflow: "Chain",
          execution_id: "chain-1",
          input: { n: 1, until: 100 },
        });
        const row = await rt.executions.wait("chain-1", 10_000);
        assert.equal(row.status, "completed", JSON.stringify(row));
        assert.deepEqual(row.output, { n: 100, run: 100 });
      } finally {
        await rt.stop();
      }
    },
  );
}

/** Continues at once for ever: only a cancel ends it. */
const FOREVER = {
  ir: "orbit-ir/2",
  name: "Forever",
  version: "1.0.0",
  steps: [{ id: "again", continue_as_new: { input: { n: "{% $input.n + 1 %}" } } }],
};

Deno.test("executions: a cancel ends a chain that continues at once for ever", async () => {
  const rt = await runtime();
  try {
    await rt.definitions.deploy(FOREVER);
    await rt.executions.start({ workflow: "Forever", execution_id: "f-1", input: { n: 1 } });
    // The chain goes on by itself, one run per turn of its execution.
    for (const end = Date.now() + 10_000;;) {
      const row = await rt.store.getExecution("f-1");
      if ((row?.input as { n: number }).n >= 20) break;
      assert.ok(Date.now() < end, `the chain stalled: ${JSON.stringify(row)}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    const cancelled = await rt.executions.cancel("f-1", "enough");
    assert.equal(cancelled.status, "cancelled");
    const n = (cancelled.input as { n: number }).n;
    // Nothing continues after it: the next turn of the chain finds nothing to start.
    await rt.executions.serial("f-1", () => Promise.resolve());
    await rt.committer.idle();
    const row = await rt.store.getExecution("f-1");
    assert.equal(row?.status, "cancelled");
    assert.equal((row?.input as { n: number }).n, n);
    const waited = await rt.executions.wait("f-1", 1000);
    assert.equal(waited.status, "cancelled");
  } finally {
    await rt.stop();
  }
});
