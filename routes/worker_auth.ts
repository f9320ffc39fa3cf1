/**
 * Worker identities on the HTTP API, when the server has a workers file (`lib/workers/identities.ts`).
 *
 * - The worker protocol routes (WORKER_ROUTES) take a worker's own token and nothing else: no
 *   token or an unknown one is 401 UNAUTHORIZED, the client token 403 WORKER_TOKEN_REQUIRED.
 *   Were the client token accepted there, whoever holds it could register as any worker for any
 *   task and the file would protect nothing.
 * - Every other `/v1` route takes the client token (`--token`): a worker token is 403
 *   CLIENT_TOKEN_REQUIRED. Without `--token` the client API stays open, as it is without a file.
 * - On a worker route the request must be the caller's own business: register names the token's
 *   `worker_id` (403 FORBIDDEN_WORKER) and only tasks the file lets it serve (403
 *   TASK_NOT_ALLOWED, naming them); poll, heartbeat, unregister, complete and fail may name only
 *   sessions and task tokens of the same worker identity (403 FORBIDDEN_WORKER).
 *
 * Order in the app: `markWorkerRoute` and `authenticate` before the body limit (a caller without
 * credentials learns nothing), the body checks after it. The body checks parse with the routes'
 * own schemas, so they see exactly what the route will act on; a body the schema refuses is left
 * to the route, which answers 400 or 422 as it always does. A session or task token that is not
 * live here is left to the route too: it answers 404 or `{"accepted": false}` and changes nothing.
 */
import type { Context, MiddlewareHandler } from "hono";
import { timingSafeEqual } from "node:crypto";
import type { z } from "zod";
import { OrbitError } from "../lib/errors.ts";
import { stepOfToken } from "../lib/engine/state.ts";
import { executionOfToken } from "../lib/executions/types.ts";
import type { Runtime } from "../lib/runtime.ts";
import type { TokenHolder } from "../lib/workers/dispatcher.ts";
import {
  deniedTasks,
  describeTasks,
  identify,
  taskAllowed,
  tokenDigest,
  type WorkerIdentity,
  type WorkersFile,
} from "../lib/workers/identities.ts";
import { heartbeatSchema, pollSchema, registerSchema, unregisterSchema } from "./workers.ts";
import { completeSchema, failSchema } from "./tasks.ts";
import { bodyText } from "./util.ts";

/** The routes of the worker protocol (SPEC §4). */
export const WORKER_ROUTES = [
  "/v1/workers/register",
  "/v1/workers/poll",
  "/v1/workers/heartbeat",
  "/v1/workers/unregister",
  "/v1/tasks/complete",
  "/v1/tasks/fail",
] as const;

const BEARER = /^Bearer +(\S+)$/i;

/** 401 UNAUTHORIZED with the `www-authenticate` challenge (also used by `routes/app.ts`). */
export function unauthorized(message: string): OrbitError {
  return new OrbitError(401, "UNAUTHORIZED", message, {}, {
    "www-authenticate": 'Bearer realm="orbit"',
  });
}

const forbidden = (code: string, message: string, fields: Record<string, unknown> = {}) =>
  new OrbitError(403, code, message, fields);

