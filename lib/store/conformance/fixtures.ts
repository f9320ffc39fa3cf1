/** Rows and appends with test defaults, for the store conformance suite and the drivers' tests. */
import type { HistoryEvent } from "../../engine/events.ts";
import type { AppendItem, ExecutionRow } from "../store.ts";

/** An execution row with test defaults. */
export function execRow(id: string, over: Partial<ExecutionRow> = {}): ExecutionRow {
  return {
    execution_id: id,
    run_id: `${id}~r1`,
    root_id: id,
    parent_id: null,
    workflow: "Order",
    version: "1.0.0",
    status: "running",
    input: { order_id: id, lines: [1, 2] },
    output: null,
    error: null,
    created_ms: 1_700_000_000_000,
    closed_ms: null,
    updated_ms: 1_700_000_000_000,
    last_seq: 1,
    ...over,
  };
}

/** The `create` item of a new execution: its row and its WorkflowCreated event. */
export function createItem(id: string, over: Partial<ExecutionRow> = {}): AppendItem {
  const row = execRow(id, over);
  const event: HistoryEvent = {
    seq: 1,
    time_ms: row.created_ms,
    type: "WorkflowCreated",
    workflow: row.workflow,
    version: row.version,
    input: row.input,
    execution_id: row.execution_id,
    run_id: row.run_id,
    root_id: row.root_id,
    parent_id: row.parent_id,
  };
  return { row: { ...row, last_seq: 1 }, events: [event], create: true };
}

/** An append of `count` StepScheduled events after `row.last_seq`, with the row after them. */
export function appendItem(
  row: ExecutionRow,
  count: number,
  over: Partial<ExecutionRow> = {},
): AppendItem {
  const events: HistoryEvent[] = [];
  for (let i = 1; i <= count; i++) {
    const seq = row.last_seq + i;
    events.push({
      seq,
      time_ms: row.updated_ms + i,
      type: "StepScheduled",
      step: `s${seq}`,
      attempt: 1,
      task: "orders.validate",
      contract: "1",
      input: { seq },
      idempotency_key: `${row.execution_id}/s${seq}`,
    });
  }
  const last_seq = row.last_seq + count;
  return { row: { ...row, last_seq, updated_ms: row.updated_ms + count, ...over }, events };
}
