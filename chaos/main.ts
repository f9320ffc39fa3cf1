/**
 * `deno task chaos`: a chaos run against a fresh ORBIT deployment (see chaos/run.ts and the
 * docs/chaos.md).
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
import { parseArgs } from "node:util";
import { type Mode, MODES } from "./deployment.ts";
import { ATTACH_FAULTS, FAULT_KINDS, type FaultKind } from "./faults.ts";
import { runChaos } from "./run.ts";

const USAGE = `usage:
  deno task chaos [--mode single-sqlite|single-pg|standby|shared] [--seconds 60] [--seed N]
                  [--servers N] [--workers N] [--python-workers N] [--clients N]
                  [--db postgres://…] [--keep] [--faults kind,kind,…] [--json FILE]
                  [--cache-executions N]
  deno task chaos --attach http://host:port [--token T] [--db postgres://…|FILE.db]
                  [--seconds 60] [--seed N] [--workers N] [--python-workers N] [--clients N]
                  [--faults worker-kind,…] [--keep] [--json FILE]`;
const text = { type: "string" } as const;
/** Every option: anything else (a misspelt one, a stray word) is refused, not ignored. */
let values;
try {
  ({ values } = parseArgs({
    args: Deno.args,
    strict: true,
    options: {
      mode: text,
      seconds: text,
      seed: text,
      servers: text,
      workers: text,
      "python-workers": text,
      clients: text,
      db: text,
      keep: { type: "boolean" },
      faults: text,
      json: text,
      "cache-executions": text,
      attach: text,
      token: text,
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (e) {
  const { code, message } = e as { code?: string; message: string };
  const named = /'([^' ]+)/.exec(message)?.[1] ?? message;
  console.error(
    `chaos: ${
      code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE"
        ? `${named} needs a value`
        : `unknown argument ${named}`
    }\n${USAGE}`,
  );
  Deno.exit(2);
}
if (values.help) {
  console.log(USAGE);
  Deno.exit(0);
}
type Option = Exclude<keyof typeof values, "keep" | "help">;
const flag = (name: `--${Option}`) => values[name.slice(2) as Option];
const usage = (msg: string): never => {
  console.error(`chaos: ${msg}`);
  Deno.exit(2);
};

const attach = flag("--attach");
if (attach !== undefined) {
  if (!/^https?:\/\/[^/]+\/?$/.test(attach)) usage("--attach must be a URL like http://host:port");
  for (const f of ["--mode", "--servers"] as const) {
    if (flag(f) !== undefined) usage(`${f} is not for --attach`);
  }
}
const mode = attach !== undefined ? "attach" : (flag("--mode") ?? "single-sqlite") as Mode;
if (mode !== "attach" && !MODES.includes(mode)) usage(`--mode must be one of ${MODES.join(", ")}`);
const token = flag("--token") ?? Deno.env.get("ORBIT_TOKEN");
if (flag("--token") !== undefined && mode !== "attach") usage("--token is for --attach");
const num = (name: `--${Option}`) => {
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
  keep: values.keep === true,
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
