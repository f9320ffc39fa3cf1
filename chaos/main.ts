/**
 * `deno task chaos`: a chaos run against a fresh ORBIT deployment (see chaos/run.ts and the
 * README's "Chaos suite").
 *
 *   deno task chaos [--mode single-sqlite|single-pg|standby|shared] [--seconds 60] [--seed N]
 *                   [--servers N] [--workers N] [--python-workers N] [--clients N]
 *                   [--db postgres://…] [--keep]
 *                   [--faults kind,kind,…] [--json FILE] [--cache-executions N]
 *   deno task chaos --attach http://host:port [--token T] [--db postgres://…|FILE.db]
 *                   [--seconds 60] [--seed N] [--workers N] [--python-workers N] [--clients N]
 *                   [--faults worker-kind,…] [--keep] [--json FILE]
 *
 * `--attach` runs against a deployment already running there (no server, no PostgreSQL started
 * here; worker and worker-link faults only); the token may come from ORBIT_TOKEN instead.
 *
 * Exits 1 when the checker finds a violation (each is printed with its execution's events and
 * the faults around it), 2 on a usage error or a run that could not go on (a refused token…).
 */
import { type Mode, MODES } from "./deployment.ts";
import { ATTACH_FAULTS, FAULT_KINDS, type FaultKind } from "./faults.ts";
import { runChaos } from "./run.ts";

const args = Deno.args;
const USAGE = `usage:
  deno task chaos [--mode single-sqlite|single-pg|standby|shared] [--seconds 60] [--seed N]
                  [--servers N] [--workers N] [--python-workers N] [--clients N]
                  [--db postgres://…] [--keep] [--faults kind,kind,…] [--json FILE]
                  [--cache-executions N]
  deno task chaos --attach http://host:port [--token T] [--db postgres://…|FILE.db]
                  [--seconds 60] [--seed N] [--workers N] [--python-workers N] [--clients N]
                  [--faults worker-kind,…] [--keep] [--json FILE]`;
if (args.includes("--help") || args.includes("-h")) {
  console.log(USAGE);
  Deno.exit(0);
}
/** Every option and whether a value follows it: anything else is refused, not ignored. */
const OPTIONS = new Map<string, boolean>([
  ["--mode", true],
  ["--seconds", true],
  ["--seed", true],
  ["--servers", true],
  ["--workers", true],
  ["--python-workers", true],
  ["--clients", true],
  ["--db", true],
  ["--keep", false],
  ["--faults", true],
  ["--json", true],
  ["--cache-executions", true],
  ["--attach", true],
  ["--token", true],
]);
for (let i = 0; i < args.length; i++) {
  const takes = OPTIONS.get(args[i]!);
  if (takes === undefined) {
    console.error(`chaos: unknown argument ${args[i]}\n${USAGE}`);
    Deno.exit(2);
  }
  if (takes) {
    if (i + 1 >= args.length) {
      console.error(`chaos: ${args[i]} needs a value\n${USAGE}`);
      Deno.exit(2);
    }
    i++;
  }
}
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const usage = (msg: string): never => {
  console.error(`chaos: ${msg}`);
  Deno.exit(2);
};

const attach = flag("--attach");
if (attach !== undefined) {
  if (!/^https?:\/\/[^/]+\/?$/.test(attach)) usage("--attach must be a URL like http://host:port");
  for (const f of ["--mode", "--servers"]) if (args.includes(f)) usage(`${f} is not for --attach`);
}
const mode = attach !== undefined ? "attach" : (flag("--mode") ?? "single-sqlite") as Mode;
if (mode !== "attach" && !MODES.includes(mode)) usage(`--mode must be one of ${MODES.join(", ")}`);
const token = flag("--token") ?? Deno.env.get("ORBIT_TOKEN");
if (args.includes("--token") && mode !== "attach") usage("--token is for --attach");
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
  if (mode === "attach" && !ATTACH_FAULTS.includes(f)) {
    usage(`--attach injects only ${ATTACH_FAULTS.join(", ")}`);
  }
}
const db = flag("--db");
if (db && mode !== "attach" && !/^postgres(ql)?:\/\//.test(db)) {
  usage("--db must be a postgres:// URL");
}
if (db && mode === "single-sqlite") usage("--db is for the PostgreSQL modes");

const seconds = num("--seconds") ?? 60;
const seed = num("--seed");
const servers = num("--servers");
const workers = num("--workers");
const pythonWorkers = num("--python-workers");
const clients = num("--clients");
const cacheExecutions = num("--cache-executions");
if (cacheExecutions !== undefined && mode === "attach") {
  usage("--cache-executions is not for --attach");
}
const report = await (runChaos({
  mode,
  ...(attach !== undefined ? { attach } : {}),
  ...(token !== undefined && mode === "attach" ? { token } : {}),
  seconds,
  ...(seed !== undefined ? { seed } : {}),
  ...(servers !== undefined ? { servers } : {}),
  ...(workers !== undefined ? { workers } : {}),
  ...(pythonWorkers !== undefined ? { pythonWorkers } : {}),
  ...(clients !== undefined ? { clients } : {}),
  ...(cacheExecutions !== undefined ? { cacheExecutions } : {}),
  ...(db ? { db } : {}),
  ...(faults ? { faults } : {}),
  keep: args.includes("--keep"),
}).catch((e) => {
  // A run that cannot start (a refused token, a definition that differs there…): no stack.
  console.error(`chaos: ${(e as Error).message}`);
  Deno.exit(2);
}));
const json = flag("--json");
if (json) {
  const { details: _d, ...rest } = report;
  await Deno.writeTextFile(json, JSON.stringify(rest, null, 2));
}
Deno.exit(report.violations.length > 0 ? 1 : 0);
