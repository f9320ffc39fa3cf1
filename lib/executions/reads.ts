/**
 * Reads of executions and their histories, for the routes (which never reach the store
 * themselves): one execution, a page of the list, a page of a run's history. Every server
 * answers them from the database, whatever it runs (standby and shared mode included).
 */
import type { HistoryEvent } from "../engine/events.ts";
import { notFound, OrbitError, storageError } from "../errors.ts";
import {
  type ExecutionPage,
  type ExecutionRow,
  InvalidCursorError,
  type ListExecutionsQuery,
  type Store,
} from "../store/store.ts";

export interface HistoryPage {
  execution_id: string;
  run_id: string;
  events: HistoryEvent[];
  next_after_seq?: number;
}

export class ExecutionReads {
  constructor(readonly store: Store) {}

  /** One execution; 404 UNKNOWN_EXECUTION when there is none. */
  async get(id: string): Promise<ExecutionRow> {
    const row = await this.store.getExecution(id);
    if (!row) throw notFound("UNKNOWN_EXECUTION", `execution ${id} does not exist`);
    return row;
  }

  /** A page of the list; a cursor this server did not hand out is 400 INVALID_CURSOR. */
  async list(q: ListExecutionsQuery): Promise<ExecutionPage> {
    try {
      return await this.store.listExecutions(q);
    } catch (e) {
      // Only a cursor the store cannot read is the client's fault; anything else is storage.
      if (e instanceof InvalidCursorError) {
        throw new OrbitError(400, "INVALID_CURSOR", "cursor is not one this server handed out");
      }
      throw e instanceof OrbitError ? e : storageError(e);
    }
  }

  /**
   * A page of one run's history (the current run unless `run_id` names an earlier one of the
   * same execution), events after `after_seq`, at most `limit`.
   */
  async history(
    id: string,
    q: { run_id?: string | undefined; after_seq?: number | undefined; limit: number },
  ): Promise<HistoryPage> {
    const row = await this.get(id);
    const runId = q.run_id ?? row.run_id;
    if (runId !== row.run_id) {
      // Another run must be one of this execution's (its WorkflowCreated names the execution).
      const [first] = await this.store.readHistory(runId, 0, 1);
      if (!first || (first as { execution_id?: string }).execution_id !== row.execution_id) {
        throw notFound("UNKNOWN_EXECUTION", `execution ${row.execution_id} has no run ${runId}`);
      }
    }
    const limit = Math.max(1, q.limit);
    const events = await this.store.readHistory(runId, q.after_seq ?? 0, limit + 1);
    const more = events.length > limit;
    if (more) events.length = limit;
    return {
      execution_id: row.execution_id,
      run_id: runId,
      events,
      ...(more ? { next_after_seq: events.at(-1)!.seq } : {}),
    };
  }
}
