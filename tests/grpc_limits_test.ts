/**
 * The binding's limits as gRPC statuses: RESOURCE_EXHAUSTED with `orbit-error-code` and the
 * API's JSON error, as HTTP answers 413 and 429 — a body over `--max-body-bytes` (judged by the
 * HTTP layer), a message so large that grpc-js refuses it before any handler runs (the same
 * BODY_TOO_LARGE answer), and a start past `--max-active-executions` (with `retry-after`, which
 * grpcFetch turns back into HTTP's header).
 */
import assert from "node:assert/strict";
import { api, tempDir } from "./support/server.ts";
import { WORKFLOW } from "./support/three_steps.ts";
import { asHttp, grpcClient, sameAnswer, startGrpcServer } from "./grpc_support.ts";
import { grpcFetch } from "../lib/grpc/fetch.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const TOKEN = "client-token-0123456789abcdef";
const LIMIT = 4096;

Deno.test({
  ...T,
  name: "grpc: limits fail RESOURCE_EXHAUSTED with orbit-error-code, as HTTP's 413 and 429",
  fn: async () => {
    const dir = await tempDir();
    const s = await startGrpcServer({
      db: `${dir}/orbit.db`,
      args: [
        "--token",
        TOKEN,
        "--max-body-bytes",
        String(LIMIT),
        "--max-active-executions",
        "1",
      ],
    });
    const g = grpcClient(s.grpcAddr, { token: TOKEN });
    try {
      const http = api(s.url, TOKEN);
      assert.equal((await http.post("/v1/workflows", WORKFLOW)).status, 201);
      const tooLarge = {
        error: {
          code: "BODY_TOO_LARGE",
          message: `request body exceeds ${LIMIT} bytes`,
          limit_bytes: LIMIT,
        },
      };

      // Over --max-body-bytes: the JSON body the call becomes is refused by the HTTP layer.
      const padded = JSON.stringify({ ...WORKFLOW, pad: "x".repeat(LIMIT) });
      const over = await sameAnswer(
        s.url,
        g,
        TOKEN,
        { method: "POST", path: "/v1/workflows", raw: padded },
        { service: "Workflows", rpc: "Deploy", request: { document_json: padded } },
      );
      assert.equal(over.grpc.grpc, "RESOURCE_EXHAUSTED");
      assert.deepEqual(over.grpc.body, tooLarge);

      // Far over it: grpc-js's own message limit refuses the call before the handler; the
      // answer is still BODY_TOO_LARGE with its metadata.
      const huge = JSON.stringify({ ...WORKFLOW, pad: "x".repeat(200 * LIMIT) });
      const refused = asHttp(await g.call("Workflows", "Deploy", { document_json: huge }));
      assert.equal(refused.grpc, "RESOURCE_EXHAUSTED");
      assert.equal(refused.orbitCode, "BODY_TOO_LARGE", JSON.stringify(refused));
      assert.equal(refused.status, 413);
      assert.deepEqual(refused.body, tooLarge);
      // The server goes on serving after it.
      assert.equal((await g.call("System", "Health", {})).ok, true);

      // Past --max-active-executions: 429 TOO_MANY_ACTIVE_EXECUTIONS, retry-after 1.
      const first = asHttp(
        await g.call("Executions", "Start", { workflow: "Three", input_json: "1" }),
      );
      assert.equal(first.status, 201, JSON.stringify(first));
      const busy = await sameAnswer(
        s.url,
        g,
        TOKEN,
        { method: "POST", path: "/v1/executions", body: { workflow: "Three", input: 2 } },
        { service: "Executions", rpc: "Start", request: { workflow: "Three", input_json: "2" } },
      );
      assert.equal(busy.http.status, 429);
      assert.equal(busy.grpc.grpc, "RESOURCE_EXHAUSTED");
      assert.equal(busy.grpc.orbitCode, "TOO_MANY_ACTIVE_EXECUTIONS");
      assert.equal(busy.grpc.metadata?.["retry-after"], "1");
      // grpcFetch (the SDK's and the CLI's gRPC transport) gives it back as HTTP's header.
      const f = grpcFetch({ addr: s.grpcAddr });
      try {
        const res = await f(`${s.url}/v1/executions`, {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({ workflow: "Three", input: 3 }),
        });
        assert.equal(res.status, 429);
        assert.equal(res.headers.get("retry-after"), "1");
        assert.equal((await res.json()).error.code, "TOO_MANY_ACTIVE_EXECUTIONS");
      } finally {
        f.close();
      }
    } finally {
      g.close();
      assert.equal((await s.kill()).code, 0, s.logs.join("\n"));
    }
  },
});
