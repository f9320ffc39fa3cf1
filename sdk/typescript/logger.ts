/**
 * A small pluggable logger. The SDK logs through it; pass your own object with the four
 * methods to route the lines elsewhere.
 *
 * @module
 */

/** Structured fields attached to a log line. */
export type LogFields = Record<string, unknown>;

/** What the SDK needs from a logger. */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  /** Writes out lines the logger holds back, if it holds any (called when a worker stops). */
  flush?(): void;
}

/** Log levels, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const ORDER: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3, silent: 4 };

/** Options of {@link consoleLogger}. */
export interface ConsoleLoggerOptions {
  /** Lowest level written (default `info`). */
  level?: LogLevel;
  /** Name written after the level (default `orbit`). */
  name?: string;
}

/** How long the default logger gathers debug and info lines before it writes them. */
export const GATHER_MS = 10;

/**
 * The default logger: writes `<ISO time> WARNING orbit <message> <fields as JSON>` to the
 * console (stderr for warnings and errors).
 *
 * Debug and info lines are gathered for up to {@link GATHER_MS} and written with one console
 * call: a busy worker makes one write for many tasks instead of one per task (that write, and
 * waking the process that reads it, was a seventh of the TypeScript worker's CPU in
 * `deno task bench`; tasks of one event-loop turn are too few to share it). Each line keeps the
 * time it was logged. A warning or an error writes what was gathered first, then itself; so do
 * `flush()` (a worker calls it when it stops) and the process's exit.
 */
export function consoleLogger(options: ConsoleLoggerOptions = {}): Logger {
  const min = ORDER[options.level ?? "info"];
  const name = options.name ?? "orbit";
  const line = (label: string, message: string, fields?: LogFields) => {
    const extra = fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : "";
    return `${new Date().toISOString()} ${label} ${name} ${message}${extra}`;
  };
  let pending: string[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  const write = () => {
    timer = undefined;
    if (pending.length === 0) return;
    const text = pending.join("\n");
    pending = [];
    console.info(text);
  };
  const flush = () => {
    if (timer !== undefined) clearTimeout(timer);
    write();
  };
  const later = (text: string) => {
    pending.push(text);
    timer ??= setTimeout(write, GATHER_MS);
  };
  if (min <= ORDER.info) onExit(flush);
  return {
    debug(message, fields) {
      if (min <= ORDER.debug) later(line("DEBUG", message, fields));
    },
    info(message, fields) {
      if (min <= ORDER.info) later(line("INFO", message, fields));
    },
    warn(message, fields) {
      if (min > ORDER.warn) return;
      flush();
      console.warn(line("WARNING", message, fields));
    },
    error(message, fields) {
      if (min > ORDER.error) return;
      flush();
      console.error(line("ERROR", message, fields));
    },
    flush,
  };
}

/**
 * Runs `fn` when the process ends: Deno's `unload`, and an uncaught error or rejection (the
 * listeners only write; the error still ends the process); Node's `exit`, which it emits for
 * those too.
 */
function onExit(fn: () => void): void {
  // Deno first: reading `globalThis.process` there loads Node's process module (~35 ms).
  if ("Deno" in globalThis) {
    for (const event of ["unload", "error", "unhandledrejection"]) {
      globalThis.addEventListener(event, fn);
    }
    return;
  }
  const node = (globalThis as { process?: { on?(event: string, fn: () => void): void } }).process;
  if (typeof node?.on === "function") node.on("exit", fn);
}

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};
