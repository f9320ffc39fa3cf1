/**
 * The CLI's HTTP client: JSON requests with a bearer token, `{"error":{…}}` answers turned into
 * {@link ApiError}, network failures into {@link UnreachableError}.
 *
 * SPEC §7 (**fixed**): on 503 NOT_LEADER the request is repeated once, with the same method,
 * path, query, body and headers, against the leader address the standby names (the
 * `x-orbit-leader` header, else the error body's `leader_addr`). Later requests of the same
 * command go to that leader too. The SDK client does not do this by design, hence this module.
 */
import { formatSeconds, networkReason, parseBody, queryString } from "../sdk/typescript/http.ts";

export const DEFAULT_SERVER = "http://127.0.0.1:7233";

/** The server answered with a non-2xx status (or a body that is not JSON). */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The parsed body (or the raw text when it was not JSON). */
    readonly body: unknown,
    /** The error object's members other than `code` and `message`. */
    readonly details: Record<string, unknown> = {},
    readonly headers: Headers = new Headers(),
  ) {
    super(message);
  }
}

/** The server could not be reached (refused, reset, DNS, timed out). */
export class UnreachableError extends Error {
  override name = "UnreachableError";
  constructor(readonly server: string, readonly reason: string) {
    super(`cannot reach the ORBIT server at ${server}: ${reason}`);
  }
}

export interface ApiResponse<T = unknown> {
  status: number;
  data: T;
  /** The raw body text as received. */
  text: string;
  headers: Headers;
}

export interface RequestOptions {
  query?: Record<string, string | number | undefined | null>;
  body?: unknown;
  /** Give up after this long (default 30 s). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface HttpOptions {
  server: string;
  token?: string | undefined;
  fetch?: typeof fetch;
  /** Told when a request is repeated against the leader. */
  onRedirect?: (from: string, to: string) => void;
}

/** Normalises a server address: adds `http://` when no scheme is given, drops trailing `/`. */
export function normalizeServer(raw: string): string {
  let s = raw.trim();
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) s = `http://${s}`;
  const url = new URL(s); // throws TypeError on garbage
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`unsupported scheme ${url.protocol} (use http:// or https://)`);
  }
  return s.replace(/\/+$/, "");
}

export class OrbitHttp {
  #server: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #onRedirect: ((from: string, to: string) => void) | undefined;

  constructor(o: HttpOptions) {
    this.#server = normalizeServer(o.server);
    this.#token = o.token || undefined;
    this.#fetch = o.fetch ?? ((input, init) => fetch(input, init));
    this.#onRedirect = o.onRedirect;
  }

  /** The address requests currently go to (the leader after a NOT_LEADER redirect). */
  get server(): string {
    return this.#server;
  }

  async request<T = unknown>(
    method: string,
    path: string,
    o: RequestOptions = {},
  ): Promise<ApiResponse<T>> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (o.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(o.body);
    }
    const rel = path + queryString(o.query);
    const first = await this.#send<T>(this.#server, method, rel, headers, body, o);
    if (!(first instanceof ApiError)) return first;
    if (first.status === 503 && first.code === "NOT_LEADER") {
      const leader = leaderOf(first);
      if (leader !== undefined && leader !== this.#server) {
        this.#onRedirect?.(this.#server, leader);
        const second = await this.#send<T>(leader, method, rel, headers, body, o);
        if (!(second instanceof ApiError)) {
          this.#server = leader;
          return second;
        }
        throw second;
      }
    }
    throw first;
  }

  get<T = unknown>(path: string, o: RequestOptions = {}): Promise<ApiResponse<T>> {
    return this.request<T>("GET", path, o);
  }

  post<T = unknown>(path: string, body: unknown, o: RequestOptions = {}): Promise<ApiResponse<T>> {
    return this.request<T>("POST", path, { ...o, body });
  }

  /** One request to one base URL; an error answer is returned (not thrown) as an ApiError. */
  async #send<T>(
    base: string,
    method: string,
    rel: string,
    headers: Record<string, string>,
    body: string | undefined,
    o: RequestOptions,
  ): Promise<ApiResponse<T> | ApiError> {
    const timeoutMs = o.timeoutMs ?? 30_000;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = o.signal ? AbortSignal.any([o.signal, timeout]) : timeout;
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch(base + rel, { method, headers, body, signal });
      text = await res.text();
    } catch (e) {
      if (o.signal?.aborted) throw o.signal.reason;
      if (timeout.aborted) {
        throw new UnreachableError(base, `no answer within ${formatSeconds(timeoutMs)}`);
      }
      throw new UnreachableError(base, networkReason(e));
    }
    const { data, parsed } = parseBody(text);
    if (!res.ok) return apiError(res, data, parsed);
    if (!parsed) {
      return new ApiError(
        res.status,
        "INVALID_RESPONSE",
        `${method} ${rel} answered ${res.status} with a body that is not JSON`,
        data,
        {},
        res.headers,
      );
    }
    return { status: res.status, data: data as T, text, headers: res.headers };
  }
}

function leaderOf(e: ApiError): string | undefined {
  const candidates = [e.headers.get("x-orbit-leader"), e.details.leader_addr];
  for (const c of candidates) {
    if (typeof c !== "string" || c.trim() === "") continue;
    try {
      return normalizeServer(c);
    } catch {
      // an unusable address: try the next one
    }
  }
  return undefined;
}

function apiError(res: Response, data: unknown, parsed: boolean): ApiError {
  const err = parsed && isObject(data) && isObject(data.error) ? data.error : undefined;
  if (err) {
    const { code, message, ...details } = err;
    return new ApiError(
      res.status,
      typeof code === "string" ? code : `HTTP_${res.status}`,
      typeof message === "string" ? message : res.statusText || `HTTP ${res.status}`,
      data,
      details,
      res.headers,
    );
  }
  const snippet = typeof data === "string" ? data.trim().slice(0, 200) : "";
  return new ApiError(
    res.status,
    `HTTP_${res.status}`,
    snippet || res.statusText || `HTTP ${res.status}`,
    data,
    {},
    res.headers,
  );
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export { formatSeconds, networkReason };
