/**
 * Runs the C# SDK's own checks as part of `deno task test`, so CI runs them: `build.sh` compiles
 * the library, the conformance worker, the example and the test runner with Mono's `mcs`
 * (warnings are errors), and the test runner's suite passes (the worker against an in-memory
 * fake runtime, the client, the task contracts). Skipped, loudly, where Mono or Debian's
 * Newtonsoft.Json is not installed; CI installs them (.ci/run).
 */
import assert from "node:assert/strict";
import { described, run } from "../../tests/support/run.ts";

const DIR = new URL(".", import.meta.url).pathname;

async function has(cmd: string): Promise<boolean> {
  try {
    return (await new Deno.Command(cmd, { args: ["--version"], stdout: "null", stderr: "null" })
      .output()).success;
  } catch {
    return false;
  }
}

let missing = "";
if (!(await has("mcs")) || !(await has("mono"))) {
  missing = "mcs/mono are not installed (Debian: apt-get install mono-complete)";
} else if (
  (await run("sh", ["-c", "ls /usr/lib/cli/Newtonsoft.Json-*/Newtonsoft.Json.dll"])).code !== 0 &&
  !Deno.env.get("NEWTONSOFT_JSON_DLL")
) {
  missing = "Newtonsoft.Json is not installed (Debian: apt-get install libnewtonsoft-json-cil-dev)";
}
if (missing) {
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the C# SDK's unit tests: ${missing}\n${"!".repeat(78)}\n`,
  );
}

Deno.test({
  name: "C# SDK: mcs builds every assembly without warnings and the SDK's test suite passes",
  ignore: missing !== "",
  fn: async () => {
    const out = await Deno.makeTempDir({ prefix: "orbit-csharp-unit-" });
    try {
      const build = await run("sh", ["build.sh", out], { cwd: DIR, guardMs: 300_000 });
      assert.equal(build.code, 0, `build.sh failed: ${described(build)}`);
      // About 4 s; each test has a 20 s limit of its own, so two minutes is a hang (seen once):
      // SIGQUIT makes Mono print every thread's stack, then the guard kills it.
      const test = await run("mono", ["--debug", `${out}/Orbit.Sdk.Tests.exe`], {
        cwd: DIR,
        guardMs: 120_000,
        guardSignal: "SIGQUIT",
      });
      assert.ok(test.code === 0 && !test.timedOut, `the C# test suite failed: ${described(test)}`);
      assert.match(test.stdout, /^\d+ passed, 0 failed/m, described(test));
    } finally {
      await Deno.remove(out, { recursive: true }).catch(() => {});
    }
  },
});
