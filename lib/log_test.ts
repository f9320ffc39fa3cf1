import assert from "node:assert/strict";
import type { LogLevel, LogRecord } from "@logtape/logtape";
import { formatText, gatheringSink } from "./log.ts";

function record(level: LogLevel, message: string): LogRecord {
  return {
    category: ["orbit_runtime", "engine"],
    level,
    message: [message],
    rawMessage: message,
    properties: {},
    timestamp: Date.now(),
  };
}

/** Resolves once `cond()` holds; fails after `ms`. */
async function until(cond: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 1));
  }
}

Deno.test("info lines are gathered for the window and written with one write", async () => {
  const writes: string[] = [];
  const { sink } = gatheringSink((r) => `${r.message[0]}\n`, (t) => writes.push(t), 30);
  const started = performance.now();
  sink(record("info", "a"));
  sink(record("debug", "b"));
  sink(record("info", "c"));
  assert.deepEqual(writes, []);
  await until(() => writes.length > 0);
  assert.ok(performance.now() - started >= 29, "written before the window ended");
  assert.deepEqual(writes, ["a\nb\nc\n"]);
  sink(record("info", "d"));
  await until(() => writes.length > 1);
  assert.deepEqual(writes, ["a\nb\nc\n", "d\n"]);
});

Deno.test("a warning writes the gathered lines and itself at once, in order", async () => {
  const writes: string[] = [];
  const { sink } = gatheringSink((r) => `${r.message[0]}\n`, (t) => writes.push(t), 20);
  sink(record("info", "a"));
  sink(record("warning", "w"));
  assert.deepEqual(writes, ["a\nw\n"]);
  sink(record("error", "e"));
  assert.deepEqual(writes, ["a\nw\n", "e\n"]);
  // The window's timer was cleared with the write: nothing is written twice.
  sink(record("info", "b"));
  await until(() => writes.length > 2);
  assert.deepEqual(writes, ["a\nw\n", "e\n", "b\n"]);
});

Deno.test("flush writes what is gathered; the timer then writes nothing more", async () => {
  const writes: string[] = [];
  const { sink, flush } = gatheringSink((r) => `${r.message[0]}\n`, (t) => writes.push(t), 10);
  flush();
  assert.deepEqual(writes, [], "nothing gathered, nothing written");
  sink(record("info", "a"));
  flush();
  assert.deepEqual(writes, ["a\n"]);
  // A later line opens a new window (its timer firing proves the old one did not write).
  sink(record("info", "b"));
  await until(() => writes.length > 1);
  assert.deepEqual(writes, ["a\n", "b\n"]);
});

Deno.test("a process's gathered lines are written when it exits or throws", async () => {
  const mod = new URL("./log.ts", import.meta.url).href;
  for (
    const [end, expect] of [
      ["Deno.exit(3);", 3],
      ["throw new Error('boom');", 1],
    ] as const
  ) {
    const code = `import { log, setupLogging } from "${mod}";
setupLogging("text", "info");
log.engine.info("execution started", { execution_id: "e-1" });
${end}`;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--ext=ts", code],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, expect, stderr);
    assert.match(stderr, /INFO orbit_runtime::engine: execution started execution_id=e-1\n/);
    if (expect === 1) assert.ok(stderr.indexOf("execution started") < stderr.indexOf("boom"));
  }
});

Deno.test("formatText writes the reference page's line shape", () => {
  const line = formatText({ ...record("info", "execution completed"), timestamp: 0 });
  assert.equal(
    line,
    "1970-01-01T00:00:00.000000Z INFO orbit_runtime::engine: execution completed\n",
  );
});
