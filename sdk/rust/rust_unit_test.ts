/**
 * Runs the Rust SDK's own checks as part of `deno task test`, so CI runs them: `cargo fmt
 * --check` finds nothing (where rustfmt is installed) and `cargo test` passes (offline, against
 * Debian's vendored serde crates). `cargo clippy -D warnings` runs too with ORBIT_RUST_CLIPPY=1:
 * it compiles every dependency again in check mode (about 17 s of CPU), too slow for every run
 * of the suite. Skipped, loudly, where cargo or the crates are not installed; CI installs the
 * crates (.ci/run).
 */
import assert from "node:assert/strict";
import { cargoCommand, rustMissing } from "../../tests/conformance/sdks.ts";

const DIR = new URL(".", import.meta.url).pathname;

const missing = await rustMissing();
if (missing) {
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Rust SDK's unit tests: ${missing}\n${"!".repeat(78)}\n`,
  );
}

async function cargo(args: string[]): Promise<{ ok: boolean; text: string }> {
  const { cargo, env } = (await cargoCommand())!;
  const out = await new Deno.Command(cargo, {
    args,
    cwd: DIR,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { ok: out.success, text: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

/** Whether a cargo subcommand (fmt, clippy) is installed. */
async function has(sub: string): Promise<boolean> {
  return (await cargo([sub, "--version"])).ok;
}

Deno.test({
  name: "Rust SDK: cargo fmt and the cargo test suite pass (and clippy, with ORBIT_RUST_CLIPPY=1)",
  ignore: missing !== null,
  fn: async () => {
    if (await has("fmt")) {
      const fmt = await cargo(["fmt", "--check"]);
      assert.ok(fmt.ok, `cargo fmt would change:\n${fmt.text}`);
    } else {
      console.warn("!!! cargo fmt is not installed: not checked");
    }
    if (Deno.env.get("ORBIT_RUST_CLIPPY") !== "1") {
      // opt-in: see above
    } else if (await has("clippy")) {
      const clippy = await cargo(["clippy", "--offline", "--all-targets", "--", "-D", "warnings"]);
      assert.ok(clippy.ok, `cargo clippy found:\n${clippy.text}`);
    } else {
      console.warn("!!! cargo clippy is not installed: not checked");
    }
    const test = await cargo(["test", "--offline"]);
    assert.ok(test.ok, `cargo test failed:\n${test.text}`);
    assert.doesNotMatch(test.text, /test result: FAILED/, test.text);
    assert.match(test.text, /test result: ok\. \d+ passed/, test.text);
  },
});
