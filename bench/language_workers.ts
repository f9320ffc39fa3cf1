/**
 * The OrderProcessing example workers of the compiled SDKs for `bench/throughput.ts`
 * (`--go-workers`, `--rust-workers`, `--csharp-workers`, `--java-workers`): each built once per bench run into
 * a temporary directory (removed when the bench ends), then started as many times as asked with
 * the SDK's command line. The processes are the conformance suite's worker processes
 * (tests/conformance/worker_process.ts): `--server URL` appended, killed by PID, also on exit.
 *
 * How each is built is how its end-to-end test builds it (tests/<sdk>_orders_e2e_test.ts), with
 * one difference for Rust: a release build (`cargo build --release`), as a user would deploy it;
 * Go's builds are optimized by default, Mono compiles the C# IL at run time, and the JVM runs with
 * the flags of the tests (JAVA_FLAGS: serial GC, the C1 compiler only).
 */
import {
  cargoCommand,
  csharpBuild,
  goEnv,
  JAVA_FLAGS,
  javaBuild,
  rustMissing,
} from "../tests/conformance/sdks.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** The languages whose example worker this module builds and starts. */
export const COMPILED_LANGUAGES = ["go", "rust", "csharp", "java"] as const;
export type CompiledLanguage = typeof COMPILED_LANGUAGES[number];

/** How the output names each language. */
export const LANGUAGE_NAMES: Record<string, string> = {
  typescript: "TypeScript",
  python: "Python",
  go: "Go",
  rust: "Rust",
  csharp: "C#",
  java: "Java",
};

const TMP = Deno.env.get("TMPDIR") || "/tmp";
const temps: string[] = [];
globalThis.addEventListener("unload", () => {
  for (const dir of temps) {
    try {
      Deno.removeSync(dir, { recursive: true });
    } catch { /* removed already */ }
  }
});

async function tempDir(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "orbit-bench-" });
  temps.push(dir);
  return dir;
}

async function run(what: string, cmd: string, args: string[], opts: {
  cwd: string;
  env?: Record<string, string>;
}): Promise<void> {
  let r: Deno.CommandOutput;
  try {
    r = await new Deno.Command(cmd, { args, ...opts, stdout: "piped", stderr: "piped" }).output();
  } catch (err) {
    throw new Error(`${what}: cannot run ${cmd} (${(err as Error).message})`);
  }
  if (!r.success) {
    const dec = new TextDecoder();
    throw new Error(`${what} failed:\n${dec.decode(r.stdout)}${dec.decode(r.stderr)}`);
  }
}

async function buildGo(): Promise<string[]> {
  const bin = `${await tempDir()}/orders-go`;
  await run("go build ./examples/orders", "go", ["build", "-o", bin, "./examples/orders"], {
    cwd: `${ROOT}sdk/go`,
    env: goEnv(),
  });
  return [bin];
}

async function buildRust(): Promise<string[]> {
  const missing = await rustMissing();
  if (missing) throw new Error(`--rust-workers: ${missing}`);
  const { cargo, env } = (await cargoCommand())!;
  // Cargo's target directory (its build cache) outside the source tree, kept between runs
  // like Go's build cache: a release build of serde from scratch takes a minute.
  const target = `${TMP}/orbit-bench-cargo-target`;
  await run(
    "cargo build --release --example orders",
    cargo,
    ["build", "--offline", "--quiet", "--release", "--example", "orders"],
    { cwd: `${ROOT}sdk/rust`, env: { ...env, CARGO_TARGET_DIR: target } },
  );
  const bin = `${await tempDir()}/orders-rust`;
  await Deno.copyFile(`${target}/release/examples/orders`, bin);
  await Deno.chmod(bin, 0o755);
  return [bin];
}

async function buildCsharp(): Promise<string[]> {
  const dir = await csharpBuild("orders"); // a temp dir, removed on exit by csharpBuild
  return ["mono", `${dir}/Orbit.Examples.Orders.exe`];
}

async function buildJava(): Promise<string[]> {
  const { classpath } = await javaBuild(); // a temp dir, removed on exit by javaBuild
  return ["java", ...JAVA_FLAGS, "-cp", classpath, "dev.orbit.examples.orders.OrderWorker"];
}

const builds = new Map<string, Promise<string[]>>();

/** The command line of a language's example worker (built on the first call). */
export function workerCommand(language: CompiledLanguage): Promise<string[]> {
  let b = builds.get(language);
  if (!b) {
    b = language === "go"
      ? buildGo()
      : language === "rust"
      ? buildRust()
      : language === "csharp"
      ? buildCsharp()
      : buildJava();
    builds.set(language, b);
  }
  return b;
}
