/**
 * `Workers.PollStream` (lib/grpc/poll_stream.ts): tasks pushed as the session's slots free —
 * never more out at once than `slots` (a task beyond them stays for another worker to take), a
 * slot freed by a Complete over gRPC and by heartbeats that no longer list a task whose result
 * went over HTTP — and a stream for an unknown session ends with UNKNOWN_SESSION.
 */
import assert from "node:assert/strict";
import { api, tempDir, waitFor } from "./support/server.ts";
import { TASKS, WORKFLOW } from "./support/three_steps.ts";
import { grpcClient, startGrpcServer } from "./grpc_support.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const TOKEN = "client-token-0123456789abcdef";

interface Task {
  token: string;
  execution_id: string;
  step: string;
  input_json: string;
}

Deno.test({
  ...T,
  name: "grpc: PollStream pushes tasks as slots free, never more than its slots",
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({ db: `${dir}/orbit.db`, args: ["--token", TOKEN] });
    const g = grpcClient(s.grpcAddr, { token: TOKEN });
    const http = api(s.url, TOKEN);
    try {
      assert.equal((await http.post("/v1/workflows", WORKFLOW)).status, 201);
      const unknown = g.open("Workers", "PollStream", { session_id: "nope", slots: 1 });
      const gone = await unknown.ended;
      assert.equal(gone?.status, "NOT_FOUND");
      assert.equal(gone?.orbitCode, "UNKNOWN_SESSION");

      const reg = await g.call("Workers", "Register", {
        worker_id: "w-stream",
        tasks: TASKS,
        concurrency: 2,
      });
      assert.ok(reg.ok);
      const session = reg.value.session_id as string;
      const stream = g.open<Task>("Workers", "PollStream", {
        session_id: session,
        slots: 2,
        wait_s: 5,
      });
      const pushed = stream.messages;
      const pushes = (n: number, what: string) =>
        waitFor(() => pushed.length >= n, `${what} (${pushed.length} pushed)`);

      for (const id of ["e-1", "e-2", "e-3"]) {
        const r = await http.post("/v1/executions", {
          workflow: "Three",
          execution_id: id,
          input: 1,
        });
        assert.equal(r.status, 201);
      }
      await pushes(2, "two tasks pushed");
      assert.deepEqual(pushed.map((t) => t.step), ["one", "one"]);
      // Both slots are held: the third task is still there for another worker.
      const other = await http.post("/v1/workers/register", {
        worker_id: "w-http",
        tasks: [TASKS[0]],
      });
      const polled = await http.post("/v1/workers/poll", {
        session_id: other.body.session_id,
        max_tasks: 3,
        wait_s: 0,
      });
      assert.equal(polled.body.tasks.length, 1, JSON.stringify(polled.body));
      const third = polled.body.tasks[0];
      assert.ok(!pushed.some((t) => t.execution_id === third.execution_id));
      assert.equal(pushed.length, 2);

      // A Complete over gRPC frees its slot: the execution's next step is pushed.
      const [a, b] = [pushed[0]!, pushed[1]!];
      const done = await g.call("Workers", "Complete", { token: a.token, output_json: "2" });
      assert.ok(done.ok && done.value.accepted, JSON.stringify(done));
      await pushes(3, "the next step after a Complete over gRPC");
      assert.equal(pushed[2]!.execution_id, a.execution_id);
      assert.equal(pushed[2]!.step, "two");
      assert.equal(pushed[2]!.input_json, "2");

      // A result over HTTP: the slot frees when the session's heartbeats stop listing the task.
      const viaHttp = await http.post("/v1/tasks/complete", { token: b.token, output: 2 });
      assert.equal(viaHttp.body.accepted, true);
      for (let i = 0; i < 2; i++) {
        const beat = await g.call("Workers", "Heartbeat", {
          session_id: session,
          tokens: [pushed[2]!.token],
        });
        assert.ok(beat.ok, JSON.stringify(beat));
      }
      await pushes(4, "the next step after heartbeats without the task");
      assert.equal(pushed[3]!.execution_id, b.execution_id);
      assert.equal(pushed[3]!.step, "two");

      stream.cancel();
      assert.equal((await stream.ended)?.status, "CANCELLED");
    } finally {
      g.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
