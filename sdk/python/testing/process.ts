/**
 * The Python example worker (examples/order-processing/worker.py) as a real process for
 * end-to-end tests: `python3` with the SDK taken from the source tree, ORDER_TRACE=1 (one JSON
 * line per attempt on stdout), every line kept, killed by PID (and on exit).
 */
import { killOnExit } from "../../../tests/support/server.ts";

const ROOT = new URL("../../../", import.meta.url).pathname;
export const PYTHON_WORKER = `${ROOT}examples/order-processing/worker.py`;
export const PYTHON_WORKFLOW = JSON.parse(
  await Deno.readTextFile(`${ROOT}examples/order-processing/workflow_python.json`),
);

export interface PythonWorker {
  pid: number;
  /** stdout and stderr lines, in arrival order. */
  lines: string[];
  /** The ORDER_TRACE lines: one per attempt the worker began. */
  traces(): Array<Record<string, unknown>>;
  waitForLine(re: RegExp, timeoutMs?: number): Promise<string>;
  kill(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
  status: Promise<Deno.CommandStatus>;
}

const children = new Set<Deno.ChildProcess>();
killOnExit(children);

export function startPythonWorker(
  server: string,
  env: Record<string, string> = {},
  args: string[] = [],
): PythonWorker {
  const child = new Deno.Command("python3", {
    args: ["-u", PYTHON_WORKER, "--server", server, ...args],
    env: { ORDER_TRACE: "1", PYTHONDONTWRITEBYTECODE: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  children.add(child);
  const lines: string[] = [];
  const watchers = new Set<() => void>();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    let buf = "";
    for await (const chunk of s.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        lines.push(line);
        if (Deno.env.get("ORBIT_TEST_LOGS")) console.error(`[python ${child.pid}] ${line}`);
        for (const w of [...watchers]) w();
      }
    }
    if (buf) lines.push(buf);
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  let exited = false;
  const status = child.status.then(async (s) => {
    children.delete(child);
    await pumps;
    exited = true;
    for (const w of [...watchers]) w();
    return s;
  });
  const waitForLine = (re: RegExp, timeoutMs = 20_000) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const hit = lines.find((l) => re.test(l));
        if (hit !== undefined) {
          done();
          resolve(hit);
        } else if (exited) {
          done();
          reject(new Error(`python worker exited before printing ${re}:\n${lines.join("\n")}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${re}; python worker said:\n${lines.join("\n")}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        watchers.delete(check);
      };
      watchers.add(check);
      check();
    });
  return {
    pid: child.pid,
    lines,
    traces: () => lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l)),
    waitForLine,
    status,
    kill: async (signal: Deno.Signal = "SIGTERM") => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      return await status;
    },
  };
}

/** Runs a short Python script with the SDK on its path; answers its exit code and output. */
export async function runPython(
  script: string,
  args: string[] = [],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command("python3", {
    args: ["-c", script, ...args],
    env: { PYTHONPATH: `${ROOT}sdk/python`, PYTHONDONTWRITEBYTECODE: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}
