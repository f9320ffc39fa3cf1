/**
 * The workers file (`--workers-file`, `ORBIT_WORKERS_FILE`): the worker identities a server
 * knows, the bearer token of each, and the tasks each may serve.
 *
 * ```json
 * { "workers": [
 *     { "worker_id": "orders-ts", "token": "…at least 16 characters…",
 *       "tasks": [ { "name": "payments.charge", "contract": "1" }, { "name": "orders.*" } ] } ] }
 * ```
 *
 * Pure: `parseWorkersFile` checks the text once at start (every problem named with the file and
 * its JSON path, as a ConfigError); `identify`, `taskAllowed` and `deniedTasks` answer lookups
 * for `routes/worker_auth.ts`. Only SHA-256 digests of the tokens are kept: they are compared in
 * constant time and can never reach a log line.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import { ConfigError } from "../config.ts";
import { noHiddenCharacters } from "../names.ts";

export interface TaskPattern {
  /** A task name, or a prefix ending in `*` (`orders.*`); `*` alone is every task. */
  name: string;
  /** The one contract version allowed; null allows every contract. */
  contract: string | null;
}

export interface WorkerIdentity {
  worker_id: string;
  tasks: readonly TaskPattern[];
  /** SHA-256 of the worker's token. */
  token_sha256: Uint8Array;
}

export interface WorkersFile {
  /** Where it was read from, for messages. */
  path: string;
  workers: readonly WorkerIdentity[];
}

/** Shortest token accepted: a guessable worker token would defeat the file. */
export const MIN_TOKEN_LENGTH = 16;

// Worker ids and task names are logged and written to history, as at registration: no control,
// invisible or bidirectional characters (lib/names.ts).
const taskSchema = z.strictObject({
  name: z.string().min(1, "must not be empty").max(200, "must be at most 200 characters")
    .superRefine(noHiddenCharacters)
    .refine(
      (s) => !s.slice(0, -1).includes("*"),
      "`*` may only end a pattern (orders.*) or stand alone (*)",
    ),
  contract: z.string().min(1, "must not be empty").max(64, "must be at most 64 characters")
    .refine((s) => !s.includes("*"), "must be one contract version; omit it to allow every one")
    .optional(),
});

const workerSchema = z.strictObject({
  worker_id: z.string().min(1, "must not be empty").max(200, "must be at most 200 characters")
    .superRefine(noHiddenCharacters),
  // The messages never quote the value: it is a secret.
  token: z.string()
    .min(MIN_TOKEN_LENGTH, `must be at least ${MIN_TOKEN_LENGTH} characters`)
    .max(1024, "must be at most 1024 characters")
    .regex(/^[\x21-\x7e]*$/, "must be printable ASCII without spaces (it is sent as a header)"),
  tasks: z.array(taskSchema).min(1, "must list at least one task"),
});

const fileSchema = z.strictObject({
  workers: z.array(workerSchema).min(1, "must list at least one worker"),
});

function jsonPath(path: readonly PropertyKey[]): string {
  return "$" + path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
}

function fail(path: string, problems: string[]): never {
  throw new ConfigError(`workers file ${path}: ${problems.join("; ")}`);
}

/** SHA-256 of a token: what identify() compares (32 bytes for every token, so in constant time). */
export function tokenDigest(token: string): Uint8Array {
  return new Uint8Array(createHash("sha256").update(token, "utf8").digest());
}

/**
 * Checks a workers file's text. Refuses bad JSON, entries that break the format, duplicate
 * worker ids, two workers with one token, and a worker token equal to the client token (a
 * token must name one caller). Throws a ConfigError naming `path` and each JSON path.
 */
export function parseWorkersFile(
  text: string,
  path: string,
  opts: { clientToken?: string | null } = {},
): WorkersFile {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    fail(path, [`not valid JSON: ${(e as Error).message}`]);
  }
  const r = fileSchema.safeParse(raw);
  if (!r.success) {
    fail(path, r.error.issues.map((i) => `${jsonPath(i.path)}: ${i.message}`));
  }
  const problems: string[] = [];
  const ids = new Map<string, number>();
  const tokens = new Map<string, number>();
  r.data.workers.forEach((w, i) => {
    const sameId = ids.get(w.worker_id);
    if (sameId !== undefined) {
      problems.push(
        `$.workers[${i}].worker_id: duplicate worker id "${w.worker_id}" (also $.workers[${sameId}])`,
      );
    } else ids.set(w.worker_id, i);
    const sameToken = tokens.get(w.token);
    if (sameToken !== undefined) {
      problems.push(
        `$.workers[${i}].token: same token as $.workers[${sameToken}]; every worker needs its own`,
      );
    } else tokens.set(w.token, i);
    if (opts.clientToken && w.token === opts.clientToken) {
      problems.push(`$.workers[${i}].token: same as --token; a worker token must differ from it`);
    }
  });
  if (problems.length > 0) fail(path, problems);
  return {
    path,
    workers: r.data.workers.map((w) => ({
      worker_id: w.worker_id,
      tasks: w.tasks.map((t) => ({ name: t.name, contract: t.contract ?? null })),
      token_sha256: tokenDigest(w.token),
    })),
  };
}

/**
 * The worker whose token this is, or null. Compares the digest against every worker's, in
 * constant time and without stopping at a match: the time taken says nothing about the token.
 */
export function identify(file: WorkersFile, token: string): WorkerIdentity | null {
  const d = tokenDigest(token);
  let found: WorkerIdentity | null = null;
  for (const w of file.workers) {
    if (timingSafeEqual(d, w.token_sha256) && found === null) found = w;
  }
  return found;
}

function matches(p: TaskPattern, name: string, contract: string): boolean {
  const nameOk = p.name.endsWith("*") ? name.startsWith(p.name.slice(0, -1)) : name === p.name;
  return nameOk && (p.contract === null || p.contract === contract);
}

/** Whether the file lets `worker` serve `name` at contract version `contract`. */
export function taskAllowed(worker: WorkerIdentity, name: string, contract: string): boolean {
  return worker.tasks.some((p) => matches(p, name, contract));
}

/** The tasks of a registration the file does not let `worker` serve (empty: all allowed). */
export function deniedTasks<T extends { name: string; contract: string }>(
  worker: WorkerIdentity,
  tasks: readonly T[],
): Array<{ name: string; contract: string }> {
  return tasks.filter((t) => !taskAllowed(worker, t.name, t.contract))
    .map((t) => ({ name: t.name, contract: t.contract }));
}

/** `orders.*, payments.charge@1`: a worker's patterns as messages show them. */
export function describeTasks(worker: WorkerIdentity): string {
  return worker.tasks.map((p) => p.contract === null ? p.name : `${p.name}@${p.contract}`)
    .join(", ");
}
