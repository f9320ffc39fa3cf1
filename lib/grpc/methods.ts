/**
 * The gRPC binding's map onto the HTTP API: each `orbit.v1` RPC is one HTTP route, given by its
 * method, its path (with `{field}`s taken from the request message), the request fields that go
 * in the query string, and what the answer becomes. Every field not in the path or the query is
 * a member of the JSON body; a field named `x_json` carries member `x` as JSON text, spliced into
 * the body as is. lib/grpc/server.ts runs each call through the server's own HTTP handler, so
 * the gRPC and HTTP bindings share every line of parsing, authentication, gating and engine code.
 */

/** How an HTTP answer becomes the RPC's response message. */
export type Answer =
  /** `orbit.v1.Document`: the body verbatim, `created` for 201. */
  | "document"
  /** `RegisterResponse`, `HeartbeatResponse`, `UnregisterResponse`: the body's members. */
  | "members"
  /** `TasksResponse` / `ReportResponse`: tasks with `input` as `input_json`. */
  | "tasks";

export interface Method {
  service: "Workflows" | "Executions" | "Schedules" | "Workers" | "System";
  rpc: string;
  http: "GET" | "POST" | "PATCH" | "DELETE";
  path: string;
  query?: string[];
  /** The request field whose JSON text is the whole body (deploy, schedule create and patch). */
  rawBody?: string;
  answer: Answer;
  /** HTTP statuses besides 2xx that are answers, not errors (ready's 503). */
  ok?: number[];
}

// deno-fmt-ignore
export const METHODS: Method[] = [
  { service: "Workflows", rpc: "Deploy", http: "POST", path: "/v1/workflows", rawBody: "document_json", answer: "document" },
  { service: "Workflows", rpc: "List", http: "GET", path: "/v1/workflows", answer: "document" },
  { service: "Workflows", rpc: "Get", http: "GET", path: "/v1/workflows/{name}", answer: "document" },
  { service: "Executions", rpc: "Start", http: "POST", path: "/v1/executions", answer: "document" },
  { service: "Executions", rpc: "Get", http: "GET", path: "/v1/executions/{execution_id}", answer: "document" },
  { service: "Executions", rpc: "List", http: "GET", path: "/v1/executions", query: ["workflow", "status", "limit", "cursor"], answer: "document" },
  { service: "Executions", rpc: "Wait", http: "GET", path: "/v1/executions/{execution_id}/wait", query: ["timeout_s"], answer: "document" },
  { service: "Executions", rpc: "Cancel", http: "POST", path: "/v1/executions/{execution_id}/cancel", answer: "document" },
  { service: "Executions", rpc: "Signal", http: "POST", path: "/v1/executions/{execution_id}/signals/{name}", answer: "document" },
  { service: "Executions", rpc: "Query", http: "GET", path: "/v1/executions/{execution_id}/queries/{name}", answer: "document" },
  { service: "Executions", rpc: "Pending", http: "GET", path: "/v1/executions/{execution_id}/pending", answer: "document" },
  { service: "Schedules", rpc: "Create", http: "POST", path: "/v1/schedules", rawBody: "schedule_json", answer: "document" },
  { service: "Schedules", rpc: "List", http: "GET", path: "/v1/schedules", query: ["workflow"], answer: "document" },
  { service: "Schedules", rpc: "Get", http: "GET", path: "/v1/schedules/{schedule_id}", answer: "document" },
  { service: "Schedules", rpc: "Update", http: "PATCH", path: "/v1/schedules/{schedule_id}", rawBody: "patch_json", answer: "document" },
  { service: "Schedules", rpc: "Delete", http: "DELETE", path: "/v1/schedules/{schedule_id}", answer: "document" },
  { service: "Schedules", rpc: "Trigger", http: "POST", path: "/v1/schedules/{schedule_id}/trigger", answer: "document" },
  { service: "Schedules", rpc: "Pause", http: "POST", path: "/v1/schedules/{schedule_id}/pause", answer: "document" },
  { service: "Schedules", rpc: "Resume", http: "POST", path: "/v1/schedules/{schedule_id}/resume", answer: "document" },
  { service: "Workers", rpc: "Register", http: "POST", path: "/v1/workers/register", answer: "members" },
  { service: "Workers", rpc: "Poll", http: "POST", path: "/v1/workers/poll", answer: "tasks" },
  { service: "Workers", rpc: "Heartbeat", http: "POST", path: "/v1/workers/heartbeat", answer: "members" },
  { service: "Workers", rpc: "Complete", http: "POST", path: "/v1/tasks/complete", answer: "tasks" },
  { service: "Workers", rpc: "Fail", http: "POST", path: "/v1/tasks/fail", answer: "tasks" },
  { service: "Workers", rpc: "Unregister", http: "POST", path: "/v1/workers/unregister", answer: "members" },
  { service: "Workers", rpc: "List", http: "GET", path: "/v1/workers", answer: "document" },
  { service: "System", rpc: "Health", http: "GET", path: "/v1/health", answer: "document" },
  { service: "System", rpc: "Ready", http: "GET", path: "/v1/ready", answer: "document", ok: [503] },
];

/** `Workflows.Get` with a version reads `/v1/workflows/{name}/{version}`. */
export function pathOf(m: Method, req: Record<string, unknown>): string {
  let path = m.path.replace(
    /\{(\w+)\}/g,
    (_, k: string) => encodeURIComponent(String(req[k] ?? "")),
  );
  if (m.service === "Workflows" && m.rpc === "Get" && typeof req.version === "string") {
    path += `/${encodeURIComponent(req.version)}`;
  }
  return path;
}

/** The fields a path template names (and `version` of Workflows.Get): not body members. */
export function pathFields(m: Method): Set<string> {
  const s = new Set([...m.path.matchAll(/\{(\w+)\}/g)].map((x) => x[1]!));
  if (m.service === "Workflows" && m.rpc === "Get") s.add("version");
  return s;
}

/** Thrown for a `_json` field that is not JSON text: INVALID_ARGUMENT, as HTTP answers 400. */
export class JsonFieldError extends Error {
  constructor(readonly field: string, reason: string) {
    super(`${field} is not JSON text: ${reason}`);
  }
}

/**
 * A message as JSON text: `x_json` fields spliced in as member `x` (checked to be JSON, never
 * re-serialized, so the HTTP route reads the very bytes the client sent), nested messages and
 * repeated fields alike.
 */
export function bodyText(value: unknown, path = ""): string {
  if (Array.isArray(value)) {
    return `[${value.map((v, i) => bodyText(v, `${path}[${i}]`)).join(",")}]`;
  }
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  const parts: string[] = [];
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    const name = path ? `${path}.${k}` : k;
    if (k.endsWith("_json") && typeof v === "string") {
      try {
        JSON.parse(v);
      } catch (e) {
        throw new JsonFieldError(name, (e as Error).message);
      }
      parts.push(`${JSON.stringify(k.slice(0, -5))}:${v}`);
    } else parts.push(`${JSON.stringify(k)}:${bodyText(v, name)}`);
  }
  return `{${parts.join(",")}}`;
}

/** A task of the HTTP answer as an `orbit.v1.Task`: its `input` as JSON text. */
export function taskMessage(t: Record<string, unknown>): Record<string, unknown> {
  const { input, ...rest } = t;
  return { ...rest, input_json: JSON.stringify(input ?? null) };
}
