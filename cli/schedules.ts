/**
 * `orbit schedules list|create|show|update|trigger|pause|resume|delete` (SPEC §6, §7), with
 * the conventions of `commands.ts` (whose plumbing it is given: the shared client options,
 * `--json`, error printing and exit codes). A schedule is created from flags or from a JSON
 * file of the §6 object (`--file`), flags overriding the file's members.
 *
 * ```sh
 * orbit schedules create --workflow Report --cron "0 9 * * 1-5" --timezone Europe/Paris
 * orbit schedules create --file nightly.json
 * orbit schedules list
 * ```
 */
import { type Command, InvalidArgumentError, Option } from "commander";
import type { OrbitHttp } from "./http.ts";
import { formatTime, keyValues, str, table, usageError } from "./output.ts";

const OVERLAP = ["skip", "buffer_one", "allow_all", "cancel_other"];
const CATCH_UP = ["skip", "one", "all"];

interface Ctx {
  http: OrbitHttp;
  json: boolean;
}

type Opts = Record<string, unknown>;

/** What `commands.ts` lends this module, so both print and exit alike. */
export interface ClientKit {
  clientCommand(parent: Command, nameAndArgs: string, description: string): Command;
  act(
    fn: (ctx: Ctx, args: unknown[], opts: Opts) => Promise<number | void>,
  ): (...params: unknown[]) => Promise<void>;
  parseJsonArg(flag: string, v: string): Promise<unknown>;
}

interface ScheduleView extends Opts {
  schedule_id: string;
  workflow?: string;
  version?: string;
  every_s?: number;
  cron?: string;
  timezone?: string;
  overlap?: string;
  catch_up?: string;
  catch_up_window_s?: number;
  paused?: boolean;
  next_fire_ms?: number | null;
  fired?: number;
  skipped?: number;
  buffered_ms?: number | null;
  last_execution_id?: string | null;
}

const enc = encodeURIComponent;

function out(line: string): void {
  console.log(line);
}

function seconds(v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new InvalidArgumentError("must be seconds");
  return n;
}

/** `every 10s` or `cron "0 9 * * *" Europe/Paris`. */
function when(s: ScheduleView): string {
  if (typeof s.every_s === "number") return `every ${s.every_s}s`;
  return `cron "${str(s.cron)}"${s.timezone ? ` ${s.timezone}` : ""}`;
}

function block(s: ScheduleView): string {
  return keyValues([
    ["schedule", s.schedule_id],
    ["workflow", `${str(s.workflow)}${s.version ? ` ${s.version}` : ""}`],
    ["when", when(s)],
    ["state", s.paused ? "paused" : "active"],
    ["overlap", str(s.overlap)],
    ["catch-up", `${str(s.catch_up)} (window ${str(s.catch_up_window_s)}s)`],
    ["input", s.input === undefined ? undefined : JSON.stringify(s.input)],
    ["next fire", formatTime(s.next_fire_ms)],
    ["fired", str(s.fired)],
    ["skipped", str(s.skipped)],
    ["buffered", s.buffered_ms ? formatTime(s.buffered_ms) : undefined],
    ["last execution", s.last_execution_id ?? undefined],
  ]);
}

/** The schedule members the flags give (for create and update). */
async function fromFlags(kit: ClientKit, o: Opts): Promise<Opts> {
  const body: Opts = {};
  if (o.workflow !== undefined) body.workflow = o.workflow;
  if (o.version !== undefined) body.version = o.version;
  if (o.every !== undefined) body.every_s = o.every;
  if (o.cron !== undefined) body.cron = o.cron;
  if (o.timezone !== undefined) body.timezone = o.timezone;
  if (o.overlap !== undefined) body.overlap = o.overlap;
  if (o.catchUp !== undefined) body.catch_up = o.catchUp;
  if (o.window !== undefined) body.catch_up_window_s = o.window;
  if (o.input !== undefined) body.input = await kit.parseJsonArg("--input", o.input as string);
  if (o.paused === true) body.paused = true;
  return body;
}

function withScheduleFlags(cmd: Command): Command {
  return cmd
    .option("--workflow <name>", "workflow to start")
    .option("--version <semver>", "definition version (default: the latest at each start)")
    .option("--every <seconds>", "an occurrence every this many seconds", seconds)
    .option("--cron <expr>", "a cron expression (5 fields, or 6 with seconds first)")
    .option("--timezone <tz>", "IANA time zone of the cron expression (default UTC)")
    .addOption(new Option("--overlap <policy>", "while one still runs").choices(OVERLAP))
    .addOption(new Option("--catch-up <policy>", "occurrences missed while down").choices(CATCH_UP))
    .option("--window <seconds>", "catch-up window (catch_up_window_s)", seconds)
    .option("--input <json>", "input of every execution as JSON (or @FILE)");
}

async function list(ctx: Ctx, o: Opts): Promise<void> {
  const r = await ctx.http.get<{ schedules?: ScheduleView[] }>("/v1/schedules", {
    query: { workflow: o.workflow as string | undefined },
  });
  if (ctx.json) return out(JSON.stringify(r.data));
  const rows = Array.isArray(r.data.schedules) ? r.data.schedules : [];
  if (rows.length === 0) return out("no schedules");
  out(table(
    [
      "SCHEDULE ID",
      "WORKFLOW",
      "WHEN",
      "OVERLAP",
      "CATCH-UP",
      "STATE",
      "NEXT FIRE",
      "FIRED",
      "SKIPPED",
    ],
    rows.map((s) => [
      s.schedule_id,
      str(s.workflow),
      when(s),
      str(s.overlap),
      str(s.catch_up),
      s.paused ? "paused" : "active",
      formatTime(s.next_fire_ms),
      str(s.fired),
      str(s.skipped),
    ]),
  ));
}

