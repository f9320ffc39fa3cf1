/**
 * The chaos run's HTTP client: one request with a deadline (`call`), and one repeated through
 * connection errors, 5xx and 429 (`retry`), with the bearer token of attach mode.
 */
export interface Reply {
  status: number;
  // deno-lint-ignore no-explicit-any
  body: any;
}

let bearer: string | null = null;

/** The bearer token every request of `call` sends from now on (attach mode), or none. */
export function useToken(token: string | null): void {
  bearer = token;
}

/** One request with a deadline; a connection error is status 0. */
export async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  timeoutMs = 20_000,
): Promise<Reply> {
  try {
    const r = await fetch(base + path, {
      method,
      headers: {
        // No kept-alive connections: Deno's fetch sends a request again, once and unseen, when
        // a reused connection is reset after the request went out (denoland/deno#35610; the
        // ready proxy resets the connections of a server it marks down). A signal would then
        // be applied twice with one answer, which the checker cannot tell from a server's fault.
        connection: "close",
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await r.text();
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = text;
    }
    return { status: r.status, body: json };
  } catch {
    return { status: 0, body: null };
  }
}

/** Repeats a request through connection errors, 5xx and 429 until `deadline`. */
export async function retry(
  base: () => string,
  method: string,
  path: string,
  body: unknown,
  deadline: number,
  timeoutMs?: number,
  statuses?: number[],
): Promise<Reply> {
  for (;;) {
    const r = await call(base(), method, path, body, timeoutMs);
    statuses?.push(r.status);
    if ((r.status !== 0 && r.status < 500 && r.status !== 429) || Date.now() > deadline) return r;
    await new Promise((res) => setTimeout(res, 200));
  }
}
