/**
 * The seeded fault scheduler: until its end time it waits a random 1–3 s, picks a fault kind
 * allowed in the mode, applies it, waits for the system to serve again (the fault's recovery
 * time), and records it. The same seed picks the same kinds and targets in the same order
 * (when they happen still depends on how fast the machine recovers).
 */
import postgres from "postgres";
import type { FaultRecord } from "./checker.ts";
import { type Deployment, NODE_TIMEOUT_S, SESSION_TIMEOUT_S } from "./deployment.ts";
import type { FaultProxy } from "./fault_proxy.ts";
import { type Rng, rng } from "./rng.ts";
import type { PgServer } from "../tests/support/pg.ts";

export const FAULT_KINDS = [
  "server-kill",
  "worker-kill",
  "both-kill",
  "server-pause",
  "worker-pause",
  "server-term",
  "worker-link-drop",
  "worker-link-blackhole",
  "worker-link-delay",
  "pg-terminate",
  "pg-restart-fast",
  "pg-restart-immediate",
  "db-drop",
  "db-blackhole",
  "db-delay",
  "db-cut-storm",
] as const;
export type FaultKind = typeof FAULT_KINDS[number];

/** Faults that need PostgreSQL (and, for restarts, one this process started). */
const PG_ONLY: ReadonlySet<FaultKind> = new Set([
  "pg-terminate",
  "pg-restart-fast",
  "pg-restart-immediate",
  "db-drop",
  "db-blackhole",
  "db-delay",
  "db-cut-storm",
]);

/**
 * Not one fault but a condition of the whole window: every database connection of the servers
 * is cut every 0.5–1.5 s while the load runs (a proxy, pgbouncer or an idle-connection killer
 * gone wrong). It runs beside the other kinds, not in their turn.
 */
export const STORM: FaultKind = "db-cut-storm";

/** What an attached run may do: its own workers and their link, nothing of the deployment's. */
export const ATTACH_FAULTS: readonly FaultKind[] = FAULT_KINDS.filter((k) =>
  k.startsWith("worker-")
);

export function faultsFor(mode: string, ownPostgres: boolean): FaultKind[] {
  if (mode === "attach") return [...ATTACH_FAULTS];
  return FAULT_KINDS.filter((k) => {
    if (mode === "single-sqlite" && PG_ONLY.has(k)) return false;
    if (!ownPostgres && (k === "pg-restart-fast" || k === "pg-restart-immediate")) return false;
    return true;
  });
}

export interface FaultTargets {
  deployment: Deployment;
  /** Fault proxy between the servers and PostgreSQL (PostgreSQL modes). */
  dbLink: FaultProxy | null;
  /** Direct URL of the run's database, for pg_terminate_backend. */
  directDb: string | null;
  /** PostgreSQL this process started (restart faults), or null. */
  pg: PgServer | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** pg_ctl of the installed PostgreSQL (the harness's lookup order). */
async function pgCtl(): Promise<string> {
  try {
    const out = await new Deno.Command("pg_config", { args: ["--bindir"], stderr: "null" })
      .output();
    const dir = new TextDecoder().decode(out.stdout).trim();
    await Deno.stat(`${dir}/pg_ctl`);
    return `${dir}/pg_ctl`;
  } catch { /* next */ }
  const versions: string[] = [];
  for await (const e of Deno.readDir("/usr/lib/postgresql")) versions.push(e.name);
  versions.sort((a, b) => Number(b) - Number(a));
  return `/usr/lib/postgresql/${versions[0]}/bin/pg_ctl`;
}

export class FaultScheduler {
  readonly faults: FaultRecord[] = [];
  readonly counts: Record<string, number> = {};
  #stopping = false;
  #done: Promise<void> | null = null;
  /** Faults of the turn-taking loop applied so far (the storm's cuts are not among them). */
  #applied = 0;

  constructor(
    readonly t: FaultTargets,
    readonly rng: Rng,
    readonly kinds: FaultKind[],
    readonly log: (line: string) => void,
    /** Apply the kinds in their order (cycling) instead of at random (the CI profile). */
    readonly inOrder = false,
  ) {}

  start(untilMs: number): void {
    const storm = this.kinds.includes(STORM) && this.t.dbLink !== null;
    // The storm's timings come from their own sequence, so the other kinds stay the seed's.
    const stormRng = storm ? rng(Math.floor(this.rng.next() * 2 ** 32)) : null;
    const kinds = this.kinds.filter((k) => k !== STORM);
    this.#done = Promise.all([
      this.#loop(untilMs, kinds),
      stormRng ? this.#storm(untilMs, stormRng) : Promise.resolve(),
    ]).then(() => {});
  }

