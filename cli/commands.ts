/**
 * The client CLI (SPEC §7): subcommands registered on the `orbit` program.
 *
 * Every client subcommand takes `--server URL` (env ORBIT_SERVER, default
 * http://127.0.0.1:7233), `--token TOKEN` (env ORBIT_TOKEN) and `--json` (print the response
 * bodies as received, one JSON document a line, instead of tables). Exit codes: 0 success,
 * 1 the operation failed, 2 usage error, 3 server unreachable, 4 wait timed out (see
 * {@link EXIT}). Errors go to stderr as `error: CODE: message`.
 */
import { type Command, type CommanderError, InvalidArgumentError, Option } from "commander";
import { ApiError, DEFAULT_SERVER, normalizeServer, OrbitHttp, UnreachableError } from "./http.ts";
import { loadDocuments } from "./load.ts";
import {
  CliError,
  errorText,
  EXIT,
  formatDuration,
  formatTime,
  formatTimeout,
  keyValues,
  pendingTable,
  shortJson,
  str,
  table,
  usageError,
} from "./output.ts";
import { startProgress } from "./progress.ts";
import { registerScheduleCommands } from "./schedules.ts";

const STATUSES = ["running", "completed", "failed", "cancelled", "timed_out", "continued"];
const TERMINAL = new Set(["completed", "failed", "cancelled", "timed_out", "continued"]);
/** The server caps one long wait at 300 s; longer waits are several requests. */
const MAX_SERVER_WAIT_S = 300;

interface Ctx {
  http: OrbitHttp;
  json: boolean;
}

type Json = Record<string, unknown>;

interface Execution extends Json {
  execution_id: string;
  run_id?: string;
  root_id?: string;
  parent_id?: string | null;
  workflow?: string;
  version?: string;
  status: string;
  input?: unknown;
  output?: unknown;
  error?: unknown;
  created_ms?: number;
  closed_ms?: number | null;
}

interface HistoryEvent extends Json {
  seq: number;
  type: string;
  time_ms: number;
  step?: string;
  attempt?: number;
}

interface HistoryPage extends Json {
  events: HistoryEvent[];
  next_after_seq?: number | null;
}

// ---------------------------------------------------------------------------------------------
// Plumbing

function out(line: string): void {
  console.log(line);
}

function err(line: string): void {
  console.error(line);
}

function printJson(v: unknown): void {
  out(JSON.stringify(v));
}

/** Commander's own errors (unknown option, missing argument, bad value) are usage errors. */
function commanderExit(e: CommanderError): never {
  Deno.exit(e.exitCode === 0 ? EXIT.OK : EXIT.USAGE);
}

function printApiError(e: ApiError, context?: string): void {
  err(`error: ${e.code}: ${e.message}${context ? ` (${context})` : ""}`);
  const problems = e.details.problems;
  if (Array.isArray(problems)) {
    for (const p of problems) {
      if (p && typeof p === "object") {
        const { path, message } = p as { path?: unknown; message?: unknown };
        err(`  ${str(path)}: ${str(message)}`);
      }
    }
  }
  if (e.status === 401) err("  (pass --token or set ORBIT_TOKEN)");
}

/** Prints an error and answers its exit code. */
function report(e: unknown, json: boolean): number {
  if (e instanceof CliError) {
    err(`error: ${e.code ? `${e.code}: ` : ""}${e.message}`);
    for (const l of e.lines) err(`  ${l}`);
    return e.exitCode;
  }
  if (e instanceof ApiError) {
    if (json && e.body !== null && typeof e.body === "object") printJson(e.body);
    printApiError(e);
    return EXIT.FAILED;
  }
  if (e instanceof UnreachableError) {
    err(`error: ${e.message}`);
    return EXIT.UNREACHABLE;
  }
  err(`error: ${(e as Error)?.message ?? String(e)}`);
  return EXIT.FAILED;
}

interface ClientOptions {
  server: string;
  token?: string;
  json?: boolean;
  grpc?: string;
  [key: string]: unknown;
}

