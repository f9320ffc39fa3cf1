/**
 * `orbit server` started with options it must refuse: it should exit by itself, with code 2 and
 * one `error: …` line. A server that starts listening instead is killed by PID and reported.
 */
import { MAIN } from "./server.ts";

export interface Refusal {
  code: number;
  stderr: string;
  stdout: string;
}

export async function serverRefusal(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 20_000,
): Promise<Refusal> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN, "server", "--addr", "127.0.0.1:0", ...args],
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let killed = false;
  const timer = setTimeout(() => {
    killed = true;
    Deno.kill(child.pid, "SIGKILL");
  }, timeoutMs);
  try {
    const out = await child.output();
    const r = {
      code: out.code,
      stderr: new TextDecoder().decode(out.stderr),
      stdout: new TextDecoder().decode(out.stdout),
    };
    if (killed) throw new Error(`the server did not exit by itself:\n${r.stdout}${r.stderr}`);
    return r;
  } finally {
    clearTimeout(timer);
  }
}
