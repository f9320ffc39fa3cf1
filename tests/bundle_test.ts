/**
 * The single-file artifact: `deno task bundle`'s command builds `orbit.js` into a temporary
 * directory outside the repository, and everything runs from there, where no deno.json
 * applies: `--help`, the server (with `--unstable-no-legacy-abort` on the command line, since
 * the config file that sets it is not there), the web UI, `deploy` through the bundle's CLI,
 * and 50 orders completed by the example worker with clean histories. Also `deno task
 * compile` up to the runtime download this machine cannot make.
 */
import assert from "node:assert/strict";
import {
  api,
  SERVER_V8_FLAGS,
  type ServerProcess,
  startServer,
  tempDir,
} from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  runOrders,
  startOrderWorker,
  type WorkerProcess,
} from "./support/orders.ts";
import { described, run, runDeno } from "./support/run.ts";
import { registerWorker } from "./support/workers.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const TASKS: Record<string, string> = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)).tasks;
/** The flag deno.json's `"unstable"` gives runs inside the project; the bundle needs it spelled. */
const NO_LEGACY_ABORT = "--unstable-no-legacy-abort";
/** What Deno prints once when request.signal keeps its legacy meaning. */
const LEGACY_WARNING = /request\.signal aborts on successful responses \(legacy behavior\)/;

/** A task's command as argv, with its `-o` output replaced by `output`. */
function taskArgs(task: string, output: string): string[] {
  const words = TASKS[task]!.trim().split(/\s+/);
  assert.equal(words[0], "deno", `${task}: ${TASKS[task]}`);
  const o = words.indexOf("-o");
  assert.ok(o > 0, `${task} names its output with -o: ${TASKS[task]}`);
  words[o + 1] = output;
  return words.slice(1);
}

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

