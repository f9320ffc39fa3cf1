/**
 * One error type with a string `code`, an HTTP status and structured fields; routes turn it
 * into `{"error":{"code","message",…}}` in one place (`routes/app.ts` onError).
 */
export class OrbitError extends Error {
  override name = "OrbitError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
  toBody(): { error: Record<string, unknown> } {
    return { error: { code: this.code, message: this.message, ...this.fields } };
  }
}

export const badRequest = (message: string, fields: Record<string, unknown> = {}) =>
  new OrbitError(400, "BAD_REQUEST", message, fields);

export const notFound = (code: string, message: string) => new OrbitError(404, code, message);

export const conflict = (code: string, message: string, fields: Record<string, unknown> = {}) =>
  new OrbitError(409, code, message, fields);

export const invalid = (code: string, message: string, fields: Record<string, unknown> = {}) =>
  new OrbitError(422, code, message, fields);

export function storageError(e: unknown): OrbitError {
  const msg = e instanceof Error ? e.message : String(e);
  return new OrbitError(500, "STORAGE_ERROR", `STORAGE_ERROR: ${msg}`);
}

/** postgres.js's codes of a connection that broke, never opened or was given up on. */
const CONNECTION_FAILURES = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
]);

/**
 * The database failing under a request that reached it without the store (shared mode's
 * claims, sessions and forwards): a connection lost or refused, or an error PostgreSQL
 * answered. 500 STORAGE_ERROR, as a failed commit answers; anything else is not a storage
 * failure (null).
 */
export function storageFailure(e: unknown): OrbitError | null {
  if (!(e instanceof Error)) return null;
  const code = (e as { code?: unknown }).code;
  if (e.name === "PostgresError" || (typeof code === "string" && CONNECTION_FAILURES.has(code))) {
    return storageError(e);
  }
  return null;
}

/** 503 NOT_LEADER (reference page, "Standby behavior"): this server is a standby. */
export class NotLeaderError extends OrbitError {
  override name = "NotLeaderError";
  constructor(leader: { node_id: string; addr: string | null } | null) {
    super(
      503,
      "NOT_LEADER",
      leader
        ? `this server is a standby; the leader is \`${leader.node_id}\` at ${
          leader.addr ?? "an unknown address"
        }`
        : "this server is a standby; no leader is elected yet",
      { leader_node: leader?.node_id ?? null, leader_addr: leader?.addr ?? null },
      { "retry-after": "1", ...(leader?.addr ? { "x-orbit-leader": leader.addr } : {}) },
    );
  }
}
