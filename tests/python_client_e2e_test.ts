/**
 * The Python client and workflow builder against a real server: orbit-ir/1 and orbit-ir/2
 * documents built in Python (tasks, retries, compensations, signals, handlers, queries, sleep,
 * parallel, if, child, http, continue-as-new) are validated by the server's deploy and run;
 * start, signal, query, wait, paged history, cancel, schedules and the API's error codes are
 * driven by `sdk/python/testing/client_walk.py`.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir } from "./support/server.ts";

const ROOT = new URL("../", import.meta.url).pathname;

Deno.test({
  name: "Python client and builder: documents deploy on a real server and executions run",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--http-allow", "127.0.0.1:8099"],
    });
    try {
      const out = await new Deno.Command("python3", {
        args: [`${ROOT}sdk/python/testing/client_walk.py`, server.url],
        env: { PYTHONPATH: `${ROOT}sdk/python`, PYTHONDONTWRITEBYTECODE: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, stderr);
      const summary = JSON.parse(new TextDecoder().decode(out.stdout));
      assert.equal(summary.ir1, "orbit-ir/1");
      assert.deepEqual(summary.ir2, ["orbit-ir/2", "orbit-ir/2"]);
      assert.equal(summary.conflict, 409);
      assert.ok(summary.invalid_problems >= 1);
      assert.deepEqual(summary.comments, ["looks fine"]);
      assert.equal(summary.status_query, "waiting");
      assert.deepEqual(summary.output, { tier: "gold", tracking: "trk-o-9", by: "ada" });
      assert.equal(summary.final_status_query, "approved by ada");
      assert.equal(summary.history_last, "WorkflowCompleted");
      assert.equal(summary.first_page, 3);
      assert.equal(summary.cancelled, "cancelled");
      assert.equal(summary.continued_then_cancelled, "cancelled");
      assert.deepEqual(summary.scheduled_run, { tracking: "trk-s" });
      assert.deepEqual(summary.schedule, { fired: 1, paused: true });

      // The server kept what the builder emitted: every orbit-ir/2 kind is in the document.
      const def = (await api(server.url).get("/v1/workflows/PyApproval/1.0.0")).body;
      const text = JSON.stringify(def);
      for (
        const key of [
          "wait_signal",
          "sleep_s",
          "parallel",
          '"if"',
          "assign",
          "child",
          "http",
          "continue_as_new",
          "handlers",
          "queries",
        ]
      ) {
        assert.ok(text.includes(key), `${key} missing from ${text}`);
      }
      const history =
        (await api(server.url).get("/v1/executions/ap-1/history?limit=1000")).body.events;
      assert.equal(history.length, summary.history_events);
      assert.ok(history.some((e: { type: string }) => e.type === "ChildStarted"));
    } finally {
      await server.kill("SIGKILL");
    }
  },
});