Deno.test({
  name: "the deno bundle artifact runs the server, the CLI and the UI outside the project",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async (t) => {
    const dir = await tempDir();
    const bundle = `${dir}/orbit.js`;
    const servers: ServerProcess[] = [];
    let worker: WorkerProcess | undefined;
    try {
      // Nothing above the directory configures Deno: what runs there is the bundle alone.
      for (let d = dir; d !== "/"; d = d.slice(0, d.lastIndexOf("/")) || "/") {
        for (const f of ["deno.json", "deno.jsonc"]) {
          assert.ok(!await exists(`${d}/${f}`), `${d}/${f} would configure the bundle's runs`);
        }
      }

      await t.step("deno task bundle's command builds one file", async () => {
        assert.equal(TASKS.bundle, "deno bundle --platform=deno -o dist/orbit.js main.ts");
        const r = await runDeno(taskArgs("bundle", bundle), { cwd: ROOT });
        assert.equal(r.code, 0, described(r));
        const text = await Deno.readTextFile(bundle);
        // main.ts's shebang survives: `./orbit.js` runs with the flags the server needs.
        assert.equal(
          text.slice(0, text.indexOf("\n")),
          `#!/usr/bin/env -S deno run -A ${NO_LEGACY_ABORT}`,
        );
        // Every npm package is inside; only Node built-ins are imported.
        const specifiers = [...text.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s+"([^"]+)"/gm)]
          .map((m) => m[1]!);
        assert.ok(specifiers.length > 0);
        assert.deepEqual(specifiers.filter((s) => !s.startsWith("node:")), []);
      });

      await t.step("--help and server --help, with deno run and as an executable", async () => {
        const opts = { cwd: dir };
        let r = await runDeno(["run", "-A", NO_LEGACY_ABORT, bundle, "--help"], opts);
        assert.equal(r.code, 0, described(r));
        for (const cmd of ["server", "deploy", "start", "executions", "workers", "health"]) {
          assert.match(r.stdout, new RegExp(`^ {2}${cmd}\\b`, "m"), r.stdout);
        }
        r = await runDeno(["run", "-A", NO_LEGACY_ABORT, bundle, "server", "--help"], opts);
        assert.equal(r.code, 0, described(r));
        assert.match(r.stdout, /^Usage: orbit server \[options\]/m);
        for (const flag of ["--db", "--addr", "--token", "--session-timeout", "--no-ui"]) {
          assert.ok(r.stdout.includes(flag), `${flag} missing:\n${r.stdout}`);
        }
        // Through the shebang, with the Deno under test first on PATH.
        await Deno.chmod(bundle, 0o755);
        const bin = Deno.execPath().slice(0, Deno.execPath().lastIndexOf("/"));
        r = await run(bundle, ["server", "--help"], {
          cwd: dir,
          env: { PATH: `${bin}:${Deno.env.get("PATH") ?? ""}` },
        });
        assert.equal(r.code, 0, described(r));
        assert.match(r.stdout, /^Usage: orbit server \[options\]/m);
      });

      await t.step(
        "server from the bundle: UI, deploy by the bundle's CLI, 50 orders",
        async () => {
          const server = await startServer({
            db: `${dir}/orbit.db`,
            entry: bundle,
            denoArgs: [NO_LEGACY_ABORT],
            cwd: dir,
          });
          servers.push(server);
          const ui = await fetch(`${server.url}/`);
          assert.equal(ui.status, 200);
          assert.match(ui.headers.get("content-type") ?? "", /^text\/html/);
          const html = await ui.text();
          assert.match(html, /^<!doctype html>/i);
          assert.match(html, /<title>ORBIT<\/title>/);

          const deploy = await runDeno([
            "run",
            "-A",
            NO_LEGACY_ABORT,
            bundle,
            "deploy",
            `${ROOT}examples/order-processing/workflow.json`,
            "--server",
            server.url,
          ], { cwd: dir });
          assert.equal(deploy.code, 0, described(deploy));
          assert.match(deploy.stdout, /^deployed OrderProcessing 1\.0\.0 \(orbit-ir\/1\)/);

          worker = startOrderWorker(server.url);
          const ids = Array.from({ length: 50 }, (_, i) => `bundle-${i}`);
          const statuses = await runOrders(() => server.url, ids, 8);
          assert.equal(statuses.size, 50);
          for (const [id, status] of statuses) assert.equal(status, "completed", id);
          for (const id of ids) assertCleanOrderHistory(id, await fullHistory(server.url, id));
          // Long polls and waits ran: request.signal had its new meaning (no legacy warning).
          assert.ok(!server.logs.some((l) => LEGACY_WARNING.test(l)), server.logs.join("\n"));
        },
      );

      await t.step(
        "without the flag the bundle gets the legacy abort (the check bites)",
        async () => {
          const server = await startServer({ db: `${dir}/legacy.db`, entry: bundle, cwd: dir });
          servers.push(server);
          const http = api(server.url);
          const session = await registerWorker(http, {
            worker_id: "legacy-probe",
            runtime: "test",
            tasks: [{ name: "probe.task", contract: "1" }],
            concurrency: 1,
          });
          const poll = await http.post("/v1/workers/poll", {
            session_id: session,
            wait_s: 0,
          });
          assert.equal(poll.status, 200, JSON.stringify(poll.body));
          await server.waitForLog(LEGACY_WARNING, 10_000);
        },
      );
    } finally {
      await worker?.kill("SIGKILL");
      for (const s of servers) await s.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});

Deno.test({
  name: "deno task compile's command gets as far as the runtime download",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    try {
      assert.equal(
        TASKS.compile,
        `deno compile -A ${NO_LEGACY_ABORT} ${SERVER_V8_FLAGS} -o dist/orbit main.ts`,
      );
      // DENORT_BIN names the runtime to embed instead of downloading it; a missing one stops
      // compile after the type check and the module graph, which is all that runs offline.
      const missing = `${dir}/no-denort`;
      const r = await runDeno(taskArgs("compile", `${dir}/orbit`), {
        cwd: ROOT,
        env: { DENORT_BIN: missing },
      });
      assert.notEqual(r.code, 0, described(r));
      // (No "Check" line to expect: the type check is skipped when Deno's cache has it.)
      assert.match(r.stderr, /Compile .*main\.ts to /, described(r));
      assert.ok(r.stderr.includes(`Could not find denort at '${missing}'`), described(r));
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
