/**
 * The Client with `transport: "http1"` against a real server process: deploy, start, get, wait
 * and a refused request answer as over fetch, concurrent requests too. How connections are kept,
 * reused and closed: http1_test.ts.
 */
import assert from "node:assert/strict";
import { Client, OrbitApiError } from "./mod.ts";
import { startServer, tempDir } from "../../tests/support/server.ts";
import { ORDER_WORKFLOW, orderInput } from "../../tests/support/orders.ts";

Deno.test("Client transport http1: the same answers as fetch, one connection for a sequence", async () => {
  const server = await startServer({ db: `${await tempDir()}/c.db` });
  const fetchClient = new Client({ server: server.url });
  const client = new Client({ server: server.url, transport: "http1" });
  try {
    await client.deploy(ORDER_WORKFLOW);
    const started = await client.start("OrderProcessing", {
      executionId: "h1-1",
      input: orderInput("h1-1"),
    });
    assert.equal(started.execution_id, "h1-1");
    assert.deepEqual(await client.get("h1-1"), await fetchClient.get("h1-1"));
    const waited = await client.wait("h1-1", { timeoutS: 0 });
    assert.equal(waited.status, "running");

    const missing = await client.get("no-such").catch((e) => e);
    assert.ok(missing instanceof OrbitApiError, String(missing));
    assert.equal(missing.status, 404);
    assert.equal(missing.code, "UNKNOWN_EXECUTION");

    // Concurrent requests, each on a connection of its own, then kept for the next ones.
    const all = await Promise.all(Array.from({ length: 4 }, () => client.get("h1-1")));
    assert.ok(all.every((e) => e.execution_id === "h1-1"));
    for (let i = 0; i < 3; i++) assert.equal((await client.get("h1-1")).execution_id, "h1-1");
  } finally {
    client.close();
    await server.kill();
  }
});

Deno.test("Client transport http1: an execution's wait goes out on the connection that started it", async () => {
  // A stand-in server that answers with the port of the connection each request came on.
  const ports = new Map<string, number>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (req, info) => {
      const path = new URL(req.url).pathname;
      const port = info.remoteAddr.port;
      if (req.method === "POST") {
        const { execution_id: id } = await req.json();
        ports.set(`start ${id}`, port);
        return Response.json({ execution_id: id, status: "running" });
      }
      const wait = path.match(/^\/v1\/executions\/([^/]+)\/wait$/);
      if (wait) {
        ports.set(`wait ${wait[1]}`, port);
        return Response.json({ execution_id: wait[1], status: "completed" });
      }
      await new Promise((r) => setTimeout(r, 150));
      ports.set("slow", port);
      return Response.json({ execution_id: "slow", status: "running" });
    },
  );
  const client = new Client({ server: `http://127.0.0.1:${server.addr.port}`, transport: "http1" });
  try {
    // The start answers first, the slow read last: its connection is the most recently used.
    await Promise.all([client.start("W", { executionId: "e1" }), client.get("slow")]);
    assert.notEqual(ports.get("start e1"), ports.get("slow"));
    // An execution this client did not start: the most recently used connection.
    await client.wait("e2");
    assert.equal(ports.get("wait e2"), ports.get("slow"));
    assert.equal((await client.wait("e1")).status, "completed");
    assert.equal(ports.get("wait e1"), ports.get("start e1"));
  } finally {
    client.close();
    await server.shutdown();
  }
});
