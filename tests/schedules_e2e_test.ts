/**
 * Schedules end to end (SPEC §6), on a real server process, once on SQLite and once on
 * PostgreSQL: a 1-second schedule whose fired count equals the executions started and
 * `orbit_schedules_fired_total`; trigger, pause, resume, PATCH, delete and the error codes;
 * overlap `skip` with a workflow that stays running (its only task has no worker); and, for
 * each catch-up policy, a SIGKILL of the server across due occurrences and a restart on the
 * same database. Waits are for conditions or for the clock, never fixed sleeps.
 */
import assert from "node:assert/strict";
import { api, MAIN, startServer, tempDir, waitFor } from "./support/server.ts";
import { testEachStore } from "./support/stores.ts";

/** Completes at once. */
const QUICK = {
  ir: "orbit-ir/1",
  name: "Sched.Quick",
  version: "1.0.0",
  steps: [{ id: "done", return: "{% $input %}" }],
};
/** Stays running: no worker serves its only task. */
const STUCK = {
  ir: "orbit-ir/1",
  name: "Sched.Stuck",
  version: "1.0.0",
  steps: [{ id: "wait", task: "nobody.serves", contract: "1" }],
};

type Api = ReturnType<typeof api>;

async function deploy(c: Api): Promise<void> {
  for (const doc of [QUICK, STUCK]) assert.equal((await c.post("/v1/workflows", doc)).status, 201);
}

/** The executions of schedule `id` (`<id>@<ISO time>`), by occurrence time. */
async function occurrences(c: Api, id: string): Promise<Array<{ at: number; status: string }>> {
  const r = await c.get("/v1/executions?limit=1000");
  assert.equal(r.status, 200);
  return (r.body.executions as Array<{ execution_id: string; status: string }>)
    .filter((x) => x.execution_id.startsWith(`${id}@`))
    .map((x) => ({ at: Date.parse(x.execution_id.slice(id.length + 1)), status: x.status }))
    .sort((a, b) => a.at - b.at);
}

