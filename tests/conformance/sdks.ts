/**
 * The SDKs held to the conformance suite: one entry each. A new SDK (Java, Rust, C#) is its
 * conformance worker program (README.md, "The worker program") plus one line here.
 */
const ROOT = new URL("../../", import.meta.url).pathname;

export interface Sdk {
  /** Short name, also the column of the results table. */
  name: string;
  /** What its worker reports as `runtime` at registration. */
  runtime: string;
  /**
   * Makes the worker program ready (builds it once per run where it needs building) and
   * answers its command line (`--server URL` is appended). Throws a {@link MissingToolchain}
   * when the language's toolchain is not installed.
   */
  prepare(): Promise<string[]>;
}

/** The SDK cannot be tested here: its toolchain is not installed. */
export class MissingToolchain extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MissingToolchain";
  }
}

async function has(cmd: string, args: string[]): Promise<boolean> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).output();
    return out.success;
  } catch {
    return false;
  }
}

/**
 * The environment of `go` commands: offline (no module proxy, the installed toolchain), with a
 * build cache even where HOME is not set.
 */
export function goEnv(): Record<string, string> {
  const env: Record<string, string> = { GOPROXY: "off", GOTOOLCHAIN: "local" };
  if (!Deno.env.get("HOME") && !Deno.env.get("GOCACHE")) env.GOCACHE = "/tmp/orbit-go-cache";
  return env;
}

/** `go build` of a program, once per test process, offline (no module proxy). */
async function goBuild(dir: string, pkg: string, name: string): Promise<string> {
  if (!(await has("go", ["version"]))) {
    throw new MissingToolchain("go is not installed (Debian: apt-get install golang-go)");
  }
  const out = `${await Deno.makeTempDir({ prefix: "orbit-conformance-" })}/${name}`;
  const r = await new Deno.Command("go", {
    args: ["build", "-o", out, pkg],
    cwd: dir,
    env: goEnv(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!r.success) {
    throw new Error(`go build ${pkg} failed:\n${new TextDecoder().decode(r.stderr)}`);
  }
  return out;
}

let goProgram: Promise<string> | null = null;

/**
 * The C# SDK's library and one of its programs (`conformance`, `orders`) built with Mono's `mcs`
 * (sdk/csharp/build.sh) into a temporary directory, once per test process, removed when the
 * process ends; answers that directory (run a program with `mono DIR/<name>.exe`). Throws
 * {@link MissingToolchain} when mcs, mono or Debian's Newtonsoft.Json is missing.
 */
export function csharpBuild(program: "conformance" | "orders"): Promise<string> {
  let build = csharpBuilds.get(program);
  if (build) return build;
  build = (async () => {
    if (!(await has("mcs", ["--version"])) || !(await has("mono", ["--version"]))) {
      throw new MissingToolchain(
        "mcs/mono are not installed (Debian: apt-get install mono-complete libnewtonsoft-json-cil-dev)",
      );
    }
    const out = await Deno.makeTempDir({ prefix: "orbit-csharp-" });
    globalThis.addEventListener("unload", () => {
      try {
        Deno.removeSync(out, { recursive: true });
      } catch { /* removed already */ }
    });
    const r = await new Deno.Command("sh", {
      args: [`${ROOT}sdk/csharp/build.sh`, out, program],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
    if (r.code === 3) {
      throw new MissingToolchain(
        `${text.trim()} (Debian: apt-get install libnewtonsoft-json-cil-dev)`,
      );
    }
    if (!r.success) throw new Error(`sdk/csharp/build.sh failed:\n${text}`);
    return out;
  })();
  csharpBuilds.set(program, build);
  return build;
}

const csharpBuilds = new Map<string, Promise<string>>();

export const SDKS: Sdk[] = [
  {
    name: "typescript",
    runtime: "typescript",
    prepare: () =>
      Promise.resolve([
        Deno.execPath(),
        "run",
        "-A",
        `${ROOT}sdk/typescript/testing/conformance_worker.ts`,
      ]),
  },
  {
    name: "python",
    runtime: "python",
    prepare: async () => {
      if (!(await has("python3", ["--version"]))) {
        throw new MissingToolchain("python3 is not installed (Debian: apt-get install python3)");
      }
      return ["python3", "-u", `${ROOT}sdk/python/testing/conformance_worker.py`];
    },
  },
  {
    name: "go",
    runtime: "go",
    prepare: async () => {
      goProgram ??= goBuild(`${ROOT}sdk/go`, "./cmd/conformance", "conformance-go");
      return [await goProgram];
    },
  },
  {
    name: "csharp",
    runtime: "csharp",
    prepare:
      async () => ["mono", "--debug", `${await csharpBuild("conformance")}/Orbit.Conformance.exe`],
  },
];
