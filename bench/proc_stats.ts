/**
 * What the benchmarks read from /proc (Linux): a process's memory, CPU and storage writes, a
 * thread's run-queue wait, the machine's and PostgreSQL's CPU, and a sampler of a main thread's
 * busy share (bench/throughput.ts).
 */

/** A process's resident memory now (VmRSS) or at its peak (VmHWM), in MB. */
export function memoryMb(pid: number, field: "VmRSS" | "VmHWM"): number {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(
      Deno.readTextFileSync(`/proc/${pid}/status`),
    );
    return m ? Math.round(Number(m[1]) / 1024) : NaN;
  } catch {
    return NaN;
  }
}

/** The fields of /proc/<path>/stat after the command name (state is [0], utime [11], stime [12]). */
export function statFields(path: string): string[] | null {
  try {
    return Deno.readTextFileSync(`/proc/${path}/stat`).split(") ")[1]!.split(" ");
  } catch {
    return null;
  }
}

/** CPU seconds (user + system) a process (or, with `tid`, one of its threads) has used. */
export function cpuSeconds(pid: number, tid?: number): number {
  const f = statFields(tid === undefined ? `${pid}` : `${pid}/task/${tid}`);
  return f ? (Number(f[11]) + Number(f[12])) / 100 : NaN;
}

/**
 * User + system CPU seconds of every PostgreSQL process on the machine (command `postgres`):
 * the harness's cluster, its backends included (a backend that exits during the run takes its
 * share with it; the servers' pools keep theirs open).
 */
export function postgresCpuSeconds(): number {
  let sum = 0;
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      if (Deno.readTextFileSync(`/proc/${e.name}/comm`).trim() !== "postgres") continue;
    } catch {
      continue;
    }
    const cpu = cpuSeconds(Number(e.name));
    if (!Number.isNaN(cpu)) sum += cpu;
  }
  return sum;
}

/**
 * User + system CPU seconds of the whole machine (`/proc/stat`): the server, the workers, the
 * clients, PostgreSQL's backends — and anything else running on it.
 */
export function machineCpuSeconds(): number {
  const cpu = Deno.readTextFileSync("/proc/stat").split("\n")[0]!.trim().split(/\s+/).map(Number);
  // user nice system idle iowait irq softirq steal
  return (cpu[1]! + cpu[2]! + cpu[3]! + cpu[6]! + cpu[7]!) / 100;
}

/** Bytes the process caused to be written to storage (`/proc/<pid>/io` write_bytes). */
export function writeBytes(pid: number): number {
  try {
    const m = /^write_bytes: (\d+)$/m.exec(Deno.readTextFileSync(`/proc/${pid}/io`));
    return m ? Number(m[1]) : NaN;
  } catch {
    return NaN;
  }
}

/** Seconds a thread waited on the run queue for a core (`/proc/.../schedstat`, second field). */
export function runQueueSeconds(pid: number, tid: number): number {
  try {
    return Number(Deno.readTextFileSync(`/proc/${pid}/task/${tid}/schedstat`).split(" ")[1]) / 1e9;
  } catch {
    return NaN;
  }
}

/**
 * Samples the state of a process's main thread every 2 ms: R (running or runnable) and D (in
 * an uninterruptible wait, a commit's fsync) count as busy, S (waiting for I/O events) as idle.
 * The stat file stays open and is read again from its start into one buffer: opening, reading
 * and decoding it anew 500 times a second was 12 % of this process's busy time (its CPU runs on
 * the same two cores as the server it measures).
 */
export function busySampler(pid: number) {
  let busy = 0;
  let total = 0;
  let file: Deno.FsFile | null = null;
  try {
    file = Deno.openSync(`/proc/${pid}/task/${pid}/stat`);
  } catch { /* gone: no samples */ }
  const buf = new Uint8Array(1024);
  const PAREN = 0x29; // ")": the state follows the command name as ") S "
  const timer = setInterval(() => {
    if (!file) return;
    let n: number | null;
    try {
      file.seekSync(0, Deno.SeekMode.Start);
      n = file.readSync(buf);
    } catch {
      return;
    }
    if (n === null) return;
    const close = buf.subarray(0, n).lastIndexOf(PAREN);
    if (close < 0 || close + 2 >= n) return;
    const state = String.fromCharCode(buf[close + 2]!);
    total++;
    if (state === "R" || state === "D") busy++;
  }, 2);
  return {
    stop: () => {
      clearInterval(timer);
      file?.close();
      return total === 0 ? NaN : busy / total;
    },
  };
}
