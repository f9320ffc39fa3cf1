/**
 * A worker whose host or network dies while its long poll is open sends no FIN: the server
 * cannot tell, and a poll in progress counts as the session's contact. The server therefore
 * answers a poll after at most half of --session-timeout, whatever `wait_s` asked; the silence
 * after it counts, and the attempts the dead worker held are redelivered about one session
 * timeout later, not after the rest of a 60-second wait.
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir, waitFor } from "./support/server.ts";
import { registerWorker } from "./support/workers.ts";

const ONE = {
  ir: "orbit-ir/1",
  name: "Held",
  version: "1.0.0",
  steps: [{ id: "only", task: "t.held", contract: "1", input: "{% $input %}" }],
};

Deno.test({
  name: "a worker that vanishes mid long poll (no FIN) has its attempts redelivered after the " +
    "session timeout, not after the poll's wait",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/b.db`,
      args: ["--session-timeout", "2"],
    });
    let socket: Deno.Conn | null = null;
    try {
      const a = api(server.url);
      assert.equal((await a.post("/v1/workflows", ONE)).status, 201);
      const session = await registerWorker(a, {
        worker_id: "vanishing",
        runtime: "typescript",
        tasks: [{ name: "t.held", contract: "1" }],
        concurrency: 2,
      });
      assert.equal(
        (await a.post("/v1/executions", { workflow: "Held", execution_id: "h-1", input: 1 }))
          .status,
        201,
      );
      const first = await a.post("/v1/workers/poll", { session_id: session, wait_s: 10 });
      assert.equal(first.body.tasks?.[0]?.execution_id, "h-1");

      // The worker holds h-1's attempt, opens a 60-second poll for its free slot, and its
      // network goes dark: the connection stays open, nothing more is read or sent.
      const port = Number(new URL(server.url).port);
      socket = await Deno.connect({ hostname: "127.0.0.1", port });
      const body = JSON.stringify({ session_id: session, wait_s: 60 });
      await socket.write(
        new TextEncoder().encode(
          `POST /v1/workers/poll HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
            `content-length: ${body.length}\r\n\r\n${body}`,
        ),
      );
      const darkAt = Date.now();

      // Poll capped at 1 s, then 2 s of silence: redelivered within a few seconds.
      await waitFor(
        async () => {
          const h = await a.get("/v1/executions/h-1/history");
          // deno-lint-ignore no-explicit-any
          return h.body.events.some((e: any) => e.type === "StepAttemptUncertain");
        },
        "the vanished worker's attempt to be redelivered",
        20_000,
      );
      const after = Date.now() - darkAt;
      assert.ok(after < 10_000, `redelivered ${after} ms after the worker went dark`);
    } finally {
      try {
        socket?.close();
      } catch { /* closed */ }
      await server.kill("SIGKILL");
    }
  },
});
