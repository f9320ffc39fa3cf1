/**
 * The HTTP transport shared by the worker and the client: JSON requests with a bearer token,
 * `{"error": {...}}` answers turned into {@link OrbitApiError}, network failures into
 * {@link OrbitConnectionError}. Uses only `fetch`, `AbortController` and `setTimeout`, so it
 * runs on Deno, Node 20 and browsers; on Deno the worker's slots, and a Client with
 * `transport: "http1"`, send theirs through `http1.ts` instead (`Transport`'s `exchange`).
 *
 * @module
 */

import { OrbitApiError, OrbitConnectionError } from "./errors.ts";

/** Options of one request. */
export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined | null>;
  /** Aborts the request; the promise then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Give up after this long (an {@link OrbitConnectionError} "timed out after …"). */
  timeoutMs?: number;
  /** Which connection to prefer, and to remember the one used (see {@link Affinity}). */
  affinity?: Affinity;
}

/**
 * A connection to ask for again. An exchange that keeps connections (the `http1` transport)
 * records in `conn` the connection a request went out on, and sends a later request that carries
 * the same holder on that connection when it is idle (any other one when it is not). Behind a
 * balancer that routes each connection to one server (the reference page's round-robin proxy;
 * HAProxy with `prefer-last-server`), the later request reaches the same server. `fetch`
 * ignores it.
 */
export interface Affinity {
  conn?: unknown;
}

/** One request as {@link Exchange} sends it. */
export interface HttpRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
  /** See {@link Affinity}. */
  affinity?: Affinity;
}

/** The answer to an {@link HttpRequest}: its status and its whole body as text. */
export interface HttpAnswer {
  status: number;
  statusText: string;
  text: string;
}

/** Sends one request and reads its whole answer; rejects on network failures and aborts. */
export type Exchange = (request: HttpRequest) => Promise<HttpAnswer>;

/** Connection settings shared by {@link Transport} users. */
export interface ConnectionOptions {
  /** Base URL of the ORBIT runtime, e.g. `http://127.0.0.1:7233`. */
  server: string;
  /** Bearer token sent as `authorization: Bearer <token>`. */
  token?: string;
  /** A `fetch` implementation (default: the global one). */
  fetch?: typeof fetch;
}

/**
 * {@link Exchange} through `fetch`.
 *
 * On Deno, the global `fetch` sends a request a second time, unseen, when a kept-alive
 * connection it reused is reset after the request went out (denoland/deno#35610; a load balancer
 * that shuts the sessions of a server it marks down does that). A signal or a cancel could then
 * be applied twice while the caller saw one answer, so there every request asks for its own
 * connection (`connection: close`; a request on a fresh connection is never sent again). The
 * `http1` transport keeps connections alive and sends only idempotent requests again.
 */
export function fetchExchange(f?: typeof fetch): Exchange {
  const send = f ?? ((input, init) => fetch(input, init));
  const close = f === undefined && isDeno();
  return async ({ method, url, headers, body, signal }) => {
    const res = await send(url, {
      method,
      headers: close ? { ...headers, connection: "close" } : headers,
      body,
      signal,
    });
    return { status: res.status, statusText: res.statusText, text: await res.text() };
  };
}

function isDeno(): boolean {
  const deno = (globalThis as { Deno?: { version?: { deno?: unknown } } }).Deno;
  return typeof deno?.version?.deno === "string";
}

/** JSON over HTTP to one ORBIT runtime. */
export class Transport {
  readonly server: string;
  readonly #token: string | undefined;
  readonly #exchange: Exchange;

  /** `exchange`: how requests go out (default: through `options.fetch`, or the global `fetch`). */
  constructor(options: ConnectionOptions, exchange?: Exchange) {
    if (!options.server) throw new TypeError("ORBIT: `server` (the runtime's URL) is required");
    this.server = options.server.replace(/\/+$/, "");
    this.#token = options.token;
    this.#exchange = exchange ?? fetchExchange(options.fetch);
  }

  /** Sends one request and answers its parsed JSON body (`null` for an empty one). */
  async request<T = unknown>(
    method: string,
    path: string,
    options: RequestOptions = {},
  ): Promise<T> {
    const url = this.server + path + queryString(options.query);
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }

    const outer = options.signal;
    if (outer?.aborted) throw outer.reason;
    const controller = new AbortController();
    const onAbort = () => controller.abort(outer?.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    let timedOut = false;
    const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => {
      timedOut = true;
      controller.abort(new Error("timeout"));
    }, options.timeoutMs);

    const fail = (err: unknown): never => {
      if (outer?.aborted) throw outer.reason;
      if (timedOut) {
        throw new OrbitConnectionError(
          this.server,
          `timed out after ${formatSeconds(options.timeoutMs ?? 0)}`,
          { cause: err },
        );
      }
      throw new OrbitConnectionError(this.server, networkReason(err), { cause: err });
    };