/**
 * `--grpc host:port`: the requests go over the gRPC binding (lib/grpc/fetch.ts, loaded on the
 * first request: @grpc/grpc-js takes half a second to load); `close` ends its channel.
 */
function grpcFetchOf(addr: string): { fetch: typeof fetch; close(): void } {
  let f: Promise<typeof fetch & { close(): void }> | null = null;
  return {
    fetch: async (input, init) => {
      f ??= import("../lib/grpc/fetch.ts").then((m) => m.grpcFetch({ addr }));
      return await (await f)(input, init);
    },
    close: () => void f?.then((g) => g.close()),
  };
}

function context(opts: ClientOptions, grpc: { fetch: typeof fetch } | null): Ctx {
  let server: string;
  try {
    server = normalizeServer(opts.server);
  } catch (e) {
    throw usageError(`--server ${opts.server}: not a usable URL: ${(e as Error).message}`);
  }
  const http = new OrbitHttp({
    server,
    token: opts.token,
    ...(grpc ? { fetch: grpc.fetch } : {}),
    onRedirect: (from, to) =>
      err(`note: ${from} is not the leader; repeating the request at ${to}`),
  });
  return { http, json: opts.json === true };
}

/**
 * Wraps a subcommand: builds the context from its options, runs it, prints any error and
 * exits with the code. Commander calls actions with the declared arguments, then the options,
 * then the command.
 */
function act(
  fn: (ctx: Ctx, args: unknown[], opts: ClientOptions) => Promise<number | void>,
): (...params: unknown[]) => Promise<void> {
  return async (...params: unknown[]) => {
    const cmd = params.at(-1) as Command;
    const opts = cmd.opts() as ClientOptions;
    let code: number;
    const grpc = opts.grpc ? grpcFetchOf(opts.grpc) : null;
    try {
      code = (await fn(context(opts, grpc), params.slice(0, -2), opts)) ?? EXIT.OK;
    } catch (e) {
      code = report(e, opts.json === true);
    }
    grpc?.close();
    // A closed grpc-js channel still holds the event loop for a while (30 s): exit now.
    if (code !== EXIT.OK || grpc) Deno.exit(code);
  };
}

/** A subcommand with the options every client subcommand shares. */
function clientCommand(parent: Command, nameAndArgs: string, description: string): Command {
  return parent.command(nameAndArgs)
    .description(description)
    .addOption(
      new Option("--server <url>", "ORBIT server URL").env("ORBIT_SERVER").default(DEFAULT_SERVER),
    )
    .addOption(new Option("--token <token>", "bearer token").env("ORBIT_TOKEN"))
    .addOption(
      new Option("--grpc <host:port>", "send the requests over gRPC (the server's --grpc-addr)")
        .env("ORBIT_GRPC"),
    )
    .option("--json", "print the raw JSON response instead of a table")
    .exitOverride(commanderExit);
}

function parseSeconds(v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || n < 0) {
    throw new InvalidArgumentError("must be a number of seconds (0 or more)");
  }
  return n;
}

function parseCount(v: string): number {
  if (!/^\d{1,9}$/.test(v.trim())) throw new InvalidArgumentError("must be a non-negative integer");
  return Number(v);
}

/** A JSON argument, or `@FILE` for the JSON in a file. */
async function parseJsonArg(flag: string, v: string): Promise<unknown> {
  let text = v;
  let where = flag;
  if (v.startsWith("@")) {
    const file = v.slice(1);
    where = `${flag} ${v}`;
    try {
      text = await Deno.readTextFile(file);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) throw usageError(`${where}: no such file`);
      throw usageError(`${where}: cannot read: ${(e as Error).message}`);
    }
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw usageError(`${where} is not valid JSON: ${(e as Error).message}`);
  }
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------------------------------------
// Human output

/** The answer of `GET /v1/executions/{id}/pending`, as far as the CLI reads it. */
interface PendingAnswer {
  status?: string;
  pending?: Json[];
  timeout_at_ms?: number | null;
  now_ms?: number;
}

