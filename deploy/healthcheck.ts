/**
 * Container health check: exits 0 when the ORBIT server answers `GET /v1/ready` with 200, and
 * 1 otherwise (not ready, not answering, or no answer within 4 s). It uses only `fetch`, so it
 * needs no curl in the image.
 *
 *   deno run --allow-net --allow-env deploy/healthcheck.ts [URL]
 *
 * The server is URL, or `ORBIT_HEALTHCHECK_URL`, or the port of `ORBIT_ADDR` on 127.0.0.1
 * (default 7233). The Dockerfile's HEALTHCHECK runs it; tests/dockerfile_test.ts checks it.
 */

const TIMEOUT_MS = 4_000;

function target(): string {
  const explicit = Deno.args[0] ?? Deno.env.get("ORBIT_HEALTHCHECK_URL");
  if (explicit) return explicit.replace(/\/+$/, "");
  const addr = Deno.env.get("ORBIT_ADDR") ?? "127.0.0.1:7233";
  const port = addr.slice(addr.lastIndexOf(":") + 1) || "7233";
  return `http://127.0.0.1:${port}`;
}

const url = `${target()}/v1/ready`;
try {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  const body = await res.text();
  if (res.status !== 200) {
    console.error(`not ready: ${url} answered ${res.status} ${body}`);
    Deno.exit(1);
  }
  console.log(`ready: ${body}`);
  Deno.exit(0);
} catch (e) {
  console.error(`not ready: ${url}: ${(e as Error).message}`);
  Deno.exit(1);
}
