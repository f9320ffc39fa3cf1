/** Test helpers: a logger that records lines, and a gate a handler can wait on. */

import type { LogFields, Logger } from "../logger.ts";

export interface LogLine {
  level: "debug" | "info" | "warn" | "error";
  message: string;
  fields?: LogFields;
}

/** A logger that keeps every line (and prints them when ORBIT_TEST_LOG is set). */
export function recordingLogger(): Logger & { lines: LogLine[]; text(): string } {
  const lines: LogLine[] = [];
  const print = (() => {
    try {
      return Boolean(Deno.env.get("ORBIT_TEST_LOG"));
    } catch {
      return false;
    }
  })();
  const add = (level: LogLine["level"]) => (message: string, fields?: LogFields) => {
    lines.push({ level, message, fields });
    if (print) console.log(level, message, fields ?? "");
  };
  return {
    lines,
    debug: add("debug"),
    info: add("info"),
    warn: add("warn"),
    error: add("error"),
    text: () => lines.map((l) => `${l.level} ${l.message}`).join("\n"),
  };
}

/** A promise to open by hand. */
export function gate<T = void>(): { promise: Promise<T>; open(value?: T): void; opened: boolean } {
  let open!: (value: T) => void;
  const g = {
    opened: false,
    promise: new Promise<T>((resolve) => (open = resolve)),
    open(value?: T) {
      g.opened = true;
      open(value as T);
    },
  };
  return g;
}
