import assert from "node:assert/strict";
import { consoleLogger, GATHER_MS } from "./logger.ts";

type Call = [stream: "info" | "warn" | "error", text: string];

/** Runs `fn` with console.info/warn/error recorded instead of written. */
async function recording(
  fn: (calls: Call[], written: () => Promise<void>) => Promise<void>,
): Promise<void> {
  const calls: Call[] = [];
  const saved = { info: console.info, warn: console.warn, error: console.error };
  let wake = () => {};
  const written = () => new Promise<void>((resolve) => (wake = resolve));
  console.info = (text: string) => {
    calls.push(["info", text]);
    wake();
  };
  console.warn = (text: string) => calls.push(["warn", text]);
  console.error = (text: string) => calls.push(["error", text]);
  try {
    await fn(calls, written);
  } finally {
    Object.assign(console, saved);
  }
}

/** Past the time the logger gathers lines for. */
const gathered = () => new Promise((resolve) => setTimeout(resolve, GATHER_MS + 5));
const LINE = /^\d{4}-\d\d-\d\dT[\d:.]+Z (DEBUG|INFO|WARNING|ERROR) orbit .+$/;

Deno.test("consoleLogger: info lines are gathered and written together", async () => {
  await recording(async (calls, written) => {
    const logger = consoleLogger();
    const t0 = performance.now();
    logger.info("executing", { step: "charge", attempt: 1 });
    logger.info("executing", { step: "ship", attempt: 1 });
    logger.debug("not at info level");
    assert.equal(calls.length, 0);
    await written();
    assert.ok(performance.now() - t0 >= GATHER_MS - 1, "written before the gathering time");
    assert.equal(calls.length, 1);
    const [stream, text] = calls[0]!;
    assert.equal(stream, "info");
    const lines = text.split("\n");
    assert.equal(lines.length, 2);
    for (const l of lines) assert.match(l, LINE);
    assert.ok(lines[0]!.endsWith(' INFO orbit executing {"step":"charge","attempt":1}'));
    assert.ok(lines[1]!.endsWith(' INFO orbit executing {"step":"ship","attempt":1}'));
  });
});

Deno.test("consoleLogger: a warning or an error writes the gathered lines first, in order", async () => {
  await recording(async (calls) => {
    const logger = consoleLogger({ level: "debug", name: "w1" });
    logger.debug("one");
    logger.info("two");
    logger.warn("three", { n: 3 });
    logger.info("four");
    logger.error("five");
    assert.deepEqual(calls.map(([s, t]) => [s, t.replace(/^\S+ /gm, "")]), [
      ["info", "DEBUG w1 one\nINFO w1 two"],
      ["warn", 'WARNING w1 three {"n":3}'],
      ["info", "INFO w1 four"],
      ["error", "ERROR w1 five"],
    ]);
    await gathered(); // the cleared timer wrote nothing more
    assert.equal(calls.length, 4);
  });
});

Deno.test("consoleLogger: flush() writes at once; below the level nothing is gathered", async () => {
  await recording(async (calls) => {
    const logger = consoleLogger({ level: "warn" });
    logger.info("dropped");
    logger.flush!();
    assert.equal(calls.length, 0);
    const verbose = consoleLogger();
    verbose.info("stopped");
    verbose.flush!();
    assert.equal(calls.length, 1);
    assert.match(calls[0]![1], / INFO orbit stopped$/);
    await gathered();
    assert.equal(calls.length, 1);
  });
});

Deno.test("consoleLogger: an uncaught error still writes the gathered lines, and still ends the process", async () => {
  const mod = new URL("./logger.ts", import.meta.url).href;
  const script = `import { consoleLogger } from ${JSON.stringify(mod)};
consoleLogger().info("before the crash");
throw new Error("boom");`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 1);
  assert.match(new TextDecoder().decode(out.stdout), /^\S+Z INFO orbit before the crash\n$/);
  assert.match(new TextDecoder().decode(out.stderr), /Uncaught .*boom/);
});
