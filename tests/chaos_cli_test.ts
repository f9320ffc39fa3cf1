/**
 * `deno task chaos`'s command line: `--help` prints the usage and starts nothing, and an
 * argument it does not know (a misspelt option) is refused with exit code 2 instead of being
 * ignored (before, `--help` ran a 60-second chaos run with the defaults).
 */
import assert from "node:assert/strict";

const MAIN = new URL("../chaos/main.ts", import.meta.url).pathname;

async function chaos(...args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("chaos CLI: --help prints the usage and runs nothing", async () => {
  const r = await chaos("--help");
  assert.equal(r.code, 0);
  assert.match(
    r.stdout,
    /^usage:\n {2}deno task chaos \[--mode single-sqlite\|single-pg\|standby\|shared\]/,
  );
  assert.doesNotMatch(r.stdout + r.stderr, /chaos: mode=/, "no run started");
});

Deno.test("chaos CLI: an unknown argument, or an option without its value, is refused", async () => {
  const unknown = await chaos("--mode", "shared", "--second", "30");
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /^chaos: unknown argument --second\nusage:/);
  assert.doesNotMatch(unknown.stdout + unknown.stderr, /chaos: mode=/);
  const missing = await chaos("--seconds");
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /^chaos: --seconds needs a value\n/);
});
