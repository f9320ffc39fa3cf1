/**
 * The client CLI (SPEC §7): subcommands registered on the `orbit` program (the executions'
 * in cli/executions.ts, the schedules' in cli/schedules.ts, the plumbing in cli/client.ts).
 *
 * Every client subcommand takes `--server URL` (env ORBIT_SERVER, default
 * http://127.0.0.1:7233), `--token TOKEN` (env ORBIT_TOKEN) and `--json` (print the response
 * bodies as received, one JSON document a line, instead of tables). Exit codes: 0 success,
 * 1 the operation failed, 2 usage error, 3 server unreachable, 4 wait timed out (see
 * {@link EXIT}). Errors go to stderr as `error: CODE: message`.
 */
import type { Command } from "commander";
import { ApiError } from "./http.ts";
import { loadDocuments } from "./load.ts";
import { EXIT, formatDuration, keyValues, str, table } from "./output.ts";
import {
  act,
  clientCommand,
  commanderExit,
  type Ctx,
  type Json,
  out,
  parseJsonArg,
  printApiError,
  printJson,
} from "./client.ts";
import { registerExecutionCommands } from "./executions.ts";
import { registerScheduleCommands } from "./schedules.ts";

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

  registerExecutionCommands(program);

  registerScheduleCommands(program, { clientCommand, act, parseJsonArg });

  clientCommand(program, "workers", "List registered worker sessions")
    .action(act((ctx) => workers(ctx)));

  clientCommand(program, "health", "Show the server's health")
    .action(act((ctx) => health(ctx)));
}
