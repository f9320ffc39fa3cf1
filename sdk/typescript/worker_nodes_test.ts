/**
 * The worker's router (worker/nodes.ts) without a server: which addresses of a health answer
 * it spreads slots over, how evenly, and how a node that does not answer or leaves is handled.
 * The end-to-end behaviour against real shared servers is tests/cluster_shared_spread_test.ts.
 */
import assert from "node:assert/strict";
import { liveAddresses, Nodes, UNREACHABLE_MS } from "./worker/nodes.ts";
import type { WorkerCore } from "./worker/common.ts";
import { Transport } from "./http.ts";
import { recordingLogger } from "./testing/helpers.ts";

const node = (addr: unknown, live = true) => ({ node_id: String(addr), addr, live });

Deno.test("liveAddresses: the live shared nodes' http(s) addresses, sorted, once each", () => {
  const health = {
    role: "shared",
    nodes: [
      node("http://b:7233/"),
      node("http://a:7233"),
      node("http://c:7233", false),
      node(null),
      node("not a url"),
      node("ftp://d:21"),
      node("https://a:7233"),
      node("http://a:7233"),
    ],
  };
  assert.deepEqual(liveAddresses(health), ["http://a:7233", "http://b:7233", "https://a:7233"]);
  // Anything but a shared cluster: every slot stays on the configured address.
  for (const role of ["single", "leader", "standby", undefined]) {
    assert.deepEqual(liveAddresses({ ...health, role }), [], String(role));
  }
  assert.deepEqual(liveAddresses({ role: "shared" }), []);
  assert.deepEqual(liveAddresses(null), []);
  assert.deepEqual(liveAddresses("ok"), []);
});

function router(o: { now?: () => number; offset?: number; left?: Set<string>[] } = {}) {
  const logger = recordingLogger();
  const core = {
    logger,
    server: "http://lb:7233",
    transport: new Transport({ server: "http://lb:7233" }),
    requestTimeoutMs: 1000,
  } as unknown as WorkerCore;
  const nodes = new Nodes(core, {
    enabled: true,
    refreshMs: 1000,
    onLeft: (left) => o.left?.push(left),
    ...(o.now ? { now: o.now } : {}),
    offset: o.offset ?? 0,
  });
  return { nodes, logger };
}

Deno.test("Nodes: slots spread evenly over the live nodes; none known, the configured address", () => {
  const { nodes } = router({ offset: 5 });
  assert.equal(nodes.targetFor(0), null);
  nodes.update(["http://a", "http://b", "http://c"]);
  const count = new Map<string | null, number>();
  for (let i = 0; i < 8; i++) {
    const t = nodes.targetFor(i);
    count.set(t, (count.get(t) ?? 0) + 1);
  }
  assert.deepEqual([...count.values()].sort(), [2, 3, 3]);
  assert.equal(count.has(null), false);
  // Two slots on two nodes: one each, whatever the offset.
  for (const offset of [0, 1, 7]) {
    const { nodes: two } = router({ offset });
    two.update(["http://a", "http://b"]);
    assert.notEqual(two.targetFor(0), two.targetFor(1));
  }
});

Deno.test("Nodes: a node that did not answer is left out for a while, then tried again", () => {
  let now = 1_000;
  const { nodes, logger } = router({ now: () => now });
  nodes.update(["http://a", "http://b"]);
  assert.equal(nodes.targetFor(1), "http://b");
  nodes.unreachable("http://b", "connection refused");
  nodes.unreachable("http://b", "connection refused"); // logged once
  assert.equal(nodes.targetFor(1), null);
  assert.equal(nodes.targetFor(0), "http://a");
  now += UNREACHABLE_MS - 1;
  assert.equal(nodes.targetFor(1), null);
  now += 1;
  assert.equal(nodes.targetFor(1), "http://b");
  assert.equal(
    logger.lines.filter((l) => /node http:\/\/b did not answer/.test(l.message)).length,
    1,
  );
});

Deno.test("Nodes: the slots of a node that left the live list are told at once", () => {
  const left: Set<string>[] = [];
  const { nodes, logger } = router({ left });
  nodes.update(["http://a", "http://b", "http://c"]);
  nodes.update(["http://a", "http://b", "http://c"]); // unchanged: nothing
  nodes.update(["http://a", "http://c", "http://d"]);
  assert.deepEqual(left, [new Set(["http://b"])]);
  nodes.update([]);
  assert.deepEqual(left[1], new Set(["http://a", "http://c", "http://d"]));
  assert.equal(nodes.targetFor(0), null);
  assert.match(logger.text(), /slots use the configured address/);
  assert.match(logger.text(), /slots spread over 3 node\(s\): http:\/\/a, http:\/\/c, http:\/\/d/);
});