/** The middlewares of worker authentication; `routes/app.ts` installs them in order. */
export function workerAuth(
  rt: Runtime,
  opts: { workers: WorkersFile; clientToken: string | null },
): {
  markWorkerRoute: MiddlewareHandler;
  authenticate: MiddlewareHandler;
  checks: Record<(typeof WORKER_ROUTES)[number], MiddlewareHandler>;
} {
  const workerRoute = new WeakSet<Context>();
  const callers = new WeakMap<Context, WorkerIdentity>();
  const clientDigest = opts.clientToken ? tokenDigest(opts.clientToken) : null;
  const file = opts.workers.path;

  const isClient = (token: string) =>
    clientDigest !== null && timingSafeEqual(tokenDigest(token), clientDigest);

  // Installed on the exact paths of the worker routes, so the router that picks the handler
  // decides which rules apply (a trailing slash or another spelling cannot slip between them).
  const markWorkerRoute: MiddlewareHandler = async (c, next) => {
    workerRoute.add(c);
    await next();
  };

  const authenticate: MiddlewareHandler = async (c, next) => {
    const token = BEARER.exec(c.req.header("authorization") ?? "")?.[1];
    const worker = token === undefined ? null : identify(opts.workers, token);
    const client = token !== undefined && isClient(token);
    if (workerRoute.has(c)) {
      if (worker) callers.set(c, worker);
      else if (client) {
        throw forbidden(
          "WORKER_TOKEN_REQUIRED",
          `the worker protocol takes a worker's own token from the workers file ${file}, not the client token`,
        );
      } else {
        throw unauthorized(
          `missing or invalid bearer token: the worker protocol takes a worker's token from the workers file ${file} (Authorization: Bearer <token>)`,
        );
      }
    } else if (worker) {
      throw forbidden(
        "CLIENT_TOKEN_REQUIRED",
        "a worker token serves only the worker protocol (/v1/workers/register, poll, heartbeat, unregister, /v1/tasks/complete, fail); this route takes the client token",
      );
    } else if (clientDigest !== null && !client) {
      throw unauthorized("missing or invalid bearer token (Authorization: Bearer <token>)");
    }
    await next();
  };

  /**
   * The worker a session belongs to: it must be the caller's own. In shared mode a session
   * another server registered is read from the database (it is served here all the same).
   */
  const ownSession = async (me: WorkerIdentity, sessionId: string | undefined) => {
    if (sessionId === undefined) return;
    const owner = rt.workers.sessions.get(sessionId)?.worker_id ??
      (await rt.workers.sessionWorker?.(sessionId)) ?? undefined;
    if (owner !== undefined && owner !== me.worker_id) {
      throw forbidden(
        "FORBIDDEN_WORKER",
        `worker session ${sessionId} belongs to another worker, not to ${me.worker_id}`,
        { worker_id: me.worker_id },
      );
    }
  };

  /**
   * A live task token must have been handed to the caller's identity, for a task it may serve.
   * In shared mode the attempts whose execution this server does not hold (owned elsewhere, or
   * their dispatch not applied here yet) are looked up in `orbit_tasks`, in one read.
   */
  const ownTokens = async (me: WorkerIdentity, tokens: readonly string[]) => {
    const holders = new Map<string, TokenHolder>();
    const unknown: string[] = [];
    for (const token of tokens) {
      const id = executionOfToken(token);
      if (id === null) continue;
      const state = rt.executions.stateOf(id);
      const step = state ? stepOfToken(state, token) : undefined;
      if (step) {
        const worker_id = step.tokens[token]!.worker_id;
        holders.set(token, { task: step.task, contract: step.contract, worker_id });
      } else unknown.push(token);
    }
    if (unknown.length > 0 && rt.workers.tokenHolders) {
      for (const [token, h] of await rt.workers.tokenHolders(unknown)) holders.set(token, h);
    }
    for (const [token, held] of holders) {
      if (held.worker_id !== null && held.worker_id !== me.worker_id) {
        throw forbidden(
          "FORBIDDEN_WORKER",
          `task token ${token} was handed to another worker, not to ${me.worker_id}`,
          { worker_id: me.worker_id, token },
        );
      }
      if (!taskAllowed(me, held.task, held.contract)) {
        throw forbidden(
          "TASK_NOT_ALLOWED",
          `worker ${me.worker_id} may not serve ${held.task}@${held.contract} (the workers file allows ${
            describeTasks(me)
          })`,
          { worker_id: me.worker_id, tasks: [{ name: held.task, contract: held.contract }] },
        );
      }
    }
  };

  /** A check of the parsed body; a body the route's schema refuses goes to the route as it is. */
  const check = <T extends z.ZodType>(
    schema: T,
    fn: (me: WorkerIdentity, r: z.infer<T>) => void | Promise<void>,
  ): MiddlewareHandler =>
  async (c, next) => {
    const me = callers.get(c);
    if (me) {
      // Read errors (the body limit, bad UTF-8) propagate; the route reads the same cached bytes.
      const text = await bodyText(c);
      let raw: unknown = {};
      try {
        if (text.trim() !== "") raw = JSON.parse(text);
      } catch {
        raw = undefined;
      }
      const r = schema.safeParse(raw);
      if (r.success) await fn(me, r.data);
    }
    await next();
  };

  return {
    markWorkerRoute,
    authenticate,
    checks: {
      "/v1/workers/register": check(registerSchema, (me, r) => {
        if (r.worker_id !== me.worker_id) {
          throw forbidden(
            "FORBIDDEN_WORKER",
            `this token is worker ${me.worker_id}'s; it cannot register as ${r.worker_id}`,
            { worker_id: me.worker_id },
          );
        }
        const denied = deniedTasks(me, r.tasks);
        if (denied.length > 0) {
          throw forbidden(
            "TASK_NOT_ALLOWED",
            `worker ${me.worker_id} may not serve ${
              denied.map((t) => `${t.name}@${t.contract}`).join(", ")
            } (the workers file allows ${describeTasks(me)})`,
            { worker_id: me.worker_id, tasks: denied },
          );
        }
      }),
      "/v1/workers/poll": check(pollSchema, (me, r) => ownSession(me, r.session_id)),
      "/v1/workers/heartbeat": check(heartbeatSchema, async (me, r) => {
        await ownSession(me, r.session_id);
        await ownTokens(me, r.tokens);
      }),
      "/v1/workers/unregister": check(unregisterSchema, (me, r) => ownSession(me, r.session_id)),
      "/v1/tasks/complete": check(completeSchema, async (me, r) => {
        await ownSession(me, r.session_id);
        await ownTokens(me, [r.token]);
      }),
      "/v1/tasks/fail": check(failSchema, async (me, r) => {
        await ownSession(me, r.session_id);
        await ownTokens(me, [r.token]);
      }),
    },
  };
}
