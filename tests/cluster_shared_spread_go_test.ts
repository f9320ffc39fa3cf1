/**
 * A Go SDK worker in a shared cluster spreads its slots over the live servers
 * (`WorkerOptions.DisableNodeSpread` off, sdk/go/nodes.go), as the TypeScript and Python
 * workers do (tests/cluster_shared_spread_test.ts): two real shared servers on one real
 * PostgreSQL, a real Go worker process (sdk/go/cmd/spread) given the first server's address
 * only. Its slots poll both servers at the addresses `/v1/health` advertises, each server hands
 * out the tasks of the executions it owns, and no result is forwarded between them. Skipped,
 * loudly, where Go is not installed; CI installs it.
 */
import assert from "node:assert/strict";
import { api, tempDir, waitFor } from "./support/server.ts";
import { sharedPostgres } from "./support/pg.ts";
import { type NodeProcess, startSharedCluster, tail } from "./support/shared_cluster.ts";
import { goEnv } from "./conformance/sdks.ts";
import {
  assertPolledAndNothingForwarded,
  runOne,
  TWO_STEPS,
  waitForPolls,
} from "./support/shared_spread.ts";

const GO_DIR = new URL("../sdk/go", import.meta.url).pathname;

let hasGo = false;
try {
  hasGo = (await new Deno.Command("go", { args: ["version"], stdout: "null", stderr: "null" })
    .output()).success;
} catch { /* not installed */ }
if (!hasGo) {
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Go worker's shared-cluster test: go is not ` +
      `installed (Debian: apt-get install golang-go)\n${"!".repeat(78)}\n`,
  );
}

/** `go build` of sdk/go/cmd/spread into `dir` (offline: no module proxy). */
async function buildSpreadWorker(dir: string): Promise<string> {
  const bin = `${dir}/spread-go`;
  const build = await new Deno.Command("go", {
    args: ["build", "-o", bin, "./cmd/spread"],
    cwd: GO_DIR,
    env: goEnv(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(build.success, new TextDecoder().decode(build.stderr));
  return bin;
}

Deno.test({
  name: "shared: a Go worker given one server's address polls every live server, and each " +
    "server's results stay on it",
  ignore: !hasGo,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    try {
      const bin = await buildSpreadWorker(dir);
      const db = await (await sharedPostgres()).createDatabase();
      const c = await startSharedCluster({ db, nodes: 2, proxy: false });
      let out = "";
      try {
        const [one, two] = c.nodes as [NodeProcess, NodeProcess];
        assert.equal((await api(one.url).post("/v1/workflows", TWO_STEPS)).status, 201);
        const child = new Deno.Command(bin, {
          args: [
            "--server",
            one.url,
            "--concurrency",
            "4",
            "--poll-wait-s",
            "5",
            "--heartbeat-ms",
            "500",
            "--node-refresh-ms",
            "200",
          ],
          stdin: "null",
          stdout: "piped",
          stderr: "inherit",
        }).spawn();
        const pump = (async () => {
          for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
            out += chunk;
          }
        })();
        try {
          await waitFor(() => /slots spread over 2 node\(s\)/.test(out), "the spread line", 30_000);
          assert.ok(
            out.includes(
              `INFO orbit slots spread over 2 node(s): ${[one.url, two.url].sort().join(", ")}`,
            ),
            out,
          );
          await waitForPolls([one, two]);
          for (let i = 0; i < 10; i++) {
            await runOne(i % 2 ? two.url : one.url, `go-spread-${i}`);
          }
          const ran = out.split("\n").filter((l) => l.startsWith("ran "));
          assert.equal(ran.length, 20, out);
          assert.equal(new Set(ran).size, 20, `an attempt ran twice:\n${out}`);
          await assertPolledAndNothingForwarded([one, two]);
          assert.doesNotMatch(out, /did not answer|report result failed/, out);
        } finally {
          // Stopped gracefully (SIGTERM), by its PID; SIGKILL if it does not stop in time.
          try {
            child.kill("SIGTERM");
          } catch { /* gone */ }
          let timer: ReturnType<typeof setTimeout> | undefined;
          const killed = new Promise<void>((resolve) => {
            timer = setTimeout(() => {
              try {
                child.kill("SIGKILL");
              } catch { /* gone */ }
              resolve();
            }, 15_000);
          });
          const status = await Promise.race([child.status, killed.then(() => child.status)]);
          clearTimeout(timer);
          await pump;
          assert.equal(status.code, 0, `the worker exited ${status.code}:\n${out}`);
          assert.match(out, /INFO orbit worker stopped worker_id=spread-go/);
        }
      } catch (e) {
        console.error(`${c.nodes.map((n) => tail(n, 40)).join("\n")}\n--- Go worker:\n${out}`);
        throw e;
      } finally {
        await c.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