/**
 * An execution as `key  value` lines; with `p` (the answer of `/pending`, for a running one) the
 * workflow's timeout and the pending items, one `step: REASON: message` line each.
 */
function executionBlock(x: Execution, p?: PendingAnswer): string {
  const pending = Array.isArray(p?.pending) ? p.pending : undefined;
  const created = typeof x.created_ms === "number" ? x.created_ms : undefined;
  const closed = typeof x.closed_ms === "number" ? x.closed_ms : undefined;
  const took = created !== undefined && closed !== undefined
    ? ` (took ${formatDuration(closed - created)})`
    : "";
  return keyValues([
    ["execution", x.execution_id],
    ["workflow", `${str(x.workflow)} ${str(x.version)}`],
    ["status", x.status],
    ["run", x.run_id],
    ["root", x.root_id && x.root_id !== x.execution_id ? x.root_id : undefined],
    ["parent", x.parent_id ? x.parent_id : undefined],
    ["created", formatTime(created)],
    ["closed", closed !== undefined ? formatTime(closed) + took : undefined],
    ["input", x.input === undefined ? undefined : JSON.stringify(x.input)],
    ["output", x.output === undefined || x.output === null ? undefined : JSON.stringify(x.output)],
    ["error", errorText(x.error)],
    ["timeout", p && x.status === "running" ? formatTimeout(p) : undefined],
    ...(pending === undefined
      ? []
      : pending.length === 0
      ? [["pending", "nothing"] as [string, string]]
      : pending.map((p, i): [string, string] => [
        i === 0 ? "pending" : "",
        `${str(p.step)}: ${str(p.reason)}: ${str(p.message)}`,
      ])),
  ]);
}

function eventDetail(e: HistoryEvent): string {
  switch (e.type) {
    case "WorkflowCreated":
      return `input ${shortJson(e.input, 60)}`;
    case "StepScheduled":
      return `task ${str(e.task)}@${str(e.contract)}${e.compensation ? " (compensation)" : ""}${
        e.redelivery ? " (redelivery)" : ""
      }`;
    case "StepDispatched":
      return `worker ${str(e.worker_id)}${e.redelivery ? " (redelivery)" : ""}`;
    case "StepSucceeded":
    case "WorkflowCompleted":
      return `output ${shortJson(e.output, 60)}`;
    case "StepFailed":
      return `${errorText(e.error) ?? ""}${e.will_retry ? " (will retry)" : ""}`;
    case "StepAttemptUncertain":
    case "StepCancelled":
    case "WorkflowCancelRequested":
      return str(e.reason);
    case "WorkflowCancelled":
      return str(e.reason);
    case "TimerStarted":
      return `${str(e.purpose)} until ${formatTime(e.fire_at_ms)}`;
    case "CompensationStarted":
      return `${str(e.reason)}: ${Array.isArray(e.steps) ? e.steps.join(", ") : ""}`;
    case "WorkflowFailed":
    case "WorkflowTimedOut":
      return errorText(e.error) ?? "";
    case "StepStarted": {
      const child = e.child as { workflow?: unknown; execution_id?: unknown } | undefined;
      return [
        str(e.kind),
        e.signal !== undefined ? str(e.signal) : undefined,
        e.branch !== undefined ? `branch ${str(e.branch)}` : undefined,
        e.branches !== undefined ? `${str(e.branches)} branches` : undefined,
        child ? `${str(child.workflow)} as ${str(child.execution_id)}` : undefined,
      ].filter((x) => x !== undefined).join(" ");
    }
    case "ChildStarted":
      return `child ${str(e.execution_id)}`;
    case "HandlerCompleted":
      return `handler of ${str(e.signal)} (signal seq ${str(e.signal_seq)})`;
    case "SignalReceived":
      return `${str(e.signal)} ${shortJson(e.payload, 50)}${
        e.carried_over ? " (carried over)" : ""
      }`;
    case "VarsAssigned":
      return `vars ${shortJson(e.vars, 60)}${e.handler ? ` (handler of ${str(e.handler)})` : ""}`;
    case "WorkflowContinuedAsNew":
      return `new run ${str(e.new_run_id)}`;
    default:
      return "";
  }
}

