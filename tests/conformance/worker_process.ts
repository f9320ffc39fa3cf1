/**
 * A conformance worker program as a real process: started from its SDK's command line with
 * `--server URL` and the scenario's environment, its standard output read as JSON event lines
 * (README.md, "The worker program"), its standard error kept for failure messages, and killed
 * by PID (also on exit).
 */
import { killOnExit } from "../support/server.ts";

/** One line of the program's standard output. */
export interface WorkerEvent {
  event: string;
  [key: string]: unknown;
}

export interface WorkerProcess {
  readonly name: string;
  readonly pid: number;
  readonly events: WorkerEvent[];
  /** Every line, stdout and stderr, in arrival order (for failure messages). */
  readonly lines: string[];
  /** Null while it runs. */
  exitCode(): number | null;
  waitForEvent(
    match: (e: WorkerEvent) => boolean,
    what: string,
    timeoutMs?: number,
  ): Promise<WorkerEvent>;
  /** Sends a signal (SIGTERM, SIGKILL, SIGSTOP, SIGCONT) to the process. */
  signal(signal: Deno.Signal): void;
  /** Sends `signal` and waits for the exit. */
  kill(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
  readonly status: Promise<Deno.CommandStatus>;
  /** The last lines, for assertion messages. */
  tail(n?: number): string;
}

const children = new Set<Deno.ChildProcess>();
killOnExit(children);

export function startWorkerProcess(
  name: string,
  command: string[],
  server: string,
  env: Record<string, string>,
): WorkerProcess {
  const [cmd, ...args] = command;
  const child = new Deno.Command(cmd!, {
    args: [...args, "--server", server],
    env: { NO_COLOR: "1", PYTHONDONTWRITEBYTECODE: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  children.add(child);
  const events: WorkerEvent[] = [];
  const lines: string[] = [];
  const watchers = new Set<() => void>();
  let code: number | null = null;
  const pump = async (stream: ReadableStream<Uint8Array>, out: boolean) => {
    let buf = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        lines.push(`${out ? "out" : "err"}| ${line}`);
        if (Deno.env.get("ORBIT_TEST_LOGS")) console.error(`[${name} ${child.pid}] ${line}`);
        if (out && line.startsWith("{")) {
          try {
            events.push(JSON.parse(line));
          } catch { /* not an event */ }
        }
        for (const w of [...watchers]) w();
      }
    }
  };
  const pumps = Promise.all([pump(child.stdout, true), pump(child.stderr, false)]);
  const status = child.status.then(async (s) => {
    children.delete(child);
    await pumps;
    code = s.code;
    for (const w of [...watchers]) w();
    return s;
  });
  const tail = (n = 40) => lines.slice(-n).join("\n");
  return {
    name,
    pid: child.pid,
    events,
    lines,
    status,
    tail,
    exitCode: () => code,
    waitForEvent: (match, what, timeoutMs = 30_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const hit = events.find(match);
          if (hit) {
            done();
            resolve(hit);
          } else if (code !== null) {
            done();
            reject(new Error(`${name} exited (code ${code}) before ${what}:\n${tail()}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`timed out waiting for ${name}: ${what}; it said:\n${tail()}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          watchers.delete(check);
        };
        watchers.add(check);
        check();
      }),
    signal: (signal) => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
    },
    kill: async (signal: Deno.Signal = "SIGTERM") => {
      try {
        child.kill(signal);
      } catch { /* gone */ }
      return await status;
    },
  };
}
