/**
 * The chaos driver's accounting (chaos/driver.ts) against a stub server: a signal or cancel
 * answered 409 (the flow already finished — the retry of a request whose first attempt landed
 * before its connection failed) is not a request left unanswered.
 */
import assert from "node:assert/strict";
import { Driver } from "../chaos/driver.ts";
import { rng } from "../chaos/rng.ts";

/** A stub ORBIT API: starts answer 201, waits "completed", and signals/cancels as told. */
function stub(answer: { cancel: number; go: number }) {
  const seen = { cancel: 0, go: 0 };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (req) => {
    const path = new URL(req.url).pathname;
    const json = (status: number, body: unknown) => Response.json(body, { status });
    if (req.method === "POST" && path === "/v1/executions") {
      return json(201, { status: "running" });
    }
    if (path.endsWith("/cancel")) {
      seen.cancel++;
      return json(
        answer.cancel,
        answer.cancel === 200 ? { status: "cancelled" } : {
          error: { code: answer.cancel === 409 ? "EXECUTION_FINISHED" : "INTERNAL", message: "x" },
        },
      );
    }
    if (path.endsWith("/signals/go")) {
      seen.go++;
      return json(
        answer.go,
        answer.go === 200 ? { seq: 1 } : {
          error: { code: answer.go === 409 ? "EXECUTION_FINISHED" : "INTERNAL", message: "x" },
        },
      );
    }
    if (path.includes("/signals/")) return json(200, { seq: 1 });
    if (path.endsWith("/wait")) return json(200, { status: "completed" });
    return json(404, { error: { code: "NOT_FOUND", message: path } });
  });
  return { url: `http://127.0.0.1:${server.addr.port}`, seen, server };
}

async function drive(answer: { cancel: number; go: number }, until: (s: Driver) => boolean) {
  const s = stub(answer);
  try {
    const d = new Driver(() => s.url, "t", rng(7), 1);
    d.start();
    const deadline = Date.now() + 20_000;
    while (!until(d) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    await d.finish(Date.now() + 2_000);
    return { d, seen: s.seen };
  } finally {
    await s.server.shutdown();
  }
}

Deno.test("chaos driver: a cancel or a go answered 409 (it already finished) is not unanswered", async () => {
  const { d, seen } = await drive(
    { cancel: 409, go: 409 },
    (d) => d.stats.flowsStarted >= 40,
  );
  assert.ok(seen.cancel > 0 && seen.go > 0, JSON.stringify(seen));
  assert.equal(d.stats.unanswered, 0, JSON.stringify(d.stats));
  assert.equal(d.stats.cancels, 0);
});
