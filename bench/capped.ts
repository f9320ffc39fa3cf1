/**
 * The capped table of issue 39: every ORBIT server in a CPU share of its own (bench/cgroup.ts),
 * the same load for every row (64 clients, 3 worker processes × 8 slots, the orders of
 * bench/throughput.ts), the rows alternated within each round, and each row's orders/s given as
 * a ratio to the single server of its own round: this host's speed moves by a third between
 * rounds, while the rows of one round run within a few minutes.
 *
 *   deno task bench:capped [--rounds 3] [--server-cpus 0.25] [--orders 1200] [--json FILE]
 *
 * Rows: one single server; one shared server (no proxy); two and three shared servers with
 * `--spread` (no proxy: clients and worker processes spread as a round-robin balancer would, each
 * worker process's slots on its one server);
 * two and three independent single servers, each on a database of its own with the load spread
 * the same way (no target: what that many servers reach on this host with nothing shared, the
 * ceiling of the shared rows); three shared servers behind the round-robin proxy. Each run is
 * `deno task bench` in a process of its own; a run that fails (or a host where no cgroup can be
 * made) stops the table with its output. Prints the table in Markdown, the CPU per order of each
 * row over the rounds, in how many rounds each of the targets was met, and each shared
 * row against the independent servers of its round.
 */
import { parseArgs } from "node:util";

export type RowName =
  | "single"
  | "shared1"
  | "spread2"
  | "independent2"
  | "spread3"
  | "independent3"
  | "proxy3";

export const ROWS: ReadonlyArray<{ name: RowName; title: string; args: string[] }> = [
  { name: "single", title: "1 single", args: ["--warmup", "600"] },
  {
    name: "shared1",
    title: "1 shared (no proxy)",
    args: ["--cluster", "shared", "--servers", "1", "--no-proxy", "--warmup", "600"],
  },
  {
    name: "spread2",
    title: "2 shared (`--spread`)",
    args: ["--cluster", "shared", "--servers", "2", "--spread", "--warmup", "1200"],
  },
  {
    // No target of its own (see independent3 below).
    name: "independent2",
    title: "2 independent single",
    args: ["--cluster", "independent", "--servers", "2", "--warmup", "1200"],
  },
  {
    name: "spread3",
    title: "3 shared (`--spread`)",
    args: ["--cluster", "shared", "--servers", "3", "--spread", "--warmup", "1800"],
  },
  {
    // No target of its own: three single servers, each on a database of its own with a third
    // of the load, share nothing, so what they reach is what three servers reach on this host
    // whatever the mode (the ceiling of the shared rows; docs/performance-log.md).
    name: "independent3",
    title: "3 independent single",
    args: ["--cluster", "independent", "--servers", "3", "--warmup", "1800"],
  },
  {
    name: "proxy3",
    title: "3 shared (proxy)",
    args: ["--cluster", "shared", "--servers", "3", "--warmup", "1800"],
  },
];

/** Each shared row (`--spread`) with the independent servers of the same count: its ceiling. */
const CEILINGS = [[2, "spread2", "independent2"], [3, "spread3", "independent3"]] as const;

/** The figures of one run that the table uses (a subset of bench/throughput.ts's JSON). */
export interface RunFigures {
  orders_per_s: number;
  p99_ms: number;
  server_cpu_ms_per_order: number;
  machine_cpu_ms_per_order: number;
  postgres_cpu_ms_per_order: number | null;
  commits_per_order: number | null;
  forwards_per_order?: number | null;
  refused_takes_per_order?: number | null;
}

export type Round = Record<RowName, RunFigures>;

/** The targets, each a test of one round. */
export const TARGETS: ReadonlyArray<{ text: string; met: (r: Round) => boolean }> = [
  { text: "one shared server ≥ 0.85× one single server", met: (r) => ratio(r, "shared1") >= 0.85 },
  { text: "two shared servers ≥ 1.6×", met: (r) => ratio(r, "spread2") >= 1.6 },
  { text: "three shared servers ≥ 2.2×", met: (r) => ratio(r, "spread3") >= 2.2 },
  {
    text: "the machine's CPU per order with three shared servers ≤ 1.5× a single server's",
    met: (r) => machineRatio(r) <= 1.5,
  },
  { text: "three shared servers through the proxy ≥ 1.8×", met: (r) => ratio(r, "proxy3") >= 1.8 },
];

/** Orders/s of `row` over the single server's of the same round. */
export function ratio(r: Round, row: RowName): number {
  return r[row].orders_per_s / r.single.orders_per_s;
}

