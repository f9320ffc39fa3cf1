/**
 * SharedWorkers' claim path on a real PostgreSQL, with the engine faked: what the worker is
 * told about an attempt is what the history recorded for its dispatch.
 */
import assert from "node:assert/strict";
import { SharedWorkers } from "./shared_workers.ts";
import type { Executions } from "../lib/executions.ts";
import { Metrics } from "../lib/metrics.ts";
import { openStore } from "../lib/store/open.ts";
import { postgresClient } from "../lib/store/postgres.ts";
import { sharedPostgres } from "../tests/support/pg.ts";

Deno.test({
  name: "a queued row from before an uncertain attempt is handed out as a redelivery",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // Found by the chaos suite (shared mode, a dispatch commit cut by a black-holed database
    // link): the dispatch landed although it reported an error, so its row went back on the
    // queue with the first delivery's payload; the attempt was then marked uncertain, and the
    // stale row's next claim recorded StepDispatched with redelivery: true while the worker
    // was told redelivery: false.
    const url = await (await sharedPostgres()).createDatabase();
    await (await openStore(url)).close();
    const sql = postgresClient(url, { max: 2, applicationName: "orbit-test" });
    const dispatches: unknown[] = [];
    const executions = {
      observer: null,
      active: new Map(),
      remote: null,
      command: (id: string, cmd: { type: string; step: string }) => {
        dispatches.push([id, cmd.type, cmd.step]);
        // The engine's state after the dispatch: a redelivery of attempt 1.
        return Promise.resolve({
          accepted: true,
          state: { execution_id: id, steps: { charge: { redelivery: true, deadline_ms: null } } },
        });
      },
    } as unknown as Executions;
    const workers = new SharedWorkers(executions, new Metrics(), {
      nodeId: "node-1",
      sessionTimeoutMs: 30_000,
      now: () => Date.now(),
      newId: () => crypto.randomUUID(),
      sql,
      drainInbox: () => Promise.resolve(),
      notify: () => {},
      healthySince: () => 0,
    });
    try {
      await sql`INSERT INTO orbit_owners (execution_id, root_id, node_id, epoch, since_ms)
        VALUES ('e-1', 'e-1', 'node-1', 1, 0)`;
      const payload = {
        execution_id: "e-1",
        step: "charge",
        attempt: 1,
        task: "payments.charge",
        contract: "1",
        input: {},
        idempotency_key: "k-1",
        redelivery: false,
        deadline_ms: null,
      };
      await sql`INSERT INTO orbit_tasks (execution_id, task_name, contract_version, state,
          enqueued_ms, payload, run_id, step, attempt, unit)
        VALUES ('e-1', 'payments.charge', '1', 'queued', 0, ${sql.json(payload)}, 'r-1',
          'charge', 1, 'r-1/charge/1/0')`;
      const session = await workers.register({
        worker_id: "w-1",
        runtime: "typescript",
        tasks: [{ name: "payments.charge", contract: "1" }],
        concurrency: 1,
      });
      const tasks = await workers.poll(session, 1, 0);
      assert.equal(tasks.length, 1);
      assert.deepEqual(dispatches, [["e-1", "dispatch", "charge"]]);
      assert.equal(tasks[0]!.redelivery, true, "the worker hears the recorded redelivery");
      assert.equal(tasks[0]!.idempotency_key, "k-1");
    } finally {
      workers.stop();
      await sql.end({ timeout: 5 });
    }
  },
});
