/**
 * A shared-mode node in this process (cluster/*_test.ts), with its app reached through
 * `SharedNode.fetch` and no listener: for tests that reach into a node's connections
 * (`afterStatement`) or time its answers.
 *
 * ```ts
 * const a = inProcessNode(url, "node-a");
 * await a.n.open();
 * await a.n.start(null);
 * const r = await a.call("GET", "/v1/ready"); // { status, body, ms }
 * ```
 */
import { SharedNode } from "../../cluster/shared/node.ts";
import { Runtime } from "../../lib/runtime.ts";
import { createApp } from "../../routes/app.ts";
import type { Store } from "../../lib/store/store.ts";
import type postgres from "postgres";
import { TAKE_OVER } from "../../sql/postgres/shared/mod.ts";

export function inProcessNode(
  url: string,
  nodeId: string,
  opts: {
    nodeTimeoutMs?: number;
    /** `--session-timeout` in ms (default 3000). */
    sessionTimeoutMs?: number;
    /** `--cache-executions` (default: every running execution stays in memory). */
    cacheExecutions?: number;
    /** `--http-allow` (default: none). */
    httpAllow?: string[];
    /** Wraps the store the runtime uses (a test that holds back one of its reads). */
    store?: (store: Store) => Store;
    afterStatement?: (text: string) => void;
    /** What the server would exit with (default: thrown). */
    onFatal?: (message: string) => void;
  } = {},
) {
  const sessionTimeoutMs = opts.sessionTimeoutMs ?? 3000;
  const n: SharedNode = new SharedNode({
    url,
    nodeId,
    nodeTimeoutMs: opts.nodeTimeoutMs ?? 2000,
    sessionTimeoutMs,
    runtime: (store, shared) =>
      new Runtime(opts.store ? opts.store(store) : store, {
        sessionTimeoutMs,
        maxActiveExecutions: null,
        cluster: n,
        shared,
        ...(opts.cacheExecutions !== undefined ? { cacheExecutions: opts.cacheExecutions } : {}),
        ...(opts.httpAllow ? { httpAllow: opts.httpAllow } : {}),
      }),
    app: (rt) => createApp(rt, { token: null, maxBodyBytes: 1 << 20, ui: false }),
    onFatal: opts.onFatal ?? ((message) => {
      throw new Error(message);
    }),
    ...(opts.afterStatement ? { afterStatement: opts.afterStatement } : {}),
  });
  return { n, call: appCaller(n.fetch) };
}

/**
 * Calls a server's handler in process (no listener): `call(method, path, body?)` answers
 * `{status, body, ms}`, the body parsed as JSON.
 */
export function appCaller(
  fetch: (req: Request, info: Deno.ServeHandlerInfo) => Response | Promise<Response>,
) {
  return async (method: string, path: string, body?: unknown) => {
    const t0 = performance.now();
    const res = await fetch(
      new Request(`http://node${path}`, {
        method,
        ...(body === undefined
          ? {}
          : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
      }),
      {} as Deno.ServeHandlerInfo,
    );
    // deno-lint-ignore no-explicit-any
    const json = await res.json() as any;
    return { status: res.status, body: json, ms: performance.now() - t0 };
  };
}

/** An in-process node, opened and started (it serves once this resolves). */
export async function startedNode(
  url: string,
  nodeId: string,
  opts: Parameters<typeof inProcessNode>[2] = {},
): Promise<ReturnType<typeof inProcessNode>> {
  const node = inProcessNode(url, nodeId, opts);
  await node.n.open();
  await node.n.start(null);
  return node;
}

/** Deploys `workflows` through `node` and starts one execution there, asserting each answer. */
export async function deployAndStart(
  node: { call: ReturnType<typeof inProcessNode>["call"] },
  workflows: unknown[],
  start: { workflow: string; execution_id: string; input: unknown },
): Promise<void> {
  for (const wf of workflows) {
    const r = await node.call("POST", "/v1/workflows", wf);
    if (r.status !== 201) throw new Error(`deploy answered ${r.status}: ${JSON.stringify(r.body)}`);
  }
  const r = await node.call("POST", "/v1/executions", start);
  if (r.status !== 201) throw new Error(`start answered ${r.status}: ${JSON.stringify(r.body)}`);
}

/**
 * Node `to` takes the trees of `roots` from node `from` with the takeover's own statement
 * (TAKE_OVER), as after a silence of `from`, without `from` noticing: its heartbeats go on.
 * Answers how many executions moved.
 */
export async function takeOverFrom(
  sql: postgres.Sql,
  from: string,
  to: { n: SharedNode },
  roots: string[],
): Promise<number> {
  const took = await sql.unsafe(TAKE_OVER, [
    to.n.opts.nodeId,
    roots,
    from,
    Date.now(),
    to.n.instance,
  ]);
  return took.length;
}
