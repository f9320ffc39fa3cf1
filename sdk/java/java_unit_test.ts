/**
 * Runs the Java SDK's own checks as part of `deno task test`, so CI runs them: `build.sh`
 * compiles the SDK, its conformance worker, its example and its unit tests with plain javac
 * (`-Xlint:all -Werror`, Gson from Debian's libgoogle-gson-java, offline), and the JUnit-free
 * runner `dev.orbit.sdk.TestMain` passes (the worker against an in-memory fake runtime, the
 * client). Skipped, loudly, where the JDK or Gson is not installed; CI installs them (.ci/run).
 */
import assert from "node:assert/strict";
import { JAVA_FLAGS } from "../../tests/conformance/sdks.ts";

const DIR = new URL(".", import.meta.url).pathname;
const GSON = Deno.env.get("GSON_JAR") ?? "/usr/share/java/gson.jar";

/** Runs a command in sdk/java; a hung one is killed (by its PID) after 120 s. */
async function run(cmd: string, args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: DIR,
    env,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const dec = new TextDecoder();
  return { ok: out.success, text: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

async function missing(): Promise<string> {
  for (const tool of ["javac", "java", "jar"]) {
    try {
      const r = await new Deno.Command(tool, {
        args: ["--version"],
        stdout: "null",
        stderr: "null",
      })
        .output();
      if (!r.success) throw new Error();
    } catch {
      return `${tool} is not installed (Debian: apt-get install openjdk-17-jdk-headless)`;
    }
  }
  try {
    await Deno.stat(GSON);
  } catch {
    return `Gson is not installed at ${GSON} (Debian: apt-get install libgoogle-gson-java)`;
  }
  return "";
}

const why = await missing();
if (why) {
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Java SDK's unit tests: ${why}\n${"!".repeat(78)}\n`,
  );
}

Deno.test({
  name: "Java SDK: build.sh (javac -Xlint:all -Werror) and the unit tests (TestMain) pass",
  ignore: why !== "",
  fn: async () => {
    const out = await Deno.makeTempDir({ prefix: "orbit-java-unit-" });
    try {
      const build = await run("sh", ["build.sh", out], { GSON_JAR: GSON, WITH_TESTS: "1" });
      assert.ok(build.ok, `build.sh failed:\n${build.text}`);
      const test = await run("java", [
        ...JAVA_FLAGS,
        "-cp",
        `${out}/classes:${out}/test-classes:${GSON}`,
        "dev.orbit.sdk.TestMain",
      ]);
      assert.ok(test.ok, `the Java unit tests failed:\n${test.text}`);
      assert.match(test.text, /^\d+ passed, 0 failed$/m, test.text);
    } finally {
      await Deno.remove(out, { recursive: true }).catch(() => {});
    }
  },
});
