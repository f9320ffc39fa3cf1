/**
 * The HTTP adapter over a store whose commits fail: an http step whose dispatch or result
 * commit failed is committed again by the adapter (nothing else moves such a step), and the
 * endpoint is called once. `before`: the commit failed without writing; `after`: it was
 * written, then reported a lost connection (the engine shell's rebuild from history handles
 * what landed).
 */
import assert from "node:assert/strict";
import { Runtime } from "../runtime.ts";
import { openStore } from "../store/open.ts";
import { readRun } from "../store/store.ts";
import type { HistoryEvent } from "../engine/events.ts";
import {
  type CommitFault,
  type FaultyStore,
  faultyStore,
  serializationFailure,
} from "../../tests/support/faulty_store.ts";

interface Setup {
  rt: Runtime;
  store: FaultyStore;
  /** Idempotency keys of the requests the endpoint received, in order. */
  calls: string[];
  history(id: string): Promise<HistoryEvent[]>;
}

async function withRuntime(
  answer: () => Response,
  fn: (s: Setup, url: string) => Promise<void>,
): Promise<void> {
  const calls: string[] = [];
  const srv = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (req) => {
    calls.push(req.headers.get("idempotency-key") ?? "");
    return answer();
  });
  const url = `http://127.0.0.1:${(srv.addr as Deno.NetAddr).port}/x`;
  const dir = await Deno.makeTempDir();
  const store = faultyStore(await openStore(`${dir}/orbit.db`));
  const rt = new Runtime(store, {
    sessionTimeoutMs: 60_000,
    maxActiveExecutions: null,
    httpAllow: ["127.0.0.1"],
  });
  await rt.start();
  const history = async (id: string) => {
    const row = await store.getExecution(id);
    return await readRun(store, row!.run_id);
  };
  try {
    await fn({ rt, store, calls, history }, url);
  } finally {
    store.plan = {};
    await rt.stop();
    await srv.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
}

function workflow(url: string) {
  return {
    ir: "orbit-ir/2",
    name: "H",
    version: "1.0.0",
    steps: [
      { id: "call", http: { method: "GET", url } },
      { id: "r", return: "{% $steps.call.body %}" },
    ],
  };
}

/** Fails the first commit that carries an event of `type`, with `fault`. */
function failFirst(store: FaultyStore, type: string, fault: CommitFault): void {
  let armed = true;
  store.plan = {
    // "before": refused by the database itself, which says that nothing was written (a lost
    // connection before the commit would leave it in doubt: tests/ambiguous_*).
    ...(fault === "before" ? { error: serializationFailure } : {}),
    commit: (_n, items) => {
      if (armed && items.some((i) => i.events.some((e) => e.type === type))) {
        armed = false;
        return fault;
      }
      return "ok";
    },
  };
}

const types = (events: HistoryEvent[], step: string) =>
  events.filter((e) => (e as { step?: string }).step === step).map((e) => e.type);

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, sanitizeOps: false, sanitizeResources: false, fn });

for (const [event, label] of [["StepDispatched", "dispatch"], ["StepSucceeded", "result"]]) {
  test(`an http step whose ${label} commit failed without writing is committed again`, () =>
    withRuntime(() => Response.json({ ok: 1 }), async ({ rt, store, calls, history }, url) => {
      await rt.definitions.deploy(workflow(url));
      failFirst(store, event!, "before");
      await rt.executions.start({ workflow: "H", execution_id: "h1" });
      const row = await rt.executions.wait("h1", 15_000);
      assert.equal(store.injected.before, 1);
      assert.equal(row.status, "completed");
      assert.deepEqual(row.output, { ok: 1 });
      // Exactly one recorded dispatch, one call for it, one result.
      assert.deepEqual(types(await history("h1"), "call"), [
        "StepScheduled",
        "StepDispatched",
        "StepSucceeded",
      ]);
      assert.equal(calls.length, 1);
    }));

  test(`an http step whose ${label} commit landed but reported an error runs once`, () =>
    withRuntime(() => Response.json({ ok: 1 }), async ({ rt, store, calls, history }, url) => {
      await rt.definitions.deploy(workflow(url));
      failFirst(store, event!, "after");
      await rt.executions.start({ workflow: "H", execution_id: "h1" });
      const row = await rt.executions.wait("h1", 15_000);
      assert.equal(store.injected.after, 1);
      assert.equal(row.status, "completed");
      const seen = types(await history("h1"), "call");
      assert.deepEqual(
        seen,
        label === "dispatch"
          // The landed dispatch was never called: marked uncertain, then dispatched again.
          ? [
            "StepScheduled",
            "StepDispatched",
            "StepAttemptUncertain",
            "StepDispatched",
            "StepSucceeded",
          ]
          : ["StepScheduled", "StepDispatched", "StepSucceeded"],
      );
      assert.equal(calls.length, 1);
    }));
}

test("an http step whose failure commit failed without writing records the failure once", () =>
  withRuntime(
    () => new Response("no", { status: 404 }),
    async ({ rt, store, calls, history }, url) => {
      await rt.definitions.deploy(workflow(url));
      failFirst(store, "StepFailed", "before");
      await rt.executions.start({ workflow: "H", execution_id: "h1" });
      const row = await rt.executions.wait("h1", 15_000);
      assert.equal(store.injected.before, 1);
      assert.equal(row.status, "failed");
      const seen = types(await history("h1"), "call");
      assert.deepEqual(seen.filter((t) => t === "StepDispatched"), ["StepDispatched"]);
      assert.deepEqual(seen.filter((t) => t === "StepFailed"), ["StepFailed"]);
      assert.equal(calls.length, 1);
    },
  ));

test("a cancel lands while a result is being committed again, and the result is dropped", () =>
  withRuntime(() => Response.json({ ok: 1 }), async ({ rt, store, calls, history }, url) => {
    await rt.definitions.deploy(workflow(url));
    // Every commit of the result is refused until the execution is cancelled.
    store.plan = {
      error: serializationFailure,
      commit: (_n, items) =>
        items.some((i) => i.events.some((e) => e.type === "StepSucceeded")) ? "before" : "ok",
    };
    await rt.executions.start({ workflow: "H", execution_id: "h1" });
    const deadline = Date.now() + 10_000;
    while (store.injected.before < 2) {
      assert.ok(Date.now() < deadline, "the result was not tried again");
      await new Promise((r) => setTimeout(r, 20));
    }
    await rt.executions.cancel("h1", "test");
    const row = await rt.executions.wait("h1", 10_000);
    assert.equal(row.status, "cancelled");
    const seen = types(await history("h1"), "call");
    assert.ok(!seen.includes("StepSucceeded"), seen.join());
    assert.equal(calls.length, 1);
  }));

test("a request whose header value HTTP cannot carry is a failed attempt, not a call that throws", () =>
  withRuntime(() => Response.json({ ok: 1 }), async ({ rt, calls }, url) => {
    // A history written before the engine refused such values may hold one (review: the
    // adapter threw before its call, and the step stayed dispatched for ever).
    const out = await rt.http.call(
      { method: "GET", url, headers: { "x-note": "a\r\nx-injected: 1" } },
      "run-1:h",
      1000,
      new AbortController().signal,
    );
    assert.ok("error" in out, JSON.stringify(out));
    assert.equal(out.error.code, "HTTP_INVALID_REQUEST");
    assert.equal(out.error.retryable, false);
    assert.equal(calls.length, 0);
  }));
