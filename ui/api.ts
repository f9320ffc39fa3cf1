/// <reference lib="dom" />
/**
 * The console's one way to the API: the bearer token from sessionStorage, errors as the API's
 * `{"error":{"code","message"}}`, and a read that got no answer retried with backoff.
 */

const TOKEN_KEY = "orbit-token";

export function getToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(t: string): void {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
  setTokenState(t ? "unchecked" : "none");
}

/**
 * What the server made of the token: none set, not yet used, taken (an answer other than 401
 * came to a request that carried it), or refused (401). The nav shows this, not merely that a
 * token is stored.
 */
export type TokenState = "none" | "unchecked" | "accepted" | "refused";
let tokenState: TokenState = getToken() ? "unchecked" : "none";
/** Listeners told when the token's state changes. */
export const tokenStates = new Set<(s: TokenState) => void>();

export function getTokenState(): TokenState {
  return tokenState;
}

function setTokenState(s: TokenState): void {
  if (s === tokenState) return;
  tokenState = s;
  tokenStates.forEach((f) => f(s));
}

/** An answer to a request sent with `sent` (the token then): 401 refuses it, others take it. */
function answered(sent: string, status: number): void {
  if (sent !== getToken()) return; // the token changed while the request was out
  if (status === 401) setTokenState(sent ? "refused" : "none");
  else if (sent) setTokenState("accepted");
}

/** One thing wrong with a request, where it is: `{"path": "$.payload.by", "message": …}`. */
export interface Problem {
  path: string;
  message: string;
}

/**
 * An API answer that was not 2xx, with the API's code (or NETWORK for no answer at all) and the
 * `problems` list a refused document or payload comes with.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly problems: Problem[] = [],
  ) {
    super(message);
  }
}

function problemsOf(err: { problems?: unknown } | undefined): Problem[] {
  if (!Array.isArray(err?.problems)) return [];
  return err.problems.filter((p): p is Problem => typeof p === "object" && p !== null)
    .map((p) => ({ path: String(p.path ?? ""), message: String(p.message ?? "") }));
}

/** Listeners told when the server asks for credentials (the shell shows the token form). */
export const authNeeded = new Set<() => void>();
/** Listeners told whether the connection is down (a retry is in progress). */
export const connection = new Set<(down: boolean) => void>();

const RETRIES = 5;

export async function api<T = unknown>(
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const headers: Record<string, string> = {};
  const token = getToken();
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  for (let attempt = 0;; attempt++) {
    let r: Response;
    try {
      r = await fetch(path, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (e) {
      // No answer: the server restarts, the network dropped. Reads are retried; a write is
      // not (a signal that reached the server would be recorded twice): its error is shown.
      connection.forEach((f) => f(true));
      if (attempt >= RETRIES || method !== "GET") {
        throw new ApiError(0, "NETWORK", `cannot reach the server: ${(e as Error).message}`);
      }
      await new Promise((res) => setTimeout(res, Math.min(4000, 250 * 2 ** attempt)));
      continue;
    }
    connection.forEach((f) => f(false));
    answered(token, r.status);
    const text = await r.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = text;
    }
    if (r.ok) return data as T;
    const err = (data as { error?: { code?: string; message?: string; problems?: unknown } } | null)
      ?.error;
    if (r.status === 401) authNeeded.forEach((f) => f());
    throw new ApiError(
      r.status,
      err?.code ?? `HTTP_${r.status}`,
      err?.message ?? String(text),
      problemsOf(err),
    );
  }
}

export const get = <T>(path: string) => api<T>("GET", path);
export const post = <T>(path: string, body: unknown = {}) => api<T>("POST", path, body);

/** Metrics are Prometheus text, not JSON. */
export async function metricsText(): Promise<string> {
  const token = getToken();
  const r = await fetch("/v1/metrics", {
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
  answered(token, r.status);
  if (r.status === 401) authNeeded.forEach((f) => f());
  if (!r.ok) throw new ApiError(r.status, `HTTP_${r.status}`, await r.text());
  return await r.text();
}

export const enc = encodeURIComponent;

// ------------------------------------------------------------------------------------------
// The API's shapes, as far as the console reads them.

export interface Execution {
  execution_id: string;
  run_id: string;
  root_id: string;
  parent_id: string | null;
  workflow: string;
  version: string;
  status: string;
  input: unknown;
  output: unknown;
  error: { code?: string; message?: string } | null;
  created_ms: number;
  closed_ms: number | null;
}

export interface HistoryEvent {
  seq: number;
  type: string;
  time_ms: number;
  step?: string;
  attempt?: number;
  [k: string]: unknown;
}

export interface PendingItem {
  kind: string;
  step: string;
  attempt: number;
  reason: string;
  message: string;
  since_ms: number | null;
  [k: string]: unknown;
}

export interface Pending {
  status: string;
  phase: string;
  timeout_at_ms: number | null;
  pending: PendingItem[];
}

export interface Definition {
  name: string;
  version: string;
  ir: string;
  document: WorkflowDoc;
  created_ms: number;
}

export interface WorkflowDoc {
  name: string;
  version: string;
  ir: string;
  steps: Step[];
  signals?: Record<string, unknown>;
  queries?: Record<string, unknown>;
  handlers?: Record<string, Step[]>;
  timeout_s?: number;
}

export interface Step {
  id: string;
  [k: string]: unknown;
}
