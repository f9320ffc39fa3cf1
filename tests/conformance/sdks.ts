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
  /**
   * The worker talks to the gRPC binding: every server of a scenario also listens with
   * `--grpc-addr`, proxies are gRPC proxies (grpc_fault_proxy.ts), and the program gets the
   * gRPC address of the server it is given as `CONFORMANCE_GRPC_ADDR`.
   */
  grpc?: boolean;
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

/** Where Debian's vendored crates live (librust-*-dev), the crate source of `sdk/rust`. */
const DEBIAN_CRATES = "/usr/share/cargo/registry";

/**
 * `cargo` and its environment: found on PATH or in `~/.cargo/bin` (rustup's, also where HOME is
 * not set: then root's), with CARGO_HOME and RUSTUP_HOME named explicitly, and one target
 * directory that the conformance build, the unit tests and the example's test share. Null when
 * Rust is not installed.
 */
export async function cargoCommand(): Promise<
  { cargo: string; env: Record<string, string> } | null
> {
  const home = Deno.env.get("HOME") || "/root";
  const env: Record<string, string> = {
    CARGO_TARGET_DIR: `${ROOT}sdk/rust/target`,
    CARGO_NET_OFFLINE: "true",
  };
  for (const cargo of ["cargo", `${home}/.cargo/bin/cargo`, "/root/.cargo/bin/cargo"]) {
    if (cargo.includes("/.cargo/bin/")) {
      const base = cargo.slice(0, cargo.indexOf("/.cargo/bin/"));
      if (!Deno.env.get("CARGO_HOME")) env.CARGO_HOME = `${base}/.cargo`;
      if (!Deno.env.get("RUSTUP_HOME")) env.RUSTUP_HOME = `${base}/.rustup`;
    } else if (!Deno.env.get("HOME")) {
      if (!Deno.env.get("CARGO_HOME")) env.CARGO_HOME = "/root/.cargo";
      if (!Deno.env.get("RUSTUP_HOME")) env.RUSTUP_HOME = "/root/.rustup";
    }
    try {
      const out = await new Deno.Command(cargo, {
        args: ["--version"],
        env,
        stdout: "null",
        stderr: "null",
      }).output();
      if (out.success) return { cargo, env };
    } catch { /* not there */ }
    delete env.CARGO_HOME;
    delete env.RUSTUP_HOME;
  }
  return null;
}

/**
 * Why the Rust SDK cannot be built here, or null: cargo is missing, or Debian's serde crates
 * are (the crate builds offline against them, sdk/rust/.cargo/config.toml).
 */
export async function rustMissing(): Promise<string | null> {
  if (!(await cargoCommand())) {
    return "cargo is not installed (rustup, or Debian: apt-get install cargo)";
  }
  let names: string[] = [];
  try {
    for await (const e of Deno.readDir(DEBIAN_CRATES)) names.push(e.name);
  } catch {
    names = [];
  }
  for (const crate of ["serde_json-", "serde_derive-"]) {
    if (!names.some((n) => n.startsWith(crate))) {
      return `Debian's Rust crates are not installed (${DEBIAN_CRATES} has no ${
        crate.slice(0, -1)
      }; ` +
        "apt-get install librust-serde-json-dev librust-serde-derive-dev)";
    }
  }
  return null;
}

/** `cargo build` of one target of sdk/rust, once per test process, copied out of the target dir. */
async function cargoBuild(dir: string, target: string, name: string): Promise<string> {
  const missing = await rustMissing();
  if (missing) throw new MissingToolchain(missing);
  const { cargo, env } = (await cargoCommand())!;
  const r = await new Deno.Command(cargo, {
    args: ["build", "--offline", "--quiet", ...target.split(" ")],
    cwd: dir,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!r.success) {
    throw new Error(`cargo build ${target} failed:\n${new TextDecoder().decode(r.stderr)}`);
  }
  const built = `${env.CARGO_TARGET_DIR}/debug/${target.split(" ").pop()}`;
  const out = `${await Deno.makeTempDir({ prefix: "orbit-conformance-" })}/${name}`;
  await Deno.copyFile(built, out);
  await Deno.chmod(out, 0o755);
  return out;
}

let rustProgram: Promise<string> | null = null;
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

/**
 * The JVM's flags for the SDK's programs: a small, quick-starting JVM (the tests start many of
 * them on loaded machines).
 */
export const JAVA_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"];

/**
 * `sdk/java/build.sh` (plain javac + jar, Gson from Debian's libgoogle-gson-java) into a temp
 * dir, once per test process; answers the classpath of the SDK, its conformance worker and its
 * example (and the dir, whose test-classes hold the unit tests).
 */
export async function javaBuild(): Promise<{ dir: string; classpath: string }> {
  const tools = ["javac", "java", "jar"];
  if (!(await Promise.all(tools.map((t) => has(t, ["--version"])))).every(Boolean)) {
    throw new MissingToolchain(
      "javac is not installed (Debian: apt-get install openjdk-17-jdk-headless)",
    );
  }
  const gson = Deno.env.get("GSON_JAR") ?? "/usr/share/java/gson.jar";
  try {
    await Deno.stat(gson);
  } catch {
    throw new MissingToolchain(
      `Gson is not installed at ${gson} (Debian: apt-get install libgoogle-gson-java)`,
    );
  }
  const dir = await Deno.makeTempDir({ prefix: "orbit-java-" });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(dir, { recursive: true });
    } catch { /* already gone */ }
  });
  const r = await new Deno.Command("sh", {
    args: [`${ROOT}sdk/java/build.sh`, dir],
    env: { GSON_JAR: gson },
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!r.success) {
    const dec = new TextDecoder();
    throw new Error(`sdk/java/build.sh failed:\n${dec.decode(r.stdout)}${dec.decode(r.stderr)}`);
  }
  const jars = ["orbit-sdk", "orbit-conformance", "orbit-examples"].map((j) => `${dir}/${j}.jar`);
  return { dir, classpath: [...jars, gson].join(":") };
}

let javaProgram: Promise<{ dir: string; classpath: string }> | null = null;

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
    // The same program over the gRPC binding (sdk/typescript/grpc_transport.ts).
    name: "typescript-grpc",
    runtime: "typescript",
    grpc: true,
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
    name: "rust",
    runtime: "rust",
    prepare: async () => {
      rustProgram ??= cargoBuild(`${ROOT}sdk/rust`, "--bin conformance", "conformance-rust");
      return [await rustProgram];
    },
  },
  {
    name: "csharp",
    runtime: "csharp",
    prepare:
      async () => ["mono", "--debug", `${await csharpBuild("conformance")}/Orbit.Conformance.exe`],
  },
  {
    name: "java",
    runtime: "java",
    prepare: async () => {
      javaProgram ??= javaBuild();
      const { classpath } = await javaProgram;
      return ["java", ...JAVA_FLAGS, "-cp", classpath, "dev.orbit.conformance.ConformanceWorker"];
    },
  },
];
