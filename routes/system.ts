/** `/v1/health`, `/v1/ready` (no credentials) and `/v1/metrics`. */
import { Hono } from "hono";
import type { Runtime } from "../lib/runtime.ts";

export function systemRoutes(rt: Runtime): Hono {
  const app = new Hono();
  app.get("/v1/health", async (c) => c.json(await rt.health()));
  app.get("/v1/ready", async (c) => {
    const r = await rt.ready();
    return c.json(r, r.ready ? 200 : 503);
  });
  return app;
}

export function metricsRoutes(rt: Runtime): Hono {
  const app = new Hono();
  app.get(
    "/",
    (c) => c.text(rt.renderMetrics(), 200, { "content-type": "text/plain; version=0.0.4" }),
  );
  return app;
}