  /** `db-cut-storm`: cuts every database connection every 0.5–1.5 s until the window ends. */
  async #storm(untilMs: number, random: Rng): Promise<void> {
    while (!this.#stopping && Date.now() < untilMs) {
      const end = Date.now() + random.int(500, 1500);
      while (!this.#stopping && Date.now() < end) await sleep(Math.min(100, end - Date.now()));
      if (this.#stopping || Date.now() >= untilMs) break;
      const at = Date.now();
      const cut = this.t.dbLink!.drop();
      this.faults.push({
        kind: STORM,
        target: `${cut} connections`,
        at_ms: at,
        end_ms: at,
        recovery_ms: null,
      });
      this.counts[STORM] = (this.counts[STORM] ?? 0) + 1;
    }
    this.log(`fault ${STORM}: ${this.counts[STORM] ?? 0} cuts`);
  }

  /** Stops after the fault in progress, then heals every link and resumes every process. */
  async stop(): Promise<void> {
    this.#stopping = true;
    await this.#done;
    await this.heal();
  }

  async heal(): Promise<void> {
    const d = this.t.deployment;
    this.t.dbLink?.heal();
    d.workerLink.heal();
    for (const n of d.nodes) {
      if (n.paused) await d.signalNode(n, "SIGCONT");
      if (!n.proc) await this.#restartNode(n);
    }
    for (const w of d.workers) {
      if (w.paused) await d.signalWorker(w, "SIGCONT");
      if (!w.child) d.startWorker(w);
    }
  }

  async #loop(untilMs: number, kinds: FaultKind[]): Promise<void> {
    if (kinds.length === 0) return;
    while (!this.#stopping && Date.now() < untilMs) {
      const wait = this.rng.int(1000, 3000);
      const end = Date.now() + wait;
      while (!this.#stopping && Date.now() < end) await sleep(Math.min(200, end - Date.now()));
      if (this.#stopping || Date.now() >= untilMs) break;
      const kind = this.inOrder ? kinds[this.#applied++ % kinds.length]! : this.rng.pick(kinds);
      const at = Date.now();
      let target = "";
      try {
        target = await this.#apply(kind);
      } catch (e) {
        target += ` (fault failed: ${(e as Error).message.split("\n")[0]})`;
      }
      const applied = Date.now();
      // Worker-only faults never stop the servers: their cost shows as the driver's stall.
      const recovery = kind.startsWith("worker-") ? null : await this.#recovery(at);
      this.faults.push({ kind, target, at_ms: at, end_ms: applied, recovery_ms: recovery });
      this.counts[kind] = (this.counts[kind] ?? 0) + 1;
      this.log(
        `fault ${kind} ${target}: ${applied - at} ms` +
          (recovery !== null ? `, serving again ${recovery} ms after it began` : ""),
      );
    }
  }

  /** From the fault's start until the entry answers ready (null: never stopped, or > 120 s). */
  async #recovery(at: number): Promise<number | null> {
    const end = Date.now() + 120_000;
    while (Date.now() < end) {
      if (await this.t.deployment.ready()) return Date.now() - at;
      await sleep(100);
    }
    return null;
  }

  async #restartNode(n: Deployment["nodes"][number]): Promise<void> {
    // A start can be refused while the old heartbeat is live (shared) or fail on a busy
    // machine: try again, a bounded number of times.
    for (let i = 1;; i++) {
      try {
        await this.t.deployment.startNode(n);
        return;
      } catch (e) {
        if (i === 5) throw e;
        await sleep(1000 * i);
      }
    }
  }

  async #apply(kind: FaultKind): Promise<string> {
    const d = this.t.deployment;
    const live = d.nodes.filter((n) => n.proc);
    const node = this.rng.pick(live.length > 0 ? live : d.nodes);
    const worker = this.rng.pick(d.workers);
    switch (kind) {
      case "server-kill":
      case "server-term": {
        await d.signalNode(node, kind === "server-kill" ? "SIGKILL" : "SIGTERM");
        await sleep(this.rng.int(0, 1500));
        await this.#restartNode(node);
        return node.id;
      }
      case "worker-kill":
        await d.signalWorker(worker, "SIGKILL");
        await sleep(this.rng.int(0, 1500));
        d.startWorker(worker);
        return worker.id;
      case "both-kill": {
        await Promise.all([d.signalNode(node, "SIGKILL"), d.signalWorker(worker, "SIGKILL")]);
        await sleep(this.rng.int(0, 1500));
        d.startWorker(worker);
        await this.#restartNode(node);
        return `${node.id}+${worker.id}`;
      }
      case "server-pause": {
        if (!node.proc) return `${node.id} (down)`;
        const ms = (d.clustered ? NODE_TIMEOUT_S : SESSION_TIMEOUT_S) * 1000 +
          this.rng.int(1000, 3000);
        await d.signalNode(node, "SIGSTOP");
        await sleep(ms);
        await d.signalNode(node, "SIGCONT");
        return `${node.id} for ${ms} ms`;
      }
      case "worker-pause": {
        const ms = SESSION_TIMEOUT_S * 1000 + this.rng.int(1000, 3000);
        await d.signalWorker(worker, "SIGSTOP");
        await sleep(ms);
        await d.signalWorker(worker, "SIGCONT");
        return `${worker.id} for ${ms} ms`;
      }
      case "worker-link-drop":
        return `${d.workerLink.drop()} connections`;
      case "worker-link-blackhole":
      case "db-blackhole": {
        const link = kind === "db-blackhole" ? this.t.dbLink! : d.workerLink;
        const ms = this.rng.int(500, (NODE_TIMEOUT_S + 2) * 1000);
        link.blackhole();
        await sleep(ms);
        link.heal();
        return `for ${ms} ms`;
      }
      case "worker-link-delay":
      case "db-delay": {
        const link = kind === "db-delay" ? this.t.dbLink! : d.workerLink;
        const lag = this.rng.int(20, 400);
        const ms = this.rng.int(1000, 5000);
        link.delay(lag);
        await sleep(ms);
        link.heal();
        return `${lag} ms per chunk for ${ms} ms`;
      }
      case "db-cut-storm": // runs beside the loop (#storm), never in its turn
      case "db-drop":
        return `${this.t.dbLink!.drop()} connections`;
      case "pg-terminate": {
        const sql = postgres(this.t.directDb!, { max: 1, onnotice: () => {} });
        try {
          const rows = await sql.unsafe(
            `SELECT pid, application_name FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()`,
          );
          if (rows.length === 0) return "no connection";
          const victim = this.rng.pick(rows);
          await sql.unsafe(`SELECT pg_terminate_backend($1)`, [victim.pid]);
          return `backend ${victim.pid} (${victim.application_name || "?"})`;
        } finally {
          await sql.end({ timeout: 5 });
        }
      }
      case "pg-restart-fast":
        await this.t.pg!.restart();
        return "fast";
      case "pg-restart-immediate": {
        const pg = this.t.pg!;
        const ctl = await pgCtl();
        const args = ["stop", "-D", `${pg.dir}/data`, "-m", "immediate", "-w", "-t", "30"];
        await new Deno.Command(Deno.uid() === 0 ? "runuser" : ctl, {
          args: Deno.uid() === 0 ? ["-u", "postgres", "--", ctl, ...args] : args,
          stdin: "null",
          stdout: "null",
          stderr: "null",
        }).output();
        await pg.restart();
        return "immediate";
      }
    }
  }
}
