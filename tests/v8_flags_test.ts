/**
 * The server's V8 flags (`--max-semi-space-size=8,--heap-growing-percent=50`: see "Many waiting
 * executions" in docs/performance-log.md) are the same in every documented way of running it, and this Deno
 * accepts them: the young generation is capped and the old one grows less under churn.
 */
import assert from "node:assert/strict";
import { SERVER_V8_FLAGS } from "./support/server.ts";

const ROOT = new URL("../", import.meta.url);
const read = (path: string) => Deno.readTextFile(new URL(path, ROOT));

/** The arguments before `main.ts` of a command given as one string or as a JSON array. */
function flagsBeforeMain(command: string[]): string[] {
  const at = command.indexOf("main.ts");
  assert.ok(at > 0, `no main.ts in ${JSON.stringify(command)}`);
  return command.slice(0, at);
}

Deno.test("deno task start and deno task compile pass the server's V8 flags", async () => {
  const tasks = JSON.parse(await read("deno.json")).tasks as Record<string, string>;
  for (const name of ["start", "compile"]) {
    const flags = flagsBeforeMain(tasks[name]!.split(" "));
    assert.ok(flags.includes(SERVER_V8_FLAGS), `${name}: ${tasks[name]}`);
  }
});

Deno.test("the Dockerfile's CMD and both Kubernetes manifests pass the server's V8 flags", async () => {
  const dockerfile = await read("Dockerfile");
  const cmd = /^CMD (\[.*\])$/m.exec(dockerfile);
  assert.ok(cmd, "the Dockerfile has an exec-form CMD");
  assert.ok(flagsBeforeMain(JSON.parse(cmd[1]!)).includes(SERVER_V8_FLAGS), cmd[1]);

  for (const manifest of ["statefulset.yaml", "statefulset-shared.yaml"]) {
    const text = await read(`deploy/kubernetes/${manifest}`);
    const args = /args: \[([^\]]*)\]/.exec(text);
    assert.ok(args, `${manifest} has the container's args`);
    const list = JSON.parse(`[${args[1]!.replace(/,\s*$/, "")}]`) as string[];
    assert.ok(flagsBeforeMain(list).includes(SERVER_V8_FLAGS), `${manifest}: ${args[1]}`);
  }
});

/** Runs `script` with `deno eval` and the given flags; its last stdout line as a number. */
async function evalNumber(flags: string[], script: string): Promise<number> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", ...flags, script],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return Number(new TextDecoder().decode(out.stdout).trim());
}

Deno.test("this Deno accepts the server's V8 flags and caps the young generation at 16 MB", async () => {
  const script = `
    import v8 from "node:v8";
    const keep = new Array(100000);
    for (let i = 0; i < 2000000; i++) keep[i % keep.length] = { i, s: "x" + i };
    const s = v8.getHeapSpaceStatistics().find((x) => x.space_name === "new_space");
    console.log(JSON.stringify(s.space_size));`;
  const capped = await evalNumber([SERVER_V8_FLAGS], script);
  const uncapped = await evalNumber([], script);
  assert.ok(capped <= 16 * 1024 * 1024, `new space ${capped} bytes with ${SERVER_V8_FLAGS}`);
  assert.ok(uncapped > capped, `new space ${uncapped} bytes without the flag, ${capped} with it`);
});

Deno.test("with the server's V8 flags the old generation grows to less than half as much under churn", async () => {
  // 150,000 objects stay alive; 3 million more live a while (100,000 at a time), long enough
  // to survive two scavenges of 8 MB semi-spaces into the old generation, where they become
  // garbage.
  const script = `
    import v8 from "node:v8";
    const live = [];
    for (let i = 0; i < 150000; i++) live.push({ i, s: "live-" + i, a: [i, i + 1] });
    const ring = new Array(100000);
    let peak = 0;
    for (let i = 0; i < 3000000; i++) {
      ring[i % ring.length] = { i, s: "x" + i, a: [i, i * 2, i * 3] };
      if (i % 5000 === 0) {
        const o = v8.getHeapSpaceStatistics().find((x) => x.space_name === "old_space");
        peak = Math.max(peak, o.space_size);
      }
    }
    console.log(String(live.length > 0 ? peak : 0));`;
  const withFlags = await evalNumber([SERVER_V8_FLAGS], script);
  const semiSpaceOnly = await evalNumber(["--v8-flags=--max-semi-space-size=8"], script);
  // Measured: 73 MB against 176 MB.
  assert.ok(
    withFlags < semiSpaceOnly / 2,
    `old space peaked at ${withFlags} bytes with ${SERVER_V8_FLAGS}, ${semiSpaceOnly} without --heap-growing-percent`,
  );
});
