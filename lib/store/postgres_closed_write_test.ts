/**
 * postgres.js 3.4.9 writes to a connection that closed under a buffered write (vendor/postgres,
 * PATCHES.md): an uncaught TypeError from its `nextWrite`, after which the client never flushes a
 * small write on that connection again. A 30-minute `db-cut-storm` run in standby mode ended with
 * both servers hung that way (issue 36). The trigger used here is deterministic: a transaction
 * whose backend is terminated while a statement runs; postgres.js then sends its own ROLLBACK on
 * the dead connection.
 */
import assert from "node:assert/strict";
import { sharedPostgres } from "../../tests/support/pg.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** Runs the trigger in a process of its own, with `postgres` from `specifier`. */
async function trigger(url: string, specifier: string): Promise<Deno.CommandOutput> {
  const script = `
    const { default: postgres } = await import(${JSON.stringify(specifier)});
    const url = ${JSON.stringify(url)};
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    const killer = postgres(url, { max: 1, onnotice: () => {} });
    let pid = null;
    const tx = sql.begin(async (t) => {
      const [row] = await t\`select pg_backend_pid() as pid\`;
      pid = row.pid;
      await t\`select pg_sleep(5)\`;
    });
    while (pid === null) await new Promise((r) => setTimeout(r, 10));
    await killer\`select pg_terminate_backend(\${pid})\`;
    console.log("tx " + await tx.then(() => "resolved", (e) => "rejected " + e.code));
    // The same client goes on: its next statement is answered.
    const [x] = await sql\`select 41 + 1 as n\`;
    console.log("next " + x.n);
    await sql.end();
    await killer.end();
  `;
  return await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--no-lock", "--ext=js", script],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
}

Deno.test({
  name:
    "postgres: a transaction whose connection dies rejects CONNECTION_CLOSED and the client goes on (no uncaught write on the closed socket)",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const url = await (await sharedPostgres()).createDatabase();
    const out = await trigger(url, "postgres");
    const stdout = new TextDecoder().decode(out.stdout);
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.match(stdout, /^tx rejected CONNECTION_CLOSED$/m);
    assert.match(stdout, /^next 42$/m);
    assert.doesNotMatch(stderr, /reading 'write'/);
  },
});
