/**
 * Builds the Node bundle (into a temporary folder: dist/ is never written by the tests) and runs
 * `node --test node_test.mjs` on it, asserting that Node 20 passes.
 */

import assert from "node:assert/strict";

const here = new URL(".", import.meta.url).pathname;

async function run(cmd: string, args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: here,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return { code: out.code, text };
}

async function hasNode(): Promise<boolean> {
  try {
    return (await run("node", ["--version"])).code === 0;
  } catch {
    return false;
  }
}

Deno.test({
  name: "the SDK bundle runs on Node 20 (node --test node_test.mjs)",
  ignore: !(await hasNode()),
  async fn() {
    const version = (await run("node", ["--version"])).text.trim();
    assert.ok(
      Number(/^v(\d+)/.exec(version)?.[1]) >= 20,
      `Node 20 or later needed, not ${version}`,
    );
    const dir = await Deno.makeTempDir({ prefix: "orbit-sdk-node-" });
    try {
      const bundle = `${dir}/orbit-sdk.mjs`;
      const build = await run("bash", [`${here}build_node.sh`, bundle]);
      assert.equal(build.code, 0, `build_node.sh failed:\n${build.text}`);
      const source = await Deno.readTextFile(bundle);
      assert.ok(!/\bDeno\./.test(source), "the bundle uses Deno APIs");
      assert.ok(!/from\s+["'](zod|npm:)/.test(source), "zod is not inlined");

      const test = await run("node", ["--test", `${here}node_test.mjs`], {
        ORBIT_SDK_BUNDLE: bundle,
      });
      assert.equal(test.code, 0, `node --test failed:\n${test.text}`);
      assert.match(test.text, /# pass 3/);
      assert.match(test.text, /# fail 0/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
