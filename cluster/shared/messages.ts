/**
 * Shared mode's messages between nodes: the inbox entries that forward a command to an
 * execution's owner, the owner's replies, and their conversions. Pure: no I/O.
 */
import type { Command } from "../../lib/engine/decide.ts";
import type { OrbitError } from "../../lib/errors.ts";
import type { ExecutionRow } from "../../lib/store/store.ts";
import type { TaskPayload } from "../../lib/workers/sessions.ts";

/** A row of orbit_inbox: a command for the execution's owner. */
export interface InboxEntry {
  seq: number;
  execution_id: string;
  kind: string;
  payload: Record<string, unknown>;
  reply_to: string | null;
}

/** The owner's answer to a forwarded command (NOTIFY orbit_reply). */
export interface Reply {
  seq: number;
  accepted?: boolean;
  row?: ExecutionRow;
  /** The row did not fit into the notification: the waiting node reads it. */
  row_omitted?: boolean;
  signal_seq?: number;
  /** Tasks dispatched to the reporting worker's session with the result (eager dispatch). */
  tasks?: TaskPayload[];
  /** The tasks' inputs did not fit into the notification: read from orbit_tasks. */
  inputs_omitted?: boolean;
  error?: { status: number; code: string; message: string; fields?: Record<string, unknown> };
}

/** The command an inbox entry carries (null: a kind this version does not know). */
export function commandOf(e: InboxEntry): Command | null {
  const p = e.payload;
  switch (e.kind) {
    case "dispatched":
      return {
        type: "dispatch",
        step: String(p.step),
        token: String(p.token),
        worker_id: String(p.worker_id),
        worker_session: String(p.worker_session),
      };
    case "complete":
      return { type: "complete", token: String(p.token), output: p.output ?? null };
    case "fail":
      return {
        type: "fail",
        token: String(p.token),
        error: p.error as { code: string; message: string },
      };
    case "uncertain":
      return { type: "uncertain", token: String(p.token), reason: String(p.reason) };
    case "signal":
      return { type: "signal", name: String(p.name), payload: p.payload ?? null };
    case "cancel":
      return { type: "cancel", reason: String(p.reason ?? "cancelled by request") };
    default:
      return null;
  }
}

/** An OrbitError as a reply carries it. */
export function errorOf(
  e: OrbitError,
): { status: number; code: string; message: string; fields?: Record<string, unknown> } {
  return {
    status: e.status,
    code: e.code,
    message: e.message,
    ...(Object.keys(e.fields).length > 0 ? { fields: e.fields } : {}),
  };
}

/** The inbox entry that forwards a command to the owner. */
export function inboxOf(cmd: Command): { kind: string; payload: Record<string, unknown> } {
  switch (cmd.type) {
    case "complete":
      return { kind: "complete", payload: { token: cmd.token, output: cmd.output ?? null } };
    case "fail":
      return { kind: "fail", payload: { token: cmd.token, error: cmd.error } };
    case "uncertain":
      return { kind: "uncertain", payload: { token: cmd.token, reason: cmd.reason } };
    case "signal":
      return { kind: "signal", payload: { name: cmd.name, payload: cmd.payload ?? null } };
    case "cancel":
      return { kind: "cancel", payload: { reason: cmd.reason } };
    default:
      throw new Error(`Cannot forward a ${cmd.type} command`);
  }
}