function historyTable(events: HistoryEvent[]): string {
  return table(
    ["SEQ", "TIME", "TYPE", "STEP", "ATTEMPT", "DETAIL"],
    events.map((e) => [
      String(e.seq),
      formatTime(e.time_ms),
      str(e.type),
      str(e.step),
      e.attempt === undefined ? "-" : String(e.attempt),
      eventDetail(e),
    ]),
  );
}

// ---------------------------------------------------------------------------------------------
// Waiting

/**
 * Long-waits (in server waits of at most 300 s) until the execution is terminal or `timeoutS`
 * passed; answers the execution as last read.
 */
async function waitUntilDone(ctx: Ctx, id: string, timeoutS?: number): Promise<Execution> {
  const deadline = timeoutS === undefined ? Infinity : Date.now() + timeoutS * 1000;
  const progress = startProgress(ctx.http, id);
  try {
    for (;;) {
      const leftMs = deadline - Date.now();
      const waitS = Math.max(0, Math.min(MAX_SERVER_WAIT_S, leftMs / 1000));
      const began = Date.now();
      const r = await ctx.http.get<Execution>(`/v1/executions/${enc(id)}/wait`, {
        query: { timeout_s: waitS.toFixed(3) },
        timeoutMs: waitS * 1000 + 30_000,
      });
      const x = r.data;
      if (TERMINAL.has(x.status) || Date.now() >= deadline) return x;
      // The server answered early with the execution still running (it may not run it): poll.
      if (Date.now() - began < 500) {
        await new Promise((res) => setTimeout(res, Math.min(1000, deadline - Date.now())));
      }
    }
  } finally {
    progress.stop();
  }
}

