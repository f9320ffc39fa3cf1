/** Exit codes, errors and human output (aligned tables, key/value blocks, times) of the CLI. */

/** Exit codes of every client subcommand. */
export const EXIT = {
  /** The operation succeeded. */
  OK: 0,
  /** The operation failed: an HTTP error, or a waited-for execution failed/cancelled/timed out. */
  FAILED: 1,
  /** Usage error: bad arguments, bad JSON, a file that cannot be read. */
  USAGE: 2,
  /** The server cannot be reached. */
  UNREACHABLE: 3,
  /** A wait ran out while the execution was still running. */
  WAIT_TIMEOUT: 4,
} as const;

/** An error with its exit code; printed as `error: [CODE: ]message`. */
export class CliError extends Error {
  override name = "CliError";
  constructor(
    message: string,
    readonly exitCode: number,
    readonly code?: string,
    /** Extra lines printed after the error line (indented). */
    readonly lines: string[] = [],
  ) {
    super(message);
  }
}

export const usageError = (message: string) => new CliError(message, EXIT.USAGE);

/** Aligned columns separated by two spaces; the last column is not padded. */
export function table(headers: string[], rows: string[][]): string {
  const all = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => width(r[i] ?? ""))));
  return all.map((r) =>
    r.map((cell, i) => i === r.length - 1 ? cell : pad(cell, widths[i]!)).join("  ").trimEnd()
  ).join("\n");
}

/** `key  value` lines with the keys aligned; entries whose value is undefined are skipped. */
export function keyValues(entries: Array<[string, string | undefined]>): string {
  const kept = entries.filter((e): e is [string, string] => e[1] !== undefined);
  const w = Math.max(0, ...kept.map(([k]) => k.length));
  return kept.map(([k, v]) => `${k.padEnd(w)}  ${v}`.trimEnd()).join("\n");
}

function width(s: string): number {
  return [...s].length;
}

function pad(s: string, w: number): string {
  return s + " ".repeat(Math.max(0, w - width(s)));
}

/** `2026-01-02T03:04:05.678Z`, or `-` for nothing. */
export function formatTime(ms: unknown): string {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "-";
  return new Date(ms).toISOString();
}

/** `850ms`, `4.2s`, `3m07s`, `2h05m`. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}

/**
 * The workflow's timeout as `GET /v1/executions/{id}/pending` answers it (`timeout_at_ms`, the
 * server's `now_ms`): `2026-01-02T03:04:05.678Z (in 23h59m)`, or `none`.
 */
export function formatTimeout(p: { timeout_at_ms?: unknown; now_ms?: unknown }): string {
  const at = p.timeout_at_ms;
  if (typeof at !== "number" || !Number.isFinite(at)) return "none";
  const now = typeof p.now_ms === "number" ? p.now_ms : Date.now();
  const rel = at >= now ? `in ${formatDuration(at - now)}` : `${formatDuration(now - at)} ago`;
  return `${formatTime(at)} (${rel})`;
}

/** Compact JSON, cut to `max` characters. */
export function shortJson(v: unknown, max = 120): string {
  if (v === undefined) return "-";
  const s = JSON.stringify(v) ?? String(v);
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** `CODE: message` of an error object as executions and events carry it. */
export function errorText(e: unknown): string | undefined {
  if (e === null || e === undefined) return undefined;
  if (typeof e !== "object") return String(e);
  const o = e as Record<string, unknown>;
  const code = typeof o.code === "string" ? o.code : undefined;
  const message = typeof o.message === "string" ? o.message : undefined;
  if (code && message) return `${code}: ${message}`;
  return code ?? message ?? shortJson(e);
}

export function str(v: unknown): string {
  if (v === undefined || v === null || v === "") return "-";
  return typeof v === "string" ? v : String(v);
}

/** The items of `GET /v1/executions/{id}/pending` as a table: step, reason, since, message. */
export function pendingTable(items: Array<Record<string, unknown>>): string {
  if (items.length === 0) return "nothing pending";
  return table(
    ["STEP", "REASON", "SINCE", "DETAIL"],
    items.map((p) => [
      `${str(p.step)}${typeof p.attempt === "number" && p.attempt > 1 ? ` #${p.attempt}` : ""}`,
      str(p.reason),
      formatTime(p.since_ms),
      str(p.message),
    ]),
  );
}
