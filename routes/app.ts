/**
 * The HTTP application: one Hono app with the resource sub-apps mounted, bearer
 * authentication on everything but health and ready, a body size limit, and one error handler
 * that turns every failure into `{"error":{"code","message",…}}` with the right status.
 */
import { Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HTTPException } from "hono/http-exception";
import { timingSafeEqual } from "hono/utils/buffer";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { OrbitError } from "../lib/errors.ts";
import type { Runtime } from "../lib/runtime.ts";
import { log } from "../lib/log.ts";
import { metricsRoutes, systemRoutes } from "./system.ts";
import { workflowRoutes } from "./workflows.ts";
import { executionRoutes } from "./executions.ts";
import { workerRoutes } from "./workers.ts";
import { taskRoutes } from "./tasks.ts";
import { uiRoutes } from "./ui.ts";

export interface AppOptions {
  token: string | null;
  maxBodyBytes: number;
  ui: boolean;
}

function errorResponse(e: OrbitError): Response {
  return new Response(JSON.stringify(e.toBody()), {
    status: e.status,
    headers: { "content-type": "application/json", ...e.headers },
  });
}

/**
 * `Authorization: Bearer <token>`, compared in constant time. Every other header (none, another
 * scheme, no token, a wrong one) is 401 UNAUTHORIZED: hono's bearerAuth answers 400 for a
 * header it cannot parse.
 */
function bearer(token: string): MiddlewareHandler {
  return async (c, next) => {
    const m = /^Bearer +(\S+)$/i.exec(c.req.header("authorization") ?? "");
    if (!m || !(await timingSafeEqual(token, m[1]!))) {
      throw new OrbitError(
        401,
        "UNAUTHORIZED",
        "missing or invalid bearer token (Authorization: Bearer <token>)",
        {},
        { "www-authenticate": 'Bearer realm="orbit"' },
      );
    }
    await next();
  };
}

export function createApp(rt: Runtime, opts: AppOptions): Hono {
  const app = new Hono();

  app.onError((err, _c) => {
    if (err instanceof OrbitError) return errorResponse(err);
    if (err instanceof HTTPException) {
      const status = err.status;
      const code = status === 401 ? "UNAUTHORIZED" : status === 400 ? "BAD_REQUEST" : "HTTP_ERROR";
      const message = status === 401
        ? "missing or invalid bearer token (Authorization: Bearer <token>)"
        : err.message || "request refused";
      return errorResponse(new OrbitError(status, code, message));
    }
    log.server.error("unhandled error", { error: (err as Error).stack ?? String(err) });
    return errorResponse(new OrbitError(500, "INTERNAL", "internal error; see the server log"));
  });
  app.notFound((c) =>
    errorResponse(new OrbitError(404, "NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`))
  );

  app.use(async (c, next) => {
    await next();
    rt.metrics.httpRequests.inc({ code: `${Math.floor(c.res.status / 100)}xx` });
  });

  // Health and ready never need credentials.
  app.route("/", systemRoutes(rt));
  if (opts.ui) app.route("/", uiRoutes());

  // Credentials first: a client without them learns nothing, not even the body limit.
  if (opts.token) app.use("/v1/*", bearer(opts.token));
  app.use(
    "/v1/*",
    bodyLimit({
      maxSize: opts.maxBodyBytes,
      onError: () => {
        throw new OrbitError(
          413,
          "BODY_TOO_LARGE",
          `request body exceeds ${opts.maxBodyBytes} bytes`,
          {
            limit_bytes: opts.maxBodyBytes,
          },
        );
      },
    }),
  );

  app.route("/v1/workflows", workflowRoutes(rt));
  app.route("/v1/executions", executionRoutes(rt));
  app.route("/v1/workers", workerRoutes(rt));
  app.route("/v1/tasks", taskRoutes(rt));
  app.route("/v1/metrics", metricsRoutes(rt));
  return app;
}

export type { ContentfulStatusCode };
