import assert from "node:assert/strict";
import { consoleLogger } from "./logger.ts";

/** Replaces the console methods the logger uses while `fn` runs; answers what they wrote. */
async function captured(fn: () => Promise<void> | void): Promise<string[]> {
  const out: string[] = [];
  const saved = {
    debug: console.debug,
    info: console.info,
    warn: console.warn,
    error: console.error,
  };
  for (const m of ["debug", "info", "warn", "error"] as const) {
    console[m] = (text: string) => out.push(`${m}: ${text.replace(/^\S+ /gm, "")}`);
  }
  try {
    await fn();
  } finally {
    Object.assign(console, saved);
  }
  return out;
}

Deno.test("consoleLogger writes the info lines of one burst in one console call, in order", async () => {
  const out = await captured(async () => {
    const log = consoleLogger();
    log.info("a", { n: 1 });
    log.info("b");
    log.debug("hidden");
    await new Promise((r) => setTimeout(r, 5));
  });
  assert.deepEqual(out, ['info: INFO orbit a {"n":1}\nINFO orbit b']);
});

Deno.test("consoleLogger: a warning writes the held lines first; flush writes them at once", async () => {
  const out = await captured(() => {
    const log = consoleLogger({ level: "debug", name: "w" });
    log.debug("d1");
    log.info("i1");
    log.warn("careful");
    log.info("i2");
    log.flush!();
  });
  assert.deepEqual(out, [
    "debug: DEBUG w d1",
    "info: INFO w i1",
    "warn: WARNING w careful",
    "info: INFO w i2",
  ]);
});
