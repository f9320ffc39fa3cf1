/**
 * `deno task chaos`: a chaos run against a fresh ORBIT deployment (see chaos/run.ts and the
 * README's "Chaos suite").
 *
 *   deno task chaos [--mode single-sqlite|single-pg|standby|shared] [--seconds 60] [--seed N]
 *                   [--servers N] [--workers N] [--python-workers N] [--clients N]
 *                   [--db postgres://…] [--keep]
 *                   [--faults kind,kind,…] [--json FILE]
 *
 * Exits 1 when the checker finds a violation (each is printed with its execution's events and
 * the faults around it), 2 on a usage error.
 */
import { type Mode, MODES } from "./deployment.ts";
import { FAULT_KINDS, type FaultKind } from "./faults.ts";
import { runChaos } from "./run.ts";

const args = Deno.args;
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const usage = (msg: string): never => {
  console.error(`chaos: ${msg}`);
  Deno.exit(2);
};

const mode = (flag("--mode") ?? "single-sqlite") as Mode;
if (!MODES.includes(mode)) usage(`--mode must be one of ${MODES.join(", ")}`);
const num = (name: string) => {
  const v = flag(name);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) usage(`${name} must be a whole number`);
  return n;
};
const faults = flag("--faults")?.split(",").map((s) => s.trim()) as FaultKind[] | undefined;
for (const f of faults ?? []) {
  if (!FAULT_KINDS.includes(f)) usage(`unknown fault ${f}; kinds: ${FAULT_KINDS.join(", ")}`);
}
const db = flag("--db");
if (db && !/^postgres(ql)?:\/\//.test(db)) usage("--db must be a postgres:// URL");
if (db && mode === "single-sqlite") usage("--db is for the PostgreSQL modes");

const seconds = num("--seconds") ?? 60;
const seed = num("--seed");
const servers = num("--servers");
const workers = num("--workers");
const pythonWorkers = num("--python-workers");
const clients = num("--clients");
const report = await runChaos({
  mode,
  seconds,
  ...(seed !== undefined ? { seed } : {}),
  ...(servers !== undefined ? { servers } : {}),
  ...(workers !== undefined ? { workers } : {}),
  ...(pythonWorkers !== undefined ? { pythonWorkers } : {}),
  ...(clients !== undefined ? { clients } : {}),
  ...(db ? { db } : {}),
  ...(faults ? { faults } : {}),
  keep: args.includes("--keep"),
});
const json = flag("--json");
if (json) {
  const { details: _d, ...rest } = report;
  await Deno.writeTextFile(json, JSON.stringify(rest, null, 2));
}
Deno.exit(report.violations.length > 0 ? 1 : 0);
