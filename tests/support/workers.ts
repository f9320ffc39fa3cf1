/**
 * Worker sessions for tests that drive the worker routes by hand (poll, complete, fail) rather
 * than through an SDK.
 */
import assert from "node:assert/strict";
import { api } from "./server.ts";

/** The body of `POST /v1/workers/register`, sent as given: no field is added or defaulted. */
export interface Registration {
  worker_id: string;
  tasks: Array<{ name: string; contract: string }>;
  runtime?: string;
  concurrency?: number;
}

/**
 * Registers a worker session on `server` (a base URL, with `token` if it needs one, or a client
 * from `api()`) and returns its id; the test fails unless the server answers 200 with one. Tests
 * whose point is the request itself (a refused, malformed or unauthorized registration) send it
 * themselves.
 */
export async function registerWorker(
  server: string | ReturnType<typeof api>,
  registration: Registration,
  token?: string,
): Promise<string> {
  const client = typeof server === "string" ? api(server, token) : server;
  const r = await client.post("/v1/workers/register", registration);
  assert.equal(r.status, 200, `register ${registration.worker_id}: ${JSON.stringify(r.body)}`);
  assert.equal(typeof r.body.session_id, "string", JSON.stringify(r.body));
  return r.body.session_id;
}