    try {
      let res: HttpAnswer;
      try {
        res = await this.#exchange({
          method,
          url,
          headers,
          body,
          signal: controller.signal,
          affinity: options.affinity,
        });
      } catch (err) {
        return fail(err);
      }
      const { data, parsed } = parseBody(res.text);
      if (res.status < 200 || res.status > 299) throw apiError(res, data, parsed, method, path);
      if (!parsed) {
        throw new OrbitApiError({
          status: res.status,
          code: "INVALID_RESPONSE",
          message: `the ORBIT runtime answered ${method} ${path} with a body that is not JSON`,
          body: data,
          method,
          path,
        });
      }
      return data as T;
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    }
  }

  get<T = unknown>(path: string, options?: RequestOptions): Promise<T> {
    return this.request<T>("GET", path, options);
  }

  post<T = unknown>(path: string, body: unknown, options: RequestOptions = {}): Promise<T> {
    return this.request<T>("POST", path, { ...options, body });
  }
}

function apiError(
  res: HttpAnswer,
  data: unknown,
  parsed: boolean,
  method: string,
  path: string,
): OrbitApiError {
  const err = parsed && isObject(data) && isObject(data.error) ? data.error : undefined;
  if (err) {
    const { code, message, ...details } = err;
    return new OrbitApiError({
      status: res.status,
      code: typeof code === "string" ? code : `HTTP_${res.status}`,
      message: typeof message === "string" ? message : res.statusText || `HTTP ${res.status}`,
      body: data,
      details,
      method,
      path,
    });
  }
  const text = typeof data === "string" ? data.trim().slice(0, 200) : "";
  return new OrbitApiError({
    status: res.status,
    code: `HTTP_${res.status}`,
    message: text || res.statusText || `HTTP ${res.status}`,
    body: data,
    method,
    path,
  });
}

/** `?a=1&b=x` from the defined members of `query` ("" for none). */
export function queryString(query: RequestOptions["query"]): string {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null) params.set(key, String(value));
  }
  const s = params.toString();
  return s ? `?${s}` : "";
}

/** A response body as JSON (`parsed`), or as the text it is when it is not JSON; "" is null. */
export function parseBody(text: string): { data: unknown; parsed: boolean } {
  if (text.length === 0) return { data: null, parsed: true };
  try {
    return { data: JSON.parse(text), parsed: true };
  } catch {
    return { data: text, parsed: false };
  }
}

/** The innermost, most telling message of a failed `fetch`. */
export function networkReason(err: unknown): string {
  let cur: unknown = err;
  let message = "";
  for (let depth = 0; cur && depth < 8; depth++) {
    if (cur instanceof Error || (isObject(cur) && typeof cur.message === "string")) {
      const m = String((cur as { message: string }).message);
      if (m) message = m;
      cur = (cur as { cause?: unknown }).cause;
    } else {
      if (typeof cur === "string") message = cur;
      break;
    }
  }
  // Deno: "error sending request from … for http://… (…): client error (SendRequest): connection closed …"
  const deno = /^error sending request\b.*?\): (?:client error \([^)]*\): )?(.+)$/s.exec(message);
  if (deno?.[1]) message = deno[1];
  return message || "unknown network error";
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `0.2s`, `1.6s`, `5s`: how the SDK writes delays in log lines. */
export function formatSeconds(ms: number): string {
  const s = ms / 1000;
  return `${Number(s.toFixed(s < 10 ? 1 : 0))}s`;
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Retry delays. */
export interface BackoffOptions {
  /** First delay (default 200 ms). */
  initialMs?: number;
  /** Largest delay (default 5000 ms). */
  maxMs?: number;
  /** Growth factor (default 2). */
  factor?: number;
  /** Random extra share of each delay, 0–1 (default 0.2). */
  jitter?: number;
}

/** Exponential backoff with jitter: 200 ms, 400 ms, 800 ms … up to 5 s, each plus up to 20 %. */
export class Backoff {
  readonly #initial: number;
  readonly #max: number;
  readonly #factor: number;
  readonly #jitter: number;
  #attempt = 0;

  constructor(options: BackoffOptions = {}) {
    this.#initial = options.initialMs ?? 200;
    this.#max = options.maxMs ?? 5000;
    this.#factor = options.factor ?? 2;
    this.#jitter = options.jitter ?? 0.2;
  }

  /** The next delay in milliseconds. */
  next(): number {
    const base = Math.min(this.#max, this.#initial * this.#factor ** this.#attempt);
    this.#attempt++;
    return Math.min(this.#max, Math.round(base * (1 + Math.random() * this.#jitter)));
  }

  reset(): void {
    this.#attempt = 0;
  }

  get attempts(): number {
    return this.#attempt;
  }
}
