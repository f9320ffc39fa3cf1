/**
 * The store interface. Two drivers implement it (`sqlite.ts`, `postgres.ts`) and one
 * conformance suite (`store_conformance.ts`) runs against both. The engine shell is the only
 * writer; SQL text lives in `sql/<backend>/`.
 */
import type { ExecutionStatus, HistoryEvent } from "../engine/events.ts";

/** A row of `workflow_executions`, as the API shows it. */
export interface ExecutionRow {
  execution_id: string;
  run_id: string;
  root_id: string;
  parent_id: string | null;
  workflow: string;
  version: string;
  status: ExecutionStatus;
  input: unknown;
  output: unknown | null;
  error: unknown | null;
  created_ms: number;
  closed_ms: number | null;
  updated_ms: number;
  /** Seq of the last event of the current run. */
  last_seq: number;
}

/** A row of `workflow_definitions`. */
export interface DefinitionRow {
  name: string;
  version: string;
  ir: string;
  document: unknown;
  /** sha-256 of the canonical JSON of the document: equal documents have equal hashes. */
  hash: string;
  created_ms: number;
}

/** One execution's part of a commit: its new events and its row after them. */
export interface AppendItem {
  /** The execution row after the events (inserted when `create`, else updated). */
  row: ExecutionRow;
  /** Events in seq order, continuing the run's history without a gap. */
  events: HistoryEvent[];
  /** True when `row` is a new execution (the first append of a run's `WorkflowCreated`). */
  create?: boolean;
}

export interface ListExecutionsQuery {
  workflow?: string;
  status?: ExecutionStatus;
  limit: number;
  /** Opaque cursor from a previous page (`next_cursor`). */
  cursor?: string;
}

export interface ExecutionPage {
  executions: ExecutionRow[];
  next_cursor: string | null;
}

/** Raised by `commit` when the fence of a clustered store rejects the append. */
export class FencedError extends Error {
  override name = "FencedError";
}

/** Raised by `commit` when a `create` item's execution id already exists. */
export class DuplicateExecutionError extends Error {
  override name = "DuplicateExecutionError";
  constructor(readonly executionId: string) {
    super(`execution ${executionId} already exists`);
  }
}

export interface Store {
  /** "sqlite" or "postgres". */
  readonly kind: "sqlite" | "postgres";
  /** Applies the versioned migrations under `sql/<backend>/` (idempotent, concurrent-safe). */
  migrate(): Promise<void>;
  close(): Promise<void>;

  /** Inserts a definition unless one with this name and version exists; returns the stored one. */
  putDefinition(def: DefinitionRow): Promise<{ created: boolean; stored: DefinitionRow }>;
  getDefinition(name: string, version: string): Promise<DefinitionRow | null>;
  /** All versions of one workflow (or of every workflow), ordered by name, then created_ms. */
  listDefinitions(name?: string): Promise<DefinitionRow[]>;

  /**
   * Commits the items of several executions in one transaction: all or nothing. Events are
   * inserted into `execution_events`, rows upserted into `workflow_executions`.
   * Throws DuplicateExecutionError if a `create` item's id exists (nothing is written then).
   */
  commit(items: AppendItem[]): Promise<void>;

  getExecution(executionId: string): Promise<ExecutionRow | null>;
  listExecutions(q: ListExecutionsQuery): Promise<ExecutionPage>;
  /** Events of one run with seq > afterSeq, at most `limit`, in seq order. */
  readHistory(runId: string, afterSeq: number, limit: number): Promise<HistoryEvent[]>;
  /** Every execution whose status is `running`, with its whole current-run history (recovery). */
  loadRunning(): Promise<Array<{ row: ExecutionRow; events: HistoryEvent[] }>>;
  /** Number of executions with status `running`. */
  countRunning(): Promise<number>;
}

/** Raised by `listExecutions` for a cursor it did not issue (a client error: answer 400). */
export class InvalidCursorError extends Error {
  override name = "InvalidCursorError";
  constructor(readonly cursor: string) {
    super(`Cannot read cursor "${cursor.slice(0, 64)}": pass a next_cursor from a previous page`);
  }
}

/**
 * The listing cursor both drivers issue: the last row's position in (created_ms DESC,
 * execution_id DESC) order, as base64url JSON. Clients treat it as opaque.
 */
export function encodeListCursor(row: Pick<ExecutionRow, "created_ms" | "execution_id">): string {
  const bytes = new TextEncoder().encode(JSON.stringify([row.created_ms, row.execution_id]));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** Reads a cursor from `encodeListCursor`; throws InvalidCursorError for anything else. */
export function decodeListCursor(cursor: string): { created_ms: number; execution_id: string } {
  try {
    if (!/^[A-Za-z0-9_-]*$/.test(cursor)) throw new Error("not base64url");
    const bin = atob(cursor.replaceAll("-", "+").replaceAll("_", "/"));
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    const value: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    if (
      Array.isArray(value) && value.length === 2 && Number.isSafeInteger(value[0]) &&
      // No execution id holds a NUL (PostgreSQL could not even compare it).
      typeof value[1] === "string" && !value[1].includes("\u0000")
    ) {
      return { created_ms: value[0], execution_id: value[1] };
    }
  } catch { /* reported below */ }
  throw new InvalidCursorError(cursor);
}
