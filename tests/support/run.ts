/**
 * Short-lived subprocesses for tests (a CLI call, `deno bundle`, a health check): run to their
 * end with output captured, killed by PID if they outlive a generous guard.
 */
import { killOnExit } from "./server.ts";

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
  /** It outlived its guard and was killed. */
  timedOut: boolean;
}

export interface RunOptions {
  cwd?: string;
  /** Added to the environment (which is this process's without ORBIT_* variables). */
  env?: Record<string, string>;
  /** Kill the process after this long: a guard against a hang, not a wait (default 120 s). */
  guardMs?: number;
  /**
   * Sent at the guard before SIGKILL, which follows 3 s later: e.g. SIGQUIT, on which Mono and
   * the JVM print every thread's stack, so a hang's output says where it hung.
   */
  guardSignal?: Deno.Signal;
}

function kill(child: Deno.ChildProcess, signal: Deno.Signal): void {
  try {
    child.kill(signal);
  } catch { /* gone */ }
}

const children = new Set<Deno.ChildProcess>();
killOnExit(children);

/** This process's environment without ORBIT_* variables, so none leak into a child. */
export function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(Deno.env.toObject())) {
    if (!k.startsWith("ORBIT_")) env[k] = v;
  }
  return { ...env, NO_COLOR: "1" };
}

/** Runs `cmd args…` to its end. */
export async function run(cmd: string, args: string[], o: RunOptions = {}): Promise<Run> {
  const child = new Deno.Command(cmd, {
    args,
    clearEnv: true,
    env: { ...cleanEnv(), ...(o.env ?? {}) },
    ...(o.cwd ? { cwd: o.cwd } : {}),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  children.add(child);
  let timedOut = false;
  let last: ReturnType<typeof setTimeout> | undefined;
  const guard = setTimeout(() => {
    timedOut = true;
    if (o.guardSignal === undefined) return kill(child, "SIGKILL");
    kill(child, o.guardSignal);
    last = setTimeout(() => kill(child, "SIGKILL"), 3000);
  }, o.guardMs ?? 120_000);
  try {
    const r = await child.output();
    return {
      code: r.code,
      stdout: new TextDecoder().decode(r.stdout),
      stderr: new TextDecoder().decode(r.stderr),
      timedOut,
    };
  } finally {
    clearTimeout(guard);
    clearTimeout(last);
    children.delete(child);
  }
}

/** Runs the Deno that runs the tests (`Deno.execPath()`, never a wrapper script). */
export function runDeno(args: string[], o: RunOptions = {}): Promise<Run> {
  return run(Deno.execPath(), args, o);
}

/** A readable account of a run for assertion messages. */
export function described(r: Run): string {
  return `${
    r.timedOut ? "killed at its guard, " : ""
  }exit code ${r.code}\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}`;
}
