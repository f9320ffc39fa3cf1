/**
 * The progress line shown on stderr while the CLI waits for an execution: a spinner, the
 * elapsed time and the type of the execution's last history event (polled once a second).
 * Shown only when stderr is a terminal; otherwise nothing is written.
 */
import type { OrbitHttp } from "./http.ts";
import { formatDuration } from "./output.ts";

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const CLEAR = "\r\x1b[2K";

export interface Progress {
  stop(): void;
}

const NONE: Progress = { stop() {} };

interface HistoryPage {
  events?: Array<{ seq?: number; type?: string; step?: string; attempt?: number }>;
  next_after_seq?: number | null;
}

export function startProgress(http: OrbitHttp, executionId: string): Progress {
  if (!Deno.stderr.isTerminal()) return NONE;
  const enc = new TextEncoder();
  const began = Date.now();
  const abort = new AbortController();
  let frame = 0;
  let last = "";
  let afterSeq = 0;
  let stopped = false;

  const write = (s: string) => {
    try {
      Deno.stderr.writeSync(enc.encode(s));
    } catch { /* stderr closed: nothing to show */ }
  };
  const columns = () => {
    try {
      const c = Deno.consoleSize().columns;
      return c > 0 ? c : 80;
    } catch {
      return 80;
    }
  };
  const render = () => {
    const parts = [
      FRAMES[frame++ % FRAMES.length],
      `waiting for ${executionId}`,
      formatDuration(Date.now() - began),
      last || "…",
    ];
    let line = parts.join("  ");
    const max = Math.max(10, columns() - 1);
    if ([...line].length > max) line = `${[...line].slice(0, max - 1).join("")}…`;
    write(CLEAR + line);
  };

  const poll = async () => {
    while (!stopped) {
      try {
        for (;;) {
          const r = await http.get<HistoryPage>(
            `/v1/executions/${encodeURIComponent(executionId)}/history`,
            { query: { after_seq: afterSeq, limit: 1000 }, timeoutMs: 5000, signal: abort.signal },
          );
          const events = Array.isArray(r.data?.events) ? r.data.events : [];
          const e = events.at(-1);
          if (e) {
            afterSeq = typeof e.seq === "number" ? e.seq : afterSeq;
            last = [e.type ?? "?", e.step ?? "", e.attempt !== undefined ? `#${e.attempt}` : ""]
              .filter(Boolean).join(" ");
          }
          const next = r.data?.next_after_seq;
          if (typeof next !== "number" || events.length === 0) break;
          afterSeq = next;
        }
      } catch {
        // the progress line is best effort; the wait itself reports errors
      }
      if (stopped) break;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 1000);
        abort.signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        }, { once: true });
      });
    }
  };

  render();
  const timer = setInterval(render, 100);
  const polling = poll();
  const onInterrupt = () => {
    write(CLEAR);
    Deno.exit(130);
  };
  try {
    Deno.addSignalListener("SIGINT", onInterrupt);
  } catch { /* signals unsupported here */ }

  return {
    stop() {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      abort.abort();
      void polling;
      try {
        Deno.removeSignalListener("SIGINT", onInterrupt);
      } catch { /* never added */ }
      write(CLEAR);
    },
  };
}
