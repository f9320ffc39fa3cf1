/**
 * What a web page must not be able to do to a server through its visitor's browser.
 *
 * - Writes take JSON only (every server): a cross-origin `fetch` with a `text/plain` body, or an
 *   HTML form, is a "simple" request the browser sends without asking first (no CORS
 *   preflight). A POST, PATCH, PUT or DELETE with a body must say `content-type:
 *   application/json` (or `…+json`, charset UTF-8 if any); one without a body may say nothing.
 *   415 UNSUPPORTED_MEDIA_TYPE.
 * - Without `--token` the API is open to every client that can reach it, and a browser is one:
 *   - a page of another site can send writes: refused when the request's `Origin` is not the
 *     server's own (403 FORBIDDEN_ORIGIN);
 *   - DNS rebinding (a name of the attacker's that first resolves to its server, then to
 *     127.0.0.1) makes the API the page's own origin: refused when `Host` is a name the server
 *     does not know as its own (403 FORBIDDEN_HOST). IP addresses and `localhost` (and
 *     `*.localhost`) cannot be rebound and pass on any port (a port mapping changes the port the
 *     client sees); names pass when they are the one the server listens on, its
 *     `--advertise-addr`, or in `--allowed-hosts` (`name`, `.domain` for it and its subdomains,
 *     `*` for any Host). A page's `Origin` passes when it is the request's own host and port, or
 *     a name (or `.domain`) listed in `--allowed-hosts` (a page behind a proxy that rewrites
 *     `Host`); `*` does not open the API to every site's pages.
 *   `/v1/health` and `/v1/ready` stay open to any Host: probes and load balancers send their own
 *   idea of it (Kubernetes the pod's IP, a load balancer a target name), and they say nothing.
 */
import type { MiddlewareHandler } from "hono";
import { OrbitError } from "../lib/errors.ts";

