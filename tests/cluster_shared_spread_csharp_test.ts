/**
 * A C# SDK worker in a shared cluster spreads its slots over the live servers
 * (`WorkerOptions.SpreadOverNodes`, sdk/csharp/src/Orbit.Sdk/Nodes.cs): two real shared servers
 * on one real PostgreSQL, the worker (a real `mono` process, sdk/csharp/examples/Spread) given
 * the first server's address only. Its slots poll both servers at the addresses `/v1/health`
 * advertises, each server hands out the tasks of the executions it owns, and no result is
 * forwarded between them. The TypeScript and Python workers' tests are
 * tests/cluster_shared_spread_test.ts. Skipped, loudly, where Mono (mcs, mono) or Debian's
 * Newtonsoft.Json is not installed; CI installs them.
 */
import assert from "node:assert/strict";
import { waitFor } from "./support/server.ts";
import {
  assertPolledAndNothingForwarded,
  runOne,
  TWO_STEPS,
  waitForPolls,
  withTwo,
} from "./support/shared_spread.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const ROOT = new URL("../", import.meta.url).pathname;

/** `sdk/csharp/build.sh OUT spread` into a temporary directory; null where Mono is missing. */
async function buildSpreadWorker(): Promise<string | null> {
  for (const tool of ["mcs", "mono"]) {
    try {
      const ok = (await new Deno.Command(tool, {
        args: ["--version"],
        stdout: "null",
        stderr: "null",
      }).output()).success;
      if (!ok) throw new Error(`${tool} --version failed`);
    } catch {
      console.warn(
        "!!! SKIPPING the C# spread worker's test: mcs/mono are not installed " +
          "(Debian: apt-get install mono-complete libnewtonsoft-json-cil-dev)",
      );
      return null;
    }
  }
  const out = await Deno.makeTempDir({ prefix: "orbit-csharp-spread-" });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(out, { recursive: true });
    } catch { /* removed already */ }
  });
  const r = await new Deno.Command("sh", {
    args: [`${ROOT}sdk/csharp/build.sh`, out, "spread"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
  if (r.code === 3) {
    console.warn(`!!! SKIPPING the C# spread worker's test: ${text.trim()}`);
    return null;
  }
  if (!r.success) throw new Error(`sdk/csharp/build.sh failed:\n${text}`);
  return out;
}

const build = await buildSpreadWorker();

Deno.test({
  ...T,
  name: "shared: a C# worker given one server's address polls every live server, and each " +
    "server's results stay on it",
  ignore: build === null,
  fn: () =>
    withTwo(TWO_STEPS, async (one, two) => {
      const child = new Deno.Command("mono", {
        args: [
          "--debug",
          `${build}/Orbit.Examples.Spread.exe`,
          "--server",
          one.url,
          "--concurrency",
          "4",
          "--node-refresh-ms",
          "200",
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
        await waitFor(() => /slots spread over 2 node\(s\)/.test(out), "the spread line", 30_000);
        assert.ok(
          out.includes(`slots spread over 2 node(s): ${[one.url, two.url].sort().join(", ")}`),
          out,
        );
        // The worker's slots poll before the first execution starts (its "serving" line comes
        // after StartAsync, which reads the nodes and starts the slots).
        await waitFor(() => out.includes("spread worker serving"), "the worker to serve", 30_000);
        await waitForPolls([one, two]);
        // One at a time, alternately owned by each server: every task goes to a slot polling
        // its owner, whose result comes back to it.
        for (let i = 0; i < 10; i++) await runOne(i % 2 ? two.url : one.url, `cs-spread-${i}`);
        const ran = out.split("\n").filter((l) => l.startsWith("ran "));
        assert.equal(ran.length, 20, out);
        assert.equal(new Set(ran).size, 20, `an attempt ran twice:\n${out}`);
        await assertPolledAndNothingForwarded([one, two]);
      } finally {
        try {
          child.kill("SIGKILL");
        } catch { /* gone */ }
        await child.status;
        await pump;
      }
    }),
});
