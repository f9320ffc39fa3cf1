/**
 * Runs the Python SDK's unit tests (`python3 -m unittest discover` on sdk/python/tests, the
 * standard library only) as part of `deno task test`, so CI runs them. Fails when they fail,
 * with their output in the message.
 */
import assert from "node:assert/strict";

const DIR = new URL(".", import.meta.url).pathname;

Deno.test("Python SDK: the unittest suite passes", async () => {
  const out = await new Deno.Command("python3", {
    args: ["-W", "ignore::ResourceWarning", "-m", "unittest", "discover", "-s", "tests", "-t", "."],
    cwd: DIR,
    env: { PYTHONDONTWRITEBYTECODE: "1", PYTHONUNBUFFERED: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, `python3 -m unittest failed:\n${text}`);
  assert.match(text, /\nOK\b/, text);
  const ran = Number(text.match(/Ran (\d+) tests?/)?.[1] ?? 0);
  assert.ok(ran >= 10, `only ${ran} Python tests ran:\n${text}`);
});
