/**
 * The TypeScript SDK over gRPC (sdk/typescript/grpc_transport.ts): a `Client` and a `Worker`
 * given `grpcFetch` as their `fetch` run a workflow end to end on a server's --grpc-addr; the
 * API's errors come back as the same `OrbitApiError`s; the server saw no HTTP API request.
 */
import assert from "node:assert/strict";
import { Client, defineTask, OrbitApiError, Worker } from "../sdk/typescript/mod.ts";
import { grpcFetch } from "../sdk/typescript/grpc_transport.ts";
import { api, tempDir } from "./support/server.ts";
import { WORKFLOW } from "./support/three_steps.ts";
import { startGrpcServer } from "./grpc_support.ts";

const TOKEN = "client-token-0123456789abcdef";

Deno.test({
  name: "grpc: the SDK's Client and Worker run an execution over gRPC (grpcFetch)",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({ db: `${dir}/orbit.db`, args: ["--token", TOKEN] });
    const before = Number(
      /orbit_http_requests_total\{code="2xx"\} (\d+)/.exec(
        await (await fetch(`${s.url}/v1/metrics`, {
          headers: { authorization: `Bearer ${TOKEN}` },
        })).text(),
      )?.[1] ?? 0,
    );
    const grpc = grpcFetch({ addr: s.grpcAddr });
    // A server address nothing listens on: every request must go over gRPC.
    const server = "http://127.0.0.1:9";
    const client = new Client({ server, token: TOKEN, fetch: grpc });
    const add = (name: string) =>
      defineTask({
        name,
        contract: "1",
        handler: (input: { n: number; via: string[] }) => ({
          ...input,
          n: input.n + 1,
          via: [...input.via, name],
        }),
      });
    const worker = new Worker({
      server,
      token: TOKEN,
      fetch: grpc,
      workerId: "sdk-grpc",
      tasks: [add("t.one"), add("t.two"), add("t.three")],
      concurrency: 2,
      pollWaitS: 1,
    });
    try {
      const deployed = await client.deploy(WORKFLOW);
      assert.equal(deployed.created, true);
      await worker.start();
      const input = { n: 0.5, via: [] as string[], big: 1e21 };
      const started = await client.start("Three", { input, executionId: "sdk-1" });
      assert.equal(started.execution_id, "sdk-1");
      const done = await client.wait("sdk-1", { timeoutS: 30 });
      assert.equal(done.status, "completed");
      assert.deepEqual(done.output, { ...input, n: 3.5, via: ["t.one", "t.two", "t.three"] });
      const history = await client.history("sdk-1");
      assert.equal(history.events.at(-1)?.type, "WorkflowCompleted");
      assert.deepEqual(
        (await api(s.url, TOKEN).get("/v1/executions/sdk-1/history")).body,
        history,
      );
      await assert.rejects(
        () => client.get("nope"),
        (e) => e instanceof OrbitApiError && e.status === 404 && e.code === "UNKNOWN_EXECUTION",
      );
      const anonymous = new Client({ server, fetch: grpc });
      await assert.rejects(
        () => anonymous.get("sdk-1"),
        (e) => e instanceof OrbitApiError && e.status === 401 && e.code === "UNAUTHORIZED",
      );
      await worker.stop();
      const after = Number(
        /orbit_http_requests_total\{code="2xx"\} (\d+)/.exec(
          await (await fetch(`${s.url}/v1/metrics`, {
            headers: { authorization: `Bearer ${TOKEN}` },
          })).text(),
        )?.[1] ?? 0,
      );
      // The calls went through the app (counted there), none over an HTTP connection of ours.
      assert.ok(after > before + 10, `${before} -> ${after}`);
    } finally {
      await worker.stop().catch(() => {});
      grpc.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
