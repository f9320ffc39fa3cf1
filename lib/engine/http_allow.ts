/**
 * The `--http-allow` host patterns of the built-in HTTP adapter, shared by deploy-time
 * validation and the adapter itself (pure: no I/O).
 *
 * - `example.com` — that host, any port;
 * - `*.example.com` — any subdomain of example.com (not example.com itself), any port;
 * - `127.0.0.1:8080`, `*.example.com:443`, `[::1]:8080` — the same, on that port only;
 * - `*` — every host (for development).
 *
 * Hosts compare case-insensitively. Only `http:` and `https:` URLs are ever allowed.
 *
 * ```ts
 * import { httpAllowed } from "./http_allow.ts";
 * httpAllowed("https://api.example.com/x", ["*.example.com"]); // { ok: true, host: "api.example.com:443" }
 * ```
 */

export type HttpAllowResult =
  | { ok: true; host: string }
  | { ok: false; host: string | null; reason: "invalid_url" | "scheme" | "not_allowed" };

function splitPattern(p: string): { host: string; port: string | null } {
  const t = p.trim().toLowerCase();
  const v6 = /^(\[[0-9a-f:.]+\])(?::(\d{1,5}))?$/.exec(t);
  if (v6) return { host: v6[1]!, port: v6[2] ?? null };
  const m = /^(.*?)(?::(\d{1,5}))?$/.exec(t)!;
  return { host: m[1]!, port: m[2] ?? null };
}

function hostMatches(pattern: string, host: string): boolean {
  if (pattern === "*") return true;
  if (pattern.startsWith("*.")) {
    const suffix = pattern.slice(1); // ".example.com"
    return host.endsWith(suffix) && host.length > suffix.length;
  }
  return pattern === host;
}

/** Whether the adapter may call `url` under `allow`; `host` is `hostname:port` for messages. */
export function httpAllowed(url: string, allow: readonly string[]): HttpAllowResult {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { ok: false, host: null, reason: "invalid_url" };
  }
  const hostname = u.hostname.toLowerCase();
  const port = u.port || (u.protocol === "https:" ? "443" : "80");
  const host = `${hostname}:${port}`;
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    return { ok: false, host, reason: "scheme" };
  }
  for (const p of allow) {
    const pat = splitPattern(p);
    if (pat.port !== null && pat.port !== port) continue;
    if (hostMatches(pat.host, hostname)) return { ok: true, host };
  }
  return { ok: false, host, reason: "not_allowed" };
}

/** The message of a refusal, naming the flag that would allow the call. */
export function httpRefusal(r: Exclude<HttpAllowResult, { ok: true }>, allow: readonly string[]) {
  if (r.reason === "invalid_url") return "HTTP_NOT_ALLOWED: the URL is not a valid absolute URL";
  if (r.reason === "scheme") {
    return "HTTP_NOT_ALLOWED: only http: and https: URLs can be called";
  }
  const hostname = r.host!.replace(/:\d+$/, "");
  return `HTTP_NOT_ALLOWED: host ${r.host} is not in --http-allow (${
    allow.length === 0 ? "none allowed" : `allowed: ${allow.join(", ")}`
  }); start the server with --http-allow ${hostname}`;
}
