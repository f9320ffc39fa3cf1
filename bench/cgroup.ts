/**
 * A CPU share of its own for each benchmark server (issue 39, `deno task bench --server-cpus
 * 0.25`): one cgroup per server process, capped at that many CPUs, made before any process is
 * started and removed at the end (also when the bench fails or is interrupted).
 *
 * - cgroup v2 (a unified hierarchy whose root lists `cpu` in `cgroup.controllers`): a group
 *   under the root with `cpu.max` = "<quota> <period>"; `cpu` is enabled in the root's
 *   `cgroup.subtree_control` if it is not yet.
 * - cgroup v1 (a `cpu` controller mounted at `<root>/cpu`): a group there with
 *   `cpu.cfs_period_us` and `cpu.cfs_quota_us`.
 *
 * The period is 100 ms and the quota `round(cpus × 100 ms)`: 0.25 CPU is 25 ms of CPU time in
 * every 100 ms, then the group waits (is throttled) until the next period. A server is put in
 * its group by writing its PID to the group's `cgroup.procs` right after it is spawned (before
 * it listens); the threads it starts later are in the group too. Each group's `cpu.stat` tells
 * how often the cap bit (`nr_throttled` of `nr_periods`, and for how long).
 *
 * The root is injectable (`root`), so that tests run against a temporary directory laid out as
 * a cgroup hierarchy, without root.
 */

export const DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup";
export const PERIOD_US = 100_000;
/** The kernel refuses a CFS quota below 1 ms. */
const MIN_QUOTA_US = 1_000;

export type CgroupVersion = "v1" | "v2";

/** Where CPU-capped groups can be made: the hierarchy's version and the directory to make them in. */
export interface CpuController {
  version: CgroupVersion;
  /** The parent directory of the groups (v1: `<root>/cpu`, v2: `<root>`). */
  dir: string;
}

/** Why no group could be made: the message to print, one paragraph. */
export class CgroupRefusal extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CgroupRefusal";
  }
}

/** The CFS quota in microseconds per 100 ms period for a cap of `cpus` CPUs. */
export function quotaUs(cpus: number, periodUs = PERIOD_US): number {
  if (!Number.isFinite(cpus) || cpus <= 0) {
    throw new RangeError(`--server-cpus ${cpus}: a positive number of CPUs, e.g. 0.25`);
  }
  const q = Math.round(cpus * periodUs);
  if (q < MIN_QUOTA_US) {
    throw new RangeError(
      `--server-cpus ${cpus}: below the kernel's smallest quota (${MIN_QUOTA_US / periodUs} CPU)`,
    );
  }
  return q;
}

/** What `cpu.stat` of a group says (v1: throttled_time in ns; v2: usage_usec, throttled_usec). */
export interface CpuStat {
  /** CPU time the group used, in microseconds (v2 only; v1 keeps it in cpuacct). */
  usageUs: number | null;
  nrPeriods: number;
  nrThrottled: number;
  /** Time the group spent throttled (waiting for its next period), in microseconds. */
  throttledUs: number;
}

/** Parses a `cpu.stat` file of either version. */
export function parseCpuStat(text: string): CpuStat {
  const kv = new Map<string, number>();
  for (const line of text.split("\n")) {
    const [k, v] = line.trim().split(/\s+/);
    if (k && v !== undefined && /^\d+$/.test(v)) kv.set(k, Number(v));
  }
  const throttledUs = kv.has("throttled_usec")
    ? kv.get("throttled_usec")!
    : kv.has("throttled_time")
    ? kv.get("throttled_time")! / 1000
    : 0;
  return {
    usageUs: kv.get("usage_usec") ?? null,
    nrPeriods: kv.get("nr_periods") ?? 0,
    nrThrottled: kv.get("nr_throttled") ?? 0,
    throttledUs,
  };
}

