/**
 * The cluster gate (standby mode): on a server that is not serving as the leader, every route
 * but GET answers 503 NOT_LEADER with `retry-after: 1` and the leader's advertised address.
 * It runs before authentication, so a standby answers NOT_LEADER even without credentials.
 */
import type { MiddlewareHandler } from "hono";
import { NotLeaderError } from "../lib/errors.ts";

export interface GateView {
  /** True when this server may handle writes (the leader within its lease, or no cluster). */
  serving(): boolean;
  leader(): { node_id: string; addr: string | null } | null;
}

export function clusterGate(view: GateView): MiddlewareHandler {
  return async (c, next) => {
    if (c.req.method === "GET" || c.req.method === "HEAD" || view.serving()) return await next();
    throw new NotLeaderError(view.leader());
  };
}