/** The machine's CPU per order with three shared servers (`--spread`) over the single server's. */
export function machineRatio(r: Round): number {
  return r.spread3.machine_cpu_ms_per_order / r.single.machine_cpu_ms_per_order;
}

const fix = (x: number, d = 2) => x.toFixed(d);

function range(xs: Array<number | null | undefined>, d = 2): string {
  const v = xs.filter((x): x is number => typeof x === "number");
  if (v.length === 0) return "–";
  const lo = Math.min(...v), hi = Math.max(...v);
  return lo === hi ? fix(lo, d) : `${fix(lo, d)}–${fix(hi, d)}`;
}

/** The rounds as Markdown: orders/s and the ratio, a CPU table, and the targets met. */
export function report(rounds: Round[]): string {
  const out: string[] = [];
  out.push(
    `| Round | ${ROWS.map((r) => r.title).join(" | ")} | machine CPU, 3 shared / single |`,
    `| ----- | ${ROWS.map(() => "---").join(" | ")} | --- |`,
  );
  rounds.forEach((r, i) => {
    const cells = ROWS.map((row) =>
      row.name === "single"
        ? fix(r.single.orders_per_s, 1)
        : `${fix(r[row.name].orders_per_s, 1)} (${fix(ratio(r, row.name))})`
    );
    out.push(`| ${i + 1} | ${cells.join(" | ")} | ${fix(machineRatio(r))} |`);
  });
  out.push(
    "",
    "| Row | servers' CPU per order (ms) | PostgreSQL | whole machine | commits per order | forwards per order | refused takes per order | p99 (ms) |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  );
  for (const row of ROWS) {
    const xs = rounds.map((r) => r[row.name]);
    out.push(
      `| ${row.title} | ${range(xs.map((x) => x.server_cpu_ms_per_order))} | ${
        range(xs.map((x) => x.postgres_cpu_ms_per_order))
      } | ${range(xs.map((x) => x.machine_cpu_ms_per_order))} | ${
        range(xs.map((x) => x.commits_per_order))
      } | ${range(xs.map((x) => x.forwards_per_order))} | ${
        range(xs.map((x) => x.refused_takes_per_order))
      } | ${range(xs.map((x) => x.p99_ms), 0)} |`,
    );
  }
  out.push("");
  for (const t of TARGETS) {
    const met = rounds.filter(t.met).length;
    out.push(`- ${t.text}: met in ${met} of ${rounds.length} rounds`);
  }
  for (const [n, shared, independent] of CEILINGS) {
    out.push(
      `- ${n} shared servers (\`--spread\`) against ${n} independent single servers: ${
        rounds.map((r) => fix(r[shared].orders_per_s / r[independent].orders_per_s)).join(", ")
      } (the independent ones against the single server: ${
        rounds.map((r) => fix(ratio(r, independent))).join(", ")
      })`,
    );
  }
  return out.join("\n");
}

/** The JSON line bench/throughput.ts prints last (one result: one store). */
export function figuresOf(stdout: string): RunFigures {
  const line = stdout.split("\n").reverse().find((l) => l.startsWith("[{"));
  if (!line) throw new Error("the bench printed no result line");
  const [r] = JSON.parse(line) as RunFigures[];
  if (!r || typeof r.orders_per_s !== "number") throw new Error(`not a bench result: ${line}`);
  return r;
}

async function run(args: string[]): Promise<RunFigures> {
  const bench = new URL("./throughput.ts", import.meta.url).pathname;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", bench, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    console.error(stdout, new TextDecoder().decode(out.stderr));
    throw new Error(`deno task bench ${args.join(" ")} failed (exit ${out.code})`);
  }
  return figuresOf(stdout);
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      rounds: { type: "string", default: "3" },
      "server-cpus": { type: "string", default: "0.25" },
      orders: { type: "string", default: "1200" },
      json: { type: "string" },
    },
  });
  const rounds: Round[] = [];
  const common = [
    "--store",
    "postgres",
    "--server-cpus",
    values["server-cpus"],
    "--workers",
    "3",
    "--orders",
    values.orders,
  ];
  for (let i = 0; i < Number(values.rounds); i++) {
    const round = {} as Round;
    for (const row of ROWS) {
      const f = await run([...common, ...row.args]);
      round[row.name] = f;
      console.error(
        `round ${
          i + 1
        } ${row.title}: ${f.orders_per_s} orders/s, server CPU ${f.server_cpu_ms_per_order} ms per order (${
          new Date().toISOString().slice(11, 19)
        } UTC)`,
      );
    }
    rounds.push(round);
    if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(rounds, null, 2));
  }
  console.log(report(rounds));
}
