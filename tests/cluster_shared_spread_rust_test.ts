/**
 * A Rust SDK worker in a shared cluster spreads its slots over the live servers
 * (`spread_over_nodes`, sdk/rust/src/nodes.rs), as the TypeScript and Python workers do
 * (tests/cluster_shared_spread_test.ts): two real shared servers on one real PostgreSQL, a real
 * Rust worker process (sdk/rust/examples/spread.rs) given the first server's address only. Its
 * slots poll both servers at the addresses `/v1/health` advertises, each server hands out the
 * tasks of the executions it owns, and no result is forwarded between them. When a server dies,
 * its slots move and the work goes on; a server whose advertised address does not answer is left
 * out, and its executions' tasks still run; a result on its way to a paused server is sent to the
 * given address once that server leaves the live list. Skipped, loudly, where cargo or Debian's
 * serde crates are not installed; CI installs them.
 */
import assert from "node:assert/strict";
import { api, tempDir, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { type NodeProcess, startSharedCluster, tail } from "./support/shared_cluster.ts";
import { cargoCommand, rustMissing } from "./conformance/sdks.ts";
import {
  assertPolledAndNothingForwarded,
  runOne,
  SLOW,
  start,
  TWO_STEPS,
  waitForPolls,
  withDeadSecond,
} from "./support/shared_spread.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const RUST_DIR = new URL("../sdk/rust", import.meta.url).pathname;

const missing = await rustMissing();
if (missing) console.warn(`!!! SKIPPING the Rust worker's shared-cluster spread tests: ${missing}`);

let built: Promise<string> | null = null;
/** The example worker `spread`, built once and copied out of the shared target directory. */
function spreadProgram(): Promise<string> {
  built ??= (async () => {
    const { cargo, env } = (await cargoCommand())!;
    const build = await new Deno.Command(cargo, {
      args: ["build", "--offline", "--quiet", "--example", "spread"],
      cwd: RUST_DIR,
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(build.success, new TextDecoder().decode(build.stderr));
    // A copy: a build running meanwhile (the unit tests') may replace the target dir's file.
    const dir = await tempDir();
    globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
    const bin = `${dir}/spread-rust`;
    await Deno.copyFile(`${env.CARGO_TARGET_DIR}/debug/examples/spread`, bin);
    await Deno.chmod(bin, 0o755);
    return bin;
  })();
  return built;
}

/**
 * The Rust worker on `server`; `out()` is its standard output (log lines and `ran …` lines),
 * `release()` lets its `t.slow` attempts finish.
 */
async function rustWorker(server: string, env: Record<string, string> = {}) {
  const child = new Deno.Command(await spreadProgram(), {
    args: [server],
    env,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const stdin = child.stdin.getWriter();
  let text = "";
  const pump = (async () => {
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) text += chunk;
  })();
  return {
    out: () => text,
    ran: () => text.split("\n").filter((l) => l.startsWith("ran ")),
    async release(): Promise<void> {
      await stdin.write(new TextEncoder().encode("finish\n"));
    },
    /** Kills it (SIGKILL, by its PID) and waits until it exited. */
    async kill(): Promise<void> {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
      await stdin.close().catch(() => {});
      await child.status;
      await pump;
    },
  };
}

Deno.test({
  ...T,
  name: "shared: a Rust worker given one server's address polls every live server, and each " +
    "server's results stay on it; a killed server's slots move",
  ignore: missing !== null,
  fn: async () => {
    await spreadProgram(); // before the servers start: the build takes a while on a busy machine
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 2, proxy: false });
    let worker: Awaited<ReturnType<typeof rustWorker>> | null = null;
    try {
      const [one, two] = c.nodes as [NodeProcess, NodeProcess];
      assert.equal((await api(one.url).post("/v1/workflows", TWO_STEPS)).status, 201);
      const w = worker = await rustWorker(one.url);
      await waitFor(() => /slots spread over 2 node\(s\)/.test(w.out()), "the spread line", 20_000);
      assert.ok(
        w.out().includes(`slots spread over 2 node(s): ${[one.url, two.url].sort().join(", ")}`),
        w.out(),
      );
      await waitForPolls([one, two]);
      // One at a time, alternately owned by each server: every task goes to a slot polling its
      // owner, whose result comes back to it.
      for (let i = 0; i < 10; i++) await runOne(i % 2 ? two.url : one.url, `rs-spread-${i}`);
      assert.equal(w.ran().length, 20, w.out());
      assert.equal(new Set(w.ran()).size, 20, `an attempt ran twice:\n${w.out()}`);
      await assertPolledAndNothingForwarded([one, two]);

      // The second server dies: its slots move to the configured address at once, and the live
      // list loses it once its heartbeat is older than the node timeout.
      await two.kill(); // SIGKILL
      for (let i = 10; i < 14; i++) await runOne(one.url, `rs-spread-${i}`);
      await waitFor(
        () => w.out().includes(`slots spread over 1 node(s): ${one.url}`),
        "the worker to read one live node",
        20_000,
      );
      for (let i = 14; i < 18; i++) await runOne(one.url, `rs-spread-${i}`);
      assert.equal(w.ran().length, 36, w.out());
      assert.equal(new Set(w.ran()).size, 36, `an attempt ran twice:\n${w.out()}`);
    } catch (e) {
      console.error(c.nodes.map((n) => tail(n, 40)).join("\n"));
      if (worker) console.error(`the Rust worker's output:\n${worker.out()}`);
      throw e;
    } finally {
      await worker?.kill();
      await c.close();
    }
  },
});

Deno.test({
  ...T,
  name: "shared: a Rust worker leaves out a server whose advertised address does not answer; " +
    "its executions' tasks still run",
  ignore: missing !== null,
  fn: async () => {
    await spreadProgram();
    await withDeadSecond(TWO_STEPS, async (one, two, dead) => {
      const w = await rustWorker(one.url);
      try {
        await waitFor(
          () => /slots spread over 2 node\(s\)/.test(w.out()),
          "the spread line",
          20_000,
        );
        assert.ok(
          w.out().includes(`slots spread over 2 node(s): ${[one.url, dead].sort().join(", ")}`),
          w.out(),
        );
        for (let i = 0; i < 6; i++) await runOne(i % 2 ? two.url : one.url, `rs-dead-${i}`);
        assert.equal(w.ran().length, 12, w.out());
        assert.match(
          w.out(),
          new RegExp(`node ${dead} did not answer \\(.+\\); its slots use ${one.url} for 10 s`),
        );
        // Left out without a backoff: no poll failure was logged.
        assert.doesNotMatch(w.out(), /poll failed/);
      } catch (e) {
        console.error(`the Rust worker's output:\n${w.out()}`);
        throw e;
      } finally {
        await w.kill();
      }
    });
  },
});

Deno.test({
  ...T,
  name: "shared: a result a Rust worker has on its way to a paused server goes to the given " +
    "address once that server leaves the live list, before its attempt is redelivered",
  ignore: missing !== null,
  fn: async () => {
    await spreadProgram();
    const db = await (await sharedPostgres()).createDatabase();
    const c = await startSharedCluster({ db, nodes: 2, proxy: false });
    let worker: Awaited<ReturnType<typeof rustWorker>> | null = null;
    const [one, two] = c.nodes as [NodeProcess, NodeProcess];
    try {
      assert.equal((await api(one.url).post("/v1/workflows", SLOW)).status, 201);
      const w = worker = await rustWorker(one.url, {
        // One slot per server: node-2's own slot takes the task of the execution it owns.
        SPREAD_CONCURRENCY: "2",
        // Far past the takeover and the redelivery that follows it: only the cut ends it.
        SPREAD_REQUEST_TIMEOUT_MS: "60000",
      });
      await waitFor(() => /slots spread over 2 node\(s\)/.test(w.out()), "the spread line", 20_000);
      await start(two.url, "SpreadSlow", "rs-held-1");
      await waitFor(() => w.ran().length === 1, "the attempt to run", 20_000);
      // node-2 stops answering with the result on its way to it.
      two.pause();
      const paused = Date.now();
      await w.release();
      const done = await api(one.url).get("/v1/executions/rs-held-1/wait?timeout_s=30");
      assert.equal(done.body.status, "completed", JSON.stringify(done.body));
      const took = Date.now() - paused;
      assert.ok(took < 15_000, `completed ${took} ms after the pause`);
      assert.equal(w.ran().length, 1, `the attempt ran again:\n${w.out()}`);
      const h = await api(one.url).get("/v1/executions/rs-held-1/history");
      const types = (h.body.events as { type: string }[]).map((e) => e.type);
      assert.equal(types.includes("StepAttemptUncertain"), false, types.join(", "));
    } catch (e) {
      console.error(c.nodes.map((n) => tail(n, 40)).join("\n"));
      if (worker) console.error(`the Rust worker's output:\n${worker.out()}`);
      throw e;
    } finally {
      two.resume();
      await worker?.kill();
      await c.close();
    }
  },
});
