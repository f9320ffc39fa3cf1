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
 */
export function consoleLogger(options: ConsoleLoggerOptions = {}): Logger {
  const min = ORDER[options.level ?? "info"];
  const name = options.name ?? "orbit";
  const line = (label: string, message: string, fields?: LogFields) => {
    const extra = fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : "";
    return `${new Date().toISOString()} ${label} ${name} ${message}${extra}`;
  };
  return {
    debug(message, fields) {
      if (min <= ORDER.debug) console.debug(line("DEBUG", message, fields));
    },
    info(message, fields) {
      if (min <= ORDER.info) console.info(line("INFO", message, fields));
    },
    warn(message, fields) {
      if (min <= ORDER.warn) console.warn(line("WARNING", message, fields));
    },
    error(message, fields) {
      if (min <= ORDER.error) console.error(line("ERROR", message, fields));
    },
  };
}

/** A logger that drops everything. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};
