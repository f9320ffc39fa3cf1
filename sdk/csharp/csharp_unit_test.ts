/**
 * Runs the C# SDK's own checks as part of `deno task test`, so CI runs them: `build.sh` compiles
 * the library, the conformance worker, the example and the test runner with Mono's `mcs`
 * (warnings are errors), and the test runner's suite passes (the worker against an in-memory
 * fake runtime, the client, the task contracts). Skipped, loudly, where Mono or Debian's
 * Newtonsoft.Json is not installed; CI installs them (.ci/run).
 */
import assert from "node:assert/strict";

const DIR = new URL(".", import.meta.url).pathname;

/**
 * Runs a command in this folder. Past `limitMs` it is sent SIGQUIT (Mono prints every thread's
 * stack to its output), then killed, and the answer says so: a hang fails with its stacks
 * instead of holding the suite until CI's own limit.
 */
async function run(
  cmd: string,
  args: string[],
  limitMs = 300_000,
): Promise<{ code: number; text: string }> {
  const child = new Deno.Command(cmd, { args, cwd: DIR, stdout: "piped", stderr: "piped" })
    .spawn();
  let hung = false;
  const timer = setTimeout(() => {
    hung = true;
    try {
      child.kill("SIGQUIT");
    } catch { /* gone */ }
    setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 3000);
  }, limitMs);
  const out = await child.output();
  clearTimeout(timer);
  const dec = new TextDecoder();
  const text = dec.decode(out.stdout) + dec.decode(out.stderr);
  return hung
    ? { code: -1, text: `${cmd} ${args.join(" ")} ran past ${limitMs / 1000} s:\n${text}` }
    : { code: out.code, text };
}

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
      const build = await run("sh", ["build.sh", out]);
      assert.equal(build.code, 0, `build.sh failed:\n${build.text}`);
      // About 4 s; each test has a 20 s limit of its own, so two minutes is a hang (seen once).
      const test = await run("mono", ["--debug", `${out}/Orbit.Sdk.Tests.exe`], 120_000);
      assert.equal(test.code, 0, `the C# test suite failed:\n${test.text}`);
      assert.match(test.text, /^\d+ passed, 0 failed/m, test.text);
    } finally {
      await Deno.remove(out, { recursive: true }).catch(() => {});
    }
  },
});
