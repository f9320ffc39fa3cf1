/**
 * The example worker under bench/worker_probe.ts, started and read by bench/throughput.ts:
 * it reports its cycle (a result to the next task) on SIGUSR1.
 */
import { killOnExit } from "../tests/support/server.ts";

const probes = new Set<Deno.ChildProcess>();
killOnExit(probes);

/** The example worker under `bench/worker_probe.ts`, which reports its cycle on SIGUSR1. */
/** `ORBIT_BENCH_WORKER_CPU_PROF=DIR`: CPU profiles of the TypeScript workers (written on SIGTERM). */
export const WORKER_PROF = Deno.env.get("ORBIT_BENCH_WORKER_CPU_PROF");

export function startProbeWorker(
  server: string,
  env: Record<string, string>,
  probe = "./worker_probe.ts",
) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      ...(WORKER_PROF ? ["--cpu-prof", `--cpu-prof-dir=${WORKER_PROF}`] : []),
      new URL(probe, import.meta.url).pathname,
      "--server",
      server,
    ],
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  probes.add(child);
  const lines: string[] = [];
  const wakers = new Set<() => void>();
  const pump = (async () => {
    let buf = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
        for (const w of [...wakers]) w();
      }
    }
  })();
  const status = child.status.then(async (s) => {
    probes.delete(child);
    await pump;
    return s;
  });
  return {
    pid: child.pid,
    /** The cycle samples since the previous call. */
    async cycle(): Promise<{ n: number; p50_ms: number; p99_ms: number }> {
      const seen = lines.length;
      const got = new Promise<void>((resolve) => {
        const check = () => {
          if (lines.slice(seen).some((l) => l.startsWith('{"cycle"'))) {
            wakers.delete(check);
            resolve();
          }
        };
        wakers.add(check);
      });
      child.kill("SIGUSR1");
      await Promise.race([got, new Promise((r) => setTimeout(r, 5000))]);
      const line = lines.slice(seen).find((l) => l.startsWith('{"cycle"'));
      return line ? JSON.parse(line).cycle : { n: 0, p50_ms: NaN, p99_ms: NaN };
    },
    kill: async (signal: Deno.Signal = "SIGKILL") => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      return await status;
    },
  };
}
