/**
 * bench/capped.ts (`deno task bench:capped`, issue 39's capped table) on made-up rounds: the
 * ratios to the round's own single server, the targets counted per round, the CPU ranges, and the
 * bench's result line read from its output.
 */
import assert from "node:assert/strict";
import {
  figuresOf,
  machineRatio,
  ratio,
  report,
  type Round,
  type RunFigures,
} from "../bench/capped.ts";

function run(orders: number, machine = 5, extra: Partial<RunFigures> = {}): RunFigures {
  return {
    orders_per_s: orders,
    p99_ms: 500,
    server_cpu_ms_per_order: 2,
    machine_cpu_ms_per_order: machine,
    postgres_cpu_ms_per_order: 1,
    commits_per_order: 0.5,
    forwards_per_order: 0,
    refused_takes_per_order: 0,
    ...extra,
  };
}

// Round 1 meets every target; round 2 (a slower host) none.
const met: Round = {
  single: run(100, 5),
  shared1: run(85, 5.5),
  spread2: run(160, 6),
  independent2: run(170, 5.5),
  spread3: run(220, 7.5),
  independent3: run(240, 7),
  proxy3: run(180, 7.8),
};
const missed: Round = {
  single: run(80, 6, { p99_ms: 900 }),
  shared1: run(60, 7, { refused_takes_per_order: 0.83 }),
  spread2: run(120, 9),
  independent2: run(130, 8),
  spread3: run(150, 9.5, { commits_per_order: 1.3 }),
  independent3: run(150, 9),
  proxy3: run(100, 11),
};

Deno.test("capped table: each row against the single server of its own round", () => {
  assert.equal(ratio(met, "spread3"), 2.2);
  assert.equal(ratio(missed, "spread3"), 1.875);
  assert.equal(machineRatio(met), 1.5);
  assert.ok(Math.abs(machineRatio(missed) - 9.5 / 6) < 1e-9);
});

Deno.test("capped table: the report counts each target per round and gives the ranges", () => {
  const text = report([met, missed]);
  const lines = text.split("\n");
  assert.match(
    lines[2]!,
    /^\| 1 \| 100\.0 \| 85\.0 \(0\.85\) \| 160\.0 \(1\.60\) \| 170\.0 \(1\.70\) \| 220\.0 \(2\.20\) \| 240\.0 \(2\.40\) \| 180\.0 \(1\.80\) \| 1\.50 \|$/,
  );
  assert.match(
    lines[3]!,
    /^\| 2 \| 80\.0 \| 60\.0 \(0\.75\) \| 120\.0 \(1\.50\) \| 130\.0 \(1\.63\) \| 150\.0 \(1\.88\) \| 150\.0 \(1\.88\) \| 100\.0 \(1\.25\) \| 1\.58 \|$/,
  );
  assert.ok(
    text.includes("| 1 single | 2.00 | 1.00 | 5.00–6.00 | 0.50 | 0.00 | 0.00 | 500–900 |"),
    text,
  );
  assert.ok(text.includes("| 0.00 | 0.00–0.83 | 500 |"), text);
  assert.ok(text.includes("| 3 shared (`--spread`) | 2.00 | 1.00 | 7.50–9.50 | 0.50–1.30 |"), text);
  for (
    const t of [
      "one shared server ≥ 0.85× one single server: met in 1 of 2 rounds",
      "two shared servers ≥ 1.6×: met in 1 of 2 rounds",
      "three shared servers ≥ 2.2×: met in 1 of 2 rounds",
      "≤ 1.5× a single server's: met in 1 of 2 rounds",
      "three shared servers through the proxy ≥ 1.8×: met in 1 of 2 rounds",
      "2 shared servers (`--spread`) against 2 independent single servers: 0.94, 0.92 " +
      "(the independent ones against the single server: 1.70, 1.63)",
      "3 shared servers (`--spread`) against 3 independent single servers: 0.92, 1.00 " +
      "(the independent ones against the single server: 2.40, 1.88)",
    ]
  ) assert.ok(text.includes(t), `missing: ${t}`);
});

Deno.test("capped table: the bench's result line is its last JSON line; none is an error", () => {
  const out = `postgres, 0.25 CPU: 112.7 orders/s\n  CPU per order: …\n${
    JSON.stringify([run(112.7)])
  }\n`;
  assert.equal(figuresOf(out).orders_per_s, 112.7);
  assert.throws(() => figuresOf("postgres, 0.25 CPU: 112.7 orders/s\n"), /no result line/);
  assert.throws(() => figuresOf('[{"store":"x"}]\n'), /not a bench result/);
});
