/**
 * postgres.js writing to a connection that closed under it (an uncaught TypeError from its
 * `nextWrite`) ended both standby servers 90 s into a 30-minute `db-cut-storm` run. The server
 * now goes on through that one error (guardPostgresWriteRace) and still ends on any other.
 */
import assert from "node:assert/strict";
import { isPostgresWriteRace } from "./postgres.ts";

const RACE_STACK = `TypeError: Cannot read properties of null (reading 'write')
    at Immediate.nextWrite (file:///root/.cache/deno/npm/registry.npmjs.org/postgres/3.4.9/src/connection.js:255:22)
    at Immediate.callback (ext:deno_node/internal/timers.mjs:4:3069)`;

function raceError(): TypeError {
  const e = new TypeError("Cannot read properties of null (reading 'write')");
  e.stack = RACE_STACK;
  return e;
}

Deno.test("isPostgresWriteRace knows postgres.js's write on a closed connection, and nothing else", () => {
  assert.equal(isPostgresWriteRace(raceError()), true);
  assert.equal(
    isPostgresWriteRace(new TypeError("Cannot read properties of null (reading 'write')")),
    false,
  );
  const other = new TypeError("Cannot read properties of null (reading 'x')");
  other.stack = RACE_STACK.replace("'write'", "'x'");
  assert.equal(isPostgresWriteRace(other), false);
  assert.equal(isPostgresWriteRace(new Error("write CONNECTION_CLOSED")), false);
  assert.equal(isPostgresWriteRace(null), false);
});

async function runGuarded(throwWhat: "race" | "other"): Promise<Deno.CommandOutput> {
  const here = new URL(".", import.meta.url).pathname;
  const script = `
    import { guardPostgresWriteRace } from "${here}postgres.ts";
    guardPostgresWriteRace();
    const e = new TypeError(${
    JSON.stringify(
      throwWhat === "race" ? "Cannot read properties of null (reading 'write')" : "boom",
    )
  });
    e.stack = ${JSON.stringify(RACE_STACK)};
    setTimeout(() => { throw e; }, 0);
    setTimeout(() => console.log("still running"), 100);
  `;
  return await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    cwd: `${here}../..`,
    stdout: "piped",
    stderr: "piped",
  }).output();
}

Deno.test("a guarded process goes on through the race and still ends on any other uncaught error", async () => {
  const race = await runGuarded("race");
  const err = new TextDecoder().decode(race.stderr);
  assert.equal(race.code, 0, err);
  assert.match(new TextDecoder().decode(race.stdout), /still running/);
  const other = await runGuarded("other");
  assert.notEqual(other.code, 0);
  assert.doesNotMatch(new TextDecoder().decode(other.stdout), /still running/);
});
