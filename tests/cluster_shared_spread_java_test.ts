/**
 * A Java SDK worker in a shared cluster spreads its slots over the live servers
 * (`spreadOverNodes`, sdk/java/src/main/java/dev/orbit/sdk/Nodes.java): two real shared servers
 * on one real PostgreSQL, the worker (a real `java` process, sdk/java/examples/spread) given the
 * first server's address only. Its slots poll both servers at the addresses `/v1/health`
 * advertises, each server hands out the tasks of the executions it owns, and no result is
 * forwarded between them. The TypeScript and Python workers do the same
 * (tests/cluster_shared_spread_test.ts). Skipped, loudly, where the JDK or Gson is not installed;
 * CI installs them.
 */
import assert from "node:assert/strict";
import { api, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { type NodeProcess, startSharedCluster, tail } from "./support/shared_cluster.ts";
import { JAVA_FLAGS, javaBuild, MissingToolchain } from "./conformance/sdks.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

let build: { dir: string; classpath: string } | null = null;
try {
  build = await javaBuild();
} catch (err) {
  if (!(err instanceof MissingToolchain)) throw err;
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Java spread test: ${err.message}\n${"!".repeat(78)}\n`,
  );
}

const TWO_STEPS = {
  ir: "orbit-ir/1",
  name: "SpreadSteps",
  version: "1.0.0",
  steps: [
    { id: "a", task: "t.spread", contract: "1", input: "{% $input %}" },
    { id: "b", task: "t.spread", contract: "1", input: "{% $steps.a %}" },
  ],
};

/**
 * Two shared servers on a fresh database, `workflow` deployed through the first; `fn` gets both
 * (their last log lines are printed when it throws).
 */
async function withTwo(
  workflow: Record<string, unknown>,
  fn: (one: NodeProcess, two: NodeProcess) => Promise<void>,
): Promise<void> {
  const db = await (await sharedPostgres()).createDatabase();
  const c = await startSharedCluster({ db, nodes: 2, proxy: false });
  try {
    const [one, two] = c.nodes as [NodeProcess, NodeProcess];
    assert.equal((await api(one.url).post("/v1/workflows", workflow)).status, 201);
    await fn(one, two);
  } catch (e) {
    console.error(c.nodes.map((n) => tail(n, 40)).join("\n"));
    throw e;
  } finally {
    await c.close();
  }
}

/** Starts `id` of SpreadSteps through `base` (that server owns it) and waits until it completed. */
async function runOne(base: string, id: string): Promise<void> {
  const end = Date.now() + 10_000;
  for (;;) {
    const r = await api(base).post("/v1/executions", {
      workflow: "SpreadSteps",
      execution_id: id,
      input: { id },
    });
    if (r.status === 201) break;
    // The other server may not have read the definition yet.
    if (r.status === 404 && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    assert.fail(`start ${id} through ${base}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  const w = await api(base).get(`/v1/executions/${id}/wait?timeout_s=30`);
  assert.equal(w.body.status, "completed", `${id}: ${JSON.stringify(w.body)}`);
}

/** Every server was polled, and none forwarded a result or a claimed task to another. */
async function assertPolledAndNothingForwarded(nodes: NodeProcess[]): Promise<void> {
  for (const n of nodes) {
    assert.ok(await n.metric("orbit_poll_latency_seconds_count") > 0, `${n.id}: no polls`);
    for (const kind of ["complete", "fail", "dispatched"]) {
      assert.equal(
        await n.metric("orbit_commands_forwarded_total", `{kind="${kind}"}`),
        0,
        `${n.id} forwarded ${kind}`,
      );
    }
  }
}

Deno.test({
  ...T,
  name: "shared: a Java worker given one server's address polls every live server, and " +
    "each server's results stay on it",
  ignore: build === null,
  fn: () =>
    withTwo(TWO_STEPS, async (one, two) => {
      const child = new Deno.Command("java", {
        args: [
          ...JAVA_FLAGS,
          "-cp",
          build!.classpath,
          "dev.orbit.examples.spread.SpreadWorker",
          one.url,
        ],
        stdin: "null",
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      let out = "";
      const pump = (async () => {
        for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) out += chunk;
      })();
      try {
        await waitFor(() => /slots spread over 2 node\(s\)/.test(out), "the spread line", 60_000);
        assert.ok(
          out.includes(`slots spread over 2 node(s): ${[one.url, two.url].sort().join(", ")}`),
          out,
        );
        for (let i = 0; i < 10; i++) await runOne(i % 2 ? two.url : one.url, `java-spread-${i}`);
        // Every attempt's line was written before its result was reported; stdout may lag.
        const ran = () => out.split("\n").filter((l) => l.startsWith("ran ")).length;
        await waitFor(() => ran() >= 20, "20 task runs on stdout", 10_000).catch(() => {});
        assert.equal(ran(), 20, out);
        await assertPolledAndNothingForwarded([one, two]);
      } finally {
        try {
          Deno.kill(child.pid, "SIGKILL");
        } catch { /* gone */ }
        await child.status;
        await pump;
      }
    }),
});
