/**
 * The client CLI (SPEC §7) end to end: a real server (`main.ts server`), the CLI run as a
 * subprocess (`deno run -A main.ts …`), outputs and exit codes asserted. A worker, where one
 * is needed, is driven with raw fetch calls to the worker protocol (SPEC §4).
 */
import assert from "node:assert/strict";
import { api, MAIN, type ServerProcess, startServer, tempDir } from "./support/server.ts";
import { registerWorker } from "./support/workers.ts";

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The environment of the test run without ORBIT_* variables (so none leak into a CLI run). */
function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(Deno.env.toObject())) {
    if (!k.startsWith("ORBIT_")) env[k] = v;
  }
  return { ...env, NO_COLOR: "1" };
}

async function orbit(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN, ...args],
    clearEnv: true,
    env: { ...baseEnv(), ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // A guard against a hanging CLI, not a wait for anything.
  const guard = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
  }, 90_000);
  try {
    const r = await child.output();
    return {
      code: r.code,
      stdout: new TextDecoder().decode(r.stdout),
      stderr: new TextDecoder().decode(r.stderr),
    };
  } finally {
    clearTimeout(guard);
  }
}

function expectCode(r: Run, code: number): void {
  assert.equal(
    r.code,
    code,
    `exit code ${r.code}, expected ${code}\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}`,
  );
}

/** The line of `text` that contains `needle`. */
function lineWith(text: string, needle: string): string {
  const l = text.split("\n").find((x) => x.includes(needle));
  assert.ok(l !== undefined, `no line with ${JSON.stringify(needle)} in:\n${text}`);
  return l;
}

/** Asserts that `value` in `row` starts in the column where `column` starts in `header`. */
function assertColumn(header: string, row: string, column: string, value: string): void {
  const at = header.indexOf(column);
  assert.ok(at >= 0, `no column ${column} in ${header}`);
  assert.equal(
    row.indexOf(value, at),
    at,
    `${value} not aligned under ${column}:\n${header}\n${row}`,
  );
}

function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

const HELLO = {
  ir: "orbit-ir/1",
  name: "Hello",
  version: "1.0.0",
  steps: [
    { id: "greet", task: "cli.greet", contract: "1", input: "{% $input %}" },
    { id: "done", return: "{% $steps.greet %}" },
  ],
};

/** A one-task workflow whose task is served by nobody but the test's worker. */
function oneTask(name: string, task: string) {
  return {
    ir: "orbit-ir/1",
    name,
    version: "1.0.0",
    steps: [
      { id: "work", task, contract: "1", input: "{% $input %}", retry: { max_attempts: 1 } },
      { id: "done", return: "{% $steps.work %}" },
    ],
  };
}

const MODULE = `
export const doc = {
  ir: "orbit-ir/1", name: "FromModule", version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};
export default doc; // the same object twice: deployed once
export const builder = {
  build() {
    return { ir: "orbit-ir/1", name: "FromBuilder", version: "2.0.0",
             steps: [{ id: "done", return: 1 }] };
  },
};
export const notAWorkflow = { hello: "world" };
export function helper() { return 1; }
`;

/** A worker session serving `task`, driven by raw fetch calls. */
async function rawWorker(base: string, workerId: string, task: string, token?: string) {
  const http = api(base, token);
  const session = await registerWorker(http, {
    worker_id: workerId,
    runtime: "test",
    tasks: [{ name: task, contract: "1" }],
    concurrency: 1,
  });
  return {
    session,
    /** Long-polls until one task arrives. */
    async next(): Promise<{ token: string; execution_id: string; input: unknown }> {
      for (;;) {
        const r = await http.post("/v1/workers/poll", { session_id: session, wait_s: 10 });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        if (r.body.tasks.length > 0) return r.body.tasks[0];
      }
    },
    complete: (t: string, output: unknown) => http.post("/v1/tasks/complete", { token: t, output }),
    fail: (t: string, code: string, message: string) =>
      http.post("/v1/tasks/fail", { token: t, error: { code, message, retryable: false } }),
  };
}

