/**
 * The chaos suite's short profile (chaos/, docs/chaos.md), run by `deno task test`: each
 * mode runs its workload under a fixed cycle of faults (targets and timings from a fixed seed)
 * and the history checker must find nothing. Single on SQLite with kills; standby with kills,
 * pauses past the node timeout and a PostgreSQL restart; shared with kills and a pause; single
 * and shared with `--cache-executions 4`, so waiting executions leave memory and load again. About
 * three minutes in all; the long profile is `deno task chaos --seconds 1800`.
 *
 * The storm profiles (issue 36): every database connection of the servers cut every 0.5–1.5 s
 * (`db-cut-storm`) under eight order clients, in single-pg, standby and shared mode; every
 * history must stay whole (the checker's `history` rule among the others) and every order
 * finish, with no stall of orders over 10 s (shared mode: 30 s, see below).
 */
import assert from "node:assert/strict";
import { type ChaosOptions, runChaos } from "../chaos/run.ts";

async function profile(o: ChaosOptions & { maxStallMs?: number }): Promise<void> {
  const lines: string[] = [];
  const report = await runChaos({
    inOrder: true,
    settleSeconds: 150,
    clients: 3,
    ...o,
    log: (l) => {
      lines.push(l);
      if (Deno.env.get("ORBIT_TEST_LOGS")) console.error(l);
    },
  });
  const out = lines.join("\n");
  console.log(out.split("\n").filter((l) => !l.startsWith("    ")).slice(-6).join("\n"));
  assert.equal(report.violations.length, 0, out);
  for (const kind of o.faults ?? []) {
    assert.ok((report.faults[kind] ?? 0) >= 1, `fault ${kind} was never injected:\n${out}`);
  }
  assert.ok(report.driver.ordersDone > 0, `no order finished:\n${out}`);
  if (o.mode === "shared") {
    // The workers spread their slots over every server's own (advertised) address.
    for (const [link, n] of Object.entries(report.workerConnections)) {
      assert.ok(n > 0, `no worker connection on ${link}:\n${out}`);
    }
    assert.ok(Object.keys(report.workerConnections).length > 1, out);
  }
  assert.equal(report.driver.ordersDone, report.driver.ordersStarted, out);
  assert.ok(report.check.occurrences > 0, `no schedule occurrence:\n${out}`);
  if (o.maxStallMs !== undefined) {
    assert.ok(
      report.driver.longestStallMs <= o.maxStallMs,
      `orders stalled ${report.driver.longestStallMs} ms:\n${out}`,
    );
  }
}

const opts = { sanitizeOps: false, sanitizeResources: false };

Deno.test({
  name: "chaos short profile: single server on SQLite under kills keeps every invariant",
  ...opts,
  fn: () =>
    profile({
      mode: "single-sqlite",
      seconds: 30,
      seed: 101,
      // Waiting executions leave memory and load again on their signal, under the kills.
      cacheExecutions: 4,
      faults: ["server-kill", "worker-kill", "both-kill", "worker-pause", "server-term"],
    }),
});

Deno.test({
  name:
    "chaos short profile: standby under kills, pauses and a PostgreSQL restart keeps every invariant",
  ...opts,
  fn: () =>
    profile({
      mode: "standby",
      seconds: 35,
      seed: 202,
      faults: ["server-kill", "server-pause", "pg-restart-fast", "worker-kill", "db-drop"],
    }),
});

Deno.test({
  name: "chaos short profile: shared mode under kills and a pause keeps every invariant",
  ...opts,
  fn: () =>
    profile({
      mode: "shared",
      seconds: 35,
      seed: 303,
      cacheExecutions: 4,
      faults: ["server-kill", "server-pause", "worker-kill", "pg-terminate"],
    }),
});

// Shared mode's orders stall longer under the storm on a loaded machine (three servers, each
// losing its pools, heartbeat and notification connections at every cut: 12-29 s measured beside
// other work, 1.7-8 s on an idle machine, docs/chaos.md): its bound here is 30 s; every order
// must still finish and every invariant hold.
for (
  const [mode, seed, maxStallMs] of [
    ["single-pg", 404, 10_000],
    ["standby", 505, 10_000],
    ["shared", 606, 30_000],
  ] as const
) {
  Deno.test({
    name: `chaos short profile: ${mode} under a storm of cut database connections keeps every ` +
      "invariant and every order moving",
    ...opts,
    fn: () =>
      profile({
        mode,
        seconds: 20,
        seed,
        clients: 8,
        faults: ["db-cut-storm"],
        settleSeconds: 60,
        maxStallMs,
      }),
  });
}
