/**
 * The server's V8 flags (`--max-semi-space-size=2`: see "Many waiting executions" in the
 * README) are the same in every documented way of running it, and this Deno accepts them and
 * caps the young generation with them.
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

Deno.test("this Deno accepts the server's V8 flags and caps the young generation at 4 MB", async () => {
  const script = `
    import v8 from "node:v8";
    const keep = [];
    for (let i = 0; i < 200000; i++) { keep.push({ i, s: "x" + i }); if (keep.length > 1000) keep.shift(); }
    const s = v8.getHeapSpaceStatistics().find((x) => x.space_name === "new_space");
    console.log(JSON.stringify(s.space_size));`;
  const measure = async (flags: string[]) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", ...flags, script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    return Number(new TextDecoder().decode(out.stdout).trim());
  };
  const capped = await measure([SERVER_V8_FLAGS]);
  const uncapped = await measure([]);
  assert.ok(capped <= 4 * 1024 * 1024, `new space ${capped} bytes with ${SERVER_V8_FLAGS}`);
  assert.ok(uncapped > capped, `new space ${uncapped} bytes without the flag, ${capped} with it`);
});
