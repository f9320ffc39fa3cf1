/**
 * Signals and queries of orbit-ir/2 executions (SPEC §3): the services behind
 * `POST /v1/executions/{id}/signals/{name}` and `GET /v1/executions/{id}/queries/{name}`.
 *
 * A signal is checked against the workflow's declaration and payload schema, then runs as a
 * command through the engine (one SignalReceived event, and its handler's events, in one
 * append); the answer carries that event's `seq`. A query is evaluated on the state in memory
 * of a running execution, or on the state replayed from the store's history of a finished one.
 */
import { scope } from "../engine/builder.ts";
import { evaluate, ExpressionLimitError } from "../engine/expr.ts";
import type { WorkflowDoc } from "../engine/ir.ts";
import { type ExecutionState, replay } from "../engine/state.ts";
import type { Executions } from "./executions.ts";
import { conflict, invalid, notFound } from "../errors.ts";
import { validateAgainst } from "../jsonschema.ts";
import { type ExecutionRow, readRun } from "../store/store.ts";

async function load(ex: Executions, id: string): Promise<{ row: ExecutionRow; def: WorkflowDoc }> {
  const row = await ex.store.getExecution(id);
  if (!row) throw notFound("UNKNOWN_EXECUTION", `execution ${id} does not exist`);
  const def = await ex.defs.get(row.workflow, row.version);
  if (!def) {
    throw notFound(
      "UNKNOWN_WORKFLOW",
      `workflow ${row.workflow} version ${row.version} of execution ${id} is not deployed`,
    );
  }
  return { row, def };
}

function finished(row: ExecutionRow) {
  return conflict("EXECUTION_FINISHED", `execution ${row.execution_id} is already ${row.status}`, {
    status: row.status,
  });
}

export interface SignalAnswer {
  seq: number;
  execution_id: string;
  run_id: string;
  signal: string;
}

/** Sends signal `name` with `payload` to execution `id`. */
export async function sendSignal(
  ex: Executions,
  id: string,
  name: string,
  payload: unknown,
): Promise<SignalAnswer> {
  const { row, def } = await load(ex, id);
  if (row.status !== "running") throw finished(row);
  const decl = def.signals && Object.hasOwn(def.signals, name) ? def.signals[name] : undefined;
  if (!decl) {
    throw notFound(
      "UNKNOWN_SIGNAL",
      `workflow ${row.workflow} ${row.version} declares no signal "${name.slice(0, 200)}"`,
    );
  }
  const value = payload ?? null;
  if (decl.schema) {
    const problems = validateAgainst(decl.schema, value, "$.payload");
    if (problems.length > 0) {
      throw invalid(
        "SIGNAL_PAYLOAD_INVALID",
        `payload of signal "${name}" does not match its schema in ${row.workflow} ${row.version}`,
        { problems },
      );
    }
  }
  const r = await ex.command(id, { type: "signal", name, payload: value });
  if (r === null && ex.remote) {
    // Shared mode: another node owns it; its inbox applies the signal and answers the seq.
    const f = await ex.remote.forward(id, { type: "signal", name, payload: value });
    if (f?.seq !== undefined) {
      return { seq: f.seq, execution_id: id, run_id: f.row?.run_id ?? row.run_id, signal: name };
    }
  }
  const received = r?.events.find((e) => e.type === "SignalReceived");
  if (!r || !received) {
    const now = await ex.store.getExecution(id);
    if (now && now.status !== "running") throw finished(now);
    throw notFound("UNKNOWN_EXECUTION", `execution ${id} is not running on this server`);
  }
  return { seq: received.seq, execution_id: id, run_id: r.state.run_id, signal: name };
}

/** Evaluates query `name` of execution `id`: `{result}`. */
export async function runQuery(
  ex: Executions,
  id: string,
  name: string,
): Promise<{ result: unknown }> {
  const { row, def } = await load(ex, id);
  const tpl = def.queries && Object.hasOwn(def.queries, name) ? def.queries[name] : undefined;
  if (tpl === undefined) {
    throw notFound(
      "UNKNOWN_QUERY",
      `workflow ${row.workflow} ${row.version} declares no query "${name.slice(0, 200)}"`,
    );
  }
  const active = ex.currentStateOf(id);
  const state: ExecutionState = active && active.run_id === row.run_id
    ? active
    : replay(await readRun(ex.store, row.run_id));
  try {
    return { result: await evaluate(tpl, scope(state)) };
  } catch (e) {
    const code = e instanceof ExpressionLimitError ? "EXPRESSION_LIMIT" : "QUERY_FAILED";
    throw invalid(code, `query "${name}" failed: ${(e as Error).message}`);
  }
}
