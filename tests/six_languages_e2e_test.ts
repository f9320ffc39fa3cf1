/**
 * One OrderProcessing run, six languages (issue 40, the reference page's mixed-language
 * deployment): each of its six steps is pinned to one language with `language`, and the six
 * example workers (TypeScript, Python, Go, Java, Rust, C#) serve one server side by side, each
 * registering the tasks it has. Every step must run on the worker of its language, and every
 * order complete with a clean history. Skipped, loudly, where a toolchain is missing (CI
 * installs them all).
 */
import assert from "node:assert/strict";
import { api, startServer, tempDir } from "./support/server.ts";
import {
  assertCleanOrderHistory,
  fullHistory,
  ORDER_WORKFLOW,
  runOrders,
  startOrderWorker,
} from "./support/orders.ts";
import { startPythonWorker } from "../sdk/python/testing/process.ts";
import { startWorkerProcess } from "./conformance/worker_process.ts";
import {
  cargoCommand,
  csharpBuild,
  goEnv,
  JAVA_FLAGS,
  javaBuild,
  MissingToolchain,
  rustMissing,
} from "./conformance/sdks.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Which language runs which step. */
const PINS: Record<string, string> = {
  validate: "python",
  reserve: "typescript",
  charge: "go",
  ship: "java",
  confirm: "rust",
  loyalty: "csharp",
};

const SIX = {
  ...ORDER_WORKFLOW,
  // The newest version of OrderProcessing: a start without a version runs it.
  version: "6.0.0",
  steps: (ORDER_WORKFLOW.steps as Array<Record<string, unknown>>).map((s) =>
    typeof s.id === "string" && PINS[s.id] ? { ...s, language: PINS[s.id] } : s
  ),
};

/** The built example workers, or why one cannot be built here. */
async function buildAll(dir: string): Promise<Record<string, string[]> | string> {
  try {
    const goBin = `${dir}/orders-go`;
    const go = await new Deno.Command("go", {
      args: ["build", "-o", goBin, "./examples/orders"],
      cwd: `${ROOT}sdk/go`,
      env: goEnv(),
      stderr: "piped",
    }).output().catch(() => null);
    if (!go?.success) return "go cannot build the Go example worker (is golang-go installed?)";
    const missing = await rustMissing();
    if (missing) return missing;
    const { cargo, env } = (await cargoCommand())!;
    const rust = await new Deno.Command(cargo, {
      args: ["build", "--offline", "--quiet", "--example", "orders"],
      cwd: `${ROOT}sdk/rust`,
      env,
      stderr: "piped",
    }).output();
    assert.ok(rust.success, new TextDecoder().decode(rust.stderr));
    const rustBin = `${dir}/orders-rust`;
    await Deno.copyFile(`${env.CARGO_TARGET_DIR}/debug/examples/orders`, rustBin);
    await Deno.chmod(rustBin, 0o755);
    const java = await javaBuild();
    const csharp = await csharpBuild("orders");
    return {
      go: [goBin],
      rust: [rustBin],
      java: ["java", ...JAVA_FLAGS, "-cp", java.classpath, "dev.orbit.examples.orders.OrderWorker"],
      csharp: ["mono", "--debug", `${csharp}/Orbit.Examples.Orders.exe`],
    };
  } catch (e) {
    if (e instanceof MissingToolchain) return e.message;
    throw e;
  }
}

const dir = await tempDir();
const built = await buildAll(dir);
if (typeof built === "string") console.warn(`!!! SKIPPING the six-language order: ${built}`);

Deno.test({
  name: "six languages: one OrderProcessing run whose six steps are pinned to six SDKs' workers",
  ignore: typeof built === "string",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const programs = built as Record<string, string[]>;
    const server = await startServer({ db: `${dir}/orbit.db` });
    const env = { ORDER_TRACE: "1", ORDER_CONCURRENCY: "2" };
    const py = startPythonWorker(server.url);
    const ts = startOrderWorker(server.url);
    const others = ["go", "rust", "java", "csharp"].map((lang) =>
      startWorkerProcess(`orders-${lang}`, programs[lang]!, server.url, env)
    );
    try {
      const c = api(server.url);
      assert.equal((await c.post("/v1/workflows", SIX)).status, 201);
      for (const lang of ["python", "typescript", "go", "rust", "java", "csharp"]) {
        await server.waitForLog(
          new RegExp(`worker registered worker_id=orders-${lang} runtime=${lang}`),
        );
      }
      const ids = Array.from({ length: 4 }, (_, i) => `six-${i}`);
      const statuses = await runOrders(() => server.url, ids, 2);
      for (const id of ids) {
        assert.equal(statuses.get(id), "completed", id);
        const events = await fullHistory(server.url, id);
        assertCleanOrderHistory(id, events);
        for (const [step, lang] of Object.entries(PINS)) {
          const by = events.filter((e) => e.type === "StepDispatched" && e.step === step)
            .map((e) => e.worker_id);
          assert.deepEqual(by, [`orders-${lang}`], `${id}: ${step} runs on ${lang}`);
        }
      }
    } finally {
      await Promise.all([
        py.kill("SIGTERM"),
        ts.kill("SIGTERM"),
        ...others.map((w) => w.kill("SIGTERM")),
      ]);
      await server.kill("SIGTERM");
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
