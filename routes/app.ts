/**
 * The HTTP application: one Hono app with the resource sub-apps mounted, bearer
 * authentication on everything but health and ready (with a workers file, worker identities as
 * `routes/worker_auth.ts` describes), JSON-only write bodies and, without a token, Host and
 * Origin checks (`routes/browsers.ts`), a body size limit, and one error handler
 * that turns every failure into `{"error":{"code","message",…}}` with the right status.
 */
import { Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HTTPException } from "hono/http-exception";
import { timingSafeEqual } from "hono/utils/buffer";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { OrbitError, storageFailure } from "../lib/errors.ts";
import type { Runtime } from "../lib/runtime.ts";
import type { WorkersFile } from "../lib/workers/identities.ts";
import { clusterGate, type GateView } from "./gate.ts";
import { log } from "../lib/log.ts";
import { metricsRoutes, systemRoutes } from "./system.ts";
import { workflowRoutes } from "./workflows.ts";
import { executionRoutes } from "./executions.ts";
import { workerRoutes } from "./workers.ts";
import { taskRoutes } from "./tasks.ts";
import { scheduleRoutes } from "./schedules.ts";
import { consoleNotFound, uiRoutes } from "./ui.ts";
import { unauthorized, WORKER_ROUTES, workerAuth } from "./worker_auth.ts";
import { hostGuard, type HostPolicy, jsonBodies } from "./browsers.ts";

export interface AppOptions {
  token: string | null;
  maxBodyBytes: number;
  ui: boolean;
  /** Standby mode: refuse writes with NOT_LEADER unless this server leads (routes/gate.ts). */
  gate?: GateView | null;
  /** With a workers file, the worker protocol takes worker tokens (routes/worker_auth.ts). */
  workers?: WorkersFile | null;
  /**
   * Without a token: the Host names the server answers to, and the Origins it takes requests
   * from (routes/browsers.ts). Absent or null: any.
   */
  hosts?: HostPolicy | null;
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
      throw unauthorized("missing or invalid bearer token (Authorization: Bearer <token>)");
    }
    await next();
  };
}

/**
 * The body size limit: 413 BODY_TOO_LARGE past `max` bytes. A request with a Content-Length
 * (and no Transfer-Encoding) is judged by the header alone, without touching `request.body`:
 * reading that property makes Deno build a ReadableStream for the body, and the route's
 * `text()` then collects it from the stream instead of taking the whole body at once (7 % of
 * the server's CPU on the worker routes). Any other request (chunked) is counted as hono's
 * bodyLimit counts it.
 */
function limitBody(max: number): MiddlewareHandler {
  const tooLarge = () => {
    throw new OrbitError(413, "BODY_TOO_LARGE", `request body exceeds ${max} bytes`, {
      limit_bytes: max,
    });
  };
  const counted = bodyLimit({ maxSize: max, onError: tooLarge });
  return async (c, next) => {
    const headers = c.req.raw.headers;
    const length = headers.get("content-length");
    if (length === null || headers.has("transfer-encoding")) return await counted(c, next);
    if (parseInt(length, 10) > max) tooLarge();
    await next();
  };
}

/**
 * A read of the request that failed because its client went away mid-body: Deno's body stream
 * fails with BadResource (the connection's resource is gone), or the socket was reset.
 */
function clientGone(err: unknown): boolean {
  return err instanceof Deno.errors.BadResource || err instanceof Deno.errors.ConnectionReset ||
    err instanceof Deno.errors.ConnectionAborted || err instanceof Deno.errors.BrokenPipe ||
    err instanceof Deno.errors.UnexpectedEof;
}

export function createApp(rt: Runtime, opts: AppOptions): Hono {
  const app = new Hono();

  app.onError((err, c) => {
    if (err instanceof OrbitError) return errorResponse(err);
    if (err instanceof HTTPException) {
      const status = err.status;
      const code = status === 401 ? "UNAUTHORIZED" : status === 400 ? "BAD_REQUEST" : "HTTP_ERROR";
      const message = status === 401
        ? "missing or invalid bearer token (Authorization: Bearer <token>)"
        : err.message || "request refused";
      return errorResponse(new OrbitError(status, code, message));
    }
    if (clientGone(err)) {
      // Nobody reads this answer: the connection is gone. A hang-up is the client's business.
      log.server.debug("client went away before its request was read", {
        method: c.req.method,
        path: c.req.path,
        error: (err as Error).message,
      });
      return errorResponse(
        new OrbitError(400, "REQUEST_ABORTED", "the connection closed before the request was read"),
      );
    }
    const storage = storageFailure(err);
    if (storage) {
      log.server.warn("the database failed under a request", {
        method: c.req.method,
        path: c.req.path,
        error: storage.message,
      });
      return errorResponse(storage);
    }
    log.server.error("unhandled error", { error: (err as Error).stack ?? String(err) });
    return errorResponse(new OrbitError(500, "INTERNAL", "internal error; see the server log"));
  });
  // An unknown console path answers the console (its not-found view, 404); the API, JSON.
  app.notFound((c) =>
    (opts.ui ? consoleNotFound(c) : null) ??
      errorResponse(new OrbitError(404, "NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`))
  );

  app.use(async (c, next) => {
    await next();
    rt.metrics.httpRequests.inc({ code: `${Math.floor(c.res.status / 100)}xx` });
  });

  // Standby mode: the gate runs before authentication (reference page, "Standby behavior").
  if (opts.gate) app.use("/v1/*", clusterGate(opts.gate));

  // Health and ready never need credentials, and take any Host (probes send their own).
  app.route("/", systemRoutes(rt));
  // Without a token: DNS rebinding and other sites' pages (routes/browsers.ts); the UI too.
  if (opts.hosts && !opts.token) app.use("*", hostGuard(opts.hosts));
  if (opts.ui) app.route("/", uiRoutes());

  // Credentials first: a client without them learns nothing, not even the body limit.
  const auth = opts.workers
    ? workerAuth(rt, { workers: opts.workers, clientToken: opts.token })
    : null;
  if (auth) {
    for (const path of WORKER_ROUTES) app.use(path, auth.markWorkerRoute);
    app.use("/v1/*", auth.authenticate);
  } else if (opts.token) app.use("/v1/*", bearer(opts.token));
  // Writes take JSON bodies only: no "simple" cross-origin request gets through.
  app.use("/v1/*", jsonBodies());
  app.use("/v1/*", limitBody(opts.maxBodyBytes));
  if (auth) {
    // After the body limit: these read the body.
    for (const path of WORKER_ROUTES) app.use(path, auth.checks[path]);
  }

  app.route("/v1/workflows", workflowRoutes(rt));
  app.route("/v1/executions", executionRoutes(rt));
  app.route("/v1/workers", workerRoutes(rt));
  app.route("/v1/tasks", taskRoutes(rt));
  app.route("/v1/schedules", scheduleRoutes(rt));
  app.route("/v1/metrics", metricsRoutes(rt));
  return app;
}

export type { ContentfulStatusCode };