/** Prints the waited-for execution and answers the exit code its status means. */
function finishWait(ctx: Ctx, x: Execution, timeoutS: number | undefined): number {
  if (ctx.json) printJson(x);
  else out(executionBlock(x));
  switch (x.status) {
    case "completed":
    case "continued":
      return EXIT.OK;
    case "running":
      err(
        `error: WAIT_TIMEOUT: execution ${x.execution_id} is still running after ${timeoutS ?? 0}s`,
      );
      return EXIT.WAIT_TIMEOUT;
    default: {
      const why = errorText(x.error);
      err(
        `error: EXECUTION_${x.status.toUpperCase()}: execution ${x.execution_id} ${x.status}${
          why ? `: ${why}` : ""
        }`,
      );
      return EXIT.FAILED;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Subcommands

async function deploy(ctx: Ctx, files: string[]): Promise<number> {
  const docs = await loadDocuments(files);
  let failed = 0;
  for (const d of docs) {
    const label = d.where ? `${d.file} ${d.where}` : d.file;
    try {
      const r = await ctx.http.post<Json>("/v1/workflows", d.doc);
      if (ctx.json) {
        printJson(r.data);
      } else {
        const created = r.data.created === true || r.status === 201;
        out(
          `${created ? "deployed" : "unchanged"} ${str(r.data.name)} ${str(r.data.version)} (${
            str(r.data.ir)
          }) from ${label}${created ? "" : ": already deployed, identical"}`,
        );
      }
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      failed++;
      if (ctx.json && e.body !== null && typeof e.body === "object") printJson(e.body);
      printApiError(e, label);
    }
  }
  return failed > 0 ? EXIT.FAILED : EXIT.OK;
}

interface StartOptions extends ClientOptions {
  input?: string;
  version?: string;
  id?: string;
  wait?: boolean;
  timeout?: number;
}

async function start(ctx: Ctx, workflow: string, o: StartOptions): Promise<number> {
  const body: Json = { workflow };
  if (o.input !== undefined) body.input = await parseJsonArg("--input", o.input);
  if (o.version !== undefined) body.version = o.version;
  if (o.id !== undefined) body.execution_id = o.id;
  const wait = o.wait === true || o.timeout !== undefined;
  const r = await ctx.http.post<Execution>("/v1/executions", body);
  const x = r.data;
  if (!wait) {
    if (ctx.json) printJson(x);
    else if (r.status === 201) {
      out(`started execution ${x.execution_id} of ${str(x.workflow)} ${str(x.version)}`);
    } else {
      out(
        `execution ${x.execution_id} already exists (${str(x.workflow)} ${
          str(x.version)
        }): ${x.status}`,
      );
    }
    return EXIT.OK;
  }
  if (!ctx.json) {
    out(
      r.status === 201
        ? `started execution ${x.execution_id} of ${str(x.workflow)} ${str(x.version)}`
        : `execution ${x.execution_id} already exists; waiting for it`,
    );
  }
  const done = TERMINAL.has(x.status) ? x : await waitUntilDone(ctx, x.execution_id, o.timeout);
  return finishWait(ctx, done, o.timeout);
}

interface ListOptions extends ClientOptions {
  workflow?: string;
  status?: string;
  limit?: number;
  cursor?: string;
}

async function list(ctx: Ctx, o: ListOptions): Promise<void> {
  const r = await ctx.http.get<{ executions?: Execution[]; next_cursor?: string | null }>(
    "/v1/executions",
    { query: { workflow: o.workflow, status: o.status, limit: o.limit, cursor: o.cursor } },
  );
  if (ctx.json) return printJson(r.data);
  const rows = Array.isArray(r.data.executions) ? r.data.executions : [];
  if (rows.length === 0) out("no executions");
  else {
    out(table(
      ["EXECUTION ID", "WORKFLOW", "VERSION", "STATUS", "CREATED", "CLOSED"],
      rows.map((x) => [
        x.execution_id,
        str(x.workflow),
        str(x.version),
        str(x.status),
        formatTime(x.created_ms),
        formatTime(x.closed_ms),
      ]),
    ));
  }
  if (r.data.next_cursor) out(`more: orbit executions list --cursor ${r.data.next_cursor}`);
}

async function show(ctx: Ctx, id: string): Promise<void> {
  const r = await ctx.http.get<Execution>(`/v1/executions/${enc(id)}`);
  if (ctx.json) return printJson(r.data);
  // "Why is it waiting?" for a running one: best effort, an older server has no such route.
  const p = r.data.status === "running"
    ? await ctx.http.get<PendingAnswer>(`/v1/executions/${enc(id)}/pending`).catch(() => null)
    : null;
  out(executionBlock(r.data, p?.data));
}

async function pending(ctx: Ctx, id: string): Promise<void> {
  const r = await ctx.http.get<PendingAnswer>(`/v1/executions/${enc(id)}/pending`);
  if (ctx.json) return printJson(r.data);
  const items = Array.isArray(r.data.pending) ? r.data.pending : [];
  if (items.length === 0 && r.data.status !== "running") {
    out(`execution ${id} is ${str(r.data.status)}: nothing pending`);
    return;
  }
  out(pendingTable(items));
  // The workflow's own deadline: a step's "no timeout" is not the workflow's.
  const timeout = formatTimeout(r.data);
  out(timeout === "none" ? "the workflow has no timeout" : `the workflow times out at ${timeout}`);
}

interface HistoryOptions extends ClientOptions {
  afterSeq?: number;
  limit?: number;
  run?: string;
}

async function history(ctx: Ctx, id: string, o: HistoryOptions): Promise<void> {
  const path = `/v1/executions/${enc(id)}/history`;
  const query = { after_seq: o.afterSeq, limit: o.limit, run_id: o.run };
  if (o.limit !== undefined) {
    // One page, as the server answers it (with next_after_seq when there is more).
    const r = await ctx.http.get<HistoryPage>(path, { query });
    if (ctx.json) return printJson(r.data);
    out(historyTable(r.data.events ?? []));
    if (typeof r.data.next_after_seq === "number") {
      out(`more: orbit executions history ${id} --after-seq ${r.data.next_after_seq}`);
    }
    return;
  }
  // Every page, joined.
  let first: HistoryPage | undefined;
  const events: HistoryEvent[] = [];
  let after = o.afterSeq;
  for (;;) {
    const r = await ctx.http.get<HistoryPage>(path, { query: { ...query, after_seq: after } });
    first ??= r.data;
    const page = Array.isArray(r.data.events) ? r.data.events : [];
    events.push(...page);
    const next = r.data.next_after_seq;
    if (typeof next !== "number" || page.length === 0 || next === after) break;
    after = next;
  }
  if (ctx.json) {
    const { next_after_seq: _, ...rest } = first ?? {};
    return printJson({ ...rest, events });
  }
  out(events.length === 0 ? "no events" : historyTable(events));
}

async function waitCmd(ctx: Ctx, id: string, timeoutS: number | undefined): Promise<number> {
  return finishWait(ctx, await waitUntilDone(ctx, id, timeoutS), timeoutS);
}

async function cancel(ctx: Ctx, id: string, reason: string | undefined): Promise<void> {
  const r = await ctx.http.post<Execution>(
    `/v1/executions/${enc(id)}/cancel`,
    reason === undefined ? {} : { reason },
  );
  if (ctx.json) printJson(r.data);
  else out(`cancelled execution ${r.data.execution_id ?? id}: ${str(r.data.status)}`);
}

async function signal(ctx: Ctx, id: string, name: string, payload?: string): Promise<void> {
  const body = payload === undefined ? {} : { payload: await parseJsonArg("--payload", payload) };
  const r = await ctx.http.post<Json>(`/v1/executions/${enc(id)}/signals/${enc(name)}`, body);
  if (ctx.json) printJson(r.data);
  else out(`sent signal ${name} to execution ${id} (seq ${str(r.data.seq)})`);
}

async function query(ctx: Ctx, id: string, name: string): Promise<void> {
  const r = await ctx.http.get<{ result?: unknown }>(
    `/v1/executions/${enc(id)}/queries/${enc(name)}`,
  );
  if (ctx.json) printJson(r.data);
  else out(JSON.stringify(r.data?.result ?? null, null, 2));
}

async function workers(ctx: Ctx): Promise<void> {
  const r = await ctx.http.get<{ workers?: Json[] }>("/v1/workers");
  if (ctx.json) return printJson(r.data);
  const rows = Array.isArray(r.data.workers) ? r.data.workers : [];
  if (rows.length === 0) return out("no worker sessions");
  const now = Date.now();
  out(table(
    ["WORKER ID", "SESSION", "RUNTIME", "CONCURRENCY", "IN FLIGHT", "LAST CONTACT", "TASKS"],
    rows.map((w) => [
      str(w.worker_id),
      str(w.session_id),
      str(w.runtime),
      str(w.concurrency),
      str(w.in_flight),
      typeof w.last_contact_ms === "number"
        ? `${formatDuration(now - w.last_contact_ms)} ago`
        : "-",
      Array.isArray(w.tasks)
        ? w.tasks.map((t: Json) =>
          `${str(t.name)}@${str(t.contract)}${t.language ? `[${t.language}]` : ""}`
        ).join(", ")
        : "-",
    ]),
  ));
}

async function health(ctx: Ctx): Promise<number> {
  const r = await ctx.http.get<Json>("/v1/health");
  const h = r.data;
  if (ctx.json) printJson(h);
  else {
    const leader = h.leader && typeof h.leader === "object"
      ? Object.entries(h.leader as Json).map(([k, v]) => `${k}=${str(v)}`).join(" ")
      : undefined;
    out(keyValues([
      ["server", ctx.http.server],
      ["status", str(h.status)],
      ["api_version", str(h.api_version)],
      ["runtime_version", str(h.runtime_version)],
      ["ir_versions", Array.isArray(h.ir_versions) ? h.ir_versions.join(", ") : undefined],
      ["role", h.role === undefined ? undefined : str(h.role)],
      ["node_id", h.node_id ? str(h.node_id) : undefined],
      ["term", h.term !== undefined && h.term !== null ? str(h.term) : undefined],
      ["leader", leader],
      ["active_executions", str(h.active_executions)],
      ["worker_sessions", str(h.worker_sessions)],
    ]));
  }
  return h.status === "ok" ? EXIT.OK : EXIT.FAILED;
}

// ---------------------------------------------------------------------------------------------
// Registration

export function registerClientCommands(program: Command): void {
  // `start --version V` must reach the subcommand, not print the program's version.
  program.enablePositionalOptions();
  program.exitOverride(commanderExit);
  program.showHelpAfterError("(add --help for usage)");

  clientCommand(program, "deploy", "Deploy workflow definitions (JSON files or TS/JS modules)")
    .argument("<files...>", "JSON documents, or modules whose exports are documents or builders")
    .action(act((ctx, [files]) => deploy(ctx, files as string[])));

  clientCommand(program, "start", "Start an execution of a deployed workflow")
    .argument("<workflow>", "workflow name")
    .option("--input <json>", "input as JSON (or @FILE to read it from a file)")
    .option("--version <semver>", "definition version (default: the latest)")
    .option("--id <execution-id>", "execution id (starting an existing id returns it)")
    .option("--wait", "wait until the execution finishes")
    .option(
      "--timeout <seconds>",
      "wait at most this long (implies --wait; exit 4 if still running)",
      parseSeconds,
    )
    .action(act((ctx, [workflow], o) => start(ctx, workflow as string, o as StartOptions)));

  const executions = program.command("executions")
    .description("List, inspect, wait for, cancel, signal and query executions")
    .exitOverride(commanderExit);

  clientCommand(executions, "list", "List executions")
    .option("--workflow <name>", "only this workflow")
    .addOption(new Option("--status <status>", "only this status").choices(STATUSES))
    .option("--limit <n>", "page size (server default 100)", parseCount)
    .option("--cursor <cursor>", "the next page (a previous page's next_cursor)")
    .action(act((ctx, _args, o) => list(ctx, o as ListOptions)));

  clientCommand(executions, "show", "Show an execution")
    .argument("<id>", "execution id")
    .action(act((ctx, [id]) => show(ctx, id as string)));

  clientCommand(executions, "pending", "Show what a running execution waits for, and why")
    .argument("<id>", "execution id")
    .action(act((ctx, [id]) => pending(ctx, id as string)));

  clientCommand(executions, "history", "Show an execution's history")
    .argument("<id>", "execution id")
    .option("--after-seq <seq>", "only events after this seq", parseCount)
    .option("--limit <n>", "one page of at most n events (default: every event)", parseCount)
    .option("--run <run-id>", "another run of the execution (continue-as-new)")
    .action(act((ctx, [id], o) => history(ctx, id as string, o as HistoryOptions)));

  clientCommand(executions, "wait", "Wait until an execution finishes")
    .argument("<id>", "execution id")
    .option("--timeout <seconds>", "give up after this long (exit 4)", parseSeconds)
    .action(act((ctx, [id], o) => waitCmd(ctx, id as string, o.timeout as number | undefined)));

  clientCommand(executions, "cancel", "Cancel an execution (its compensations run)")
    .argument("<id>", "execution id")
    .option("--reason <text>", "why")
    .action(act((ctx, [id], o) => cancel(ctx, id as string, o.reason as string | undefined)));

  clientCommand(executions, "signal", "Send a signal to an execution")
    .argument("<id>", "execution id")
    .argument("<name>", "signal name")
    .option("--payload <json>", "payload as JSON (or @FILE)")
    .action(
      act((ctx, [id, name], o) =>
        signal(ctx, id as string, name as string, o.payload as string | undefined)
      ),
    );

  clientCommand(executions, "query", "Evaluate a declared query on an execution")
    .argument("<id>", "execution id")
    .argument("<name>", "query name")
    .action(act((ctx, [id, name]) => query(ctx, id as string, name as string)));

  registerScheduleCommands(program, { clientCommand, act, parseJsonArg });

  clientCommand(program, "workers", "List registered worker sessions")
    .action(act((ctx) => workers(ctx)));

  clientCommand(program, "health", "Show the server's health")
    .action(act((ctx) => health(ctx)));
}