async function create(kit: ClientKit, ctx: Ctx, o: Opts): Promise<void> {
  let body: Opts = {};
  if (o.file !== undefined) {
    const doc = await kit.parseJsonArg("--file", `@${o.file}`);
    if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
      throw usageError(`--file ${o.file}: must hold one schedule object`);
    }
    body = doc as Opts;
  }
  Object.assign(body, await fromFlags(kit, o));
  if (o.id !== undefined) body.schedule_id = o.id;
  if (body.workflow === undefined) {
    throw usageError("give --workflow and --every or --cron, or a schedule object with --file");
  }
  const r = await ctx.http.post<ScheduleView>("/v1/schedules", body);
  if (ctx.json) return out(JSON.stringify(r.data));
  out(
    `created schedule ${r.data.schedule_id} (${when(r.data)}); next fire ${
      formatTime(r.data.next_fire_ms)
    }`,
  );
}

async function show(ctx: Ctx, id: string): Promise<void> {
  const r = await ctx.http.get<ScheduleView>(`/v1/schedules/${enc(id)}`);
  out(ctx.json ? JSON.stringify(r.data) : block(r.data));
}

async function update(kit: ClientKit, ctx: Ctx, id: string, o: Opts): Promise<void> {
  const patch = await fromFlags(kit, o);
  if (Object.keys(patch).length === 0) throw usageError("give at least one member to change");
  const r = await ctx.http.request<ScheduleView>("PATCH", `/v1/schedules/${enc(id)}`, {
    body: patch,
  });
  if (ctx.json) return out(JSON.stringify(r.data));
  out(`updated schedule ${id} (${when(r.data)}); next fire ${formatTime(r.data.next_fire_ms)}`);
}

async function trigger(ctx: Ctx, id: string): Promise<void> {
  const r = await ctx.http.post<Opts>(`/v1/schedules/${enc(id)}/trigger`, {});
  if (ctx.json) return out(JSON.stringify(r.data));
  const x = r.data;
  out(
    r.status === 201
      ? `started execution ${str(x.execution_id)} of ${str(x.workflow)} ${str(x.version)}`
      : `execution ${str(x.execution_id)} already exists: ${str(x.status)}`,
  );
}

async function pauseOrResume(ctx: Ctx, id: string, verb: "pause" | "resume"): Promise<void> {
  const r = await ctx.http.post<ScheduleView>(`/v1/schedules/${enc(id)}/${verb}`, {});
  if (ctx.json) return out(JSON.stringify(r.data));
  out(
    verb === "pause"
      ? `paused schedule ${id}`
      : `resumed schedule ${id}; next fire ${formatTime(r.data.next_fire_ms)}`,
  );
}

async function remove(ctx: Ctx, id: string): Promise<void> {
  const r = await ctx.http.request<Opts>("DELETE", `/v1/schedules/${enc(id)}`);
  out(ctx.json ? JSON.stringify(r.data) : `deleted schedule ${id}`);
}

/** Registers `orbit schedules …` on the program. */
export function registerScheduleCommands(program: Command, kit: ClientKit): void {
  const { clientCommand, act } = kit;
  const schedules = program.command("schedules")
    .description("Create, list, inspect, trigger, pause, resume and delete schedules");

  clientCommand(schedules, "list", "List schedules")
    .option("--workflow <name>", "only schedules of this workflow")
    .action(act((ctx, _args, o) => list(ctx, o)));

  withScheduleFlags(clientCommand(schedules, "create", "Create a schedule"))
    .option("--id <schedule-id>", "schedule id (default: generated from the workflow name)")
    .option("--file <path>", "a JSON file with the schedule object; flags override its members")
    .option("--paused", "create it paused")
    .action(act((ctx, _args, o) => create(kit, ctx, o)));

  clientCommand(schedules, "show", "Show a schedule")
    .argument("<id>", "schedule id")
    .action(act((ctx, [id]) => show(ctx, id as string)));

  withScheduleFlags(clientCommand(schedules, "update", "Change members of a schedule (PATCH)"))
    .argument("<id>", "schedule id")
    .action(act((ctx, [id], o) => update(kit, ctx, id as string, o)));

  clientCommand(schedules, "trigger", "Start one occurrence now (counted as fired)")
    .argument("<id>", "schedule id")
    .action(act((ctx, [id]) => trigger(ctx, id as string)));

  clientCommand(schedules, "pause", "Pause a schedule")
    .argument("<id>", "schedule id")
    .action(act((ctx, [id]) => pauseOrResume(ctx, id as string, "pause")));

  clientCommand(schedules, "resume", "Resume a paused schedule (from now on)")
    .argument("<id>", "schedule id")
    .action(act((ctx, [id]) => pauseOrResume(ctx, id as string, "resume")));

  clientCommand(schedules, "delete", "Delete a schedule")
    .argument("<id>", "schedule id")
    .action(act((ctx, [id]) => remove(ctx, id as string)));
}