async function schedule(c: Api, id: string) {
  const r = await c.get(`/v1/schedules/${id}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

async function firedMetric(c: Api): Promise<number> {
  const text = (await c.get("/v1/metrics")).body as string;
  const m = /^orbit_schedules_fired_total (\d+)$/m.exec(text);
  assert.ok(m, "orbit_schedules_fired_total is missing from /v1/metrics");
  return Number(m[1]);
}

testEachStore(
  "a 1-second schedule fires; fired equals executions and the metric",
  async (store) => {
    const server = await startServer({ db: await store.newDb() });
    try {
      const c = api(server.url);
      await deploy(c);
      const created = await c.post("/v1/schedules", {
        schedule_id: "tick",
        workflow: QUICK.name,
        every_s: 1,
        overlap: "allow_all",
        input: { hello: "world" },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.deepEqual(
        {
          ...created.body,
          next_fire_ms: undefined,
          created_ms: undefined,
          updated_ms: undefined,
        },
        {
          schedule_id: "tick",
          workflow: QUICK.name,
          input: { hello: "world" },
          every_s: 1,
          overlap: "allow_all",
          catch_up: "one",
          catch_up_window_s: 3600,
          paused: false,
          next_fire_ms: undefined,
          fired: 0,
          skipped: 0,
          buffered_ms: null,
          last_fired_ms: null,
          last_execution_id: null,
          created_ms: undefined,
          updated_ms: undefined,
        },
      );
      assert.equal(created.body.next_fire_ms % 1000, 0, "every_s occurrences are whole seconds");
      await waitFor(
        async () => (await schedule(c, "tick")).fired >= 3,
        "three occurrences",
        15_000,
      );
      assert.equal((await c.post("/v1/schedules/tick/pause")).status, 200);
      // A pass in progress may still land after the pause; then the counts hold still.
      const final = await waitFor(async () => {
        const s = await schedule(c, "tick");
        const xs = await occurrences(c, "tick");
        const metric = await firedMetric(c);
        return s.fired === xs.length && metric === xs.length ? { s, xs } : null;
      }, "fired, executions and orbit_schedules_fired_total to agree");
      const { s, xs } = final;
      assert.equal(s.skipped, 0);
      // One execution per second, no gap, each with the schedule's input, each completed.
      for (let i = 1; i < xs.length; i++) assert.equal(xs[i]!.at - xs[i - 1]!.at, 1000);
      assert.equal(s.last_execution_id, `tick@${new Date(xs.at(-1)!.at).toISOString()}`);
      await waitFor(
        async () => (await occurrences(c, "tick")).every((x) => x.status === "completed"),
        "the occurrences to complete",
      );
      const one = await c.get(`/v1/executions/${s.last_execution_id}`);
      assert.deepEqual(one.body.output, { hello: "world" });
    } finally {
      await server.kill("SIGKILL");
    }
  },
);

testEachStore("trigger, pause, resume, PATCH and delete; the error codes", async (store) => {
  const server = await startServer({ db: await store.newDb() });
  try {
    const c = api(server.url);
    await deploy(c);
    const base = { schedule_id: "ops", workflow: QUICK.name, every_s: 3600 };
    assert.equal((await c.post("/v1/schedules", base)).status, 201);
    const dup = await c.post("/v1/schedules", { ...base, every_s: 60 });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.error.code, "SCHEDULE_EXISTS");
    const unknownWf = await c.post("/v1/schedules", {
      ...base,
      schedule_id: "x",
      workflow: "Nope",
    });
    assert.equal(unknownWf.status, 404);
    assert.equal(unknownWf.body.error.code, "UNKNOWN_WORKFLOW");
    const bad = await c.post("/v1/schedules", {
      schedule_id: "a@b",
      workflow: QUICK.name,
      cron: "99 * * * *",
      overlap: "never",
    });
    assert.equal(bad.status, 422);
    assert.equal(bad.body.error.code, "INVALID_SCHEDULE");
    assert.deepEqual(bad.body.error.problems.map((p: { path: string }) => p.path).sort(), [
      "$.cron",
      "$.overlap",
      "$.schedule_id",
    ]);

    const t = await c.post("/v1/schedules/ops/trigger");
    assert.equal(t.status, 201, JSON.stringify(t.body));
    assert.match(t.body.execution_id, /^ops@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(t.body.workflow, QUICK.name);
    let s = await schedule(c, "ops");
    assert.deepEqual([s.fired, s.last_execution_id], [1, t.body.execution_id]);
    assert.equal(await firedMetric(c), 1);

    const paused = await c.post("/v1/schedules/ops/pause");
    assert.deepEqual([paused.status, paused.body.paused], [200, true]);
    assert.equal((await c.get("/v1/schedules")).body.schedules[0].paused, true);
    const resumed = await c.post("/v1/schedules/ops/resume");
    assert.deepEqual([resumed.status, resumed.body.paused], [200, false]);
    assert.ok(resumed.body.next_fire_ms > Date.now());

    const patched = await c.call("PATCH", "/v1/schedules/ops", { every_s: 1, input: { n: 2 } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.ok(patched.body.next_fire_ms <= Date.now() + 1000, "the new timing applies at once");
    s = await waitFor(
      async () => {
        const v = await schedule(c, "ops");
        return v.fired >= 2 ? v : null;
      },
      "a scheduled occurrence after the PATCH",
      10_000,
    );
    const last = await c.get(`/v1/executions/${s.last_execution_id}`);
    assert.deepEqual(last.body.input, { n: 2 });
    const badPatch = await c.call("PATCH", "/v1/schedules/ops", { every_s: 0, color: "red" });
    assert.equal(badPatch.status, 422);
    assert.deepEqual(badPatch.body.error.problems.map((p: { path: string }) => p.path).sort(), [
      "$.color",
      "$.every_s",
    ]);
    for (
      const [method, path] of [
        ["PATCH", "/v1/schedules/nope"],
        ["GET", "/v1/schedules/nope"],
        ["POST", "/v1/schedules/nope/trigger"],
        ["POST", "/v1/schedules/nope/pause"],
        ["DELETE", "/v1/schedules/nope"],
      ] as const
    ) {
      const r = await c.call(
        method,
        path,
        method === "GET" || method === "DELETE" ? undefined : {},
      );
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.equal(r.body.error.code, "UNKNOWN_SCHEDULE", `${method} ${path}`);
    }

    const deleted = await c.call("DELETE", "/v1/schedules/ops");
    assert.deepEqual([deleted.status, deleted.body], [200, { schedule_id: "ops", deleted: true }]);
    assert.equal((await c.get("/v1/schedules/ops")).status, 404);
    const count = (await occurrences(c, "ops")).length;
    // Two more seconds pass: a deleted schedule starts nothing.
    const until = Date.now() + 2_100;
    await waitFor(() => Date.now() > until, "two occurrence times to pass");
    assert.equal((await occurrences(c, "ops")).length, count);
  } finally {
    await server.kill("SIGKILL");
  }
});

testEachStore("overlap skip: occurrences are skipped while one still runs", async (store) => {
  const server = await startServer({ db: await store.newDb() });
  try {
    const c = api(server.url);
    await deploy(c);
    const body = { schedule_id: "busy", workflow: STUCK.name, every_s: 1, overlap: "skip" };
    assert.equal((await c.post("/v1/schedules", body)).status, 201);
    let s = await waitFor(
      async () => {
        const v = await schedule(c, "busy");
        return v.skipped >= 2 ? v : null;
      },
      "two skipped occurrences",
      15_000,
    );
    assert.equal(s.fired, 1);
    const [first, ...rest] = await occurrences(c, "busy");
    assert.deepEqual(rest, []);
    assert.equal(first?.status, "running");
    const id = `busy@${new Date(first!.at).toISOString()}`;
    assert.equal((await c.post(`/v1/executions/${id}/cancel`, { reason: "test" })).status, 200);
    s = await waitFor(
      async () => {
        const v = await schedule(c, "busy");
        return v.fired === 2 ? v : null;
      },
      "the next occurrence once the running one ended",
      10_000,
    );
    const after = await occurrences(c, "busy");
    assert.deepEqual(after.map((x) => x.status), ["cancelled", "running"]);
    assert.ok(after[1]!.at > first!.at);
    assert.equal(await firedMetric(c), 2);
  } finally {
    await server.kill("SIGKILL");
  }
});

/**
 * For each policy: a P-second schedule fires K; the server is killed at once (K + P never
 * fires) and stays down until E + 0.2 s, E = K + 2P. It comes back before E + P (checked), so
 * K + P and E were missed and E + P is on time. Catch-up window 60 s. P is 5 s so that a
 * restart on a loaded machine (CI runs test files in parallel) still fits in it.
 */
const P = 5;
const CATCH_UP: Array<["skip" | "one" | "all", number[]]> = [
  ["skip", [0, 3 * P]],
  ["one", [0, 2 * P, 3 * P]],
  ["all", [0, P, 2 * P, 3 * P]],
];

for (const [catchUp, expected] of CATCH_UP) {
  testEachStore(`catch_up ${catchUp}: a restart across due occurrences`, async (store) => {
    const db = await store.newDb();
    let server = await startServer({ db });
    try {
      let c = api(server.url);
      await deploy(c);
      const body = {
        schedule_id: "cu",
        workflow: QUICK.name,
        every_s: P,
        overlap: "allow_all",
        catch_up: catchUp,
        catch_up_window_s: 60,
      };
      assert.equal((await c.post("/v1/schedules", body)).status, 201);
      const [first] = await waitFor(
        async () => {
          const xs = await occurrences(c, "cu");
          return xs.length > 0 ? xs : null;
        },
        "the first occurrence",
        10_000,
        20,
      );
      await server.kill("SIGKILL");
      const k = first!.at;
      assert.ok(Date.now() < k + P * 1000, "the server was killed before the next occurrence");
      const e = k + 2 * P * 1000;
      await waitFor(() => Date.now() > e + 200, "two occurrences to pass while down", 30_000);

      server = await startServer({ db });
      assert.ok(
        Date.now() < e + P * 1000,
        `the server took until ${Date.now() - e} ms after E to start; this test needs < ${
          P * 1000
        }`,
      );
      c = api(server.url);
      await waitFor(
        async () => (await occurrences(c, "cu")).some((x) => x.at === e + P * 1000),
        "the first occurrence on time after the restart",
        10_000,
      );
      assert.equal((await c.post("/v1/schedules/cu/pause")).status, 200);
      const s = await waitFor(async () => {
        const v = await schedule(c, "cu");
        return v.fired === (await occurrences(c, "cu")).length ? v : null;
      }, "the counts to settle");
      const xs = await occurrences(c, "cu");
      const seen = xs.map((x) => (x.at - k) / 1000).filter((t) => t <= 3 * P);
      assert.deepEqual(seen, expected, `occurrences (seconds after K) with catch_up ${catchUp}`);
      // Every occurrence from the first to the last started or was counted skipped.
      const last = xs.at(-1)!.at;
      assert.equal(s.fired + s.skipped, (last - k) / (P * 1000) + 1);
    } finally {
      await server.kill("SIGKILL");
    }
  });
}

/** `orbit …` as a subprocess against `server`; the CLI is the same whatever the store. */
async function orbit(server: string, args: string[]) {
  const env: Record<string, string> = { NO_COLOR: "1", ORBIT_SERVER: server };
  for (const k of ["PATH", "HOME", "DENO_DIR"]) {
    const v = Deno.env.get(k);
    if (v !== undefined) env[k] = v;
  }
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN, ...args],
    clearEnv: true,
    env,
    stdin: "null",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: r.code, stdout: text(r.stdout), stderr: text(r.stderr) };
}

Deno.test({
  name: "orbit schedules create|list|show|update|trigger|pause|resume|delete",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const server = await startServer({ db: `${dir}/orbit.db` });
    try {
      await deploy(api(server.url));
      const ok = async (args: string[]) => {
        const r = await orbit(server.url, args);
        assert.equal(r.code, 0, `orbit ${args.join(" ")}\n${r.stdout}${r.stderr}`);
        return r.stdout;
      };
      assert.match(
        await ok([
          "schedules",
          "create",
          "--id",
          "hourly",
          "--workflow",
          QUICK.name,
          "--every",
          "3600",
          "--overlap",
          "allow_all",
          "--input",
          '{"n":1}',
        ]),
        /^created schedule hourly \(every 3600s\); next fire \d{4}-/,
      );
      const file = `${dir}/morning.json`;
      await Deno.writeTextFile(
        file,
        JSON.stringify({
          schedule_id: "ignored",
          workflow: QUICK.name,
          cron: "0 9 * * 1-5",
          timezone: "Europe/Paris",
          catch_up: "skip",
        }),
      );
      assert.match(
        await ok(["schedules", "create", "--file", file, "--id", "morning"]),
        /^created schedule morning \(cron "0 9 \* \* 1-5" Europe\/Paris\)/,
      );
      const dup = await orbit(server.url, [
        "schedules",
        "create",
        "--file",
        file,
        "--id",
        "morning",
      ]);
      assert.equal(dup.code, 1);
      assert.match(dup.stderr, /^error: SCHEDULE_EXISTS: /);
      const bad = await orbit(server.url, [
        "schedules",
        "create",
        "--workflow",
        QUICK.name,
        "--cron",
        "61 * * * *",
      ]);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /INVALID_SCHEDULE[\s\S]*\$\.cron: is not a cron expression/);
      assert.equal((await orbit(server.url, ["schedules", "create", "--every", "5"])).code, 2);

      const [header, ...rows] = (await ok(["schedules", "list"])).trimEnd().split("\n");
      assert.match(
        header!,
        /^SCHEDULE ID\s+WORKFLOW\s+WHEN\s+OVERLAP\s+CATCH-UP\s+STATE\s+NEXT FIRE/,
      );
      assert.deepEqual(rows.map((r) => r.split(/\s{2,}/)[0]), ["hourly", "morning"]);
      assert.match(rows[1]!, /cron "0 9 \* \* 1-5" Europe\/Paris\s+skip\s+skip\s+active/);
      const listed = JSON.parse(await ok(["schedules", "list", "--json"]));
      assert.deepEqual(listed.schedules.map((s: { schedule_id: string }) => s.schedule_id), [
        "hourly",
        "morning",
      ]);

      assert.match(
        await ok(["schedules", "trigger", "hourly"]),
        /^started execution hourly@\d{4}-\d\d-\d\dT[\d:.]+Z of Sched\.Quick 1\.0\.0/,
      );
      const shown = await ok(["schedules", "show", "hourly"]);
      assert.match(shown, /^fired\s+1$/m);
      assert.match(shown, /^input\s+\{"n":1\}$/m);
      assert.match(
        await ok(["schedules", "update", "hourly", "--every", "7200", "--catch-up", "all"]),
        /^updated schedule hourly \(every 7200s\)/,
      );
      assert.equal(JSON.parse(await ok(["schedules", "show", "hourly", "--json"])).catch_up, "all");
      assert.equal(await ok(["schedules", "pause", "morning"]), "paused schedule morning\n");
      assert.match(await ok(["schedules", "resume", "morning"]), /^resumed schedule morning; next/);
      assert.equal(await ok(["schedules", "delete", "morning"]), "deleted schedule morning\n");
      const gone = await orbit(server.url, ["schedules", "show", "morning"]);
      assert.equal(gone.code, 1);
      assert.match(gone.stderr, /^error: UNKNOWN_SCHEDULE: /);
    } finally {
      await server.kill("SIGKILL");
    }
  },
});