const NO_BODY_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
const JSON_TYPE = /^application\/(?:[a-z0-9!#$&^_.-]+\+)?json$/;

/** Whether a `content-type` names JSON: `application/json`, `application/x+json`, UTF-8 only. */
export function isJsonType(value: string): boolean {
  const [type, ...params] = value.toLowerCase().split(";");
  if (!JSON_TYPE.test(type!.trim())) return false;
  for (const p of params) {
    const [k, v] = p.split("=").map((s) => s.trim());
    if (k === "charset" && v?.replace(/^"(.*)"$/, "$1") !== "utf-8") return false;
  }
  return true;
}

/** 415 UNSUPPORTED_MEDIA_TYPE for a write whose body is not declared JSON. */
export function jsonBodies(): MiddlewareHandler {
  return async (c, next) => {
    if (!NO_BODY_METHODS.has(c.req.method)) {
      const headers = c.req.raw.headers;
      const type = headers.get("content-type");
      const ok = type === null
        // No type: only a request without a body (a POST with nothing to say).
        ? !headers.has("transfer-encoding") && (headers.get("content-length") ?? "0") === "0"
        : isJsonType(type);
      if (!ok) {
        throw new OrbitError(
          415,
          "UNSUPPORTED_MEDIA_TYPE",
          `request bodies must be JSON: send content-type: application/json (got ${
            type === null ? "a body without a content-type" : JSON.stringify(type.slice(0, 100))
          })`,
        );
      }
    }
    await next();
  };
}

/** The names a server without a token answers to (see the module comment). */
export interface HostPolicy {
  /** Names (lower case, without a trailing dot) that pass. */
  names: ReadonlySet<string>;
  /** `.domain` entries of `--allowed-hosts`: the domain and every name under it. */
  domains: readonly string[];
  /** `--allowed-hosts *`: every Host passes. */
  any: boolean;
  /** `--allowed-hosts` as given, for messages. */
  listed: readonly string[];
}

/**
 * The policy of a server listening on `hostname`, advertised as `advertise` (a URL or null),
 * with `--allowed-hosts` `allowed`.
 */
export function hostPolicy(
  hostname: string,
  advertise: string | null,
  allowed: readonly string[],
): HostPolicy {
  const names = new Set<string>();
  const domains: string[] = [];
  const add = (h: string) => {
    const name = normal(h);
    // IP addresses pass anyway; the set holds names, for the check and for messages.
    if (!IPV4.test(name) && !name.startsWith("[") && !name.includes(":")) names.add(name);
  };
  add(hostname);
  if (advertise) {
    try {
      add(new URL(advertise).hostname);
    } catch { /* checked at start-up; a bad one names nothing */ }
  }
  for (const a of allowed) {
    if (a.startsWith(".")) domains.push(normal(a));
    else if (a !== "*") add(a);
  }
  return { names, domains, any: allowed.includes("*"), listed: allowed };
}

function normal(hostname: string): string {
  const h = hostname.toLowerCase();
  return h.endsWith(".") ? h.slice(0, -1) : h;
}

const IPV4 = /^\d{1,3}(?:\.\d{1,3}){3}$/;

/** The hostname of a `host[:port]` (`[v6]:port` too), lower case. */
export function hostnameOf(host: string): string {
  if (host.startsWith("[")) {
    const end = host.indexOf("]");
    return end < 0 ? host.toLowerCase() : host.slice(0, end + 1).toLowerCase();
  }
  const colon = host.lastIndexOf(":");
  return normal(colon < 0 ? host : host.slice(0, colon));
}

/** Whether `hostname` (from `hostnameOf`) passes `policy`. */
export function hostAllowed(policy: HostPolicy, hostname: string): boolean {
  if (policy.any || hostname.startsWith("[") || IPV4.test(hostname)) return true;
  if (hostname === "localhost" || hostname.endsWith(".localhost")) return true;
  if (policy.names.has(hostname)) return true;
  return policy.domains.some((d) => hostname === d.slice(1) || hostname.endsWith(d));
}

/** The `host[:port]` a request was sent to (from its URL, which Deno builds from `Host`). */
function requestHost(url: string): string {
  const start = url.indexOf("//") + 2;
  const end = url.indexOf("/", start);
  return url.slice(start, end < 0 ? url.length : end).toLowerCase();
}

/**
 * Whether a request sent to `host` may come from a page of `origin`: its own (same host and
 * port; the scheme may differ behind a TLS proxy), or a name listed in `--allowed-hosts`.
 */
function originAllowed(policy: HostPolicy, origin: string, host: string): boolean {
  let u: URL;
  try {
    u = new URL(origin);
  } catch {
    return false; // "null" (a sandboxed frame, a file: page) and anything else unparsable
  }
  if (u.host === host) return true;
  const name = normal(u.hostname);
  return policy.listed.some((a) =>
    a.startsWith(".") ? name === a.slice(1) || name.endsWith(a) : normal(a) === name
  );
}

const MEANS = "give the server a --token, or add the name to --allowed-hosts";

/** 403 FORBIDDEN_HOST and FORBIDDEN_ORIGIN on a server without a token (see above). */
export function hostGuard(policy: HostPolicy): MiddlewareHandler {
  return async (c, next) => {
    const host = requestHost(c.req.url);
    if (!hostAllowed(policy, hostnameOf(host))) {
      throw new OrbitError(
        403,
        "FORBIDDEN_HOST",
        `this server has no --token and answers only requests addressed to it (an IP address, localhost${
          policy.names.size ? `, ${[...policy.names].join(", ")}` : ""
        }); Host ${JSON.stringify(host.slice(0, 200))} is not one: ${MEANS}`,
        { host: host.slice(0, 200) },
      );
    }
    const origin = c.req.raw.headers.get("origin");
    if (origin !== null && !originAllowed(policy, origin, host)) {
      throw new OrbitError(
        403,
        "FORBIDDEN_ORIGIN",
        `this server has no --token and refuses requests from other sites' web pages; Origin ${
          JSON.stringify(origin.slice(0, 200))
        } is not ${host}: ${MEANS}`,
        { origin: origin.slice(0, 200) },
      );
    }
    await next();
  };
}
