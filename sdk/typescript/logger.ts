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
  /** Writes out lines the logger holds back, if it holds any (the worker calls it on stop). */
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

/**
 * The default logger: writes `<ISO time> WARNING orbit <message> <fields as JSON>` to the
 * console (stderr for warnings and errors).
 *
 * Debug and info lines written in one burst of work go out together, in one console call on
 * the next macrotask (a busy worker writes one line per task; a console write each cost more
 * than the task's own work). A warning or an error writes the held lines first, so the order
 * is kept; {@link Logger.flush} writes them at once.
 */
export function consoleLogger(options: ConsoleLoggerOptions = {}): Logger {
  const min = ORDER[options.level ?? "info"];
  const name = options.name ?? "orbit";
  const line = (label: string, message: string, fields?: LogFields) => {
    const extra = fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : "";
    return `${new Date().toISOString()} ${label} ${name} ${message}${extra}`;
  };
  // Held lines, all of one console method (a line of the other one writes them first).
  let held: string[] = [];
  let heldDebug = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const flush = () => {
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    if (held.length === 0) return;
    const text = held.join("\n");
    held = [];
    if (heldDebug) console.debug(text);
    else console.info(text);
  };
  const hold = (debug: boolean, text: string) => {
    if (held.length > 0 && heldDebug !== debug) flush();
    heldDebug = debug;
    held.push(text);
    if (held.length >= 256) flush();
    else timer ??= setTimeout(flush, 0);
  };
  return {
    debug(message, fields) {
      if (min <= ORDER.debug) hold(true, line("DEBUG", message, fields));
    },
    info(message, fields) {
      if (min <= ORDER.info) hold(false, line("INFO", message, fields));
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

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};