/** Parses v1 `cpuacct.usage` (nanoseconds) into microseconds. */
export function parseCpuacctUsage(text: string): number {
  const n = Number(text.trim());
  if (!Number.isFinite(n) || text.trim() === "") throw new Error(`cpuacct.usage: ${text}`);
  return n / 1000;
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/**
 * Which CPU controller the host has under `root`: v2 where `<root>/cgroup.controllers` lists
 * `cpu`, else v1 where `<root>/cpu/cpu.cfs_quota_us` exists, else null.
 */
export function detectCpuController(root = DEFAULT_CGROUP_ROOT): CpuController | null {
  try {
    const controllers = Deno.readTextFileSync(`${root}/cgroup.controllers`).trim().split(/\s+/);
    if (controllers.includes("cpu")) return { version: "v2", dir: root };
  } catch { /* not a unified hierarchy */ }
  if (isFile(`${root}/cpu/cpu.cfs_quota_us`)) return { version: "v1", dir: `${root}/cpu` };
  return null;
}

/** The refusal's paragraph: why, and what to do. */
export function refusalMessage(cpus: number, why: string): string {
  return `--server-cpus ${cpus}: cannot give each ORBIT server a CPU cap of its own, so nothing ` +
    `was started: ${why}. The bench caps each server in a cgroup of its own (cgroup v1: the ` +
    "`cpu` controller at /sys/fs/cgroup/cpu, cpu.cfs_quota_us; cgroup v2: cpu.max under " +
    "/sys/fs/cgroup) and has to be able to create and write one. Run it as root on a host " +
    "whose cpu controller is mounted writable (in a container: privileged, or with the cgroup " +
    "filesystem mounted read-write), or leave out --server-cpus to run the servers uncapped.";
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** One server's group. */
export interface CpuGroup {
  path: string;
  /** Puts a process (all its threads) in the group. */
  add(pid: number): void;
  stat(): CpuStat;
  /** The group's `cgroup.procs` lines (the PIDs in it). */
  procs(): number[];
}

/**
 * `n` CPU-capped groups, made up front. Throws a CgroupRefusal (after removing whatever it
 * made) where no group can be made.
 */
export class CpuCaps {
  readonly groups: CpuGroup[] = [];
  readonly quotaUs: number;
  private removed = false;
  private readonly onUnload = () => this.removeSync();

  private constructor(
    readonly cpus: number,
    readonly controller: CpuController,
    paths: string[],
  ) {
    this.quotaUs = quotaUs(cpus);
    for (const path of paths) {
      this.groups.push({
        path,
        add: (pid) => Deno.writeTextFileSync(`${path}/cgroup.procs`, `${pid}\n`),
        stat: () => parseCpuStat(Deno.readTextFileSync(`${path}/cpu.stat`)),
        procs: () =>
          Deno.readTextFileSync(`${path}/cgroup.procs`).split("\n").filter(Boolean).map(Number),
      });
    }
  }

  /** "cgroup v1 cpu.cfs_quota_us 25000/100000" — what the report names as the cap. */
  describe(): string {
    return this.controller.version === "v1"
      ? `cgroup v1 cpu.cfs_quota_us ${this.quotaUs} / cpu.cfs_period_us ${PERIOD_US}`
      : `cgroup v2 cpu.max "${this.quotaUs} ${PERIOD_US}"`;
  }

  static make(
    cpus: number,
    n: number,
    o: { root?: string | undefined; prefix?: string } = {},
  ): CpuCaps {
    const quota = quotaUs(cpus); // a RangeError for a cap that is no number of CPUs
    const root = o.root ?? DEFAULT_CGROUP_ROOT;
    const controller = detectCpuController(root);
    if (!controller) {
      throw new CgroupRefusal(refusalMessage(
        cpus,
        `no cpu controller under ${root} (neither ${root}/cgroup.controllers listing cpu, ` +
          `cgroup v2, nor ${root}/cpu/cpu.cfs_quota_us, cgroup v1)`,
      ));
    }
    const prefix = o.prefix ?? `orbit-bench-${Deno.pid}`;
    const made: string[] = [];
    try {
      if (controller.version === "v2") enableCpuV2(controller.dir);
      for (let i = 0; i < n; i++) {
        const path = `${controller.dir}/${prefix}-${i}`;
        Deno.mkdirSync(path);
        made.push(path);
        if (controller.version === "v1") {
          Deno.writeTextFileSync(`${path}/cpu.cfs_period_us`, `${PERIOD_US}\n`);
          Deno.writeTextFileSync(`${path}/cpu.cfs_quota_us`, `${quota}\n`);
        } else {
          Deno.writeTextFileSync(`${path}/cpu.max`, `${quota} ${PERIOD_US}\n`);
        }
      }
    } catch (e) {
      for (const p of made.reverse()) rmdirSync(p);
      const where = made.length ? made[made.length - 1] : controller.dir;
      throw new CgroupRefusal(refusalMessage(
        cpus,
        `making a cgroup ${controller.version} group in ${where} failed (${errText(e)}${
          Deno.uid() === 0 ? "" : "; this process is not root"
        })`,
      ));
    }
    const caps = new CpuCaps(cpus, controller, made);
    // Removed at exit too: Deno.exit (the harness's SIGINT/SIGTERM handler, after it SIGKILLs
    // the servers) dispatches unload; an uncaught error does not, but reaches these first (the
    // bench has killed its servers in its `finally` by then).
    for (const event of ["unload", "error", "unhandledrejection"]) {
      globalThis.addEventListener(event, caps.onUnload);
    }
    return caps;
  }

  /**
   * Removes every group (each one's processes must have exited: a group with a process in it
   * cannot be removed; a process just SIGKILLed may take a moment, so this retries for up to
   * `waitMs`). Returns the groups it could not remove.
   */
  removeSync(waitMs = 3000): string[] {
    if (this.removed) return [];
    const left: string[] = [];
    const deadline = Date.now() + waitMs;
    for (const g of this.groups) {
      while (!rmdirSync(g.path)) {
        if (Date.now() > deadline) {
          left.push(g.path);
          break;
        }
        // A short synchronous pause: this also runs in the unload handler, where no timer fires.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
      }
    }
    if (left.length === 0) {
      this.removed = true;
      for (const event of ["unload", "error", "unhandledrejection"]) {
        globalThis.removeEventListener(event, this.onUnload);
      }
    }
    return left;
  }
}

/**
 * `--server-cpus`: the groups for `n` servers, or the refusal printed and the process ended
 * (exit code 2) before anything is started.
 */
export function capServersOrExit(cpus: number, n: number): CpuCaps {
  try {
    // ORBIT_BENCH_CGROUP_ROOT: a cgroup filesystem mounted elsewhere than /sys/fs/cgroup.
    const caps = CpuCaps.make(cpus, n, { root: Deno.env.get("ORBIT_BENCH_CGROUP_ROOT") });
    console.error(`  ${n} CPU cgroup${n > 1 ? "s" : ""}: ${caps.describe()} each`);
    return caps;
  } catch (e) {
    if (!(e instanceof CgroupRefusal)) throw e;
    console.error(e.message);
    Deno.exit(2);
  }
}

/** Removes an (empty) group directory; true when it is gone. */
function rmdirSync(path: string): boolean {
  try {
    // A cgroup directory is removed with rmdir(2) even though it lists files: `remove` without
    // recursive is rmdir for a directory. A fake (test) group holds real files: remove those.
    Deno.removeSync(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return true;
    if (!isCgroupFs(path)) {
      try {
        Deno.removeSync(path, { recursive: true });
        return true;
      } catch { /* fall through */ }
    }
    return false;
  }
}

/** Whether a path is on a real cgroup filesystem (its `cgroup.procs` is not a regular file we wrote). */
function isCgroupFs(path: string): boolean {
  return path.startsWith(`${DEFAULT_CGROUP_ROOT}/`);
}

/** cgroup v2: a child group has cpu.max only where the parent's subtree_control enables cpu. */
function enableCpuV2(dir: string): void {
  const control = `${dir}/cgroup.subtree_control`;
  let enabled: string[] = [];
  try {
    enabled = Deno.readTextFileSync(control).trim().split(/\s+/);
  } catch { /* written below */ }
  if (!enabled.includes("cpu")) Deno.writeTextFileSync(control, "+cpu\n");
}

/** The cgroup lines of a process (`/proc/<pid>/cgroup`), for the log at start. */
export function processCgroups(pid: number): string {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/cgroup`).trim().split("\n")
      .filter((l) => /(^0::|[:,]cpu[,:])/.test(l)).join("; ");
  } catch {
    return "(gone)";
  }
}