Deno.test("orbit CLI against a real server", async (t) => {
  const dir = await tempDir();
  let server: ServerProcess | undefined;
  let fake: Deno.HttpServer<Deno.NetAddr> | undefined;
  try {
    server = await startServer({ db: `${dir}/cli.db` });
    const url = server.url;
    const s = ["--server", url];
    const files = {
      hello: `${dir}/hello.json`,
      module: `${dir}/workflows.ts`,
      invalid: `${dir}/invalid.json`,
      notJson: `${dir}/broken.json`,
      empty: `${dir}/empty.ts`,
    };
    await Deno.writeTextFile(files.hello, JSON.stringify(HELLO, null, 2));
    await Deno.writeTextFile(files.module, MODULE);
    await Deno.writeTextFile(
      files.invalid,
      JSON.stringify({ ir: "orbit-ir/1", name: "Broken", version: "one", steps: [{ id: "a" }] }),
    );
    await Deno.writeTextFile(files.notJson, "{ not json");
    await Deno.writeTextFile(files.empty, "export const x = 1;\n");

    await t.step(
      "deploy a JSON file: deployed, then unchanged; --json answers the body",
      async () => {
        let r = await orbit(["deploy", files.hello, ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, /^deployed Hello 1\.0\.0 \(orbit-ir\/1\) from .*hello\.json\n$/);
        r = await orbit(["deploy", files.hello, ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, /^unchanged Hello 1\.0\.0 .*already deployed/);
        r = await orbit(["deploy", files.hello, "--json", ...s]);
        expectCode(r, 0);
        const body = JSON.parse(r.stdout);
        assert.equal(body.name, "Hello");
        assert.equal(body.version, "1.0.0");
        assert.equal(body.created, false);
      },
    );

    await t.step("deploy a TS module: every exported document and builder", async () => {
      const r = await orbit(["deploy", files.module, ...s]);
      expectCode(r, 0);
      assert.match(r.stdout, /deployed FromModule 1\.0\.0 .*export doc/);
      assert.match(r.stdout, /deployed FromBuilder 2\.0\.0 .*export builder/);
      assert.equal(r.stdout.trim().split("\n").length, 2, r.stdout);
      const http = api(url);
      assert.equal((await http.get("/v1/workflows/FromModule/1.0.0")).status, 200);
      assert.equal((await http.get("/v1/workflows/FromBuilder/2.0.0")).status, 200);
    });

    await t.step(
      "deploy an invalid document: exit 1, every problem with its JSON path",
      async () => {
        const r = await orbit(["deploy", files.invalid, ...s]);
        expectCode(r, 1);
        assert.match(r.stderr, /^error: INVALID_WORKFLOW: .*invalid\.json/m);
        assert.match(r.stderr, /^ {2}\$\.version: /m);
        assert.match(r.stderr, /^ {2}\$\.steps\[0\]: /m);
        assert.equal(r.stdout, "");
        // --json: the error body on stdout, one line per document, in order.
        const j = await orbit(["deploy", files.invalid, files.hello, "--json", ...s]);
        expectCode(j, 1);
        const lines = j.stdout.trim().split("\n").map((l) => JSON.parse(l));
        assert.equal(lines.length, 2);
        assert.equal(lines[0].error.code, "INVALID_WORKFLOW");
        assert.ok(lines[0].error.problems.some((p: { path: string }) => p.path === "$.version"));
        assert.equal(lines[1].name, "Hello");
      },
    );

    await t.step(
      "deploy usage errors: missing file, bad JSON, module without workflows",
      async () => {
        let r = await orbit(["deploy", `${dir}/missing.json`, ...s]);
        expectCode(r, 2);
        assert.match(r.stderr, /error: .*missing\.json: no such file/);
        r = await orbit(["deploy", files.notJson, ...s]);
        expectCode(r, 2);
        assert.match(r.stderr, /broken\.json: not valid JSON/);
        r = await orbit(["deploy", files.empty, ...s]);
        expectCode(r, 2);
        assert.match(r.stderr, /exports no workflow document/);
        r = await orbit(["deploy", ...s]);
        expectCode(r, 2); // missing argument
        r = await orbit(["deploy", files.hello, "--bogus", ...s]);
        expectCode(r, 2); // unknown option
      },
    );

    await t.step("start --json, and with the same --id again: the same execution", async () => {
      const first = await orbit([
        "start",
        "Hello",
        "--input",
        '{"n":1}',
        "--id",
        "cli-1",
        "--json",
        ...s,
      ]);
      expectCode(first, 0);
      const a = JSON.parse(first.stdout);
      assert.equal(a.execution_id, "cli-1");
      assert.equal(a.workflow, "Hello");
      assert.equal(a.version, "1.0.0");
      assert.equal(a.status, "running");
      assert.deepEqual(a.input, { n: 1 });
      const again = await orbit(["start", "Hello", "--id", "cli-1", "--json", ...s]);
      expectCode(again, 0);
      const b = JSON.parse(again.stdout);
      assert.equal(b.execution_id, "cli-1");
      assert.equal(b.run_id, a.run_id);
      assert.deepEqual(b.input, { n: 1 }); // not restarted with the new (absent) input
      const human = await orbit(["start", "Hello", "--id", "cli-1", "--version", "1.0.0", ...s]);
      expectCode(human, 0);
      assert.match(human.stdout, /^execution cli-1 already exists \(Hello 1\.0\.0\): running$/m);
      const fresh = await orbit(["start", "Hello", "--id", "cli-2", ...s]);
      expectCode(fresh, 0);
      assert.match(fresh.stdout, /^started execution cli-2 of Hello 1\.0\.0$/m);
    });

    await t.step("start usage and API errors", async () => {
      let r = await orbit(["start", "Hello", "--input", "{bad json", ...s]);
      expectCode(r, 2);
      assert.match(r.stderr, /^error: --input is not valid JSON/m);
      r = await orbit(["start", "Hello", "--input", `@${dir}/nope.json`, ...s]);
      expectCode(r, 2);
      r = await orbit(["start", "Hello", "--timeout", "soon", ...s]);
      expectCode(r, 2);
      r = await orbit(["start", "NoSuchWorkflow", ...s]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: UNKNOWN_WORKFLOW: /m);
    });

    await t.step("executions list: table and --json, filters and paging", async () => {
      let r = await orbit(["executions", "list", "--workflow", "Hello", ...s]);
      expectCode(r, 0);
      const lines = r.stdout.trim().split("\n");
      const header = lines[0]!;
      assert.match(header, /^EXECUTION ID +WORKFLOW +VERSION +STATUS +CREATED +CLOSED$/);
      const row = lineWith(r.stdout, "cli-1");
      assertColumn(header, row, "WORKFLOW", "Hello");
      assertColumn(header, row, "VERSION", "1.0.0");
      assertColumn(header, row, "STATUS", "running");
      assertColumn(header, row, "CREATED", new Date().toISOString().slice(0, 4));
      assert.equal(lines.length, 3); // header, cli-1, cli-2

      r = await orbit(["executions", "list", "--json", ...s]);
      expectCode(r, 0);
      const page = JSON.parse(r.stdout);
      assert.ok(Array.isArray(page.executions));
      assert.deepEqual(
        page.executions.map((x: { execution_id: string }) => x.execution_id).sort(),
        ["cli-1", "cli-2"],
      );

      r = await orbit(["executions", "list", "--limit", "1", ...s]);
      expectCode(r, 0);
      const cursor = /more: orbit executions list --cursor (\S+)/.exec(r.stdout)?.[1];
      assert.ok(cursor, r.stdout);
      const next = await orbit([
        "executions",
        "list",
        "--limit",
        "1",
        "--cursor",
        cursor,
        "--json",
        ...s,
      ]);
      expectCode(next, 0);
      assert.equal(JSON.parse(next.stdout).executions.length, 1);

      r = await orbit(["executions", "list", "--status", "completed", ...s]);
      expectCode(r, 0);
      assert.equal(r.stdout.trim(), "no executions");
      r = await orbit(["executions", "list", "--status", "sleeping", ...s]);
      expectCode(r, 2);
      r = await orbit(["executions", "list", "--limit", "many", ...s]);
      expectCode(r, 2);
    });

    await t.step("executions show: table and --json; unknown id is exit 1", async () => {
      let r = await orbit(["executions", "show", "cli-1", ...s]);
      expectCode(r, 0);
      assert.match(r.stdout, /^execution +cli-1$/m);
      assert.match(r.stdout, /^workflow +Hello 1\.0\.0$/m);
      assert.match(r.stdout, /^status +running$/m);
      assert.match(r.stdout, /^input +\{"n":1\}$/m);
      // The values start in one column.
      const starts = r.stdout.trim().split("\n").map((l) => l.search(/ {2}\S/));
      assert.equal(new Set(starts).size, 1, r.stdout);
      r = await orbit(["executions", "show", "cli-1", "--json", ...s]);
      expectCode(r, 0);
      const x = JSON.parse(r.stdout);
      assert.equal(x.execution_id, "cli-1");
      assert.equal(x.status, "running");
      r = await orbit(["executions", "show", "nope", ...s]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: UNKNOWN_EXECUTION: /m);
    });

    await t.step(
      "executions pending and show: the workflow's timeout, not a step's \"no timeout\"",
      async () => {
        const deadline = {
          ir: "orbit-ir/2",
          name: "Deadline",
          version: "1.0.0",
          timeout_s: 7200,
          signals: { approved: {} },
          steps: [{ id: "approval", wait_signal: "approved" }, { id: "done", return: 1 }],
        };
        assert.equal((await api(url).post("/v1/workflows", deadline)).status, 201);
        expectCode(await orbit(["start", "Deadline", "--id", "deadline-1", ...s]), 0);
        const at = String.raw`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(in (1h59m|2h00m)\)`;
        let r = await orbit(["executions", "pending", "deadline-1", ...s]);
        expectCode(r, 0);
        const row = lineWith(r.stdout, "WAITING_FOR_SIGNAL");
        assert.doesNotMatch(row, /; no timeout$/);
        assert.match(row, /no timeout of its own \(the workflow times out at \S+Z\)$/);
        assert.match(r.stdout, new RegExp(`^the workflow times out at ${at}$`, "m"));
        r = await orbit(["executions", "show", "deadline-1", ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, new RegExp(`^timeout +${at}$`, "m"));
        // Without a timeout: said so.
        r = await orbit(["executions", "pending", "cli-1", ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, /^the workflow has no timeout$/m);
        r = await orbit(["executions", "show", "cli-1", ...s]);
        expectCode(r, 0);
        assert.match(r.stdout, /^timeout +none$/m);
      },
    );

    await t.step("executions history: seq time type step attempt lines, and --json", async () => {
      let r = await orbit(["executions", "history", "cli-1", ...s]);
      expectCode(r, 0);
      const lines = r.stdout.trim().split("\n");
      const header = lines[0]!;
      assert.match(header, /^SEQ +TIME +TYPE +STEP +ATTEMPT +DETAIL$/);
      const created = lines[1]!;
      assert.match(created, /^1 +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z +WorkflowCreated +- +- +/);
      const scheduled = lineWith(r.stdout, "StepScheduled");
      assert.match(scheduled, /^2 +\S+ +StepScheduled +greet +1 +task cli\.greet@1$/);
      assertColumn(header, scheduled, "TYPE", "StepScheduled");
      assertColumn(header, scheduled, "STEP", "greet");
      assertColumn(header, scheduled, "ATTEMPT", "1");

      r = await orbit(["executions", "history", "cli-1", "--json", ...s]);
      expectCode(r, 0);
      const h = JSON.parse(r.stdout);
      assert.equal(h.execution_id, "cli-1");
      assert.deepEqual(
        h.events.map((e: { seq: number; type: string }) => [e.seq, e.type]),
        [[1, "WorkflowCreated"], [2, "StepScheduled"]],
      );

      // One page with --limit, and the next with --after-seq.
      r = await orbit(["executions", "history", "cli-1", "--limit", "1", "--json", ...s]);
      expectCode(r, 0);
      const p1 = JSON.parse(r.stdout);
      assert.equal(p1.events.length, 1);
      assert.equal(p1.next_after_seq, 1);
      r = await orbit(["executions", "history", "cli-1", "--after-seq", "1", ...s]);
      expectCode(r, 0);
      assert.equal(r.stdout.trim().split("\n").length, 2, r.stdout);
      assert.match(r.stdout, /^2 .*StepScheduled/m);
    });

    await t.step(
      "start --wait: completes through a worker; no progress line off a TTY",
      async () => {
        assert.equal(
          (await api(url).post("/v1/workflows", oneTask("Completer", "cli.complete"))).status,
          201,
        );
        const worker = await rawWorker(url, "cli-worker-ok", "cli.complete");
        const cli = orbit([
          "start",
          "Completer",
          "--input",
          '{"x":2}',
          "--id",
          "done-1",
          "--wait",
          ...s,
        ]);
        const task = await worker.next();
        assert.equal(task.execution_id, "done-1");
        assert.equal((await worker.complete(task.token, { doubled: 4 })).status, 200);
        const r = await cli;
        expectCode(r, 0);
        assert.match(r.stdout, /^started execution done-1 of Completer 1\.0\.0$/m);
        assert.match(r.stdout, /^status +completed$/m);
        assert.match(r.stdout, /^output +\{"doubled":4\}$/m);
        // stderr is a pipe: no progress line.
        assert.doesNotMatch(r.stderr, /waiting for|[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]/);
        assert.ok(!r.stderr.includes("\x1b["), r.stderr);
        // Waiting again on a finished execution answers at once; --json is the execution.
        const w = await orbit(["executions", "wait", "done-1", "--json", ...s]);
        expectCode(w, 0);
        assert.equal(JSON.parse(w.stdout).status, "completed");
        // And the history shows the whole run.
        const h = await orbit(["executions", "history", "done-1", ...s]);
        expectCode(h, 0);
        assert.match(h.stdout, /StepDispatched +work +1 +worker cli-worker-ok/);
        assert.match(h.stdout, /WorkflowCompleted/);
      },
    );

    await t.step("executions wait on an execution that fails: exit 1", async () => {
      assert.equal(
        (await api(url).post("/v1/workflows", oneTask("Failer", "cli.fail"))).status,
        201,
      );
      const worker = await rawWorker(url, "cli-worker-fail", "cli.fail");
      const started = await orbit(["start", "Failer", "--id", "fail-1", ...s]);
      expectCode(started, 0);
      const cli = orbit(["executions", "wait", "fail-1", "--timeout", "60", ...s]);
      const task = await worker.next();
      assert.equal((await worker.fail(task.token, "BROKEN", "it broke")).status, 200);
      const r = await cli;
      expectCode(r, 1);
      assert.match(r.stdout, /^status +failed$/m);
      assert.match(r.stderr, /^error: EXECUTION_FAILED: execution fail-1 failed: .*BROKEN/m);
    });

    await t.step("wait timeout: exit 4 while still running", async () => {
      let r = await orbit(["executions", "wait", "cli-1", "--timeout", "0.3", ...s]);
      expectCode(r, 4);
      assert.match(r.stdout, /^status +running$/m);
      assert.match(r.stderr, /^error: WAIT_TIMEOUT: execution cli-1 is still running/m);
      r = await orbit([
        "start",
        "Hello",
        "--id",
        "cli-1",
        "--wait",
        "--timeout",
        "0.2",
        "--json",
        ...s,
      ]);
      expectCode(r, 4);
      assert.equal(JSON.parse(r.stdout).status, "running");
    });

    const script = "/usr/bin/script"; // util-linux: runs the CLI on a pseudo-terminal
    const hasScript = await Deno.stat(script).then(() => true, () => false);
    await t.step({
      name: "progress line on a TTY: spinner, elapsed time, last event type",
      ignore: !hasScript,
      fn: async () => {
        const q = (a: string) => `'${a.replaceAll("'", `'\\''`)}'`;
        const cmd = [
          Deno.execPath(),
          "run",
          "-A",
          MAIN,
          "executions",
          "wait",
          "cli-1",
          "--timeout",
          "2",
          ...s,
        ]
          .map(q).join(" ");
        const r = await new Deno.Command(script, {
          args: ["-qefc", cmd, "/dev/null"],
          clearEnv: true,
          env: baseEnv(),
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
        }).output();
        const text = new TextDecoder().decode(r.stdout);
        assert.equal(r.code, 4, text);
        assert.match(
          text,
          /[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] {2}waiting for cli-1 {2}\d+(ms|\.\ds) {2}StepScheduled greet #1/,
        );
        // The line is cleared before the result is printed.
        assert.ok(text.includes("\r\x1b[2Kexecution "), text);
      },
    });

    await t.step("signal and query: API errors are exit 1, bad payload JSON exit 2", async () => {
      let r = await orbit(["executions", "signal", "cli-1", "approved", "--payload", "{x", ...s]);
      expectCode(r, 2);
      r = await orbit([
        "executions",
        "signal",
        "cli-1",
        "approved",
        "--payload",
        '{"ok":true}',
        ...s,
      ]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: UNKNOWN_SIGNAL: /m);
      r = await orbit(["executions", "query", "cli-1", "status", ...s]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: UNKNOWN_QUERY: /m);
    });

    await t.step("cancel: cancelled, then EXECUTION_FINISHED (exit 1)", async () => {
      let r = await orbit(["executions", "cancel", "cli-2", "--reason", "not needed", ...s]);
      expectCode(r, 0);
      assert.match(r.stdout, /^cancelled execution cli-2: cancelled$/m);
      r = await orbit(["executions", "show", "cli-2", "--json", ...s]);
      assert.equal(JSON.parse(r.stdout).status, "cancelled");
      r = await orbit(["executions", "cancel", "cli-2", "--json", ...s]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: EXECUTION_FINISHED: /m);
      assert.equal(JSON.parse(r.stdout).error.code, "EXECUTION_FINISHED");
      r = await orbit(["executions", "wait", "cli-2", ...s]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: EXECUTION_CANCELLED: /m);
      r = await orbit(["executions", "cancel", "cli-1", "--json", ...s]);
      expectCode(r, 0);
      assert.equal(JSON.parse(r.stdout).status, "cancelled");
    });

    await t.step("workers: table and --json", async () => {
      let r = await orbit(["workers", ...s]);
      expectCode(r, 0);
      const header = r.stdout.split("\n")[0]!;
      assert.match(
        header,
        /^WORKER ID +SESSION +RUNTIME +CONCURRENCY +IN FLIGHT +LAST CONTACT +TASKS$/,
      );
      const row = lineWith(r.stdout, "cli-worker-ok");
      assertColumn(header, row, "RUNTIME", "test");
      assertColumn(header, row, "TASKS", "cli.complete@1");
      r = await orbit(["workers", "--json", ...s]);
      expectCode(r, 0);
      const ids = JSON.parse(r.stdout).workers.map((w: { worker_id: string }) => w.worker_id);
      assert.ok(ids.includes("cli-worker-ok") && ids.includes("cli-worker-fail"), r.stdout);
    });

    await t.step("health: table and --json", async () => {
      let r = await orbit(["health", ...s]);
      expectCode(r, 0);
      assert.match(r.stdout, /^status +ok$/m);
      assert.match(r.stdout, /^api_version +orbit-api\/1$/m);
      r = await orbit(["health", "--json", ...s]);
      expectCode(r, 0);
      const h = JSON.parse(r.stdout);
      assert.equal(h.status, "ok");
      assert.equal(h.api_version, "orbit-api/1");
      // ORBIT_SERVER is the default server.
      r = await orbit(["health", "--json"], { ORBIT_SERVER: url });
      expectCode(r, 0);
      assert.equal(JSON.parse(r.stdout).status, "ok");
    });

    await t.step("unreachable server: exit 3", async () => {
      const port = freePort();
      let r = await orbit(["health", "--server", `http://127.0.0.1:${port}`]);
      expectCode(r, 3);
      assert.match(
        r.stderr,
        new RegExp(`^error: cannot reach the ORBIT server at http://127\\.0\\.0\\.1:${port}`, "m"),
      );
      r = await orbit(["deploy", files.hello], { ORBIT_SERVER: `127.0.0.1:${port}` });
      expectCode(r, 3);
      r = await orbit(["health", "--server", "ftp://x"]);
      expectCode(r, 2);
    });

    await t.step("503 NOT_LEADER: the request is repeated once at the leader", async () => {
      const seen: Array<{ method: string; path: string; body: string; auth: string | null }> = [];
      fake = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
        const u = new URL(req.url);
        seen.push({
          method: req.method,
          path: u.pathname + u.search,
          body: await req.text(),
          auth: req.headers.get("authorization"),
        });
        // Only the header for writes, only the body for reads: both are honoured.
        const headers: Record<string, string> = {
          "content-type": "application/json",
          "retry-after": "1",
        };
        if (req.method !== "GET") headers["x-orbit-leader"] = url;
        return new Response(
          JSON.stringify({
            error: {
              code: "NOT_LEADER",
              message: `this server is a standby; the leader is \`a\` at ${url}`,
              leader_node: "a",
              ...(req.method === "GET" ? { leader_addr: url } : {}),
            },
          }),
          { status: 503, headers },
        );
      });
      const standby = `http://127.0.0.1:${fake.addr.port}`;
      const doc = { ...HELLO, version: "1.1.0" };
      const file = `${dir}/hello-1.1.json`;
      await Deno.writeTextFile(file, JSON.stringify(doc));
      let r = await orbit(["deploy", file, "--server", standby]);
      expectCode(r, 0);
      assert.match(r.stdout, /^deployed Hello 1\.1\.0 /m);
      assert.match(r.stderr, /not the leader; repeating the request at/);
      assert.equal(seen.length, 1);
      assert.equal(seen[0]!.method, "POST");
      assert.equal(seen[0]!.path, "/v1/workflows");
      assert.deepEqual(JSON.parse(seen[0]!.body), doc);
      assert.equal((await api(url).get("/v1/workflows/Hello/1.1.0")).status, 200);

      r = await orbit(["executions", "show", "cli-1", "--json", "--server", standby]);
      expectCode(r, 0);
      assert.equal(JSON.parse(r.stdout).execution_id, "cli-1");
      assert.equal(seen.length, 2);
      assert.equal(seen[1]!.path, "/v1/executions/cli-1");

      // A standby that names itself as the leader: no loop, the error is reported.
      await fake.shutdown();
      fake = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
        seen.push({ method: "?", path: "?", body: "", auth: null });
        return Response.json({ error: { code: "NOT_LEADER", message: "no leader elected" } }, {
          status: 503,
        });
      });
      const before = seen.length;
      r = await orbit(["deploy", file, "--server", `http://127.0.0.1:${fake.addr.port}`]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: NOT_LEADER: no leader elected/m);
      assert.equal(seen.length - before, 1);
    });
  } finally {
    await fake?.shutdown();
    if (server) {
      try {
        Deno.kill(server.pid, "SIGKILL");
      } catch { /* already gone */ }
      await server.status;
    }
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("orbit CLI with a server that requires a token", async (t) => {
  const dir = await tempDir();
  let server: ServerProcess | undefined;
  try {
    server = await startServer({ db: `${dir}/token.db`, args: ["--token", "t"] });
    const url = server.url;
    const file = `${dir}/hello.json`;
    await Deno.writeTextFile(file, JSON.stringify(HELLO));

    await t.step("without a token: exit 1, UNAUTHORIZED", async () => {
      let r = await orbit(["workers", "--server", url]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: UNAUTHORIZED: /m);
      r = await orbit(["deploy", file, "--server", url, "--token", "wrong"]);
      expectCode(r, 1);
      assert.match(r.stderr, /^error: UNAUTHORIZED: /m);
      // Health needs no credentials.
      r = await orbit(["health", "--server", url]);
      expectCode(r, 0);
    });

    await t.step("with --token", async () => {
      let r = await orbit(["deploy", file, "--server", url, "--token", "t"]);
      expectCode(r, 0);
      assert.match(r.stdout, /^deployed Hello 1\.0\.0/m);
      r = await orbit(["start", "Hello", "--id", "tok-1", "--server", url, "--token", "t"]);
      expectCode(r, 0);
    });

    await t.step("with ORBIT_TOKEN and ORBIT_SERVER", async () => {
      const env = { ORBIT_TOKEN: "t", ORBIT_SERVER: url };
      let r = await orbit(["executions", "list", "--json"], env);
      expectCode(r, 0);
      assert.equal(JSON.parse(r.stdout).executions[0].execution_id, "tok-1");
      r = await orbit(["executions", "history", "tok-1"], env);
      expectCode(r, 0);
      assert.match(r.stdout, /WorkflowCreated/);
      // The flag wins over the environment.
      r = await orbit(["workers"], { ...env, ORBIT_TOKEN: "wrong" });
      expectCode(r, 1);
      r = await orbit(["workers", "--token", "t"], { ...env, ORBIT_TOKEN: "wrong" });
      expectCode(r, 0);
    });
  } finally {
    if (server) {
      try {
        Deno.kill(server.pid, "SIGKILL");
      } catch { /* already gone */ }
      await server.status;
    }
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
