/**
 * Logging through LogTape. Text lines look like the reference page's
 * (`2026-11-15T16:33:29.189807Z INFO orbit_runtime::cluster: message key=value`); `json`
 * writes one JSON object a line. Categories are `["orbit_runtime", "<module>"]`.
 */
import {
  configureSync,
  getLogger,
  type LogLevel,
  type LogRecord,
  resetSync,
  type Sink,
} from "@logtape/logtape";

export type LogFormat = "text" | "json";

const LEVEL: Record<LogLevel, string> = {
  trace: "TRACE",
  debug: "DEBUG",
  info: "INFO",
  warning: "WARN",
  error: "ERROR",
  fatal: "FATAL",
};

/** Fields the reference page prints in Debug form (quoted). */
const QUOTED = new Set(["advertise_addr", "leader"]);

function fieldValue(key: string, v: unknown): string {
  if (typeof v === "string") return QUOTED.has(key) ? JSON.stringify(v) : v;
  if (v === null || v === undefined) return "null";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function messageText(r: LogRecord): string {
  return r.message.map((p) => (typeof p === "string" ? p : fieldValue("", p))).join("");
}

export function formatText(r: LogRecord): string {
  const ts = new Date(r.timestamp).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
  const fields = Object.entries(r.properties)
    .map(([k, v]) => ` ${k}=${fieldValue(k, v)}`)
    .join("");
  return `${ts} ${LEVEL[r.level]} ${r.category.join("::")}: ${messageText(r)}${fields}\n`;
}

export function formatJson(r: LogRecord): string {
  return JSON.stringify({
    time: new Date(r.timestamp).toISOString(),
    level: LEVEL[r.level],
    target: r.category.join("::"),
    message: messageText(r),
    ...r.properties,
  }) + "\n";
}

const encoder = new TextEncoder();

/** Levels whose lines may wait a little (GATHER_MS) before they are written. */
const BUFFERED = new Set<LogLevel>(["trace", "debug", "info"]);

/**
 * How long info, debug and trace lines are gathered before they are written. Each written
 * batch is one blocking write on the main thread and a wake-up of whatever reads the server's
 * output; one event-loop turn (a 0 ms timer) held the lines of about one commit, so a busy
 * server still wrote several hundred times a second.
 */
export const GATHER_MS = 10;

/**
 * A sink that writes formatted lines through `write`. Info, debug and trace lines are gathered
 * for up to `gatherMs` and written together, so a busy server makes one write for many lines
 * instead of one per line (two per execution at info level); each line keeps the time it was
 * logged. A warning or an error writes everything gathered so far and itself at once; so does
 * the returned `flush` (the process's exit and an uncaught error call it for stderr).
 */
export function gatheringSink(
  format: (r: LogRecord) => string,
  write: (text: string) => void,
  gatherMs = GATHER_MS,
): { sink: Sink; flush: () => void } {
  let pending = "";
  let timer: ReturnType<typeof setTimeout> | null = null;
  const flush = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (pending === "") return;
    const text = pending;
    pending = "";
    write(text);
  };
  const sink: Sink = (r) => {
    pending += format(r);
    if (!BUFFERED.has(r.level)) {
      flush();
    } else if (timer === null) {
      const t = setTimeout(flush, gatherMs);
      // Waiting lines must not keep the process alive (the exit writes them).
      Deno.unrefTimer(t);
      timer = t;
    }
  };
  return { sink, flush };
}

function writeStderr(text: string): void {
  const bytes = encoder.encode(text);
  let off = 0;
  while (off < bytes.length) off += Deno.stderr.writeSync(bytes.subarray(off));
}

function stderrSink(format: (r: LogRecord) => string): Sink {
  const { sink, flush } = gatheringSink(format, writeStderr);
  // The listeners only write: an uncaught error still ends the process as before.
  for (const event of ["unload", "error", "unhandledrejection"]) {
    globalThis.addEventListener(event, flush);
  }
  return sink;
}

export function setupLogging(format: LogFormat, level: LogLevel): void {
  resetSync();
  configureSync({
    sinks: { stderr: stderrSink(format === "json" ? formatJson : formatText) },
    loggers: [
      { category: ["orbit_runtime"], lowestLevel: level, sinks: ["stderr"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["stderr"] },
    ],
  });
}

export const log = {
  server: getLogger(["orbit_runtime", "server"]),
  engine: getLogger(["orbit_runtime", "engine"]),
  cluster: getLogger(["orbit_runtime", "cluster"]),
  shared: getLogger(["orbit_runtime", "shared"]),
  store: getLogger(["orbit_runtime", "store"]),
};
